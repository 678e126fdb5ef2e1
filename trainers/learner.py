"""The learner: the trainable model, its optimizer, and the few calls a training step makes.

One class for every distribution strategy: what a backend changes is the
:class:`~agentgym.trainers.strategy.Strategy` the learner is given (one process by
default; :mod:`.strategies` has DeepSpeed ZeRO-2/3 and FSDP2, :mod:`.parallel` the device
mesh), whose public methods are the only thing the learner calls of it. The interface
every training loop uses -- SFT, value pretraining, every RL loss -- is::

    forward(mbs, fn, output=)            no-grad outputs of micro-batches (log-probs,
                                         values), every rank receiving all of them
    forward_backward(mbs, loss_fn, output=)
                                         gradients of a loss, added up; its metrics
    step()                               the schedule's learning rate, clip each
                                         parameter group, step, zero
    critic_step()                        the same for the critic alone (value
                                         pretraining, the critic's extra updates)
    reference()                          a context: the adapter switched off (the KL
                                         reference policy)
    generation()                         the model, usable for generation on this rank
    adapter_shards()                     what this rank holds of the adapter (engine sync)
    state_dict() / load_state_dict()     adapter (or full fine-tuning's model), critic,
                                         optimizer, updates (checkpoints)

What is trained with which loss is not the learner's business: :mod:`.update` builds the
policy update, the critic's and value pretraining out of these calls, each with its
own loss function. ``output`` says what the
loss function receives for a micro-batch: ``"logits"`` (``[B, R, V]`` float32, the
positions that predict each sampled token) or ``"values"`` (``[B, R]``, the critic's).

Every rank is handed the *whole* list of micro-batches. The learner deals them out to the
data-parallel shares in turn (a share short of one runs an empty micro-batch, so every
rank makes the same number of passes, which the sharded strategies' collectives need) and
scales each rank's loss by the number of shares, since the strategies average gradients
over them: the update equals the single-process one on the same batch when the loss
divides by the token count of the whole mini-batch.

The policy's learning rate follows ``optim``'s schedule (:mod:`.schedule`: a linear
warm-up over ``warmup_steps`` optimizer steps, then constant or a decay over
``total_updates``), for SFT and RL alike.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Literal

import torch

from agentgym import ConfigError
from agentgym.generation import AdapterShard
from agentgym.trainers.batch import MicroBatch, Sample, TokenRows, make_microbatches
from agentgym.trainers.config import AlgorithmConfig, OptimConfig
from agentgym.trainers.critic import Critic, CriticConfig
from agentgym.trainers.device import autocast, compute_dtype, keep_master_weights
from agentgym.trainers.distributed import SINGLE, DistInfo, all_gather_objects, all_reduce_sum
from agentgym.trainers.fused_lora import fused_lora_forward
from agentgym.trainers.replies import labelled_logits, model_replies
from agentgym.trainers.router_replay import RoutingReplay
from agentgym.trainers.schedule import lr_at
from agentgym.trainers.strategy import Strategy, make_optimizer

__all__ = ["Learner", "LossFn", "Output", "combine_metrics", "make_optimizer", "weights_for"]

#: what a forward pass hands on: the policy's logits at the sampled tokens, the critic's
#: values, or the logits at token rows' labelled positions (SFT's :class:`TokenRows`)
Output = Literal["logits", "values", "tokens"]
#: a loss function: a micro-batch and its outputs -> the loss to back-propagate and the
#: metrics to add up (a key ending in ``_max`` is combined by its maximum instead)
LossFn = Callable[[MicroBatch, torch.Tensor], tuple[torch.Tensor, dict[str, float]]]


def combine_metrics(parts: Sequence[dict[str, float]]) -> dict[str, float]:
    """Metric sums of several micro-batches or ranks added up (``*_max`` keys: the max)."""
    out: dict[str, float] = {}
    for part in parts:
        for k, v in part.items():
            if k not in out:
                out[k] = v
            else:
                out[k] = max(out[k], v) if k.endswith("_max") else out[k] + v
    return out


def weights_for(engine: Any, learner: Learner) -> contextlib.AbstractContextManager[Any]:
    """What a rollout holds while ``engine`` generates: the learner's generation model
    (:meth:`Learner.generation`) for an engine that generates with it (the HF engine,
    ``shares_weights``), nothing for one that holds its own weights (vLLM loads the base
    itself and gets the adapter at each sync): gathering the whole model on every rank
    for it would be wasted, and at 671B would not fit."""
    return learner.generation() if engine.shares_weights else contextlib.nullcontext()


class Learner:
    """The learner (see the module docstring for the interface).

    Args:
        model: the policy (a peft model, or a plain one for full fine-tuning). With LoRA,
            the reference policy is the same model with the adapter disabled: no copy.
        algo: the ``algorithm`` section: micro-batch size, shared prompts, router replay.
        optim: the ``optim`` section (learning rate and its schedule, clipping, AdamW).
        pad_id: padding token id.
        lora: the model is a peft model (the reference is the adapter switched off).
        dist: this process's place in the job (single process by default).
        critic: the ``critic`` section, when the advantages come from a critic: a second
            adapter and a value head are added before the optimizer is made.
        seed: the critic adapter's initialisation seed.
        strategy: how the model is split over the ranks (default: one process).
        total_updates: the run's optimizer steps, over which ``optim.schedule`` decays
            (unused by ``constant``).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        algo: AlgorithmConfig,
        optim: OptimConfig,
        *,
        pad_id: int,
        lora: bool = True,
        dist: DistInfo = SINGLE,
        critic: CriticConfig | None = None,
        seed: int = 0,
        strategy: Strategy | None = None,
        total_updates: int = 0,
    ) -> None:
        if optim.schedule != "constant" and total_updates < 1:
            raise ConfigError(
                f"optim.schedule={optim.schedule} decays over the run's optimizer steps: "
                "give the learner total_updates (or use optim.schedule=constant)."
            )
        if not lora and dist.world_size > 1:  # its weights are saved and loaded whole
            raise ConfigError(
                "full fine-tuning runs on one process: set lora.enabled=true to train on "
                f"{dist.world_size} processes, or run without --nproc / torchrun."
            )
        self.total_updates = total_updates
        self.strategy = strategy or Strategy(dist)
        self.micro_batch_size = algo.micro_batch_size
        self.optim_cfg = optim
        self.pad_id = pad_id
        self.lora = lora
        self.dist = dist
        #: MoE router replay (``algorithm.router_replay``): the routers use the engine's
        #: recorded expert choices in every training forward (and their own otherwise)
        self.replay = RoutingReplay(model).__enter__() if algo.router_replay else None
        #: value-based RL: the critic's adapter and head on the same base
        self.critic = Critic(model, critic, seed=seed) if critic is not None else None
        #: mixed precision: a bf16 base (``model.dtype``) trains under bf16 autocast, with
        #: float32 master copies of the trainable weights (None: float32 throughout)
        self.compute_dtype = compute_dtype(model)
        keep_master_weights(model)
        self.model, self.optimizer = self.strategy.parallelize(model, self.critic, optim)
        #: run a prompt shared by several samples once (``algorithm.share_prompts``)
        self.share_prompts = algo.share_prompts and self.strategy.share_prompts
        self.strategy.zero_grad(self.optimizer)
        #: policy optimizer steps so far (the learning rate's warm-up and decay count them)
        self.updates = 0

    # ================================================================ the interface
    def microbatches(self, samples: Sequence[Sample]) -> list[MicroBatch]:
        """``samples`` cut into the learner's micro-batches (``algorithm.micro_batch_size``,
        padded with its pad id)."""
        return make_microbatches(list(samples), self.micro_batch_size, self.pad_id)

    @property
    def critic_config(self) -> CriticConfig | None:
        """The critic's settings, or None when the learner has no critic."""
        return self.critic.cfg if self.critic is not None else None

    @property
    def optimizer_shards_read(self) -> str:
        """Which ranks' saved optimizer states a resume reads: ``own`` or ``all``."""
        return self.strategy.optimizer_shards_read

    @torch.no_grad()
    def forward(
        self,
        mbs: Sequence[MicroBatch],
        fn: Callable[[MicroBatch, torch.Tensor], torch.Tensor],
        *,
        output: Output = "logits",
    ) -> list[torch.Tensor]:
        """``fn(mb, outputs)`` of every micro-batch, without gradients (log-probs from
        logits, values). Each data-parallel share computes its own and the results are
        exchanged, so every rank returns all of them, in order."""
        self.model.eval()
        parts, me = self.strategy.shares()
        compute = self._compute(output)
        mine = [mb.to(self._device()) for mb in self._my_microbatches(list(mbs))]
        own = self.strategy.forward(mine, compute, fn, output=output)
        if parts == 1:
            return own
        real = len(range(me, len(mbs), parts))
        out: list[torch.Tensor] = [torch.empty(0)] * len(mbs)
        for part, results in all_gather_objects((me, [t.cpu() for t in own[:real]]), self.dist):
            for j, t in enumerate(results):
                out[part + j * parts] = t
        return out

    @contextlib.contextmanager
    def reference(self) -> Iterator[None]:
        """The reference policy while the context lasts: the adapter switched off (the
        KL's reference, A*PO's); the same model, no copy."""
        with self.model.disable_adapter() if self.lora else contextlib.nullcontext():
            yield

    def forward_backward(
        self, mbs: Sequence[MicroBatch], loss_fn: LossFn, *, output: Output = "logits"
    ) -> dict[str, float]:
        """Forward and backward of this rank's share of ``mbs`` (gradients add up until
        :meth:`step`); returns ``loss_fn``'s metrics summed over every micro-batch of
        every rank."""
        self.model.train()
        scale = float(self.strategy.shares()[0])

        def loss(mb: MicroBatch, out: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
            value, stats = loss_fn(mb, out)
            return value * scale, stats

        compute = self._compute(output)
        mine = [mb.to(self._device()) for mb in self._my_microbatches(list(mbs))]
        # the policy's LoRA layers as one matmul each (same loss and gradients) around
        # the passes, backward too (a checkpointed layer recomputes the same forward);
        # the critic's passes fuse theirs inside _values, with its adapter active
        fused = self.lora and output == "logits"
        parts = self.strategy.forward_backward(
            mine,
            compute,
            loss,
            output=output,
            context=(lambda: fused_lora_forward(self.model)) if fused else None,
        )
        sums = combine_metrics(parts) if self.strategy.reports_metrics() else {}
        if self.dist.world_size == 1:
            return sums
        return combine_metrics(all_gather_objects(sums, self.dist))

    def step(self) -> dict[str, float]:
        """The policy's learning rate for this step (``optim``'s schedule at
        :attr:`updates`), then clip each parameter group's gradient on its own, take the
        optimizer step and zero the gradients. Returns the gradient norms before clipping
        (``grad_norm``: the policy's; ``critic_grad_norm``) and the learning rate."""
        lr = self._set_lr()
        norms = self.strategy.step(self.optimizer, self.optim_cfg.max_grad_norm)
        self.updates += 1
        return self._step_figures(norms, lr)

    def critic_step(self) -> dict[str, float]:
        """:meth:`step` for the critic alone (value pretraining, the critic's extra
        updates): the policy does not move and its schedule does not advance."""
        norms = self.strategy.step(self.optimizer, self.optim_cfg.max_grad_norm, policy=False)
        return self._step_figures(norms, 0.0)

    def router_counts(self) -> tuple[float, float] | None:
        """MoE router replay since the last call, over every rank: positions replayed,
        and of them those where the learner's own router would have chosen otherwise
        (None without router replay; every rank calls it)."""
        if self.replay is None:
            return None
        counts = [float(self.replay.replayed), float(self.replay.changed)]
        self.replay.replayed = self.replay.changed = 0
        replayed, changed = all_reduce_sum(counts, self.dist)
        return replayed, changed

    @contextlib.contextmanager
    def generation(self) -> Iterator[torch.nn.Module]:
        """The model, usable for generation on this rank alone while the context lasts.
        Sharded strategies gather the full weights here (a collective: all ranks enter)."""
        with self.strategy.generation(self.model) as model:
            yield model

    def adapter_shards(self) -> list[AdapterShard]:
        """What this rank holds of the policy's adapter, for an engine's sync
        (:class:`~agentgym.generation.AdapterSync`; all ranks call it)."""
        return self.strategy.adapter_shards(self.model)

    def adapter_digest(self) -> str:
        """SHA-256 of the whole adapter, the same on every rank of a healthy run (all
        ranks call it)."""
        return self.strategy.adapter_digest(self.model)

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint holds of the learner: ``adapter`` (the LoRA weights, whole,
        on the host, in peft naming; under the device mesh on rank 0 alone, streamed
        there tensor by tensor; None in full fine-tuning), ``model`` (full fine-tuning's
        weights; None with LoRA), ``critic`` (its adapter and head, or None),
        ``optimizer`` (this rank's shard when sharded) and ``updates``. A collective
        under sharded strategies: every rank calls it."""
        s = self.strategy
        return {
            "adapter": s.adapter_state(self.model) if self.lora else None,
            "model": None if self.lora else s.model_state(self.model),
            "critic": s.critic_state(self.critic) if self.critic is not None else None,
            "optimizer": s.optimizer_state(self.optimizer),
            "updates": self.updates,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Put back what :meth:`state_dict` gave; ``optimizer`` is every rank's saved
        state, in rank order. Parts absent from ``state`` are left as they are."""
        s = self.strategy
        if state.get("adapter") is not None:
            s.load_adapter_state(self.model, state["adapter"])
        if state.get("model") is not None:
            s.load_model_state(self.model, state["model"])
        if state.get("critic") is not None:
            if self.critic is None:
                raise ConfigError(
                    "the checkpoint holds a critic and this run has none: resume with the "
                    "config it was written with (algorithm.name ppo / vapo), or start a new "
                    "run folder."
                )
            s.load_critic_state(self.critic, state["critic"])
        if state.get("optimizer") is not None:
            s.load_optimizer_state(self.optimizer, state["optimizer"])
        if "updates" in state:
            self.updates = int(state["updates"])

    # ================================================================ internals
    def _step_figures(self, norms: list[float], lr: float) -> dict[str, float]:
        out = {"grad_norm": norms[0], "lr": lr}
        if len(norms) > 1:
            out["critic_grad_norm"] = norms[-1]
        return out

    def _compute(self, output: Output) -> Callable[[Any], torch.Tensor]:
        """A micro-batch's logits ``[B, R, V]``, the critic's values ``[B, R]``, or
        token rows' logits ``[N, V]`` at their labelled positions."""
        if output == "values":
            return self._values
        if output == "tokens":
            if self.strategy.shares()[0] != 1:  # the decoder and head are called past
                raise ConfigError(  # a sharding wrapper, and no empty rows are dealt
                    "token rows (SFT) train in one process: run agentgym sft without torchrun."
                )
            return self._labelled
        return lambda mb: self._replies(mb, hidden=False)

    def _labelled(self, rows: TokenRows) -> torch.Tensor:
        """:func:`~agentgym.trainers.replies.labelled_logits` under the learner's
        autocast."""
        with autocast(self._device(), self.compute_dtype):
            return labelled_logits(self.model, rows)

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
        """The model's output at the positions that predict each sampled token (logits,
        float32, or with ``hidden`` the last hidden states), under :attr:`compute_dtype`
        autocast (:func:`~agentgym.trainers.replies.model_replies`). ``module``: another
        causal LM to run instead of the policy (the separate critic; no router replay)."""
        own = module is None
        if not own:
            self.strategy.before_side_forward()
        with autocast(self._device(), self.compute_dtype):
            return model_replies(
                self.strategy.forward_module(self.model) if own else module,
                mb,
                hidden=hidden,
                share_prompts=self.share_prompts,
                cache_config=self.model.config if own else module.config,
                replay=self.replay if own and mb.reply_routing is not None else None,
            )

    def _device(self) -> torch.device:
        return next(self.model.parameters()).device

    def _my_microbatches(self, mbs: list[MicroBatch]) -> list[MicroBatch]:
        """This rank's share of a mini-batch's micro-batches (padded to equal counts)."""
        parts, me = self.strategy.shares()
        if parts == 1:
            return mbs
        per_rank = max(1, math.ceil(len(mbs) / parts))
        mine = mbs[me::parts]
        while len(mine) < per_rank:
            mine.append(_empty_like(mbs[0]))
        return mine

    def _set_lr(self) -> float:
        """The policy's learning rate for this step (the schedule's); the critic's is
        fixed."""
        o = self.optim_cfg
        lr = lr_at(
            self.updates,
            self.total_updates,
            lr=o.lr,
            warmup_steps=o.warmup_steps,
            schedule=o.schedule,
            min_ratio=o.min_lr_ratio,
            decay_fraction=o.decay_fraction,
        )
        for g in self.optimizer.param_groups:
            if g.get("name", "policy") == "policy":
                g["lr"] = lr
        return lr


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
