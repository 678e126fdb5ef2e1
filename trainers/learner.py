"""The learner: the trainable model, its optimizer, and one DAPO update per batch.

This is the piece a distributed strategy replaces (:mod:`agentgym.trainers.strategies`:
DeepSpeed ZeRO-2/3, FSDP2): the loop hands it a list of
:class:`~agentgym.trainers.batch.Sample` and asks for ``update(samples)``,
``adapter_state()`` and a ``generation()`` context; nothing else of the loop touches the
model while training.

Every rank is handed the *whole* batch. :meth:`Learner.update` cuts each mini-batch into
micro-batches, deals them out to the ranks in turn (a rank short of one runs an empty
micro-batch, so every rank makes the same number of forward/backward passes, which the
sharded strategies' collectives need) and divides every token's loss by the token count
of the whole mini-batch over all ranks. The strategies average gradients over ranks, so
each rank's loss is multiplied by the world size: the update equals the single-process
one on the same batch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from agentgym.trainers.algorithm import (
    importance_weights,
    loss_spec,
    mismatch_stats,
    positive_nll,
    selected_logprobs,
    token_entropy,
    value_loss,
)
from agentgym.trainers.batch import MicroBatch, Sample, make_microbatches
from agentgym.trainers.config import AlgorithmConfig, OptimConfig
from agentgym.trainers.critic import Critic, CriticConfig, attach_advantages
from agentgym.trainers.device import autocast, compute_dtype, host_copy, keep_master_weights
from agentgym.trainers.distributed import SINGLE, DistInfo, all_gather_objects, all_reduce_sum
from agentgym.trainers.fused_lora import fused_lora_forward
from agentgym.trainers.replies import model_replies
from agentgym.trainers.router_replay import RoutingReplay


def make_optimizer(
    model: torch.nn.Module, cfg: OptimConfig, critic: Critic | None = None
) -> torch.optim.Optimizer:
    """AdamW over the trainable parameters; the critic's (if any) in a group of their own
    with the critic's learning rate (``name: "critic"``)."""
    theirs = {id(p) for p in critic.parameters()} if critic is not None else set()
    policy = [p for p in model.parameters() if p.requires_grad and id(p) not in theirs]
    groups: list[dict[str, Any]] = [{"params": policy, "name": "policy"}]
    if critic is not None:
        groups.append({"params": critic.parameters(), "name": "critic", "lr": critic.cfg.lr})
    return torch.optim.AdamW(
        groups, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps, weight_decay=cfg.weight_decay
    )


