"""Sharded training strategies: DeepSpeed ZeRO-2/3 and FSDP2, and the learner of a config.

Both are :class:`~agentgym.trainers.strategy.Strategy` backends (the strategy protocol)
that change only how the model is wrapped, how a backward pass and an optimizer step run,
how the full weights are made available for generation, and how the LoRA weights are
gathered. The learner, the losses (:mod:`.update`) and the dealing of micro-batches are
shared, so a sharded run computes the same update as a single process on the same batch
(tested: the adapter after one 2-process step equals the 1-process one to float
tolerance). :func:`make_learner` builds the learner of a config with its strategy.

What each strategy shards, with LoRA (only the adapter is trainable):

=============  ==============================  =========================================
strategy       weights                         gradients + optimizer state
=============  ==============================  =========================================
deepspeed, 2   replicated on every rank        partitioned (ZeRO-2)
deepspeed, 3   partitioned (ZeRO-3)            partitioned
fsdp2          partitioned per decoder layer   partitioned (DTensor shards)
=============  ==============================  =========================================

Generation (the HF engine on every rank, each with its own share of the tasks) needs
whole weights: :meth:`generation` gathers them once per rollout under ZeRO-3 and FSDP2
(as TRL's ``ds3_gather_for_generation`` does) and releases them before training. That is
the right trade for models that fit one device; the 671B layout generates with vLLM
instead (docs/plan.md), where the rollout engine holds its own sharded copy.

Adapter sync and checkpoints gather only the LoRA weights (``lora_`` parameters), never
the base model. Optimizer state is saved per rank (a resumed run needs the same number
of processes; the adapter itself is saved whole and loads anywhere).

DeepSpeed would compile a shared-memory communication extension on first use on CPU
(40-80 s); it serves only inference, so :func:`_skip_shm_extension` skips that build.
Any extension DeepSpeed still builds is cached in ``TORCH_EXTENSIONS_DIR`` (default
here: ``~/.cache/agentgym/torch_extensions``, set before DeepSpeed is imported).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from agentgym import ConfigError, derive_seed
from agentgym.trainers.config import STRATEGIES, OptimConfig, TrainConfig
from agentgym.trainers.critic import Critic
from agentgym.trainers.device import compute_dtype, host_copy
from agentgym.trainers.distributed import DistInfo
from agentgym.trainers.learner import Learner
from agentgym.trainers.strategy import Strategy, make_optimizer


def extensions_dir() -> Path:
    """Where DeepSpeed keeps its compiled extensions (``TORCH_EXTENSIONS_DIR``)."""
    env = os.environ.get("TORCH_EXTENSIONS_DIR")
    if env:
        return Path(env)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "agentgym" / "torch_extensions"


def _skip_shm_extension() -> None:
    """Keep DeepSpeed from compiling its shared-memory communication extension.

    On CPU, DeepSpeed's communication backend compiles a C++ extension when it starts
    (40-80 s on 2 busy cores, and again for every new virtual environment: the build is
    keyed by the sources' paths). The extension serves only ``inference_all_reduce``
    (DeepSpeed's inference tensor parallelism); ZeRO's reductions, all a training run
    makes, go through ``torch.distributed``. Without it the backend takes the path it
    takes wherever the extension cannot be built."""
    import importlib

    # the submodule by its full name: ``deepspeed.comm.torch`` as an attribute is torch
    backend = importlib.import_module("deepspeed.comm.torch")
    if hasattr(backend, "build_shm_op"):
        backend.build_shm_op = lambda: None


def _lora_params(model: torch.nn.Module) -> list[tuple[str, torch.nn.Parameter]]:
    return [(n, p) for n, p in model.named_parameters() if "lora_" in n]


def deepspeed_config(
    *,
    micro_batch_size: int,
    world_size: int,
    max_grad_norm: float,
    zero_stage: int,
    compute_dtype: torch.dtype | None,
) -> dict[str, Any]:
    """The DeepSpeed config of :class:`DeepSpeedZeRO`: our gradient accumulation, our
    float32 optimizer, and the learner's autocast (``model.dtype``) declared in
    ``torch_autocast`` -- DeepSpeed's forward switches an outer CUDA autocast off unless
    its own section asks for it -- with no module's gradients reduced in bf16 (the float32
    master weights' gradients stay float32)."""
    mbs = max(1, micro_batch_size)
    return {
        "train_micro_batch_size_per_gpu": mbs,
        "gradient_accumulation_steps": 1,
        "train_batch_size": mbs * world_size,
        "managed_gradient_accumulation": False,
        "gradient_clipping": float(max_grad_norm),
        "zero_optimization": {"stage": zero_stage},
        "bf16": {"enabled": False},
        "fp16": {"enabled": False},
        "torch_autocast": {
            "enabled": compute_dtype is not None,
            "dtype": str(compute_dtype or torch.bfloat16).removeprefix("torch."),
            "lower_precision_safe_modules": [],
        },
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }


class DeepSpeedZeRO(Strategy):
    """DeepSpeed ZeRO stage 2 or 3 (``distributed.strategy: deepspeed``).

    The optimizer is the same AdamW as the single-process learner, handed to DeepSpeed
    (no DeepSpeed CPU-Adam build). Gradient accumulation is ours
    (``managed_gradient_accumulation: false``): every micro-batch's ``backward`` adds
    to the gradients and one ``engine.step()`` per mini-batch reduces, clips and steps.

    Under ZeRO-3 every micro-batch runs as one full sequence per sample
    (``share_prompts`` is off): ZeRO-3 prefetches parameters in the module order it
    traced on the first forward pass, and the shared-prompt layout's two passes (prompt,
    then replies) change that order between micro-batches, which it rejects.
    """

    optimizer_shards_read = "all"  # ZeRO-2 merges every partition's state on resume

    def __init__(
        self,
        dist: DistInfo,
        *,
        zero_stage: int = 3,
        micro_batch_size: int = 1,
        compute_dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(dist)
        self.zero_stage = zero_stage
        self.micro_batch_size = micro_batch_size
        self.compute_dtype = compute_dtype
        self.share_prompts = zero_stage != 3

    def parallelize(
        self, model: torch.nn.Module, critic: Critic | None, optim: OptimConfig
    ) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        """``deepspeed.initialize`` with the learner's own AdamW (per-group clipping with a
        critic)."""
        os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(extensions_dir()))
        if not torch.cuda.is_available():  # named: no "unable to detect a GPU" warning
            os.environ.setdefault("DS_ACCELERATOR", "cpu")
        try:
            import deepspeed
        except ImportError as e:  # pragma: no cover - deepspeed is a dependency
            raise ConfigError(
                "distributed.strategy: deepspeed needs the deepspeed package: pip install deepspeed"
            ) from e
        _skip_shm_extension()
        config = deepspeed_config(
            micro_batch_size=self.micro_batch_size,
            world_size=self.dist.world_size,
            max_grad_norm=optim.max_grad_norm,
            zero_stage=self.zero_stage,
            compute_dtype=self.compute_dtype,
        )
        optimizer = make_optimizer(model, optim, critic)
        engine, ds_optimizer, _, _ = deepspeed.initialize(
            model=model, optimizer=optimizer, config=config, dist_init_required=False
        )
        self.engine, self.model, self.optimizer = engine, model, ds_optimizer
        if critic is not None:
            clip_each_group(ds_optimizer)
        return model, ds_optimizer

    def forward_module(self, model: torch.nn.Module) -> Any:
        return self.engine

    def backward(self, loss: torch.Tensor) -> None:
        self.engine.backward(loss, scale_wrt_gas=False)

    def zero_grad(self, optimizer: torch.optim.Optimizer) -> None:
        """ZeRO-3 keeps the reduced gradients in one flat buffer and, on the first
        backward pass after a step, *copies* each parameter's gradient into its slice,
        adding on later passes; ``zero_grad`` leaves the buffer as it is. A parameter
        without a gradient in that first pass (the policy's LoRA while the critic's
        backward runs first; an expert no token of the first micro-batch reached) then
        adds onto the previous step's gradient. Zeroing the buffer makes every pass's
        gradient land on zeros."""
        super().zero_grad(optimizer)
        flat = getattr(optimizer, "grad_partitions_flat_buffer", None)
        if self.zero_stage == 3 and flat is not None:
            flat.zero_()

    def before_side_forward(self) -> None:
        """The engine's forward tells ZeRO a new pass begins (ZeRO-3 counts passes to
        know whether a gradient starts or adds to the step's); a module called outside
        the engine (the separate critic model) must do the same, else each of its
        passes overwrote the previous ones' gradients."""
        clear = getattr(self.optimizer, "clear_backward_seen_flag", None)
        if clear is not None:
            clear()

    def step(
        self, optimizer: torch.optim.Optimizer, max_norm: float, *, policy: bool = True
    ) -> list[float]:
        """DeepSpeed's step (its clipping: per group with a critic); a critic-only step
        keeps the policy's groups where they are (:meth:`_critic_only`)."""
        if not policy:
            return self._critic_only(optimizer)
        return self._engine_step(optimizer)

    def _engine_step(self, optimizer: torch.optim.Optimizer) -> list[float]:
        self.engine.step()
        if self.zero_stage == 3:  # the next pass (critic-only steps' too) starts on zeros
            self.zero_grad(optimizer)
        group_norms = getattr(self.optimizer, "agentgym_group_norms", None)
        if group_norms is not None:  # clip_each_group: each group's own norm
            return list(group_norms)
        norm = self.engine.get_global_grad_norm()
        return [float(norm) if norm is not None else 0.0]

    def _critic_only(self, optimizer: torch.optim.Optimizer) -> list[float]:
        """ZeRO steps every parameter group, the policy's too, with zero gradients where
        it got none: AdamW would then decay the policy's weights and count a step in its
        bias correction (the first policy update after value pretraining would be about
        half as large as a single process's). The policy's groups step with learning
        rate 0 and get their optimizer state back afterwards."""
        zero = optimizer
        inner = zero.optimizer  # the torch AdamW over ZeRO's flat fp32 partitions
        frozen = {
            i for i, g in enumerate(inner.param_groups) if g.get("name", "policy") != "critic"
        }
        if hasattr(zero, "sub_group_to_group_id"):  # ZeRO-3 steps one sub-group at a time
            flat = [
                zero.fp32_partitioned_groups_flat[sub]
                for sub, group in zero.sub_group_to_group_id.items()
                if group in frozen
            ]
        else:
            flat = [p for i in frozen for p in inner.param_groups[i]["params"]]
        saved = [(p, _clone_state(inner.state.get(p))) for p in flat]
        lrs = {i: inner.param_groups[i]["lr"] for i in frozen}
        for i in frozen:
            inner.param_groups[i]["lr"] = 0.0
        try:
            return self._engine_step(optimizer)
        finally:
            for i, lr in lrs.items():
                inner.param_groups[i]["lr"] = lr
            for p, before in saved:
                if before is None:
                    inner.state.pop(p, None)
                else:
                    inner.state[p] = before

    @contextlib.contextmanager
    def generation(self, model: torch.nn.Module) -> Iterator[torch.nn.Module]:
        if self.zero_stage < 3:
            yield model
            return
        from deepspeed.runtime.zero import GatheredParameters

        with GatheredParameters(list(model.parameters())):
            yield model

    def adapter_state(self, model: torch.nn.Module) -> dict[str, torch.Tensor]:
        with self.gathered([p for _, p in _lora_params(model)]):
            return super().adapter_state(model)  # host copies, made while gathered

    def load_adapter_state(self, model: torch.nn.Module, state: Mapping[str, torch.Tensor]) -> None:
        # modify: rank 0's values are scattered back into every shard
        with self.gathered([p for _, p in _lora_params(model)], modify=True):
            super().load_adapter_state(model, state)

    def gathered(self, params: Sequence[torch.nn.Parameter], modify: bool = False) -> Any:
        if self.zero_stage < 3:
            return contextlib.nullcontext()
        from deepspeed.runtime.zero import GatheredParameters

        return GatheredParameters(list(params), modifier_rank=0 if modify else None)

    def load_optimizer_state(
        self, optimizer: torch.optim.Optimizer, states: Sequence[dict[str, Any] | None]
    ) -> None:
        # ZeRO-2 merges every partition's state; ZeRO-3 picks its own rank's
        optimizer.load_state_dict(list(states))


#: what :func:`clip_each_group` and the ZeRO-3 learner's hooks read of DeepSpeed's
#: ZeRO-3 optimizer (checked when a critic is set up)
ZERO3_INTERNALS = (
    "_get_norm_groups",
    "fp32_partitioned_groups_flat",
    "grad_partitions_flat_buffer",
    "clear_backward_seen_flag",
    "loss_scale",
)


def _clone_state(state: dict[str, Any] | None) -> dict[str, Any] | None:
    if state is None or not state:
        return None
    return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in state.items()}


def clip_each_group(optimizer: Any) -> None:
    """Make a ZeRO-2/3 optimizer clip each parameter group by its own gradient norm, as
    the single-process learner does (the policy's and the critic's groups each to
    ``optim.max_grad_norm``), instead of DeepSpeed's one norm over all groups: with a
    joint clip, the critic's value-loss gradients would shrink the policy's step and the
    policy's the critic's, and a sharded run would not compute the single process's
    update.

    DeepSpeed computes every group's norm (reduced over ranks) and then scales each
    group by the joint one; this wraps its norm and scaling methods on this one
    optimizer object so that each group is scaled by its own. The groups' norms are
    kept as ``agentgym_group_norms`` (what the learner logs).
    """
    from deepspeed.runtime.utils import combine_grad_norm_groups

    if getattr(optimizer, "cpu_offload", False) or getattr(optimizer, "offload_optimizer", False):
        raise ConfigError(
            "a critic under DeepSpeed needs per-group gradient clipping, which agentgym "
            "does not do with optimizer offload: turn offload off or use fsdp2."
        )
    zero3 = hasattr(optimizer, "sub_group_to_group_id")  # sub-groups of param groups
    needed = (
        ZERO3_INTERNALS
        if zero3
        else ("averaged_gradients", "scaled_global_norm", "get_grad_norm_direct", "bit16_groups")
    )
    missing = [
        a for a in (*needed, "optimizer", "unscale_and_clip_grads") if not hasattr(optimizer, a)
    ]
    if missing:
        raise ConfigError(  # pragma: no cover - a DeepSpeed whose ZeRO internals moved
            f"this DeepSpeed version's ZeRO optimizer lacks {missing}, which agentgym needs to "
            "train a critic under it exactly (per-group clipping, critic-only steps, "
            "gradient passes); use distributed.strategy=fsdp2, or DeepSpeed 0.19 (the "
            "version it was tested with)."
        )
    if zero3:
        get_norms, clip = optimizer._get_norm_groups, optimizer.unscale_and_clip_grads
        owner = optimizer.sub_group_to_group_id

        def norms_zero3() -> list[torch.Tensor]:
            norms = get_norms()
            by_group: dict[int, list[torch.Tensor]] = {}
            for sub, norm in enumerate(norms):
                by_group.setdefault(owner[sub], []).append(norm)
            combined = {g: combine_grad_norm_groups(n) for g, n in by_group.items()}
            optimizer.agentgym_scaled_norms = combined
            scale = float(optimizer.loss_scale)
            optimizer.agentgym_group_norms = [float(combined[g]) / scale for g in sorted(combined)]
            return norms

        def clip_zero3(sub_group_id: int, total_norm: torch.Tensor) -> None:
            clip(sub_group_id, optimizer.agentgym_scaled_norms[owner[sub_group_id]])

        optimizer._get_norm_groups, optimizer.unscale_and_clip_grads = norms_zero3, clip_zero3
        return
    clip2 = optimizer.unscale_and_clip_grads

    def norm_zero2(norm_type: int = 2) -> torch.Tensor:
        norms = [
            optimizer.get_grad_norm_direct(
                optimizer.averaged_gradients[i], optimizer.params_in_partition[i]
            )
            for i in range(len(optimizer.bit16_groups))
        ]
        optimizer.agentgym_scaled_norms, optimizer.agentgym_next = norms, 0
        scale = float(optimizer.loss_scale)
        optimizer.agentgym_group_norms = [float(n) / scale for n in norms]
        return combine_grad_norm_groups(norms, norm_type=norm_type)

    def clip_zero2(grad_groups_flat: list[torch.Tensor], total_norm: torch.Tensor) -> None:
        # called once per group, in group order, after scaled_global_norm
        i = optimizer.agentgym_next
        optimizer.agentgym_next += 1
        clip2(grad_groups_flat, optimizer.agentgym_scaled_norms[i])

    optimizer.scaled_global_norm, optimizer.unscale_and_clip_grads = norm_zero2, clip_zero2


class FSDP2(Strategy):
    """FSDP2 (``distributed.strategy: fsdp2``).

    Each decoder layer is one ``fully_shard`` unit and the root module another, on a 1-D
    device mesh over all ranks. Parameters become DTensors sharded on dim 0; frozen base
    weights and the trainable LoRA weights share units (FSDP2 handles mixed
    ``requires_grad``). Gradients are reduce-scattered and averaged over ranks.

    Every micro-batch runs as one full sequence per sample (``share_prompts`` is off):
    each unit all-gathers its parameters at every forward call, and the shared-prompt
    layout makes one call or two per micro-batch depending on whether its prompts repeat,
    so ranks holding different micro-batches (T-PPO's continued windows, multi-turn
    episodes) would issue different collectives and hang.
    """

    share_prompts = False

    def parallelize(
        self, model: torch.nn.Module, critic: Critic | None, optim: OptimConfig
    ) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        """Every decoder layer, then the root, a ``fully_shard`` unit (the critic's head,
        and a separate critic model's layers, units of their own)."""
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh(self.dist.device.type, (self.dist.world_size,))
        # the root unit is the HF model inside the peft wrapper: both training
        # (PeftModel.forward) and generation (PeftModel.generate) call its forward
        root = model.get_base_model() if hasattr(model, "get_base_model") else model
        for layer in _decoder_layers(root):
            fully_shard(layer, mesh=mesh)
        if critic is not None:  # called outside the root's forward: units of their own
            backbone = critic.backbone
            if backbone is not None:  # a separate critic model: per layer, like the policy
                for layer in _decoder_layers(backbone):
                    fully_shard(layer, mesh=mesh)
                fully_shard(backbone, mesh=mesh)
            fully_shard(critic.head, mesh=mesh)
        fully_shard(root, mesh=mesh)
        self._root = root
        return model, make_optimizer(model, optim, critic)

    def _units(self) -> list[Any]:
        """The FSDP units, root first (unsharding the root first initialises them all)."""
        from torch.distributed.fsdp import FSDPModule

        return [m for m in self._root.modules() if isinstance(m, FSDPModule)]

    @contextlib.contextmanager
    def generation(self, model: torch.nn.Module) -> Iterator[torch.nn.Module]:
        units = self._units()
        for u in units:
            u.unshard()
            u.set_reshard_after_forward(False)
        try:
            yield model
        finally:
            for u in units:
                u.reshard()
                u.set_reshard_after_forward(True)

    def adapter_state(self, model: torch.nn.Module) -> dict[str, torch.Tensor]:
        from agentgym.generation import adapter_state_dict

        shards = adapter_state_dict(model)
        full = {k: v.full_tensor() if hasattr(v, "full_tensor") else v for k, v in shards.items()}
        return host_copy(full)

    def load_adapter_state(self, model: torch.nn.Module, state: Mapping[str, torch.Tensor]) -> None:
        from torch.distributed.tensor import distribute_tensor

        from agentgym.generation import adapter_state_dict, load_adapter_state_dict

        current = adapter_state_dict(model)
        sharded = {}
        for k, v in state.items():
            ref = current.get(k)
            if ref is not None and hasattr(ref, "device_mesh"):
                sharded[k] = distribute_tensor(  # a host tensor goes to the mesh's device
                    v.to(device=ref.device, dtype=ref.dtype),
                    ref.device_mesh,
                    ref.placements,
                    src_data_rank=None,
                )
            else:
                sharded[k] = v
        load_adapter_state_dict(model, sharded)


def _decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The transformer blocks of a (peft-wrapped) causal LM, for per-layer sharding."""
    for _, module in model.named_modules():
        layers = getattr(module, "layers", None)
        if isinstance(layers, torch.nn.ModuleList) and len(layers) > 0:
            return list(layers)
    raise ConfigError(
        "fsdp2: could not find the model's decoder layers (a ModuleList named `layers`); "
        "use distributed.strategy: deepspeed for this architecture."
    )


def make_learner(
    model: torch.nn.Module, cfg: TrainConfig, dist: DistInfo, *, pad_id: int
) -> Learner:
    """The learner of a run, built from its config sections with the strategy
    ``distributed.strategy`` names (``none``: one process; ``deepspeed``: ZeRO-2/3;
    ``fsdp2``: FSDP2, or on a device mesh, ``distributed: {dp_shard, tp, ep, pp}``
    carried by ``dist.layout``, :class:`~agentgym.trainers.parallel.MeshStrategy`)."""
    strategy: Strategy
    name = cfg.distributed.strategy
    if name == "deepspeed":
        strategy = DeepSpeedZeRO(
            dist,
            zero_stage=cfg.distributed.zero_stage,
            micro_batch_size=cfg.algorithm.micro_batch_size,
            compute_dtype=compute_dtype(model),
        )
    elif name == "fsdp2" and dist.layout is not None:
        from agentgym.trainers.parallel import MeshStrategy

        strategy = MeshStrategy(
            dist,
            layout=dist.layout,
            pp_window=cfg.distributed.pp_window,
            pad_id=pad_id,
            compute_dtype=compute_dtype(model),
            activation_checkpointing=cfg.distributed.activation_checkpointing,
            router_replay=cfg.algorithm.router_replay,
        )
    elif name == "fsdp2":
        strategy = FSDP2(dist)
    else:
        assert name == "none", f"{name!r} is not in STRATEGIES {STRATEGIES}"
        strategy = Strategy(dist)
    return Learner(
        model,
        cfg.algorithm,
        cfg.optim,
        pad_id=pad_id,
        lora=cfg.lora.enabled,
        dist=dist,
        critic=cfg.critic if cfg.algorithm.uses_critic else None,
        seed=derive_seed("critic", cfg.run.seed),
        strategy=strategy,
        # the schedule's length: each step's batch makes updates_per_batch optimizer steps
        total_updates=max(1, cfg.run.max_steps * cfg.algorithm.updates_per_batch),
    )
