"""One rank of a launch, run here and now: its set-up and first training step at the real shapes.

:func:`dry_run_rank` runs rank ``R`` of the configured world in this process, on CPU, the
way torchtitan's ``COMM_MODE=fake_backend`` does: PyTorch's fake process group (every
collective returns at once, nothing travels) and fake tensors (shapes and dtypes, no
memory; ``FakeTensorMode``). What runs is the trainer's own code, not a model of it:

1. the model of ``model.path``'s ``config.json`` built on the meta device with its LoRA
   adapter (:func:`~agentgym.trainers.model_setup.build_policy_model`); without the
   checkpoint on this machine, a header-only description of it
   (:func:`~.index.describe_checkpoint` from ``model.architecture``, in the published
   layout: per-expert tensors, fp8 values with their block scales);
2. the learner of the config (:func:`~agentgym.trainers.strategies.make_learner`): the
   mesh on the fake group, the stage cut, the expert split, tensor parallelism, FSDP2,
   activation checkpointing, then the rank's share allocated as fake tensors and "read"
   against the checkpoint's index (:class:`~agentgym.trainers.loading.CheckpointSource`'s
   ``fake``: the reader counts the bytes of every box and reads none), the adapter's share
   drawn (:mod:`~agentgym.trainers.lora_draws`);
3. one training call at the config's lengths: ``micro_batch_size`` sequences of
   ``seq_len`` tokens per micro-batch, ``pp`` micro-batches per data-parallel rank (what
   1F1B needs; the pipeline then holds its most micro-batches in flight), forward and
   backward through the learner (the 1F1B schedule when ``pp > 1``), then an optimizer
   step, under PyTorch's ``MemTracker`` (``FSDPMemTracker`` when the root is an FSDP2
   module) and the per-layer saved-bytes counter of :mod:`~agentgym.trainers.parallel.activations`;
4. the rollout engine's place (:class:`~agentgym.generation.EngineLayout`): the worker on
   this rank, its layers and experts, and the adapter slice it would receive at a sync,
   sized from the adapter's shapes.

Fake tensors carry no values, so what depends on values is replaced, and only that: the
routers' expert choices are the planner's balanced routing (:mod:`~agentgym.trainers.parallel.experts`);
the step's loss is the configured policy loss without its logged metrics; gradient
clipping (a norm read as a number) is left out of the step. Host memory at set-up is
what the set-up allocates that is not the rank's share: before the share is allocated
(the model is on meta: nothing but small buffers), and while it is read (a read buffer,
the adapter's scratch draws); in a dry run the share's tensors stand for device memory
(every read goes through a host buffer, as on a GPU).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from agentgym import ConfigError
from agentgym.trainers.dry_run.meter import (
    LiveBytes,
    grad_bytes,
    optimizer_bytes,
    share_bytes,
    storage_keys,
    uncounted_propagation,
)

#: what the dry run's figures are called, in the order it prints them
GIB = float(1 << 30)


@dataclass
class RankFigures:
    """What a dry run of one rank measured (bytes unless named otherwise).

    Attributes:
        rank / world_size / coords: the rank and its place on the mesh.
        layers: the decoder layers of its pipeline stage; experts: the routed experts it
            trains (empty for a dense model).
        setup_s / step_s: wall seconds of the set-up and the training call.
        base / adapter: the rank's share of the frozen base and of the adapter.
        bytes_read: what the rank reads of the checkpoint (its loading plan), over
            ``files`` of the checkpoint's files.
        host_before_alloc: host bytes held when the share is allocated (the model is
            built on meta: buffers only).
        host_peak: the most host memory the set-up held at once (before allocation, or
            while reading: read buffers, the adapter's scratch draws).
        draw_numbers: generator numbers the rank's adapter draw passes through.
        optimizer / grads: after one optimizer step.
        saved_per_layer: bytes autograd saved per decoder layer in one micro-batch (the
            sum over the call's micro-batches divided by their count).
        step_peak: the training call's peak in a step after the first (share,
            gradients, optimizer state, activations, temporaries: :class:`_Tracker`);
            step_peak_by: its parts.
        micro_batches / tokens: what the call ran on this rank.
        engine: the rollout engine's worker on this rank (dict of figures), or None.
        notes: what the run substituted (the header-only checkpoint, the dtype).
    """

    rank: int
    world_size: int
    coords: dict[str, int]
    layers: range
    experts: range
    setup_s: float = 0.0
    step_s: float = 0.0
    base: int = 0
    adapter: int = 0
    bytes_read: int = 0
    files: int = 0
    host_before_alloc: int = 0
    host_peak: int = 0
    draw_numbers: int = 0
    optimizer: int = 0
    grads: int = 0
    saved_per_layer: dict[int, int] = field(default_factory=dict)
    step_peak: int = 0
    step_peak_by: dict[str, int] = field(default_factory=dict)
    micro_batches: int = 0
    tokens: int = 0
    engine: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def saved(self) -> int:
        """Bytes saved per micro-batch over the stage's layers."""
        return sum(self.saved_per_layer.values())

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["layers"] = [self.layers.start, self.layers.stop]
        out["experts"] = [self.experts.start, self.experts.stop]
        return out


# ----------------------------------------------------------------------------- the world
@contextlib.contextmanager
def fake_world(rank: int, world_size: int) -> Iterator[None]:
    """PyTorch's fake process group as rank ``rank`` of ``world_size`` (module docstring);
    left when the block ends."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        raise ConfigError("a dry run needs a process without a process group: run it alone.")
    saved = {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    _clear_sharding_caches()
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)
    try:
        yield
    finally:
        dist.destroy_process_group()
        _clear_sharding_caches()
        for k, v in saved.items():
            if v is not None:
                os.environ[k] = v


def _clear_sharding_caches() -> None:
    """Forget DTensor's cached sharding decisions: they are keyed by a mesh's shape, not its
    rank, so a second fake world in this process (another rank's dry run) would get the
    first one's meshes back, with the first rank's coordinates."""
    from torch.distributed.tensor import DTensor

    prop = DTensor._op_dispatcher.sharding_propagator
    prop.propagate_op_sharding.cache_clear()
    type(prop)._propagate_tensor_meta_cached.cache_clear()
    torch._C._clear_DTensor_sharding_propagator_cache()


class _Allocation:
    """The dry run's ``CheckpointSource.fake``: the fake mode, entered around each
    allocation, and what host memory the set-up held when the first began."""

    def __init__(self, mode: Any, meter: LiveBytes) -> None:
        self.mode, self.meter = mode, meter
        self.before: int | None = None
        self.before_peak = 0

    def __enter__(self) -> Any:
        if self.before is None:
            self.before, self.before_peak = self.meter.live, self.meter.peak
        return self.mode.__enter__()

    def __exit__(self, *exc: Any) -> Any:
        return self.mode.__exit__(*exc)


# ----------------------------------------------------------------------------- the run
def dry_run_rank(
    cfg: Any,
    rank: int,
    *,
    seq_len: int,
    prompt_tokens: int = 0,
    gpus_per_node: int = 8,
    say: Callable[[str], None] = print,
    step: bool = True,
    gpu_kernels: bool = True,
) -> RankFigures:
    """Run rank ``rank`` of ``cfg``'s device mesh here (module docstring).

    Args:
        cfg: a trainer config (``TrainConfig`` or a subclass).
        seq_len: tokens of one sequence (prompt and reply) in the training call.
        prompt_tokens: of which the prompt (the rest is the reply the loss reads).
        gpus_per_node: ranks per node (the rank's ``LOCAL_RANK``).
        step: run the training call too (else the set-up alone).
        gpu_kernels: attention as a GPU runs it (:class:`_GpuAttention`); off, as this
            CPU runs it (to compare with a CPU run).

    Raises:
        ConfigError: the config does not run a device mesh, or its set-up fails (the
            error the launch would meet, on rank ``rank``).
    """
    from agentgym.trainers.parallel import Layout

    layout = Layout.from_config(cfg.distributed)
    if cfg.distributed.strategy != "fsdp2" or layout.is_default:
        raise ConfigError(
            "--dry-run runs one rank of a device mesh: distributed.strategy fsdp2 with "
            "dp_shard/tp/ep/pp (the launch that loads a model per rank)."
        )
    if not cfg.lora.enabled:
        raise ConfigError("--dry-run runs LoRA training (lora.enabled=true), as the mesh does.")
    world = layout.world_size
    if not 0 <= rank < world:
        raise ConfigError(f"--rank {rank} is outside the {world} ranks of {layout.describe()}.")
    with tempfile.TemporaryDirectory(prefix="agentgym-dry-run-") as tmp:
        cfg, notes = _dry_config(cfg, Path(tmp))
        with fake_world(rank, world), uncounted_propagation():
            figures = _run(
                cfg, layout, rank, seq_len, prompt_tokens, gpus_per_node, say,
                step=step, gpu_kernels=gpu_kernels,
            )  # fmt: skip
    figures.notes[:0] = notes
    return figures


def _dry_config(cfg: Any, tmp: Path) -> tuple[Any, list[str]]:
    """``cfg`` with a checkpoint this machine has (the real one's headers, or a header-only
    description) and the dtype the GPUs would take."""
    notes: list[str] = []
    model = cfg.model
    path = Path(model.path) if model.path else None
    changes: dict[str, Any] = {}
    has_index = path is not None and (
        (path / "model.safetensors.index.json").is_file() or (path / "model.safetensors").is_file()
    )
    if has_index and (path / "config.json").is_file():
        notes.append(f"checkpoint: {path}'s own index and headers")
    elif model.architecture:
        from agentgym.trainers.dry_run.index import describe_checkpoint

        fields = dict(model.architecture)
        fp8 = fields.get("model_type") == "deepseek_v3" or model.quantize == "fp8"
        describe_checkpoint(fields, tmp / "checkpoint", fp8=fp8)
        changes.update(path=str(tmp / "checkpoint"), preset=None)
        notes.append(
            "checkpoint: a header-only description from model.architecture "
            + ("(DeepSeek-V3's published fp8 layout)" if fp8 else "(bf16)")
            + ("" if path is None else f"; {path} is not on this machine")
        )
    elif model.preset:
        from agentgym.generation import build_preset, build_tokenizer, save_model

        tok = build_tokenizer()
        built = build_preset(
            model.preset, tok, seed=model.init_seed, overrides=model.preset_overrides
        )
        save_model(built, tok, tmp / "checkpoint")
        changes.update(path=str(tmp / "checkpoint"), preset=None)
        notes.append(f"checkpoint: model.preset {model.preset} saved to a temporary folder")
    else:
        raise ConfigError(
            "--dry-run needs the model's shape: model.path (its config.json and index), "
            "model.architecture or model.preset."
        )
    if model.dtype == "auto":
        changes["dtype"] = "bfloat16"
        notes.append("model.dtype auto: bfloat16, as on the GPUs")
    if model.device != "auto":
        changes["device"] = "auto"
    return dataclasses.replace(cfg, model=dataclasses.replace(model, **changes)), notes


def _run(
    cfg: Any,
    layout: Any,
    rank: int,
    seq_len: int,
    prompt_tokens: int,
    gpus_per_node: int,
    say: Callable[[str], None],
    *,
    step: bool,
    gpu_kernels: bool,
) -> RankFigures:
    from torch._subclasses.fake_tensor import FakeTensorMode

    from agentgym.trainers.distributed import DistInfo
    from agentgym.trainers.hf_reader import CheckpointReader
    from agentgym.trainers.loading import SOURCE_ATTR, source_of
    from agentgym.trainers.lora_draws import DRAWS_ATTR
    from agentgym.trainers.model_setup import build_policy_model
    from agentgym.trainers.strategies import make_learner

    dist = DistInfo(
        rank=rank,
        world_size=layout.world_size,
        local_rank=rank % gpus_per_node,
        # the fake group is the default one (the mesh and FSDP2 use it); "none" keeps the
        # learner's small object exchanges (its metric sums) in this process, where the
        # fake group would have to send real bytes
        backend="none",
        layout=layout,
    )
    coords = layout.coords(rank)
    fake = FakeTensorMode(allow_non_fake_inputs=True)
    meter = LiveBytes(fake, record=True)
    alloc = _Allocation(fake, meter)
    t0 = time.monotonic()
    read_before = CheckpointReader.process_bytes_read
    with meter:
        model, tok = build_policy_model(cfg, dist, say)
        source = source_of(model)
        if source is None:
            raise ConfigError("the dry run needs the model built on meta (a mesh with model.path).")
        setattr(model, SOURCE_ATTR, dataclasses.replace(source, fake=alloc))
        draws = getattr(model, DRAWS_ATTR, None)
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        learner = make_learner(model, cfg, dist, pad_id=int(pad))
    setup_s = time.monotonic() - t0
    with fake:  # a fake parameter is read inside its mode
        shares = share_bytes(learner.model)
        models = (learner.model, learner.strategy.gen_model)
        device = storage_keys([t for m in models for t in (*m.parameters(), *m.buffers())])
    stage_layers = _stage_layers(learner)
    num_experts = int(
        getattr(learner.strategy.gen_model.get_base_model().config, "n_routed_experts", 0) or 0
    )
    figures = RankFigures(
        rank=rank,
        world_size=layout.world_size,
        coords=dataclasses.asdict(coords),
        layers=range(min(stage_layers), max(stage_layers) + 1),
        experts=layout.experts_of(rank, num_experts) if num_experts else range(0),
        setup_s=setup_s,
        base=shares["base"],
        adapter=shares["adapter"],
        bytes_read=CheckpointReader.process_bytes_read - read_before,
        host_before_alloc=alloc.before or 0,
        host_peak=meter.peak_without(device),
        draw_numbers=_draw_numbers(learner, draws),
    )
    if step:
        _step(
            learner, cfg, figures, fake, seq_len, prompt_tokens, pad=int(pad),
            gpu_kernels=gpu_kernels,
        )  # fmt: skip
    figures.engine = _engine(cfg, rank, layout.world_size, draws, stage_layers, num_experts)
    return figures


def _stage_layers(learner: Any) -> list[int]:
    """The decoder layers this rank's stage trains."""
    from agentgym.generation import stage_ranges
    from agentgym.trainers.parallel import decoder_layers

    lm = learner.strategy.gen_model.get_base_model()
    n = len(decoder_layers(lm)[1])
    return list(stage_ranges(n, learner.strategy.layout.pp)[learner.strategy.pmesh.coords.pp])


def _draw_numbers(learner: Any, draws: Any) -> int:
    """Generator numbers the rank's adapter draw passes through: every draw up to the
    last one it keeps values from."""
    if draws is None:
        return 0
    mine = {n for n, _ in learner.model.named_parameters() if n in draws.final}
    last = max((draws.final[n] for n in mine if draws.final[n] is not None), default=-1)
    return sum(d.numel for d in draws.draws[: last + 1])


# ----------------------------------------------------------------------------- the step
@dataclass(frozen=True)
class _DryLoss:
    """The configured policy loss of a micro-batch without its logged metrics (a fake
    tensor has no value to log), plus the entropy the real loss function computes."""

    algo: Any
    temperature: float
    total_tokens: int

    def __call__(self, mb: Any, logits: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        from agentgym.trainers.algorithm import loss_spec, selected_logprobs, token_entropy

        logp = selected_logprobs(logits, mb.targets, self.temperature)
        terms = loss_spec(self.algo.loss).fn(
            logp,
            logp.detach(),
            mb.advantages,
            mb.loss_mask,
            total_tokens=self.total_tokens,
            total_sequences=mb.targets.shape[0],
            eps_low=self.algo.eps_low,
            eps_high=self.algo.eps_high,
            clip_c=self.algo.clip_c,
            ref_logp=None,
            kl_coef=0.0,
            beta=self.algo.apo_beta,
            weights=None,
        )
        with torch.no_grad():
            token_entropy(logits.detach(), self.temperature)
        return terms.loss, {}


def _step(
    learner: Any,
    cfg: Any,
    figures: RankFigures,
    fake: Any,
    seq_len: int,
    prompt_tokens: int,
    *,
    pad: int,
    gpu_kernels: bool,
) -> None:
    """One training call and an optimizer step on fake tensors, measured (module docstring)."""
    from agentgym.trainers.batch import Sample, make_microbatches
    from agentgym.trainers.parallel import SavedBytes

    layout = learner.strategy.layout
    mbs_per_rank = max(layout.pp, 1)
    size = cfg.algorithm.micro_batch_size
    prompt = max(1, min(prompt_tokens or seq_len // 8, seq_len - 1))
    ids = tuple(3 + (i % 200) for i in range(prompt))
    reply = tuple(3 + (i % 200) for i in range(seq_len - prompt))
    samples = [
        Sample(prompt_ids=ids, response_ids=reply, advantage=1.0, episode=i)
        for i in range(mbs_per_rank * size * layout.dp)
    ]
    mbs = make_microbatches(samples, size, pad)
    loss = _DryLoss(cfg.algorithm, cfg.rollout.temperature, total_tokens=len(samples) * len(reply))
    lm = learner.model.get_base_model()
    from agentgym.trainers.parallel import decoder_layers

    layers = {i: decoder_layers(lm)[1][i] for i in figures.layers}
    saved = SavedBytes(learner.model, layers)
    t0 = time.monotonic()
    attention = _GpuAttention() if gpu_kernels else contextlib.nullcontext(None)
    with fake, _static_pipeline_votes(), attention as kernels, warnings.catch_warnings():
        # FSDP2 warns that a fake output's backward hook is registered on a view: noise
        warnings.filterwarnings("ignore", category=UserWarning, module="torch.distributed")
        tracker = _Tracker(learner, fake)
        with tracker, saved.recording():
            learner.forward_backward(mbs, loss)
            figures.grads = grad_bytes(learner.model)
            tracker.call_done()
            learner.optimizer.step()
        figures.optimizer = optimizer_bytes(learner.optimizer)
    figures.step_s = time.monotonic() - t0
    figures.micro_batches = mbs_per_rank
    figures.tokens = mbs_per_rank * size * seq_len
    figures.saved_per_layer = {i: n // mbs_per_rank for i, n in saved.per_layer.items()}
    figures.step_peak, figures.step_peak_by = tracker.peak()
    if kernels is not None and kernels.math:
        figures.notes.append(
            f"attention: {kernels.math} of {kernels.calls} calls run PyTorch's math path on a "
            "GPU too (no fused kernel takes their shapes): [B, H, T, T] scores kept"
        )
    elif kernels is not None:
        figures.notes.append(
            "attention: a GPU's fused SDPA kernel (memory-efficient: no T x T scores); on CPU "
            "PyTorch would take the math path for MLA's unequal head dims"
        )


class _Tracker:
    """The training call's peak memory: what the rank held before it (its share,
    gradients and optimizer state so far) plus the most the call allocated at once
    (:class:`~.meter.LiveBytes`, FSDP2's gathered parameters included), as in every
    step after the first: the optimizer's state, which the first step creates after its
    backward pass, is held through the calls of the later ones. PyTorch's
    ``FSDPMemTracker`` counts one call per module and step, where the pipeline schedule
    makes one per micro-batch; its ``MemTracker`` hooks every parameter for gradients,
    which frozen ones refuse."""

    def __init__(self, learner: Any, fake: Any) -> None:
        shares = share_bytes(learner.model)
        held = shares["base"] + shares["adapter"]
        self.before = held + grad_bytes(learner.model) + optimizer_bytes(learner.optimizer)
        self.live = LiveBytes(fake)
        model = learner.model
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        states = [v for st in learner.optimizer.state.values() for v in st.values()]
        self.live.known([*model.parameters(), *model.buffers(), *grads, *states])

        self.state_before = optimizer_bytes(learner.optimizer)
        self.optimizer = learner.optimizer
        self.call_peak: int | None = None

    def __enter__(self) -> Any:
        return self.live.__enter__()

    def __exit__(self, *exc: Any) -> Any:
        return self.live.__exit__(*exc)

    def call_done(self) -> None:
        """The forward and backward passes are over (the optimizer step follows)."""
        self.call_peak = self.live.peak

    def peak(self) -> tuple[int, dict[str, int]]:
        """The peak bytes of a step after the first: held before the call, the optimizer
        state the first step created (held through the later calls), and the most the
        call allocated at once; or the step's own peak, if higher."""
        later = optimizer_bytes(self.optimizer) - self.state_before
        call = self.live.peak if self.call_peak is None else self.call_peak
        allocated = max(self.live.peak, call + later)
        return self.before + allocated, {
            "held before": self.before,
            "optimizer state from the second step on": later,
            "allocated by the passes at most": call,
            "allocated by the step at most": self.live.peak,
        }


class _GpuAttention:
    """Scaled dot-product attention with the kernel a GPU would pick, by PyTorch's CUDA
    rules (``sdp_utils.cpp``): on CPU PyTorch has no fused kernel for unequal query and
    value head dims (MLA: 192 and 128) and takes the math path, which keeps the ``[B, H, T,
    T]`` scores; a GPU runs the memory-efficient kernel (query and key dims equal, every
    dim a multiple of 8 in half precision), which keeps the output and a ``[B, H, T]``
    log-sum-exp. A call no fused GPU kernel takes keeps the math path (counted in
    :attr:`math`). Active for the block only."""

    def __init__(self) -> None:
        self.calls = 0
        self.math = 0
        self._original: Any = None

    def __enter__(self) -> _GpuAttention:
        import torch.nn.functional as F

        self._original = original = F.scaled_dot_product_attention

        def sdpa(q: Any, k: Any, v: Any, attn_mask: Any = None, dropout_p: float = 0.0,
                 is_causal: bool = False, scale: Any = None, enable_gqa: bool = False) -> Any:  # fmt: skip
            self.calls += 1
            if not _fused_on_gpu(q, k, v):
                self.math += 1
                return original(
                    q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa=enable_gqa
                )
            bias = attn_mask
            if bias is not None and bias.dtype == torch.bool:  # as PyTorch converts it
                bias = torch.zeros_like(bias, dtype=q.dtype).masked_fill(~bias, float("-inf"))
            grad = q.requires_grad or k.requires_grad or v.requires_grad
            return torch.ops.aten._scaled_dot_product_efficient_attention(
                q, k, v, bias, grad, dropout_p, is_causal, scale=scale
            )[0]

        F.scaled_dot_product_attention = sdpa
        return self

    def __exit__(self, *exc: Any) -> None:
        import torch.nn.functional as F

        F.scaled_dot_product_attention = self._original


def _fused_on_gpu(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> bool:
    """Whether a GPU's memory-efficient SDPA kernel takes these inputs (PyTorch's
    ``check_head_dim_size_mem_efficient`` and shape checks): 4-D, as many key as query
    heads, query and key head dims equal, every head dim a multiple of the GEMM alignment
    (8 values in half precision, 4 in float32)."""
    if q.dim() != 4 or k.shape[1] != q.shape[1] or v.shape[1] != q.shape[1]:
        return False
    align = 8 if q.dtype in (torch.float16, torch.bfloat16) else 4
    dq, dv = q.shape[-1], v.shape[-1]
    return dq == k.shape[-1] and dq % align == 0 and dv % align == 0


@contextlib.contextmanager
def _static_pipeline_votes() -> Iterator[None]:
    """The pipeline schedule's first call has the stages vote, stage to stage, whether all
    of them gave their shapes (a flag tensor sent along and read as a number). The fake
    group carries nothing and a fake flag has no value, so here each stage takes its own
    vote: the runner gives every stage static shapes (``PipelineRunner._static_shapes``),
    which is the vote the real ranks reach. Undone when the block ends."""
    from torch.distributed.pipelining import schedules
    from torch.distributed.pipelining._utils import InferenceMode

    original = schedules._PipelineSchedule._warmup_p2p

    def vote(self: Any, stages: Any, has_backward: bool, p2p_done: bool) -> None:
        for stage in stages:
            dynamic = InferenceMode.needs_dynamic(stage._user_meta, has_backward)
            if dynamic:
                raise ConfigError("a dry run needs the pipeline's static shapes on every stage")
            stage._inference_mode = InferenceMode.STATIC

    schedules._PipelineSchedule._warmup_p2p = vote
    try:
        yield
    finally:
        schedules._PipelineSchedule._warmup_p2p = original


# ----------------------------------------------------------------------------- the engine
def _engine(
    cfg: Any, rank: int, world: int, draws: Any, trainer_layers: list[int], num_experts: int
) -> dict[str, Any] | None:
    """The rollout engine's worker on ``rank`` and the adapter slice it would receive at a
    sync: its stage's dense adapter tensors whole, its experts' rows of the expert ones
    (sized from the adapter's shapes, in the learner's float32 and in bf16)."""
    if cfg.rollout.engine != "vllm" or draws is None:
        return None
    from agentgym.generation import engine_layout
    from agentgym.trainers.engine_check import model_shape

    engine = engine_layout(cfg.rollout.engine_settings, world)
    num_layers, _ = model_shape(cfg.model)
    if num_layers is None:
        num_layers = max(layer_of(n) or 0 for n in draws.shapes) + 1
    worker = engine.worker(rank)
    layers = engine.layers_of(rank, num_layers)
    experts = engine.experts_of(rank, num_experts) if num_experts else range(0)
    served = foreign = values = 0
    trained = set(trainer_layers)
    for name, (shape, _dtype) in draws.shapes.items():
        layer = layer_of(name)
        if layer is not None and layer not in layers:
            continue
        if layer is None and not _outside_layers_served(name, worker.stage, engine.pp):
            continue
        numel = 1
        for n in shape:
            numel *= n
        if "experts" in name and num_experts:
            numel = numel * len(experts) // num_experts
        values += numel
        if layer is not None and layer not in trained:
            foreign += numel
    served = values * 4
    return {
        "replica": worker.replica,
        "stage": worker.stage,
        "tp": worker.tp,
        "layers": [layers.start, layers.stop],
        "experts": [experts.start, experts.stop],
        "adapter_values": values,
        "adapter_fp32": served,
        "adapter_bf16": values * 2,
        "from_other_stages_fp32": foreign * 4,
    }


def layer_of(name: str) -> int | None:
    """The decoder layer a parameter belongs to (None: outside the layers)."""
    m = re.search(r"\.layers\.(\d+)\.", name)
    return int(m.group(1)) if m else None


def _outside_layers_served(name: str, stage: int, stages: int) -> bool:
    """An adapter tensor outside the decoder layers: the embedding's on the first stage,
    the head's on the last."""
    return stage == 0 if "embed" in name else stage == stages - 1