class Learner:
    """Holds the policy (a peft model, or a plain one for full fine-tuning).

    Args:
        model: the policy. With LoRA, the reference policy is the same model with the
            adapter disabled (``model.disable_adapter()``): no second copy.
        algo: loss settings.
        optim: optimizer settings.
        temperature: the sampling temperature; log-probs are computed at the same
            temperature so that ratios compare like with like.
        pad_id: padding token id.
        lora: the model is a peft model (the reference is the adapter switched off).
        dist: this process's place in the job (single process by default).
        critic: the critic section, when the advantages come from a critic (``gae``):
            a second adapter and a value head are added to the model before the
            optimizer is made (:mod:`agentgym.trainers.critic`).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        algo: AlgorithmConfig,
        optim: OptimConfig,
        *,
        temperature: float,
        pad_id: int,
        lora: bool = True,
        dist: DistInfo = SINGLE,
        critic: CriticConfig | None = None,
        seed: int = 0,
    ) -> None:
        self.model = model
        self.algo = algo
        self.optim_cfg = optim
        self.temperature = temperature
        self.pad_id = pad_id
        self.lora = lora
        self.dist = dist
        #: run a prompt shared by several samples once (``algorithm.share_prompts``)
        self.share_prompts = algo.share_prompts
        #: the policy loss (``algorithm.loss``), called the same way whichever it is
        self.loss = loss_spec(algo.loss)
        #: MoE router replay (``algorithm.router_replay``): the routers use the engine's
        #: recorded expert choices in every training forward (and their own otherwise)
        self.replay = RoutingReplay(model).__enter__() if algo.router_replay else None
        #: value-based RL: the critic's adapter and head on the same base
        self.critic = Critic(model, critic, seed=seed) if critic is not None else None
        #: mixed precision: a bf16 base (``model.dtype``) trains under bf16 autocast, with
        #: float32 master copies of the trainable weights (None: float32 throughout)
        self.compute_dtype = compute_dtype(model)
        keep_master_weights(model)
        self.optimizer = self._setup()
        self.updates = 0
        #: each parameter group's gradient norm before clipping at the last optimizer
        #: step (the policy's first, then the critic's)
        self.group_norms: list[float] = []

    # ------------------------------------------------------------ strategy hooks
    def _setup(self) -> torch.optim.Optimizer:
        """Wrap the model as the strategy needs and return the optimizer."""
        return make_optimizer(self.model, self.optim_cfg, self.critic)

    def _forward_module(self) -> Any:
        """What a training forward pass calls (the model, or a DeepSpeed engine)."""
        return self.model

    def _backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def _optimizer_step(self) -> float:
        """Clip (each parameter group on its own: the policy's, the critic's), step, zero
        the gradients; returns the policy's gradient norm before clipping."""
        max_norm = self.optim_cfg.max_grad_norm if self.optim_cfg.max_grad_norm > 0 else math.inf
        norms = []
        for group in self.optimizer.param_groups:
            params = [p for p in group["params"] if p.requires_grad]
            norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
            if hasattr(norm, "full_tensor"):  # a DTensor under FSDP2
                norm = norm.full_tensor()
            norms.append(float(norm))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.group_norms = norms
        return norms[0]

    def _before_side_forward(self) -> None:
        """Called before a forward pass of a module other than :meth:`_forward_module`
        (the separate critic model), for strategies that count passes themselves."""

    def _critic_norm(self) -> float:
        """The critic group's gradient norm at the last step (the last group)."""
        return self.group_norms[-1] if len(self.group_norms) > 1 else float("nan")

    def _zero_grad(self) -> None:
        """Clear the gradients before a mini-batch's first backward pass."""
        self.optimizer.zero_grad(set_to_none=True)

    def _critic_only_step(self) -> float:
        """An optimizer step after a backward pass of the critic alone (value
        pretraining, the critic's extra updates): the policy must not move. Here its
        gradients are None, which AdamW skips (no decay, no moment or step-count
        change); strategies whose optimizer steps every group whatever holds it."""
        return self._optimizer_step()

    @contextlib.contextmanager
    def generation(self) -> Iterator[torch.nn.Module]:
        """The model, usable for generation on this rank alone while the context lasts.

        Sharded strategies gather the full weights here (one collective on entry and
        exit, so every rank must enter).
        """
        yield self.model

    # ------------------------------------------------------------------ forward
    def _logits(self, mb: MicroBatch) -> torch.Tensor:
        """Logits predicting each sampled token: ``[B, R, V]``, aligned with ``mb.targets``
        (:meth:`_replies`)."""
        return self._replies(mb, hidden=False)

    def value_batches(self, mbs: Sequence[MicroBatch]) -> list[torch.Tensor]:
        """The critic's values of each micro-batch. With several data-parallel ranks each
        values its own share (dealt and padded as training deals them) and the values are
        exchanged, so that every rank holds all of them: GAE chains an episode's turns
        wherever they landed."""
        parts, me = self._data_parallel()
        if parts == 1:
            return self._value_own(list(mbs))
        real = len(range(me, len(mbs), parts))
        own = [v.cpu() for v in self._value_own(self._my_microbatches(list(mbs)))[:real]]
        out: list[torch.Tensor] = [torch.empty(0)] * len(mbs)
        for part, values in all_gather_objects((me, own), self.dist):
            for j, v in enumerate(values):
                out[part + j * parts] = v
        return out

    def _value_own(self, mbs: list[MicroBatch]) -> list[torch.Tensor]:
        """The values of this rank's micro-batches (a pipeline runs them all at once)."""
        return [self._values(mb) for mb in mbs]

    def _values(self, mb: MicroBatch) -> torch.Tensor:
        """The critic's ``[B, R]`` values of the states that predict each sampled token,
        from its own adapter (:meth:`_replies`' last hidden states through the head)."""
        assert self.critic is not None
        backbone = self.critic.backbone
        if backbone is not None:  # a separate critic model (critic.share_base: false)
            return self.critic.values(self._replies(mb, hidden=True, module=backbone))
        with self.critic.active():
            # the critic's LoRA layers as one matmul each (fused reads the active adapter)
            fused = fused_lora_forward(self.model) if self.lora else contextlib.nullcontext(0)
            with fused:
                return self.critic.values(self._replies(mb, hidden=True))

    def _replies(
        self, mb: MicroBatch, *, hidden: bool, module: torch.nn.Module | None = None
    ) -> torch.Tensor:
        """The model's output at the positions that predict each sampled token: logits
        ``[B, R, V]`` (float32), or with ``hidden`` the last hidden states ``[B, R, H]``
        (the vocabulary projection is then skipped). Runs under :attr:`compute_dtype`
        autocast (:meth:`_replies_in_precision`). ``module``: another causal LM to run
        instead of the policy (the separate critic model; no router replay)."""
        with autocast(self._device(), self.compute_dtype):
            return self._replies_in_precision(mb, hidden=hidden, module=module)

    def _replies_in_precision(
        self, mb: MicroBatch, *, hidden: bool, module: torch.nn.Module | None = None
    ) -> torch.Tensor:
        """:meth:`_replies`' body (:func:`~agentgym.trainers.replies.model_replies`;
        prompts shared with :attr:`share_prompts`)."""
        own = module is None
        replay = self.replay if own and mb.reply_routing is not None else None
        if not own:
            self._before_side_forward()
        return model_replies(
            self._forward_module() if module is None else module,
            mb,
            hidden=hidden,
            share_prompts=self.share_prompts,
            cache_config=self.model.config if module is None else module.config,
            replay=replay,
        )

    def _device(self) -> torch.device:
        return next(self.model.parameters()).device

    def _data_parallel(self) -> tuple[int, int]:
        """Into how many shares a mini-batch's micro-batches are dealt, and this rank's."""
        return self.dist.world_size, self.dist.rank

    def _my_microbatches(self, mbs: list[MicroBatch]) -> list[MicroBatch]:
        """This rank's share of a mini-batch's micro-batches (padded to equal counts)."""
        parts, me = self._data_parallel()
        if parts == 1:
            return mbs
        per_rank = max(1, math.ceil(len(mbs) / parts))
        mine = mbs[me::parts]
        while len(mine) < per_rank:
            mine.append(_empty_like(mbs[0]))
        return mine

    @torch.no_grad()
    def logprobs(self, mbs: Sequence[MicroBatch], *, reference: bool = False) -> list[torch.Tensor]:
        """Per-token log-probs (no grad) of each micro-batch's targets."""
        self.model.eval()
        outs = []
        ctx = self.model.disable_adapter() if reference and self.lora else contextlib.nullcontext()
        with ctx:
            for mb in mbs:
                mb = mb.to(self._device())
                outs.append(selected_logprobs(self._logits(mb), mb.targets, self.temperature))
        return outs

    def _set_lr(self) -> None:
        """The policy's learning rate for this update (warm-up); the critic's is fixed."""
        for g in self.optimizer.param_groups:
            if g.get("name", "policy") == "policy":
                g["lr"] = self._lr()

    def _lr(self) -> float:
        w = self.optim_cfg.warmup_steps
        return self.optim_cfg.lr * min(1.0, (self.updates + 1) / w) if w > 0 else self.optim_cfg.lr

    # ------------------------------------------------------------------ update
    def update(
        self,
        samples: Sequence[Sample],
        *,
        policy: bool = True,
        critic_updates: int | None = None,
        train_critic: bool = True,
    ) -> dict[str, float]:
        """Policy update(s) on one batch; returns ``losses/`` and ``charts/`` metrics.

        The batch is split into ``updates_per_batch`` mini-batches (one optimizer step
        each) and each mini-batch into micro-batches (gradient accumulation). Each
        token's (or sequence's) loss is divided by the token (or sequence) count of its
        whole mini-batch over all ranks, whatever the loss (``algorithm.loss``).

        With a critic, the batch is valued first and the advantages are GAE's, per token
        (:func:`~agentgym.trainers.critic.attach_advantages`); each optimizer step then
        trains the critic (clipped value loss) and the policy. ``policy=False`` trains
        the critic alone (value pretraining). ``critic_updates`` (default
        ``critic.updates_per_batch``) optimizer steps train the critic on each
        mini-batch: the extra ones come first and move the critic alone (its values are
        clipped against those it gave before the first). ``train_critic=False``: the
        critic only values the batch for the advantages (T-PPO trains it on another one,
        the episodes that ended, :mod:`agentgym.trainers.tppo`).
        """
        algo = self.algo
        n_mini = min(algo.updates_per_batch, len(samples))
        minis = [list(range(k, len(samples), n_mini)) for k in range(n_mini)]
        full = [
            make_microbatches([samples[i] for i in idx], algo.micro_batch_size, self.pad_id)
            for idx in minis
        ]
        # token and sequence counts over every rank's share: the losses divide by these
        totals = [sum(mb.num_tokens for mb in mbs) for mbs in full]
        seq_totals = [sum(mb.num_trained_samples for mb in mbs) for mbs in full]
        critic_stats: dict[str, float] = {}
        if self.critic is not None:
            self.model.eval()
            full, critic_stats = attach_advantages(
                self.value_batches, samples, minis, full, algo, self._device()
            )
        # VAPO's positive-example NLL divides by the tokens of correct samples
        pos_totals = [
            sum(int((mb.loss_mask * mb.positive[:, None]).sum()) for mb in mbs) for mbs in full
        ]
        all_mbs = [self._my_microbatches(mbs) for mbs in full]
        scale = float(self.dist.world_size)  # strategies average gradients over ranks
        # old log-probs: with one update per batch the policy has not moved since
        # sampling, so old = current (detached) and needs no extra pass
        old = [self.logprobs(mbs) for mbs in all_mbs] if n_mini > 1 and policy else None
        need_ref = policy and (algo.kl_coef > 0 or self.loss.needs_reference)
        ref = [self.logprobs(mbs, reference=True) for mbs in all_mbs] if need_ref else None

        sums: dict[str, float] = {
            "loss": 0.0,
            "policy_loss": 0.0,
            "kl_loss": 0.0,
            "clip_low": 0.0,
            "clip_high": 0.0,
            "ratio": 0.0,
            "kl": 0.0,
            "tokens": 0.0,
            "entropy": 0.0,
            "mismatch": 0.0,
            "mismatch_k3": 0.0,
            "mismatch_tokens": 0.0,
            "dual_clip": 0.0,
            "tis_truncated": 0.0,
            "tis_masked": 0.0,
            "value_loss": 0.0,
            "nll": 0.0,
        }
        mismatch_max = 0.0
        grad_norms: list[float] = []
        critic_norms: list[float] = []
        if not self.model.training:
            self.model.train()
        for m, mbs in enumerate(all_mbs):
            if totals[m] == 0:
                continue
            self._set_lr()
            self._zero_grad()
            if self.critic is not None and train_critic:
                extra = (critic_updates or self.critic.cfg.updates_per_batch) - 1
                for k in range(extra + 1):
                    if k:  # the previous pass's critic-only step
                        self._critic_only_step()
                        critic_norms.append(self._critic_norm())
                    for mb in mbs:
                        dev_mb = mb.to(self._device())
                        self._critic_backward(dev_mb, totals[m], scale, sums, 1.0 / (extra + 1))
            # LoRA layers as one matmul each while training (same loss and gradients)
            fused = fused_lora_forward(self.model) if self.lora else contextlib.nullcontext(0)
            with fused:
                for j, mb in enumerate(mbs if policy else ()):
                    mismatch_max = max(
                        mismatch_max,
                        self._accumulate(
                            mb.to(self._device()),
                            totals[m],
                            seq_totals[m],
                            pos_totals[m],
                            scale,
                            old[m][j] if old is not None else None,
                            ref[m][j] if ref is not None else None,
                            sums,
                        ),
                    )
            grad_norms.append(self._optimizer_step() if policy else self._critic_only_step())
            if self.critic is not None and train_critic:
                critic_norms.append(self._critic_norm())
            self.updates += 1
        trained_critic = self.critic is not None and train_critic
        if self.dist.world_size > 1:  # each rank summed over its own micro-batches
            keys = sorted(sums)
            sums = dict(zip(keys, all_reduce_sum([sums[k] for k in keys], self.dist), strict=True))
            mismatch_max = max(all_gather_objects(mismatch_max, self.dist))
        n = max(sums["tokens"], 1.0)
        steps = max(len(grad_norms), 1)  # the losses are per mini-batch: their mean
        known = max(sums["mismatch_tokens"], 1.0)
        return {
            "losses/total": sums["loss"] / steps,
            "losses/policy": sums["policy_loss"] / steps,
            "losses/kl": sums["kl_loss"] / steps,
            "losses/entropy": sums["entropy"] / n,
            "losses/clip_fraction": (sums["clip_low"] + sums["clip_high"]) / n,
            "losses/clip_fraction_low": sums["clip_low"] / n,
            "losses/clip_fraction_high": sums["clip_high"] / n,
            "losses/ratio_mean": sums["ratio"] / n,
            "losses/approx_kl_ref": sums["kl"] / n,
            "losses/grad_norm": float(sum(grad_norms) / len(grad_norms)) if grad_norms else 0.0,
            "losses/dual_clip_fraction": sums["dual_clip"] / n,
            "charts/logprob_mismatch": sums["mismatch"] / known,
            "charts/logprob_mismatch_max": mismatch_max,
            "charts/logprob_mismatch_k3": sums["mismatch_k3"] / known,
            "charts/tis_truncated_share": sums["tis_truncated"] / known,
            "charts/tis_masked_share": sums["tis_masked"] / known,
            **({"losses/value": sums["value_loss"] / steps} if trained_critic else {}),
            **(
                {"losses/critic_grad_norm": sum(critic_norms) / len(critic_norms)}
                if critic_norms
                else {}
            ),
            **critic_stats,
            **({"losses/nll_positive": sums["nll"] / steps} if algo.nll_coef > 0 else {}),
            **self._replay_metrics(),
            "charts/train_tokens": sums["tokens"],
            "charts/lr": self._lr(),
            "charts/optimizer_steps": float(len(grad_norms)),
        }

    def _critic_backward(
        self, mb: MicroBatch, total_tokens: int, scale: float, sums: dict[str, float], weight: float
    ) -> None:
        """The critic's clipped value loss on one micro-batch, backward; ``weight`` times
        the loss is added to ``sums["value_loss"]``."""
        loss = self._value_loss(self._values(mb), mb, total_tokens)
        self._backward(loss * scale if scale != 1.0 else loss)
        sums["value_loss"] += weight * float(loss.detach())

    def _value_loss(self, values: torch.Tensor, mb: MicroBatch, total_tokens: int) -> torch.Tensor:
        """The critic's clipped value loss of ``values`` (``[B, R]``) on ``mb``."""
        assert self.critic is not None and mb.old_values is not None
        cfg = self.critic.cfg
        return cfg.value_coef * value_loss(
            values,
            mb.old_values.to(values.device),
            mb.value_targets.to(values.device),
            mb.loss_mask,
            total_tokens=total_tokens,
            clip=cfg.value_clip,
        )

    def _replay_metrics(self) -> dict[str, float]:
        """Router replay's counts since the last update: positions replayed, and the share
        where the learner's router would have chosen other experts (then reset)."""
        if self.replay is None:
            return {}
        counts = [float(self.replay.replayed), float(self.replay.changed)]
        self.replay.replayed = self.replay.changed = 0
        if self.dist.world_size > 1:
            counts = all_reduce_sum(counts, self.dist)
        return {
            "charts/router_replayed": counts[0],
            "charts/router_changed_share": counts[1] / max(counts[0], 1.0),
        }

    def _accumulate(
        self,
        mb: MicroBatch,
        total_tokens: int,
        total_sequences: int,
        positive_tokens: int,
        scale: float,
        old_logp: torch.Tensor | None,
        ref_logp: torch.Tensor | None,
        sums: dict[str, float],
    ) -> float:
        """Forward and backward of one micro-batch (gradients add up); metrics into
        ``sums``. Returns the largest learner/engine log-prob gap it saw."""
        algo = self.algo
        logits = self._logits(mb)
        logp = selected_logprobs(logits, mb.targets, self.temperature)
        # the learner's log-probs under the policy that sampled (old = current when the
        # batch gets one update), compared with the engine's for the same tokens
        sampled_by = old_logp if old_logp is not None else logp.detach()
        known = mb.has_sampler_logprobs & (mb.loss_mask > 0)
        weights, truncated, masked = importance_weights(
            sampled_by,
            mb.sampler_logprobs,
            known,
            mode=algo.tis,
            cap=algo.tis_cap,
            band=(algo.tis_band[0], algo.tis_band[1]),
        )
        advantages = mb.token_advantages if mb.token_advantages is not None else mb.advantages
        terms = self.loss.fn(
            logp,
            sampled_by,
            advantages,
            mb.loss_mask,
            total_tokens=total_tokens,
            total_sequences=total_sequences,
            eps_low=algo.eps_low,
            eps_high=algo.eps_high,
            clip_c=algo.clip_c,
            ref_logp=ref_logp,
            kl_coef=algo.kl_coef,
            beta=algo.apo_beta,
            weights=weights if algo.tis != "off" else None,
        )
        loss = terms.loss
        if algo.nll_coef > 0 and positive_tokens > 0:  # VAPO's positive-example LM loss
            nll = positive_nll(logp, mb.loss_mask, mb.positive, total_tokens=positive_tokens)
            loss = loss + algo.nll_coef * nll
            sums["nll"] += float(nll.detach())
        self._backward(loss * scale if scale != 1.0 else loss)
        with torch.no_grad():
            ent = token_entropy(logits.detach(), self.temperature)
            sums["entropy"] += float((ent * mb.loss_mask).sum())
            gap = mismatch_stats(sampled_by, mb.sampler_logprobs, known)
            sums["mismatch"] += float(gap["abs_sum"])
            sums["mismatch_k3"] += float(gap["k3_sum"])
            sums["mismatch_tokens"] += float(gap["tokens"])
        sums["loss"] += float(terms.loss.detach())
        sums["policy_loss"] += float(terms.policy_loss)
        sums["kl_loss"] += float(terms.kl_loss)
        sums["clip_low"] += float(terms.clipped_low_tokens)
        sums["clip_high"] += float(terms.clipped_high_tokens)
        sums["ratio"] += float(terms.ratio_sum)
        sums["kl"] += float(terms.kl_sum)
        sums["tokens"] += float(terms.tokens)
        if terms.dual_clipped_tokens is not None:
            sums["dual_clip"] += float(terms.dual_clipped_tokens)
        sums["tis_truncated"] += float(truncated)
        sums["tis_masked"] += float(masked)
        return float(gap["abs_max"])

    def adapter_state(self) -> dict[str, torch.Tensor]:
        """The LoRA weights only (full tensors on the host, on every rank), peft naming:
        what the engines, the checkpoints and the adapter digest read."""
        from agentgym.trainers.models import adapter_state_dict

        return host_copy(adapter_state_dict(self.model))

    # ------------------------------------------------------------ checkpoints
    def optimizer_state(self) -> dict[str, Any]:
        """What a checkpoint stores for the optimizer (this rank's shard when sharded)."""
        return self.optimizer.state_dict()

    def load_optimizer_state(self, states: Sequence[dict[str, Any]]) -> None:
        """Restore from every rank's saved :meth:`optimizer_state` (rank order)."""
        self.optimizer.load_state_dict(states[self.dist.rank])

    def _gathered(self, params: list[torch.nn.Parameter], modify: bool = False) -> Any:
        """A context in which ``params`` are whole (ZeRO-3 gathers them; ``modify``:
        what rank 0 writes is scattered back). Other strategies need nothing."""
        return contextlib.nullcontext()

    def critic_state(self) -> dict[str, torch.Tensor] | None:
        """The critic's adapter and head (full tensors), or None without a critic."""
        if self.critic is None:
            return None
        with self._gathered(self.critic.parameters()):
            return self.critic.state_dict()

    def load_critic_state(self, state: dict[str, torch.Tensor]) -> None:
        """Put a :meth:`critic_state` back."""
        assert self.critic is not None
        with self._gathered(self.critic.parameters(), modify=True):
            self.critic.load_state_dict(state)

    def load_adapter_state(self, state: dict[str, torch.Tensor]) -> None:
        """Put saved LoRA weights back into the (possibly sharded) model."""
        from agentgym.trainers.models import load_adapter_state_dict

        load_adapter_state_dict(self.model, state)


def _empty_like(mb: MicroBatch) -> MicroBatch:
    """A micro-batch that runs forward/backward but carries no loss and no metrics."""
    return dataclasses.replace(
        mb,
        loss_mask=torch.zeros_like(mb.loss_mask),
        advantages=torch.zeros_like(mb.advantages),
        has_sampler_logprobs=torch.zeros_like(mb.has_sampler_logprobs),
        indices=[],
        prompt_routing=None,
        reply_routing=None,
    )
