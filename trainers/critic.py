"""The critic of value-based RL (PPO, VAPO): a second LoRA adapter plus a value head on the
policy's own frozen base, so the 671B layout pays no second copy of the base weights.

* :class:`CriticConfig` is the ``critic`` section of a trainer config (in
  :mod:`.critic_config`, which needs no torch).
* :class:`Critic` adds the adapter (``"critic"``, next to the policy's ``"default"``) and a
  scalar head on the last hidden state, computes per-token values of every policy turn,
  and turns one episode's values and its terminal reward into token advantages and value
  targets with (decoupled) GAE (:func:`episode_advantages`).

What a value means here. A sample is one policy turn; the value at reply token ``t`` is
the critic's estimate of the episode's return from the state *before* that token, read
from the context the turn saw (its prompt and the reply so far). In a multi-conversation
episode a new conversation is a new state: its first turn is valued from what that
conversation holds (the task, the memory summary, the state digest), not as a
continuation of the previous conversation's context. The GAE chain still runs over the
episode's policy tokens in order, across turns and conversations, so the one terminal
reward is credited to every token of every conversation through the critic.

Adapters: peft's ``set_adapter`` switches the active adapter and also freezes the others;
:meth:`Critic.active` switches for a critic pass and back, keeping both adapters
trainable (each gets gradients only from its own passes). The value head is attached to
the base model as a submodule (``agentgym_value_head``) so that sharded strategies see it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from agentgym import ConfigError
from agentgym.trainers.algorithm import decoupled_gae, length_adaptive_lambda, terminal_rewards
from agentgym.trainers.critic_config import CriticConfig

ADAPTER = "critic"
HEAD = "agentgym_value_head"
#: the separate critic model's place in the policy's module tree (``share_base: false``)
BACKBONE = "agentgym_critic_model"


class Critic:
    """The critic on a peft policy: a second adapter on its base, or a separate model
    (``share_base: false``), plus the value head (see the module docstring).

    A separate critic model is attached to the policy's base model as a submodule
    (:data:`BACKBONE`) beside the head, so that every strategy shards, gathers and
    checkpoints it with the rest (FSDP2 makes its layers units of their own); the
    policy's forward never calls it, and the policy's adapter state, which the engines
    sync and the checkpoints store, holds LoRA weights only.
    """

    def __init__(self, model: Any, cfg: CriticConfig, *, seed: int = 0) -> None:
        if not hasattr(model, "get_base_model") or not hasattr(model, "peft_config"):
            raise ConfigError(
                "the critic attaches to the LoRA policy's model (an adapter on its base, or "
                "a separate model beside it): it needs lora.enabled=true."
            )
        self.model, self.cfg = model, cfg
        base = model.get_base_model()
        dtype, device = next(base.parameters()).dtype, next(base.parameters()).device
        if cfg.share_base:
            self._add_adapter(seed)
            hidden = int(base.config.hidden_size)
        else:
            backbone = load_critic_model(cfg.path or "", like=base)
            base.add_module(BACKBONE, backbone.to(device=device))
            hidden = int(backbone.config.hidden_size)
        head = nn.Linear(hidden, 1)
        nn.init.zeros_(head.weight)  # V = 0 everywhere at the start
        nn.init.zeros_(head.bias)
        base.add_module(HEAD, head.to(device=device, dtype=dtype))
        self._activate("default")

    def _add_adapter(self, seed: int) -> None:
        from peft import LoraConfig

        cfg, model = self.cfg, self.model
        # the policy adapter's layers unless the section names its own (leaf names)
        targets = cfg.target_modules or sorted(model.peft_config["default"].target_modules)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model.add_adapter(
                ADAPTER,
                LoraConfig(
                    r=cfg.r,
                    lora_alpha=cfg.alpha,
                    target_modules=list(targets),
                    bias="none",
                    task_type="CAUSAL_LM",
                ),
            )

    @property
    def head(self) -> nn.Linear:
        return getattr(self.model.get_base_model(), HEAD)

    @property
    def backbone(self) -> nn.Module | None:
        """The separate critic model (``share_base: false``), else None."""
        return getattr(self.model.get_base_model(), BACKBONE, None)

    def named_parameters(self) -> list[tuple[str, nn.Parameter]]:
        """The critic's trainable parameters (its adapter or separate model, and the
        value head), by the model's own names."""
        return [(n, p) for n, p in self.model.named_parameters() if is_critic_name(n)]

    def parameters(self) -> list[nn.Parameter]:
        return [p for _, p in self.named_parameters()]

    def _activate(self, name: str) -> None:
        if self.cfg.share_base:
            self.model.set_adapter(name)
            for n, p in self.model.named_parameters():  # set_adapter froze the other adapter
                if "lora_" in n:
                    p.requires_grad_(True)
        for p in self.parameters() if not self.cfg.share_base else self.head.parameters():
            p.requires_grad_(True)

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """The critic adapter is the active one inside the block (the policy's after);
        a separate critic model needs no switch."""
        if not self.cfg.share_base:
            yield
            return
        self._activate(ADAPTER)
        try:
            yield
        finally:
            self._activate("default")

    def values(self, hidden: Tensor) -> Tensor:
        """``[B, R]`` values from the last hidden states ``[B, R, H]`` of the critic's
        passes (the learner computes them with the critic adapter active)."""
        return self.head(hidden.to(self.head.weight.dtype)).squeeze(-1).float()

    def state_dict(self) -> dict[str, Tensor]:
        """Full copies of the critic's parameters by name, for a checkpoint (a sharded
        parameter, FSDP2's DTensor, is gathered; ZeRO-3's caller gathers first)."""
        out = {}
        for n, p in self.named_parameters():
            full = p.full_tensor() if hasattr(p, "full_tensor") else p
            out[n] = full.detach().cpu().clone()
        return out

    @torch.no_grad()
    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        """Put a :meth:`state_dict` back (into shards where the parameters are sharded)."""
        own = dict(self.named_parameters())
        if set(own) != set(state):
            raise ConfigError(
                "the checkpoint's critic does not fit this critic (different critic.r, "
                f"critic.target_modules or model): missing {sorted(set(own) - set(state))[:3]}, "
                f"unexpected {sorted(set(state) - set(own))[:3]}."
            )
        for n, p in own.items():
            value = state[n].to(p.dtype)
            if hasattr(p, "device_mesh"):  # FSDP2: this rank's shard of the full tensor
                from torch.distributed.tensor import distribute_tensor

                value = distribute_tensor(
                    value.to(p.device), p.device_mesh, p.placements, src_data_rank=None
                )
                p.copy_(value)
            else:
                p.data.copy_(value.to(p.device))


