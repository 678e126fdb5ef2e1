"""The critic of value-based RL (PPO, VAPO): a second LoRA adapter plus a value head on the
policy's own frozen base, so the 671B layout pays no second copy of the base weights.

* :class:`CriticConfig` is the ``critic`` section of a trainer config.
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
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from agentgym import ConfigError
from agentgym import config_check as _check
from agentgym.trainers.algorithm import decoupled_gae, length_adaptive_lambda, terminal_rewards

ADAPTER = "critic"
HEAD = "agentgym_value_head"


@dataclass
class CriticConfig:
    """The critic (used when ``algorithm.advantage`` is ``gae``: PPO, VAPO).

    Attributes:
        share_base: the critic is a second LoRA adapter plus a value head on the policy's
            own frozen base (no second copy of the base weights). ``false`` is not built
            yet: a separate critic model would need ``path``.
        path: a separate critic model (a local HF directory) for ``share_base: false``.
        r / alpha: the critic adapter's LoRA rank and scaling numerator.
        target_modules: Linear leaf names to adapt (``null``: the policy adapter's).
        lr: the critic's learning rate (the adapter and the head).
        value_clip: PPO's value clip (``null``: no clip).
        value_coef: weight of the value loss in the critic's update.
        updates_per_batch: optimizer steps the critic takes on each mini-batch (the
            policy takes one); more than 1 fits the values faster (PPO's epochs).
        pretrain_steps: VAPO's value pretraining: before any policy update, train the
            critic alone for up to this many steps on rollouts of the warm-start policy
            (0: off; the critic then starts from a value of 0 everywhere, and its first
            advantages are biased: the docs say what that risks).
        pretrain_updates: the critic's optimizer steps on each pretraining round's batch.
        pretrain_explained_variance: stop value pretraining early once the critic's
            explained variance on a step reaches this.
    """

    share_base: bool = True
    path: str | None = None
    r: int = 8
    alpha: float = 16.0
    target_modules: list[str] | None = None
    lr: float = 1e-3
    value_clip: float | None = 0.2
    value_coef: float = 1.0
    updates_per_batch: int = 1
    pretrain_steps: int = 0
    pretrain_updates: int = 4
    pretrain_explained_variance: float = 0.6

    def __post_init__(self) -> None:
        _check(
            self.share_base,
            "critic.share_base: false (a separate critic model) is not built yet; the critic "
            "is a LoRA adapter and a value head on the policy's base (share_base: true).",
        )
        _check(self.r >= 1, f"critic.r must be >= 1, got {self.r}.")
        _check(self.lr > 0, f"critic.lr must be > 0, got {self.lr}.")
        _check(
            self.value_clip is None or self.value_clip > 0,
            "critic.value_clip must be > 0 or null.",
        )
        _check(self.value_coef > 0, "critic.value_coef must be > 0.")
        _check(self.pretrain_steps >= 0, "critic.pretrain_steps must be >= 0.")
        _check(self.updates_per_batch >= 1, "critic.updates_per_batch must be >= 1.")
        _check(self.pretrain_updates >= 1, "critic.pretrain_updates must be >= 1.")


class Critic:
    """The critic's adapter and value head on a peft model (see the module docstring)."""

    def __init__(self, model: Any, cfg: CriticConfig, *, seed: int = 0) -> None:
        from peft import LoraConfig

        if not hasattr(model, "add_adapter") or not hasattr(model, "peft_config"):
            raise ConfigError(
                "the critic is a second LoRA adapter on the policy's base: it needs "
                "lora.enabled=true."
            )
        self.model, self.cfg = model, cfg
        base = model.get_base_model()
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
        hidden = int(base.config.hidden_size)
        head = nn.Linear(hidden, 1)
        nn.init.zeros_(head.weight)  # V = 0 everywhere at the start
        nn.init.zeros_(head.bias)
        dtype = next(base.parameters()).dtype
        base.add_module(HEAD, head.to(device=next(base.parameters()).device, dtype=dtype))
        self._activate("default")

    @property
    def head(self) -> nn.Linear:
        return getattr(self.model.get_base_model(), HEAD)

    def named_parameters(self) -> list[tuple[str, nn.Parameter]]:
        """The critic's trainable parameters (its adapter and the value head), by the
        model's own names."""
        return [
            (n, p) for n, p in self.model.named_parameters() if f".{ADAPTER}." in n or HEAD in n
        ]

    def parameters(self) -> list[nn.Parameter]:
        return [p for _, p in self.named_parameters()]

    def _activate(self, name: str) -> None:
        self.model.set_adapter(name)
        for n, p in self.model.named_parameters():  # set_adapter froze the other adapter
            if "lora_" in n:
                p.requires_grad_(True)
        for p in self.head.parameters():
            p.requires_grad_(True)

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """The critic adapter is the active one inside the block (the policy's after)."""
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
    value_fn: Callable[[Any], Tensor],
    samples: Sequence[Any],
    minis: Sequence[Sequence[int]],
    full: Sequence[Sequence[Any]],
    algo: Any,
    device: torch.device,
) -> tuple[list[list[Any]], dict[str, float]]:
    """Value the whole batch with ``value_fn`` (micro-batch -> ``[B, R]`` values: the
    learner's critic pass), run (decoupled) GAE per episode, and return the
    micro-batches with ``token_advantages``, ``old_values`` and ``value_targets`` set,
    plus the critic's statistics (explained variance, means).

    Every rank values every micro-batch (``full``, all ranks' shares), so that GAE, which
    chains an episode's turns wherever they landed, sees the same values everywhere (and
    ``algorithm.whiten_advantages`` the same batch statistics).
    """
    import dataclasses

    from agentgym.trainers.algorithm import explained_variance

    values: dict[int, Tensor] = {}
    with torch.no_grad():
        for m, mbs in enumerate(full):
            for mb in mbs:
                v = value_fn(mb.to(device)).cpu()
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
    if getattr(algo, "whiten_advantages", False):
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
