"""The learner: the trainable model, its optimizer, and the few calls a training step makes.

Every distribution strategy implements the same small interface (this class is the
one-process backend; :mod:`.strategies` has DeepSpeed ZeRO-2/3 and FSDP2, and
:mod:`.parallel` the device mesh with its pipeline schedule)::

    forward(mbs, fn, output=)            no-grad outputs of micro-batches (log-probs,
                                         values), every rank receiving all of them
    forward_backward(mbs, loss_fn, output=)
                                         gradients of a loss, added up; its metrics
    step(policy=True)                    clip each parameter group, step, zero
    generation()                         the model, usable for generation on this rank
    state_dict() / load_state_dict()     adapter, critic and optimizer, for checkpoints

What is trained with which loss is not the learner's business: :mod:`.update` builds the
policy update, the critic's and value pretraining out of these calls, each with its own
loss function. ``output`` says what the loss function receives for a micro-batch:
``"logits"`` (``[B, R, V]`` float32, the positions that predict each sampled token) or
``"values"`` (``[B, R]``, the critic's).

Every rank is handed the *whole* list of micro-batches. The learner deals them out to the
data-parallel ranks in turn (a rank short of one runs an empty micro-batch, so every rank
makes the same number of passes, which the sharded strategies' collectives need) and
scales each rank's loss by the number of data-parallel ranks, since the strategies
average gradients over them: the update equals the single-process one on the same batch
when the loss divides by the token count of the whole mini-batch.
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
from agentgym.trainers.batch import MicroBatch
from agentgym.trainers.config import AlgorithmConfig, OptimConfig
from agentgym.trainers.critic import Critic, CriticConfig
from agentgym.trainers.device import autocast, compute_dtype, host_copy, keep_master_weights
from agentgym.trainers.distributed import SINGLE, DistInfo, all_gather_objects
from agentgym.trainers.fused_lora import fused_lora_forward
from agentgym.trainers.replies import model_replies
from agentgym.trainers.router_replay import RoutingReplay

#: what a forward pass hands on: the policy's logits or the critic's values
Output = Literal["logits", "values"]
#: a loss function: a micro-batch and its outputs -> the loss to back-propagate and the
#: metrics to add up (a key ending in ``_max`` is combined by its maximum instead)
LossFn = Callable[[MicroBatch, torch.Tensor], tuple[torch.Tensor, dict[str, float]]]


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
    """The one-process learner (see the module docstring for the interface).

    Args:
        model: the policy (a peft model, or a plain one for full fine-tuning). With LoRA,
            the reference policy is the same model with the adapter disabled: no copy.
        algo: the ``algorithm`` section: micro-batch size, shared prompts, router replay.
        optim: the ``optim`` section.
        pad_id: padding token id.
        lora: the model is a peft model (the reference is the adapter switched off).
        dist: this process's place in the job (single process by default).
        critic: the ``critic`` section, when the advantages come from a critic: a second
            adapter and a value head are added before the optimizer is made.
        seed: the critic adapter's initialisation seed.
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
    ) -> None:
        self.model = model
        self.micro_batch_size = algo.micro_batch_size
        self.optim_cfg = optim
        self.pad_id = pad_id
        self.lora = lora
        self.dist = dist
        #: run a prompt shared by several samples once (``algorithm.share_prompts``)
        self.share_prompts = algo.share_prompts
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
        self._zero_grad()
        #: policy optimizer steps so far (the learning-rate warm-up counts them)
        self.updates = 0

    # ================================================================ the interface
    @torch.no_grad()
    def forward(
        self,
        mbs: Sequence[MicroBatch],
        fn: Callable[[MicroBatch, torch.Tensor], torch.Tensor],
        *,
        output: Output = "logits",
        reference: bool = False,
    ) -> list[torch.Tensor]:
        """``fn(mb, outputs)`` of every micro-batch, without gradients (log-probs from
        logits, values). Each data-parallel rank computes its own share and the results
        are exchanged, so every rank returns all of them, in order. ``reference``: the
        adapter switched off (the KL reference policy)."""
        self.model.eval()
        parts, me = self._data_parallel()
        mine = [mb.to(self._device()) for mb in self._my_microbatches(list(mbs))]
        off = self.model.disable_adapter() if reference and self.lora else contextlib.nullcontext()
        with off:
            own = self._forward_own(mine, fn, output)
        if parts == 1:
            return own
        real = len(range(me, len(mbs), parts))
        out: list[torch.Tensor] = [torch.empty(0)] * len(mbs)
        for part, results in all_gather_objects((me, [t.cpu() for t in own[:real]]), self.dist):
            for j, t in enumerate(results):
                out[part + j * parts] = t
        return out

    def forward_backward(
        self, mbs: Sequence[MicroBatch], loss_fn: LossFn, *, output: Output = "logits"
    ) -> dict[str, float]:
        """Forward and backward of this rank's share of ``mbs`` (gradients add up until
        :meth:`step`); returns ``loss_fn``'s metrics summed over every micro-batch of
        every rank."""
        self.model.train()
        mine = self._my_microbatches(list(mbs))
        sums = self._backward_own(mine, loss_fn, output)
        if self.dist.world_size == 1:
            return sums
        return combine_metrics(all_gather_objects(sums, self.dist))

    def step(self, *, policy: bool = True) -> dict[str, float]:
        """Clip each parameter group's gradient on its own, take an optimizer step and
        zero the gradients. ``policy=False``: the critic alone moves (value pretraining,
        the critic's extra updates). Returns the gradient norms before clipping
        (``grad_norm``: the policy's; ``critic_grad_norm``) and the learning rate."""
        if policy:
            lr = self._set_lr()
            norms = self._optimizer_step()
            self.updates += 1
        else:
            lr = 0.0
            norms = self._critic_only_step()
        out = {"grad_norm": norms[0], "lr": lr}
        if len(norms) > 1:
            out["critic_grad_norm"] = norms[-1]
        return out

    @contextlib.contextmanager
    def generation(self) -> Iterator[torch.nn.Module]:
        """The model, usable for generation on this rank alone while the context lasts.
        Sharded strategies gather the full weights here (a collective: all ranks enter)."""
        yield self.model

    def state_dict(self, *, optimizer: bool = True) -> dict[str, Any]:
        """What a checkpoint holds of the learner: ``adapter`` (the LoRA weights, whole,
        on the host, in peft naming: also what the engines load; on a device mesh on
        rank 0 alone, streamed there tensor by tensor), ``critic`` (its adapter
        and head, or None), ``optimizer`` (this rank's shard when sharded) and
        ``updates``. A collective under sharded strategies: every rank calls it.
        ``optimizer=False``: adapter only (the engine sync)."""
        state: dict[str, Any] = {"adapter": self._adapter_state()}
        if optimizer:
            state["critic"] = self._critic_state()
            state["optimizer"] = self._optimizer_state()
            state["updates"] = self.updates
        return state

    def adapter_shards(self) -> list[AdapterShard]:
        """What this rank holds of the policy's adapter, for an engine's sync
        (:class:`~agentgym.generation.AdapterSync`; all ranks call it): here, and under
        ZeRO and FSDP2, every tensor whole (gathered for the moment)."""
        return [AdapterShard(k, v) for k, v in self._adapter_state().items()]

    def adapter_digest(self) -> str:
        """SHA-256 of the whole adapter, the same on every rank of a healthy run (all
        ranks call it)."""
        from agentgym.generation import tensors_digest

        return tensors_digest(self._adapter_state())

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Put back what :meth:`state_dict` gave; ``optimizer`` is every rank's saved
        state, in rank order. Parts absent from ``state`` are left as they are."""
        if state.get("adapter") is not None:
            self._load_adapter_state(state["adapter"])
        if state.get("critic") is not None:
            if self.critic is None:
                raise ConfigError(
                    "the checkpoint holds a critic and this run has none: resume with the "
                    "config it was written with (algorithm.name ppo / vapo), or start a new "
                    "run folder."
                )
            self._load_critic_state(state["critic"])
        if state.get("optimizer") is not None:
            self._load_optimizer_state(state["optimizer"])
        if "updates" in state:
            self.updates = int(state["updates"])

    # ================================================================ strategy hooks
    def _setup(self) -> torch.optim.Optimizer:
        """Wrap the model as the strategy needs and return the optimizer."""
        return make_optimizer(self.model, self.optim_cfg, self.critic)

    def _forward_module(self) -> Any:
        """What a training forward pass calls (the model, or a DeepSpeed engine)."""
        return self.model

    @property
    def _grad_scale(self) -> float:
        """What each rank's loss is multiplied by: the strategies average gradients over
        the data-parallel ranks, the losses divide by the whole batch's count."""
        return float(self._data_parallel()[0])

    def _backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def _optimizer_step(self) -> list[float]:
        """Clip each parameter group (the policy's, the critic's) on its own, step, zero
        the gradients; returns each group's gradient norm before clipping."""
        max_norm = self.optim_cfg.max_grad_norm if self.optim_cfg.max_grad_norm > 0 else math.inf
        norms = []
        for group in self.optimizer.param_groups:
            params = [p for p in group["params"] if p.requires_grad]
            norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
            if hasattr(norm, "full_tensor"):  # a DTensor under FSDP2
                norm = norm.full_tensor()
            norms.append(float(norm))
        self.optimizer.step()
        self._zero_grad()
        return norms

    def _critic_only_step(self) -> list[float]:
        """An optimizer step after backward passes of the critic alone: the policy must
        not move. Here its gradients are None, which AdamW skips (no decay, no moment or
        step-count change); strategies whose optimizer steps every group override it."""
        return self._optimizer_step()

    def _zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    def _before_side_forward(self) -> None:
        """Called before a forward pass of a module other than :meth:`_forward_module`
        (the separate critic model), for strategies that count passes themselves."""

    def _data_parallel(self) -> tuple[int, int]:
        """Into how many shares micro-batches are dealt, and this rank's share."""
        return self.dist.world_size, self.dist.rank

    def _reports_metrics(self) -> bool:
        """Whether this rank's loss metrics count (ranks sharing a micro-batch: one)."""
        return True

    def _backward_own(
        self, mbs: list[MicroBatch], loss_fn: LossFn, output: Output
    ) -> dict[str, float]:
        """Forward and backward of this rank's micro-batches, one after the other; the
        metrics summed. (The mesh learner runs them through its pipeline schedule.)"""
        sums: list[dict[str, float]] = []
        # the policy's LoRA layers as one matmul each (same loss and gradients); the
        # critic's passes fuse theirs inside _values, with its adapter active
        fused = self.lora and output == "logits"
        with fused_lora_forward(self.model) if fused else contextlib.nullcontext(0):
            for mb in mbs:
                mb = mb.to(self._device())
                loss, stats = loss_fn(mb, self._outputs(mb, output))
                self._backward(loss * self._grad_scale)
                sums.append(stats)
        return combine_metrics(sums) if self._reports_metrics() else {}

    def _forward_own(
        self,
        mbs: list[MicroBatch],
        fn: Callable[[MicroBatch, torch.Tensor], torch.Tensor],
        output: Output,
    ) -> list[torch.Tensor]:
        """``fn`` of this rank's micro-batches' outputs (no gradients)."""
        return [fn(mb, self._outputs(mb, output)) for mb in mbs]

    def _adapter_state(self) -> dict[str, torch.Tensor]:
        from agentgym.generation import adapter_state_dict

        return host_copy(adapter_state_dict(self.model))

    def _load_adapter_state(self, state: dict[str, torch.Tensor]) -> None:
        from agentgym.generation import load_adapter_state_dict

        load_adapter_state_dict(self.model, state)

    #: which ranks' saved optimizer states :meth:`_load_optimizer_state` reads on resume:
    #: ``own`` (this rank's) or ``all`` (:func:`~agentgym.trainers.checkpoint.read_checkpoint`)
    optimizer_shards_read = "own"

    def _optimizer_state(self) -> dict[str, Any]:
        return self.optimizer.state_dict()

    def _load_optimizer_state(self, states: Sequence[dict[str, Any]]) -> None:
        self.optimizer.load_state_dict(states[self.dist.rank])

    def _gathered(self, params: list[torch.nn.Parameter], modify: bool = False) -> Any:
        """A context in which ``params`` are whole (ZeRO-3 gathers them; ``modify``:
        what rank 0 writes is scattered back). Other strategies need nothing."""
        return contextlib.nullcontext()

    def _critic_state(self) -> dict[str, torch.Tensor] | None:
        if self.critic is None:
            return None
        with self._gathered(self.critic.parameters()):
            return self.critic.state_dict()

    def _load_critic_state(self, state: dict[str, torch.Tensor]) -> None:
        assert self.critic is not None
        with self._gathered(self.critic.parameters(), modify=True):
            self.critic.load_state_dict(state)

    # ================================================================ internals
    def _outputs(self, mb: MicroBatch, output: Output) -> torch.Tensor:
        """A micro-batch's logits ``[B, R, V]`` or the critic's values ``[B, R]``."""
        return self._values(mb) if output == "values" else self._replies(mb, hidden=False)

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
            self._before_side_forward()
        with autocast(self._device(), self.compute_dtype):
            return model_replies(
                self._forward_module() if own else module,
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
        parts, me = self._data_parallel()
        if parts == 1:
            return mbs
        per_rank = max(1, math.ceil(len(mbs) / parts))
        mine = mbs[me::parts]
        while len(mine) < per_rank:
            mine.append(_empty_like(mbs[0]))
        return mine

    def _set_lr(self) -> float:
        """The policy's learning rate for this step (warm-up); the critic's is fixed."""
        w = self.optim_cfg.warmup_steps
        lr = self.optim_cfg.lr * min(1.0, (self.updates + 1) / w) if w > 0 else self.optim_cfg.lr
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