def is_critic_name(name: str) -> bool:
    """Whether a parameter name of the policy's model is the critic's (its adapter, its
    separate model or the value head)."""
    return f".{ADAPTER}." in name or HEAD in name or BACKBONE in name


def load_critic_model(path: str, *, like: nn.Module) -> nn.Module:
    """The separate critic model (``critic.path``): a causal LM read from a local
    directory in the policy's dtype, all of its weights trainable. Its vocabulary must
    be the policy's, since it reads the policy's token ids."""
    from agentgym.generation import load_model

    dtype = next(like.parameters()).dtype
    backbone, _ = load_model(path, dtype=dtype)
    theirs = int(getattr(backbone.config, "vocab_size", 0))
    ours = int(getattr(like.config, "vocab_size", 0))
    if theirs != ours:
        raise ConfigError(
            f"critic.path {path!r} has a vocabulary of {theirs} tokens and the policy {ours}: "
            "the separate critic reads the policy's token ids, so it must use the policy's "
            "tokenizer (a model of the same family, or one trained with that tokenizer)."
        )
    backbone.requires_grad_(True)
    backbone.train()
    return backbone


def episode_advantages(
    values: Sequence[Tensor],
    reward: float,
    *,
    gamma: float,
    lam_policy: float | None,
    lam_critic: float,
    lam_alpha: float | None,
    bootstrap: bool = False,
) -> tuple[list[Tensor], list[Tensor]]:
    """Token advantages and value targets of one episode's turns (in order).

    The turns' reply tokens are chained into one sequence, the episode's ``reward`` sits on
    its last token, and decoupled GAE runs over it: advantages with ``lam_policy`` (or,
    with ``lam_alpha``, VAPO's length-adaptive ``1 - 1 / (lam_alpha * tokens)``), targets
    with ``lam_critic``. Returns per-turn tensors of the turns' lengths.

    ``bootstrap``: the chain does not reach the episode's end (T-PPO: the window cut it
    and the episode goes on): no reward is credited, and the state after the last token
    takes that token's own value (Extended GAE, ``V(s_l) := V(s_{l-1})``).
    """
    lengths = [int(v.numel()) for v in values]
    total = sum(lengths)
    if total == 0:
        return [v.new_zeros(0) for v in values], [v.new_zeros(0) for v in values]
    chain = torch.cat([v.detach().float().flatten() for v in values])[None]
    mask = torch.ones_like(chain)
    rewards = terminal_rewards(torch.tensor([0.0 if bootstrap else float(reward)]), mask)
    if lam_alpha is not None:
        lam: float | Tensor = length_adaptive_lambda(torch.tensor([total]), lam_alpha)
    else:
        lam = 1.0 if lam_policy is None else lam_policy
    adv, targets = decoupled_gae(
        rewards,
        chain,
        mask,
        gamma=gamma,
        lam_policy=lam,
        lam_critic=lam_critic,
        last_value=chain[:, -1] if bootstrap else None,
    )
    return list(adv[0].split(lengths)), list(targets[0].split(lengths))


