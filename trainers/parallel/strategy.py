"""The device mesh as a strategy: FSDP2 with tensor, expert and pipeline parallelism.

:class:`MeshStrategy` is a :class:`~agentgym.trainers.strategy.Strategy` (the learner,
the losses, the micro-batching and the metrics are the one
:class:`~agentgym.trainers.learner.Learner`'s) whose model is split over the mesh of
``distributed: {dp_shard, tp, ep, pp}``:

1. the unsplit peft model the loop built stays the *generation model* (the HF engine's);
   its module tree, copied with every tensor moved into the copy (no weight held twice),
   becomes the *training model*, and the generation model keeps empty parameters;
2. the training model is cut by its family's parallelize function
   (:mod:`.parallelize`): this rank's pipeline stage, its routed experts' share, tensor
   parallelism, activation checkpointing and FSDP2 (each decoder layer over the
   ``dp = dp_shard * ep`` data-parallel ranks, each layer's experts over ``dp_shard``);
3. the micro-batches are dealt over the ``dp`` ranks (the ``tp`` ranks and the pipeline
   stages of one data-parallel rank share them) and run with the learner's plain passes,
   or, when ``pp > 1``, through the 1F1B pipeline schedule at once
   (:meth:`MeshStrategy.forward_backward`), the last stage calling the loss function;
   no-grad results are broadcast from the last stage;
4. gradients: FSDP2 averages dense gradients over ``dp``; an expert's gradient adds up
   the tokens every rank of its group sent it, so it is averaged over ``dp_shard`` by
   FSDP2 and divided by ``ep`` here. The gradient norm is the norm of the whole model's
   gradient (summed over experts and stages), and clipping matches the single-process
   ``clip_grad_norm_``;
5. generation gathers every tensor into the generation model for the rollout and frees
   it again; checkpoints gather the adapter into an ordinary peft state dict, streamed
   to rank 0 tensor by tensor.

The critic of PPO/VAPO (``critic.share_base: true``: its adapter and value head on the
policy's base) is split like the policy's adapter: its LoRA with the layer it adapts,
the head (on the root) sharded by FSDP2; each parameter group is clipped on its own, and
its checkpoint gathers whole tensors through :class:`~.state.ParamMap`. Under pipelining
its passes run through the stages like the policy's, the last stage returning values
(:class:`~.pipeline.StageModule`), broadcast to every stage.

Refused here (a clear error at start): a separate critic model (``critic.share_base:
false``), router replay, LoRA dropout (ranks would draw different masks) and, because
ranks must run the same number of forward passes in lock step (and, under tensor
parallelism, the logits stay split over the vocabulary), shared-prompt micro-batches
are turned off.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from agentgym import ConfigError
from agentgym.generation import AdapterShard
from agentgym.trainers.batch import MicroBatch
from agentgym.trainers.config import OptimConfig
from agentgym.trainers.critic import Critic, is_critic_name
from agentgym.trainers.device import autocast, host_copy
from agentgym.trainers.distributed import DistInfo
from agentgym.trainers.loading import release_meta, source_of
from agentgym.trainers.parallel.experts import find_experts
from agentgym.trainers.parallel.layout import Layout, check_mesh_critic
from agentgym.trainers.parallel.mesh import ParallelMesh, build_mesh
from agentgym.trainers.parallel.parallelize import parallelize
from agentgym.trainers.parallel.pipeline import PipelineRunner
from agentgym.trainers.parallel.quant import is_quantized
from agentgym.trainers.parallel.state import ParamMap
from agentgym.trainers.strategy import Compute, StepLoss, Strategy, make_optimizer

#: the key of the layout in a rank's saved optimizer state
LAYOUT_KEY = "agentgym_layout"


class _Renamed(Mapping[str, torch.Tensor]):
    """``state`` (peft keys) seen under the training model's parameter names, read on
    access."""

    def __init__(self, state: Mapping[str, torch.Tensor], rename: dict[str, str]) -> None:
        self.state, self.rename = state, rename

    def __getitem__(self, name: str) -> torch.Tensor:
        return self.state[self.rename[name]]

    def __iter__(self) -> Iterator[str]:
        return iter(self.rename)

    def __len__(self) -> int:
        return len(self.rename)


def training_copy(gen: nn.Module) -> nn.Module:
    """The training model: ``gen``'s module tree copied with its parameters *moved* (the
    copy's parameters hold ``gen``'s tensors, which ``gen`` then gives up), so no weight is
    ever held twice; a quantized frozen base is shared (the generation model keeps it
    whole, the training model keeps its share), and so is the checkpoint source of a
    meta-built model. Buffers are copied (small)."""
    memo: dict[int, Any] = {}
    for p in gen.parameters():
        if id(p) not in memo:
            memo[id(p)] = p if is_quantized(p) else nn.Parameter(p.data, p.requires_grad)
    source = source_of(gen)
    if source is not None:
        memo[id(source)] = source
    return copy.deepcopy(gen, memo)


def refuse(model: nn.Module, critic: Critic | None, layout: Layout, router_replay: bool) -> None:
    """What the mesh does not run, refused at start with the fix."""
    if critic is not None:
        check_mesh_critic(critic.cfg.share_base, layout)
        if source_of(model) is not None:
            raise ConfigError(
                "a critic with model.path on a device mesh is not wired yet: the model is "
                "built on the meta device and read per rank, where the critic's adapter "
                "and head get no values. Use one process, or an algorithm without a "
                "critic (DAPO, GRPO)."
            )
    if router_replay:
        raise ConfigError(
            "algorithm.router_replay is not supported with distributed dp_shard/tp/ep/pp."
        )
    expert_stacks = {id(p) for _, e, _ in find_experts(model) for p in e.parameters()}
    if layout.tp > 1 and any(
        is_quantized(p) and id(p) not in expert_stacks for p in model.parameters()
    ):
        raise ConfigError(
            "model.quantize with distributed.tp > 1 quantizes the routed experts only: "
            "DTensor does not split torchao's tensors (quantize_base(..., dense=False))."
        )
    dropout = [m.p for m in model.modules() if isinstance(m, nn.Dropout) and m.p > 0]
    if dropout:
        raise ConfigError(
            "lora.dropout must be 0 with distributed dp_shard/tp/ep/pp (ranks that share "
            "an activation would draw different dropout masks)."
        )


class MeshStrategy(Strategy):
    """``distributed.strategy: fsdp2`` with a mesh (see the module docstring).

    Args:
        dist: this process's place in the job.
        layout: the mesh's sizes.
        pad_id: the padding token id (the pipeline pads micro-batches to one shape).
        compute_dtype: the learner's autocast dtype (the pipeline schedule calls the
            stage module itself, under it); None: float32.
        activation_checkpointing: recompute each decoder layer in the backward pass
            (``distributed.activation_checkpointing``, :mod:`.activations`).
        pp_window: the most micro-batches per run of the pipeline schedule
            (``distributed.pp_window``; 0: all at once).
        router_replay: ``algorithm.router_replay`` (refused here).

    Attributes (set by :meth:`parallelize`): ``gen_model`` (the generation model),
    ``model`` (the training model), ``pmesh`` (the mesh), ``params``
    (:class:`~.state.ParamMap`), ``runner`` (the pipeline schedule, or None).
    """

    # lock-step forward passes (dp, pp), and logits split over the vocabulary (tp: the
    # shared-prompt layout's index_select of the logits is not split-aware)
    share_prompts = False

    def __init__(
        self,
        dist: DistInfo,
        *,
        layout: Layout,
        pad_id: int,
        compute_dtype: torch.dtype | None = None,
        activation_checkpointing: bool = False,
        router_replay: bool = False,
        pp_window: int = 0,
    ) -> None:
        super().__init__(dist)
        self.layout = layout
        self.pad_id = pad_id
        self.compute_dtype = compute_dtype
        self.activation_checkpointing = activation_checkpointing
        self.router_replay = router_replay
        self.pp_window = pp_window

    # ------------------------------------------------------------------ set-up
    def parallelize(
        self, model: nn.Module, critic: Critic | None, optim: OptimConfig
    ) -> tuple[nn.Module, torch.optim.Optimizer]:
        """The training copy of ``model`` cut by its family's parallelize function;
        ``model`` stays the generation model, its tensors released."""
        refuse(model, critic, self.layout, self.router_replay)
        layout = self.layout
        layout.check_world(self.dist.world_size)
        lm_full = model.get_base_model() if hasattr(model, "get_base_model") else model
        layout.check_model(lm_full.config)
        self.pmesh: ParallelMesh = build_mesh(layout, self.dist.rank, self.dist.device)
        shapes = {n: (p.shape, p.dtype) for n, p in model.named_parameters()}
        self.gen_model = model
        self.model = training_copy(model)  # the tensors moved into it: no byte copied
        source = source_of(model)
        if source is not None:  # the generation model: gathered at each rollout
            release_meta(model, source)
        self.critic = critic
        if critic is not None:  # the critic trains on the training model's copy
            critic.model = self.model
        self._free_generation_model()
        cut = parallelize(
            self.model, self.pmesh, layout, activation_checkpointing=self.activation_checkpointing
        )
        self._expert_names = set(cut.experts)
        self.params = ParamMap(
            self.model, shapes, self.pmesh, cut.num_layers, cut.experts, cut.expert_group
        )
        self.runner = (
            PipelineRunner(
                cut.stage_module,
                self.pmesh.coords.pp,
                layout.pp,
                self.pmesh.pp_group,
                self.pmesh.device,
                vocab_width=self._vocab_slice()[1] if layout.tp > 1 else None,
                window=self.pp_window,
            )
            if cut.stage_module is not None
            else None
        )
        self._reports = layout.reports_metrics(self.dist.rank)
        return self.model, make_optimizer(self.model, optim, critic)

    def _free_generation_model(self) -> None:
        """Drop the generation model's tensors (gathered again for each rollout); a
        quantized base stays (it is frozen, and gathering torchao tensors is not wired)."""
        for p in self.gen_model.parameters():
            if not is_quantized(p):
                p.data = p.data.new_empty(0)  # like p (a dry run's fake tensors too)

    # ------------------------------------------------------------------ dealing
    def shares(self) -> tuple[int, int]:
        """The ``dp`` data-parallel shares: the tp ranks and stages of one share get the
        same micro-batches."""
        return self.layout.dp, self.layout.dp_rank(self.dist.rank)

    def reports_metrics(self) -> bool:
        return self._reports

    # ------------------------------------------------------------------ running
    def forward(
        self,
        mbs: Sequence[MicroBatch],
        compute: Compute,
        fn: Callable[[MicroBatch, torch.Tensor], torch.Tensor],
        *,
        output: str = "logits",
    ) -> list[torch.Tensor]:
        """Without pipelining, the learner's passes; with it, this share's micro-batches
        through the stages at once, the results broadcast from the last stage."""
        if self.runner is None:
            return super().forward(mbs, compute, fn, output=output)
        outs = [torch.zeros(mb.targets.shape, device=self._device()) for mb in mbs]

        def on_output(i: int, mb: MicroBatch, out: torch.Tensor) -> torch.Tensor:
            outs[i] = fn(mb, out).float().contiguous()
            return out.new_zeros(())

        self._run_schedule(mbs, on_output, output, backward=False)
        last = self.pmesh.pp_peer(self.layout.pp - 1)
        for t in outs:
            dist.broadcast(t, src=last, group=self.pmesh.pp_group)
        return outs

    def forward_backward(
        self,
        mbs: Sequence[MicroBatch],
        compute: Compute,
        loss: StepLoss,
        *,
        output: str = "logits",
        context: Callable[[], contextlib.AbstractContextManager[Any]] | None = None,
    ) -> list[dict[str, float]]:
        """Without pipelining, the learner's passes (in ``context``); with it, this
        share's micro-batches through the 1F1B schedule, the last stage calling
        ``loss`` (``context``, made for the learner's own passes, is not entered)."""
        if self.runner is None:
            return super().forward_backward(mbs, compute, loss, output=output, context=context)
        stats: list[dict[str, float]] = []

        def on_output(i: int, mb: MicroBatch, out: torch.Tensor) -> torch.Tensor:
            value, part = loss(mb, out)
            stats.append(part)
            return value

        self._run_schedule(mbs, on_output, output, backward=True)
        return stats

    def _run_schedule(
        self,
        mbs: Sequence[MicroBatch],
        on_output: Callable[[int, MicroBatch, torch.Tensor], torch.Tensor],
        output: str,
        *,
        backward: bool,
    ) -> None:
        """``mbs`` through the pipeline (:class:`~.pipeline.PipelineRunner`); the last
        stage hands micro-batch ``i``'s logits (or, with the critic's adapter active and
        its head, values) to ``on_output(i, mb, out)``, which returns the loss to
        back-propagate."""
        assert self.runner is not None
        mbs = [mb.to(self._device()) for mb in mbs]
        seqs = [mb.sequences() for mb in mbs]
        values = output == "values"

        def on_stage_output(i: int, out: torch.Tensor) -> torch.Tensor:
            rows, cols = seqs[i][0].shape
            if not values and self.layout.tp > 1:  # this rank's slice of the vocabulary
                out = self._split_logits(out)
            replies = mbs[i].reply_logits(out[:rows, :cols])
            return on_output(i, mbs[i], (replies.squeeze(-1) if values else replies).float())

        critic = self.critic.active() if values and self.critic else contextlib.nullcontext()
        # the schedule calls the stage module itself: the learner's autocast (bf16) here
        with critic, autocast(self._device(), self.compute_dtype):
            self.runner.run(
                seqs, on_stage_output, pad_id=self.pad_id, backward=backward, values=values
            )

    def _device(self) -> torch.device:
        return next(self.model.parameters()).device

    def _vocab_slice(self) -> tuple[int, int]:
        """(vocabulary size, this tensor-parallel rank's slice of it), split as ``Shard``
        splits (``torch.chunk``)."""
        vocab = int(self.gen_model.get_base_model().config.vocab_size)
        chunk = -(-vocab // self.layout.tp)
        return vocab, max(0, min(chunk, vocab - self.pmesh.coords.tp * chunk))

    def _split_logits(self, local: torch.Tensor) -> torch.Tensor:
        """The last stage's slice of the logits as the vocabulary-sharded DTensor the
        loss reduces (:func:`~agentgym.trainers.algorithm.selected_logprobs`)."""
        from torch.distributed.tensor import DTensor, Shard

        shape = torch.Size([*local.shape[:-1], self._vocab_slice()[0]])
        stride = torch.empty(shape, device="meta").stride()
        return DTensor.from_local(
            local, self.pmesh.tp, [Shard(-1)], run_check=False, shape=shape, stride=stride
        )

    # ------------------------------------------------------------------ the step
    def step(
        self, optimizer: torch.optim.Optimizer, max_norm: float, *, policy: bool = True
    ) -> list[float]:
        """Clip each parameter group (the policy's, the critic's) on its own by the norm
        of its whole gradient, step, zero; returns the norms before clipping. A
        critic-only step is the same: the policy's gradients are None, which AdamW
        skips."""
        names = {id(p): n for n, p in self.model.named_parameters()}
        norms = []
        for group in optimizer.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if self.layout.ep > 1:  # every ep rank's tokens reached the expert: their sum
                for p in params:
                    if names[id(p)] in self._expert_names:
                        p.grad.div_(self.layout.ep)
            norm = self._grad_norm(params, names)
            if max_norm > 0:
                coef = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
                for p in params:
                    p.grad.mul_(coef.to(torch.float32))
            norms.append(float(norm))
        optimizer.step()
        self.zero_grad(optimizer)
        return norms

    def _grad_norm(self, params: list[nn.Parameter], names: dict[int, str]) -> torch.Tensor:
        """The norm of the whole model's gradient: DTensor norms over their meshes, the
        experts' summed over the expert group, everything summed over the stages."""
        dense = torch.zeros((), dtype=torch.float64, device=self.pmesh.device)
        expert = torch.zeros((), dtype=torch.float64, device=self.pmesh.device)
        for p in params:
            norm = torch.linalg.vector_norm(p.grad)
            if hasattr(norm, "full_tensor"):
                norm = norm.full_tensor()
            sq = norm.double() ** 2
            if names[id(p)] in self._expert_names:
                expert += sq
            else:
                dense += sq
        if self.layout.expert_split > 1:
            dist.all_reduce(expert, group=self.pmesh.expert_group)
        total = dense + expert
        if self.layout.pp > 1:
            dist.all_reduce(total, group=self.pmesh.pp_group)
        return total.sqrt()

    # ------------------------------------------------------------------ whole tensors
    @contextlib.contextmanager
    def generation(self, model: nn.Module) -> Iterator[nn.Module]:
        """The generation model with every tensor gathered (all ranks enter together):
        all but a quantized base and the critic (generation never runs it)."""
        names = [
            n
            for n, p in self.gen_model.named_parameters()
            if not is_quantized(p) and not is_critic_name(n)
        ]
        full = self.params.gather(names)
        params = dict(self.gen_model.named_parameters())
        for name in names:
            params[name].data = full.pop(name)
        try:
            yield self.gen_model
        finally:
            self._free_generation_model()

    # ------------------------------------------------------------------ the adapter
    def _peft_keys(self) -> dict[str, str]:
        """The policy adapter's parameter names (not the critic's) -> their keys in a
        peft state dict (peft renames them: drops ``.default``)."""
        from peft import get_peft_model_state_dict

        lora = sorted(n for n in self.params.shapes if "lora_" in n and not is_critic_name(n))
        marks = {n: torch.empty(0) for n in lora}
        keyed = get_peft_model_state_dict(self.gen_model, state_dict=dict(marks))
        key_of = {id(v): k for k, v in keyed.items()}
        return {n: key_of[id(t)] for n, t in marks.items() if id(t) in key_of}

    def adapter_pieces(
        self, *, dst: int = 0, dtype: torch.dtype | None = None
    ) -> Iterator[tuple[str, torch.Tensor]]:
        """The whole adapter on rank ``dst``, one tensor at a time, in peft naming and key
        order, on the host (in ``dtype`` when given): what the checkpoint, the engine's
        adapter file and the digest read. Every rank runs it to its end (collectives);
        the others yield nothing and hold at most one gathered tensor beyond their own
        shares (:meth:`~.state.ParamMap.stream`)."""
        keys = self._peft_keys()
        names = sorted(keys, key=keys.__getitem__)
        for name, t in self.params.stream(names, dst=dst):
            t = t.detach().to("cpu", copy=True)
            yield keys[name], t if dtype is None else t.to(dtype)

    def adapter_state(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """The whole adapter in peft naming on rank 0 (the writer of checkpoints and
        adapter files), an empty dict on the others (all ranks call it)."""
        return dict(self.adapter_pieces(dst=0))

    def load_adapter_state(self, model: nn.Module, state: Mapping[str, torch.Tensor]) -> None:
        """Put a whole (peft-named) adapter into this rank's shares of it, read tensor by
        tensor (a checkpoint's LazyTensors): this rank's stage's only."""
        rename = self._peft_keys()
        missing = [k for k in rename.values() if k not in state]
        if missing:
            raise ConfigError(
                f"the saved adapter lacks {missing[:5]}: it was written by another model."
            )
        self.params.load(_Renamed(state, rename))

    def adapter_shards(self, model: nn.Module) -> list[AdapterShard]:
        """What this rank holds of the policy's adapter, for an engine's sync (every rank
        calls it): its pipeline stage's tensors -- dense ones whole (gathered over the
        stage's tensor- and data-parallel ranks for the moment), fused-expert ones as its
        expert share (the rows of its experts, gathered over ``dp_shard`` only). Nothing
        of another stage, and no expert another rank holds."""
        keys = self._peft_keys()
        mine = self.params.local()
        here = self.pmesh.coords.pp
        out = []
        for name in sorted(keys):
            if self.params.stage_of(name) != here:
                continue
            t = mine[name].detach()
            t = t.full_tensor() if hasattr(t, "full_tensor") else t
            t = t.to("cpu", copy=True)
            if name in self.params.experts:
                _, shard = self.params.experts[name]
                held = range(shard.offset, shard.offset + shard.local)
                out.append(AdapterShard(keys[name], t, experts=held, total=shard.total))
            else:
                out.append(AdapterShard(keys[name], t))
        return out

    def adapter_digest(self, model: nn.Module) -> str:
        """SHA-256 of the whole adapter (:func:`~agentgym.generation.tensors_digest`'s
        value), hashed on rank 0 as it streams in and sent to every rank."""
        h = hashlib.sha256()
        for key, t in self.adapter_pieces(dst=0):
            h.update(key.encode())
            h.update(t.to(torch.float32).cpu().contiguous().numpy().tobytes())
        digest = [h.hexdigest() if self.dist.rank == 0 else None]
        dist.broadcast_object_list(digest, src=0)
        return str(digest[0])

    # ------------------------------------------------------------------ critic, optimizer
    def critic_state(self, critic: Critic) -> dict[str, torch.Tensor]:
        """The critic's adapter and head, whole tensors on the host (all ranks call it)."""
        names = [n for n in self.params.shapes if is_critic_name(n)]
        return host_copy(self.params.gather(names))

    def load_critic_state(self, critic: Critic, state: Mapping[str, torch.Tensor]) -> None:
        """Put a :meth:`critic_state` back into this rank's shares of it."""
        names = {n for n in self.params.shapes if is_critic_name(n)}
        if names != set(state):
            raise ConfigError(
                "the checkpoint's critic does not fit this critic (different critic.r, "
                f"critic.target_modules or model): missing {sorted(names - set(state))[:3]}, "
                f"unexpected {sorted(set(state) - names)[:3]}."
            )
        self.params.load(state)

    def optimizer_state(self, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """This rank's optimizer shard, with the layout that split it."""
        return {**optimizer.state_dict(), LAYOUT_KEY: dataclasses.asdict(self.layout)}

    def load_optimizer_state(
        self, optimizer: torch.optim.Optimizer, states: Sequence[dict[str, Any] | None]
    ) -> None:
        """Restore this rank's shard; a checkpoint written under another layout is
        refused (its shards would not fit this rank's parameters)."""
        state = dict(states[self.dist.rank] or {})
        written = state.pop(LAYOUT_KEY, None)
        here = dataclasses.asdict(self.layout)
        if written != here:
            raise ConfigError(
                f"this checkpoint's optimizer states were written with distributed {written} "
                f"and this run is {here}: resume with the same dp_shard/tp/ep/pp (the adapter "
                "itself loads under any layout: start a new run from it with "
                "model.path / the saved adapter)."
            )
        optimizer.load_state_dict(state)
