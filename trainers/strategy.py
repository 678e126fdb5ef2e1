"""The strategy protocol: how a learner's model is split over the ranks.

The :class:`~agentgym.trainers.learner.Learner` is one class for every distribution
strategy. What differs between them -- how the model is wrapped, how micro-batches run,
how a backward pass and an optimizer step go, how whole tensors are made and saved -- is
a :class:`Strategy` the learner is given, and the learner calls its public methods and
nothing else. This class is the one-process strategy, and each method's docstring is the
contract every backend keeps:

==========================  ==========================================================
set-up                      ``parallelize(model, critic, optim) -> (model, optimizer)``
dealing micro-batches       ``shares()``, ``reports_metrics()``, ``share_prompts``
running them                ``forward(mbs, compute, fn)``,
                            ``forward_backward(mbs, compute, loss, context=)``,
                            ``backward(loss)``,
                            ``forward_module(model)``, ``before_side_forward()``
the optimizer step          ``step(optimizer, max_norm, policy=)``, ``zero_grad(optimizer)``
whole tensors               ``gathered(params, modify=)``, ``generation(model)``
state                       ``adapter_state``, ``load_adapter_state``, ``adapter_shards``,
                            ``adapter_digest``,
                            ``critic_state``, ``load_critic_state``,
                            ``optimizer_state``, ``load_optimizer_state``,
                            ``optimizer_shards_read``
==========================  ==========================================================

The backends: :class:`Strategy` (one process), :class:`~.strategies.DeepSpeedZeRO`
(ZeRO-2/3), :class:`~.strategies.FSDP2` and the device mesh's
:class:`~.parallel.MeshStrategy` (FSDP2 with tensor, expert and pipeline parallelism,
the model cut by a parallelize function per model family). Adding a backend is
subclassing :class:`Strategy` and overriding these methods; nothing private of the
learner's is called or needed.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch

from agentgym import ConfigError
from agentgym.generation import AdapterShard
from agentgym.trainers.batch import MicroBatch
from agentgym.trainers.config import OptimConfig
from agentgym.trainers.critic import Critic
from agentgym.trainers.device import host_copy
from agentgym.trainers.distributed import SINGLE, DistInfo

#: a micro-batch's outputs (its logits or the critic's values), computed by the learner
Compute = Callable[[MicroBatch], torch.Tensor]
#: a micro-batch and its outputs -> the loss to back-propagate (already scaled) and metrics
StepLoss = Callable[[MicroBatch, torch.Tensor], tuple[torch.Tensor, dict[str, float]]]


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


class Strategy:
    """One process (see the module docstring for the protocol).

    Attributes:
        dist: this process's place in the job.
        share_prompts: micro-batches may run a prompt shared by several samples once
            (the sharded backends turn it off: their collectives need the same passes on
            every rank).
        optimizer_shards_read: which ranks' saved optimizer states
            :meth:`load_optimizer_state` needs on resume: ``own`` or ``all``.
    """

    share_prompts: bool = True
    optimizer_shards_read: str = "own"

    def __init__(self, dist: DistInfo = SINGLE) -> None:
        self.dist = dist

    # ------------------------------------------------------------------ set-up
    def parallelize(
        self, model: torch.nn.Module, critic: Critic | None, optim: OptimConfig
    ) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        """Split ``model`` over the ranks as the backend does; returns the model the
        learner trains (the same object here) and its optimizer."""
        return model, make_optimizer(model, optim, critic)

    # ------------------------------------------------------------------ dealing
    def shares(self) -> tuple[int, int]:
        """Into how many data-parallel shares micro-batches are dealt, and this rank's."""
        return self.dist.world_size, self.dist.rank

    def reports_metrics(self) -> bool:
        """Whether this rank's loss metrics count (of ranks sharing a micro-batch: one)."""
        return True

    # ------------------------------------------------------------------ running
    def forward_module(self, model: torch.nn.Module) -> Any:
        """What a training forward pass calls (the model, or a DeepSpeed engine)."""
        return model

    def before_side_forward(self) -> None:
        """Called before a forward pass of a module other than :meth:`forward_module`
        (the separate critic model), for backends that count passes themselves."""

    def forward(
        self,
        mbs: Sequence[MicroBatch],
        compute: Compute,
        fn: Callable[[MicroBatch, torch.Tensor], torch.Tensor],
        *,
        output: str = "logits",
    ) -> list[torch.Tensor]:
        """``fn(mb, compute(mb))`` of this rank's micro-batches, in order, no gradients
        (``compute``: the learner's outputs of one micro-batch, the logits or, ``output``
        ``"values"``, the critic's values; a pipeline computes them stage by stage)."""
        return [fn(mb, compute(mb)) for mb in mbs]

    def forward_backward(
        self,
        mbs: Sequence[MicroBatch],
        compute: Compute,
        loss: StepLoss,
        *,
        output: str = "logits",
        context: Callable[[], contextlib.AbstractContextManager[Any]] | None = None,
    ) -> list[dict[str, float]]:
        """Forward and backward of this rank's micro-batches, one after the other; the
        gradients add up until :meth:`step`. Returns each micro-batch's metrics.
        ``context``: entered around the passes made with ``compute``, backward passes
        included (the learner's fused LoRA layers; a backend that runs a schedule of its
        own instead of ``compute``, as the mesh's pipeline, runs without it)."""
        out = []
        with context() if context is not None else contextlib.nullcontext():
            for mb in mbs:
                value, stats = loss(mb, compute(mb))
                self.backward(value)
                out.append(stats)
        return out

    def backward(self, loss: torch.Tensor) -> None:
        """Back-propagate one micro-batch's (already scaled) loss."""
        loss.backward()

    # ------------------------------------------------------------------ the step
    def step(
        self, optimizer: torch.optim.Optimizer, max_norm: float, *, policy: bool = True
    ) -> list[float]:
        """Clip each parameter group (the policy's, the critic's) on its own, take the
        optimizer step and zero the gradients; returns each group's gradient norm before
        clipping. ``policy=False``: the critic alone moves (here the policy's gradients
        are None, which AdamW skips: no decay, no moment or step-count change)."""
        limit = max_norm if max_norm > 0 else math.inf
        norms = []
        for group in optimizer.param_groups:
            params = [p for p in group["params"] if p.requires_grad]
            norm = torch.nn.utils.clip_grad_norm_(params, limit)
            if hasattr(norm, "full_tensor"):  # a DTensor under FSDP2
                norm = norm.full_tensor()
            norms.append(float(norm))
        optimizer.step()
        self.zero_grad(optimizer)
        return norms

    def zero_grad(self, optimizer: torch.optim.Optimizer) -> None:
        optimizer.zero_grad(set_to_none=True)

    # ------------------------------------------------------------------ whole tensors
    def gathered(self, params: Sequence[torch.nn.Parameter], modify: bool = False) -> Any:
        """A context in which ``params`` are whole (ZeRO-3 gathers them; ``modify``: what
        rank 0 writes is scattered back)."""
        return contextlib.nullcontext()

    @contextlib.contextmanager
    def generation(self, model: torch.nn.Module) -> Iterator[torch.nn.Module]:
        """The model, whole, for generation on this rank while the context lasts (every
        rank enters together where weights are gathered)."""
        yield model

    # ------------------------------------------------------------------ state
    def adapter_state(self, model: torch.nn.Module) -> dict[str, torch.Tensor]:
        """The policy's adapter, whole, on the host, in peft naming (every rank calls it;
        a backend may return it on rank 0 alone, as the mesh does)."""
        from agentgym.generation import adapter_state_dict

        return host_copy(adapter_state_dict(model))

    def load_adapter_state(self, model: torch.nn.Module, state: Mapping[str, torch.Tensor]) -> None:
        """Put a whole (peft-named) adapter into this rank's shares of it."""
        from agentgym.generation import load_adapter_state_dict

        load_adapter_state_dict(model, dict(state))

    def adapter_shards(self, model: torch.nn.Module) -> list[AdapterShard]:
        """What this rank holds of the adapter for an engine's sync (every tensor whole
        here, and under ZeRO and FSDP2, gathered for the moment)."""
        return [AdapterShard(k, v) for k, v in self.adapter_state(model).items()]

    def adapter_digest(self, model: torch.nn.Module) -> str:
        """SHA-256 of the whole adapter (every rank calls it; every rank gets it)."""
        from agentgym.generation import tensors_digest

        return tensors_digest(self.adapter_state(model))

    def model_state(self, model: torch.nn.Module) -> dict[str, torch.Tensor]:
        """Full fine-tuning's weights, whole (it runs in one process: the learner refuses
        a model without an adapter on more, so a sharded backend never gets here)."""
        return model.state_dict()

    def load_model_state(self, model: torch.nn.Module, state: Mapping[str, torch.Tensor]) -> None:
        """Put back full fine-tuning's weights; names the model does not have are refused."""
        _, unexpected = model.load_state_dict(dict(state), strict=False)
        if unexpected:
            raise ConfigError(
                f"checkpoint weights do not fit the model: {unexpected[:5]}. Resume with the "
                "model.* settings the checkpoint was written with."
            )

    def critic_state(self, critic: Critic) -> dict[str, torch.Tensor]:
        """The critic's adapter and head, whole."""
        with self.gathered(critic.parameters()):
            return critic.state_dict()

    def load_critic_state(self, critic: Critic, state: Mapping[str, torch.Tensor]) -> None:
        with self.gathered(critic.parameters(), modify=True):
            critic.load_state_dict(dict(state))

    def optimizer_state(self, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """This rank's optimizer state (its shard where sharded)."""
        return optimizer.state_dict()

    def load_optimizer_state(
        self, optimizer: torch.optim.Optimizer, states: Sequence[dict[str, Any] | None]
    ) -> None:
        """Restore from every rank's saved state (rank order; None where not read)."""
        optimizer.load_state_dict(states[self.dist.rank])