def whiten(adv: dict[int, Tensor]) -> dict[int, Tensor]:
    """The advantages shifted and scaled to mean 0 and std 1 over all their tokens
    (``algorithm.whiten_advantages``); unchanged with fewer than two tokens."""
    flat = torch.cat(list(adv.values())) if adv else torch.zeros(0)
    if flat.numel() < 2:
        return adv
    mean, std = flat.mean(), flat.std()
    return {i: (a - mean) / (std + 1e-8) for i, a in adv.items()}


def attach_advantages(
    value_fn: Callable[[list[Any]], list[Tensor]],
    samples: Sequence[Any],
    minis: Sequence[Sequence[int]],
    full: Sequence[Sequence[Any]],
    algo: Any,
) -> tuple[list[list[Any]], dict[str, float]]:
    """Value the whole batch with ``value_fn`` (micro-batches -> their ``[B, R]``
    values: the learner's critic passes), run (decoupled) GAE per episode, and return the
    micro-batches with ``token_advantages``, ``old_values`` and ``value_targets`` set,
    plus the critic's statistics (explained variance, means).

    ``value_fn`` returns the values of every micro-batch (``full``, all ranks' shares) on
    every rank (the learner's splits the work over the data-parallel ranks and exchanges
    the values), so that GAE, which chains an episode's turns wherever they landed, sees
    the same values everywhere (and ``algorithm.whiten_advantages`` the same batch
    statistics).
    """
    import dataclasses

    from agentgym.trainers.algorithm import explained_variance

    values: dict[int, Tensor] = {}
    placed = [(m, mb) for m, mbs in enumerate(full) for mb in mbs]
    with torch.no_grad():
        valued = value_fn([mb for _, mb in placed])
    for (m, mb), v in zip(placed, valued, strict=True):
        v = v.cpu()
        for b, j in enumerate(mb.indices):
            n = len(samples[minis[m][j]].response_ids)
            values[minis[m][j]] = v[b, :n]
    by_episode: dict[int, list[int]] = {}
    for i, s in enumerate(samples):
        by_episode.setdefault(s.episode, []).append(i)  # turns in order
    adv: dict[int, Tensor] = {}
    tgt: dict[int, Tensor] = {}
    for turns in by_episode.values():
        a, t = episode_advantages(
            [values[i] for i in turns],
            samples[turns[-1]].reward,
            gamma=algo.gamma,
            lam_policy=algo.lam_policy,
            lam_critic=algo.lam_critic,
            lam_alpha=algo.lam_alpha,
            bootstrap=samples[turns[-1]].bootstrap,
        )
        adv.update(zip(turns, a, strict=True))
        tgt.update(zip(turns, t, strict=True))
    raw = adv  # the statistics below are the raw GAE advantages'
    if algo.whiten_advantages:
        adv = whiten(adv)
    out = []
    for m, mbs in enumerate(full):
        rows = []
        for mb in mbs:
            shape = mb.targets.shape
            fields = {
                k: torch.zeros(shape) for k in ("token_advantages", "old_values", "value_targets")
            }
            for b, j in enumerate(mb.indices):
                i = minis[m][j]
                n = values[i].numel()
                fields["token_advantages"][b, :n] = adv[i]
                fields["old_values"][b, :n] = values[i]
                fields["value_targets"][b, :n] = tgt[i]
            rows.append(dataclasses.replace(mb, **fields))
        out.append(rows)
    flat_v = torch.cat([values[i] for i in sorted(values)]) if values else torch.zeros(0)
    flat_t = torch.cat([tgt[i] for i in sorted(tgt)]) if tgt else torch.zeros(0)
    flat_a = torch.cat([raw[i] for i in sorted(raw)]) if raw else torch.zeros(0)
    ones = torch.ones_like(flat_v)
    stats = {
        "critic/explained_variance": explained_variance(flat_v[None], flat_t[None], ones[None]),
        "critic/value_mean": float(flat_v.mean()) if flat_v.numel() else 0.0,
        "critic/target_mean": float(flat_t.mean()) if flat_t.numel() else 0.0,
        "critic/advantage_mean": float(flat_a.mean()) if flat_a.numel() else 0.0,
        "critic/advantage_std": float(flat_a.std()) if flat_a.numel() > 1 else 0.0,
    }
    return out, stats
