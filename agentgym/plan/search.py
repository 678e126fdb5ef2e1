"""``agentgym plan --search``: every layout that fits, ranked by modelled step time.

The space: training layouts (TP, PP, DP, EP, ZeRO stage, micro-batch size, activation
checkpointing), rollout engine layouts (TP, PP, DP, experts over the engine's GPUs or
sliced over TP, ``max_num_seqs``, sleep level), and, when ``plan.search`` lists them,
frozen-base dtypes and LoRA ranks and target sets. Constraints: every layout uses
exactly ``plan.gpus`` GPUs, TP divides the attention heads (and stays inside a node
unless ``plan.search.tp_within_node`` is off), EP divides the experts, PP does not
exceed the layers.

Why it is fast: memory and time both split into a training half and a rollout half
(:mod:`.search_memory`; the phases of a step add up), so each half is sized and timed
once per candidate, each half is cut to its own Pareto set (no candidate that is slower
and needs more memory on every count survives), and only the survivors are paired. The
ranked layouts and the Pareto front are then modelled in full by
:func:`~agentgym.plan.timing.step_time`. Deterministic: ties break on the
layout's description.
"""

from __future__ import annotations

import bisect
import math
import time
from dataclasses import dataclass, replace
from typing import Literal

from agentgym import ConfigError
from agentgym.plan.architecture import ATTENTION_TARGETS, MLP_TARGETS, LoraSpec
from agentgym.plan.config import PlanInputs, TimingInputs, step_spec
from agentgym.plan.links import Links
from agentgym.plan.memory import COMM_BUFFERS_GIB, CUDA_CONTEXT_GIB, FRAGMENTATION
from agentgym.plan.rollout_time import rollout_time
from agentgym.plan.search_memory import (
    RolloutMemory,
    peak_gib,
    rollout_memory,
    train_memory,
)
from agentgym.plan.specs import ParallelSpec, RolloutSpec
from agentgym.plan.timing import StepSpec, StepTime, step_time, sync_seconds
from agentgym.plan.train_time import train_time

#: per-GPU constants of the memory plan (CUDA context and NCCL buffers), GiB
CONSTANT_GIB = CUDA_CONTEXT_GIB + COMM_BUFFERS_GIB


@dataclass(frozen=True)
class Layout:
    """One point of the search space."""

    base_dtype: str
    lora: LoraSpec | None
    parallel: ParallelSpec
    micro_batch_size: int
    activation_checkpointing: bool
    rollout: RolloutSpec

    def describe(self) -> str:
        """A one-line description (also the deterministic tie-breaker)."""
        p, r = self.parallel, self.rollout
        adapter = (
            "full FT" if self.lora is None else f"LoRA r={self.lora.r} {targets_name(self.lora)}"
        )
        return (
            f"train tp={p.tp} ep={p.ep} pp={p.pp} dp={p.dp} zero={p.zero_stage} "
            f"mb={self.micro_batch_size} ckpt={'on' if self.activation_checkpointing else 'off'} "
            f"base={self.base_dtype} {adapter} | rollout tp={r.tp} pp={r.pp} dp={r.dp} "
            f"ep={r.ep} seqs={r.max_num_seqs} sleep={r.sleep_level}"
        )


def targets_name(lora: LoraSpec) -> str:
    """A short name of the adapter's target set."""
    mods = lora.target_modules
    if mods is None:
        names = "attention"
    elif set(mods) >= set(MLP_TARGETS):
        names = "all-linear"
    elif set(mods) <= set(ATTENTION_TARGETS):
        names = "attention"
    else:
        names = "+".join(mods)
    return names + ("+experts" if lora.target_experts else "")


@dataclass(frozen=True)
class Scored:
    """A layout that fits, with its peak memory and modelled step."""

    layout: Layout
    peak_gib: float
    headroom_gib: float
    step: StepTime

    @property
    def seconds(self) -> float:
        """Modelled seconds per step."""
        return self.step.seconds


@dataclass(frozen=True)
class SearchResult:
    """What ``--search`` prints.

    Attributes:
        mode: ``lora`` or ``full``.
        ranked: the fastest layouts, best first.
        pareto: layouts no other beats on both memory headroom and step time.
        baseline: the config's own layout (``None`` when it does not fit or for ``full``).
        space: layouts in the enumerated space (training x rollout x adapter variants).
        fitting: how many of them fit.
        seconds: wall time of the search.
        explanation: why the winner wins, in sentences.
        held: the dimensions held at the config's value.
    """

    mode: str
    gpus: int
    gpu_mem_gib: float
    ranked: tuple[Scored, ...]
    pareto: tuple[Scored, ...]
    baseline: Scored | None
    space: int
    fitting: int
    seconds: float
    explanation: tuple[str, ...]
    held: tuple[str, ...]


def divisors(n: int) -> list[int]:
    """The divisors of ``n``, ascending."""
    return [d for d in range(1, n + 1) if n % d == 0]


def _pareto(items: list, keys) -> list:
    """Items not dominated on every key of ``keys(item)`` (a tuple; lower is better)."""
    ranked = sorted(items, key=lambda it: (keys(it), it[-1]))
    kept: list = []
    for it in ranked:
        k = keys(it)
        if not any(all(a <= b for a, b in zip(keys(o), k, strict=True)) for o in kept):
            kept.append(it)
    return kept


def _variants(inputs: PlanInputs, mode: str) -> list[tuple[str, LoraSpec | None]]:
    """(base dtype, adapter) pairs to try."""
    if mode == "full":
        return [("bf16", None)]
    s = inputs.timing.search  # type: ignore[union-attr]
    bases = s.base_weights or [inputs.base_dtype]
    ranks = s.lora_ranks or [inputs.lora.r]
    target_sets: list[LoraSpec] = []
    for t in s.lora_targets or [None]:
        if t is None:
            target_sets.append(inputs.lora)
        elif t == "attention":
            target_sets.append(replace(inputs.lora, target_modules=None, target_experts=False))
        elif t == "attention+experts":
            target_sets.append(replace(inputs.lora, target_modules=None, target_experts=True))
        elif t == "all":
            mods = tuple(n for n in ATTENTION_TARGETS + MLP_TARGETS)
            target_sets.append(replace(inputs.lora, target_modules=mods, target_experts=True))
        elif isinstance(t, list):
            target_sets.append(replace(inputs.lora, target_modules=tuple(t)))
        else:
            raise ConfigError(
                f"plan.search.lora_targets: {t!r} is not attention, attention+experts, all or "
                "a list of module names."
            )
    return [(b, replace(ls, r=r)) for b in bases for r in ranks for ls in target_sets]


def _train_layouts(inputs: PlanInputs, t: TimingInputs) -> list[tuple[int, int, int, int]]:
    """The (tp, pp, dp, ep) training meshes that use every GPU and divide the model."""
    s, arch, gpus = t.search, inputs.arch, inputs.hardware.gpus
    gpn = t.cluster.gpus_per_node
    heads, experts = arch.num_attention_heads, arch.n_routed_experts

    def ok_ep(ep: int, group: int) -> bool:
        return group % ep == 0 and (experts % ep == 0 if arch.is_moe else ep == 1)

    tps = s.tp or [
        d for d in divisors(gpus) if heads % d == 0 and (d <= gpn or not s.tp_within_node)
    ]
    train_layouts = []
    for tp in tps:
        for pp in s.pp or [d for d in divisors(gpus // tp) if d <= arch.num_layers]:
            if gpus % (tp * pp):
                continue
            dp = gpus // (tp * pp)
            for ep in s.ep or divisors(tp * dp):
                if ok_ep(ep, tp * dp):
                    train_layouts.append((tp, pp, dp, ep))
    return train_layouts


def _rollout_layouts(inputs: PlanInputs, t: TimingInputs) -> list[tuple[int, int, int, int]]:
    """The (tp, pp, dp, ep) engine meshes that use every GPU and divide the model."""
    s, arch, gpus = t.search, inputs.arch, inputs.hardware.gpus
    heads, experts = arch.num_attention_heads, arch.n_routed_experts
    rollout_layouts = []
    for rtp in s.rollout_tp or [d for d in divisors(gpus) if heads % d == 0]:
        for rpp in s.rollout_pp or [
            d for d in divisors(gpus // rtp) if d <= min(arch.num_layers, 16)
        ]:
            if gpus % (rtp * rpp):
                continue
            rdp = gpus // (rtp * rpp)
            for wide in s.rollout_expert_parallel if arch.is_moe else [False]:
                rep = rtp * rdp if wide else rtp
                if arch.is_moe and experts % rep:
                    continue
                if wide and rdp == 1 and False in s.rollout_expert_parallel:
                    continue  # the same engine as the sliced one
                rollout_layouts.append((rtp, rpp, rdp, rep))
    return rollout_layouts


def _train_half(
    inputs: PlanInputs,
    t: TimingInputs,
    base: str,
    lora: LoraSpec | None,
    train_layouts: list[tuple[int, int, int, int]],
    m_prime: float,
) -> tuple[list[tuple[float, float, float, tuple, str]], int]:
    """The training candidates that fit (time, memory, key, name), and how many were tried."""
    s, arch = t.search, inputs.arch
    trains: list[tuple[float, float, float, tuple, str]] = []
    n_train = 0
    for tp, pp, dp, ep in train_layouts:
        for zero in s.zero_stages:
            par = ParallelSpec(
                tp=tp,
                ep=ep,
                pp=pp,
                dp=dp,
                zero_stage=zero,
                sequence_parallel=inputs.parallel.sequence_parallel,
            )
            for mbs in s.micro_batch_sizes:
                for ckpt in s.activation_checkpointing:
                    n_train += 1
                    train = replace(
                        inputs.train, micro_batch_size=mbs, activation_checkpointing=ckpt
                    )
                    tm = train_memory(arch, lora=lora, parallel=par, train=train, base_dtype=base)
                    if tm.train > m_prime:
                        continue
                    tt = train_time(
                        arch,
                        work=t.workload,
                        lora=lora,
                        parallel=par,
                        base_dtype=base,
                        micro_batch_size=mbs,
                        checkpointing=ckpt,
                        cluster=t.cluster,
                        eff=t.efficiency,
                        offload_state=t.offload_train_state,
                        pipeline_window=train.pipeline_window,
                    )
                    key = (par, mbs, ckpt, tm)
                    name = f"{tp}.{pp}.{ep}.{zero}.{mbs}.{ckpt}"
                    trains.append((tt.total, tm.train, tm.both, key, name))
    return trains, n_train


@dataclass(frozen=True)
class _RolloutSearch:
    """What every rollout candidate of one search shares."""

    inputs: PlanInputs
    t: TimingInputs
    mode: str
    base_spec: StepSpec
    links: Links
    m_prime: float


def _rollout_half(
    ctx: _RolloutSearch,
    base: str,
    lora: LoraSpec | None,
    rollout_layouts: list[tuple[int, int, int, int]],
) -> tuple[list[tuple[float, float, float, tuple, str]], int]:
    """The rollout candidates that fit (time, memory, key, name), and how many were tried."""
    t, s, arch = ctx.t, ctx.t.search, ctx.inputs.arch
    mem = ctx.inputs.hardware.gpu_mem_gib
    episodes = t.workload.episodes
    rolls: list[tuple[float, float, float, tuple, str]] = []
    n_roll = 0
    engine_dtype = base if ctx.mode == "lora" else "bf16"
    for rtp, rpp, rdp, rep in rollout_layouts:
        need = math.ceil(episodes / rdp)
        seqs_list = [q for q in s.max_num_seqs if q < 2 * need] or [min(s.max_num_seqs)]
        for seqs in seqs_list:
            probe = replace(
                ctx.base_spec.rollout or RolloutSpec(),
                tp=rtp,
                pp=rpp,
                dp=rdp,
                ep=rep,
                max_num_seqs=seqs,
                gpu_memory_utilization=0.95,
                sleep_level=1,
            )
            rm = rollout_memory(arch, lora, probe, engine_dtype)
            n_roll += len(s.sleep_levels)
            if rm.gib > 0.95 * mem or rm.gib > ctx.m_prime:
                continue
            util = round(min(0.95, math.ceil(rm.gib / mem / 0.05 - 1e-9) * 0.05), 2)
            spec = replace(
                ctx.base_spec,
                mode=ctx.mode,
                lora=lora,
                base_dtype=base,
                rollout=replace(probe, gpu_memory_utilization=util),
                engine_dtype=engine_dtype,
            )
            rt = rollout_time(spec.engine_shape(), t.workload, t.generation_rounds)
            for sleep in s.sleep_levels:
                sp = replace(spec, rollout=replace(spec.rollout, sleep_level=sleep))
                sync, sleep_s, _ = sync_seconds(sp, ctx.links)
                total = rt.prefill + rt.decode + sync + sleep_s + t.workload.env_seconds
                kept = sleep == 0
                name = f"{rtp}.{rpp}.{rep}.{seqs}.{sleep}"
                rolls.append((total, rm.gib, rm.gib if kept else 0.0, (sp.rollout, rm), name))
    return rolls, n_roll


def _pair(
    base: str, lora: LoraSpec | None, trains: list, rolls: list, mem: float
) -> list[tuple[float, float, Layout]]:
    """(seconds, peak GiB, layout) of each fitting pair of the two halves' Pareto sets."""
    front_t = _pareto(trains, lambda x: (x[0], x[1], x[2]))
    front_r = _pareto(rolls, lambda x: (x[0], x[1], x[2]))
    scored: list[tuple[float, float, Layout]] = []
    for tr in front_t:
        par, mbs, ckpt, tm = tr[3]
        for ro in front_r:
            rspec, rm = ro[3]
            peak = peak_gib(tm, RolloutMemory(rm.gib, rspec.sleep_level == 0))
            if peak > mem:
                continue
            layout = Layout(base, lora, par, mbs, ckpt, rspec)
            scored.append((tr[0] + ro[0], peak, layout))
    return scored


def _memory_front(
    scored: list[tuple[float, float, Layout]],
) -> list[tuple[float, float, Layout]]:
    """The layouts, fastest first, that each need less memory than every faster one."""
    front = []
    best_peak = math.inf
    for sec, peak, layout in sorted(scored, key=lambda x: (x[0], x[1], x[2].describe())):
        if peak < best_peak - 1e-9:
            front.append((sec, peak, layout))
            best_peak = peak
    return front


def search_layouts(
    inputs: PlanInputs, *, mode: Literal["lora", "full"] = "lora", top: int | None = None
) -> SearchResult:
    """Enumerate, size, time and rank the layouts of ``inputs`` (see the module docstring).

    Raises:
        ConfigError: the inputs have no timing part, or nothing in the space fits.
    """
    started = time.perf_counter()
    t = inputs.timing
    if t is None:
        raise ConfigError("the search needs planner inputs built by plan_inputs.")
    s, arch, gpus = t.search, inputs.arch, inputs.hardware.gpus
    mem = inputs.hardware.gpu_mem_gib
    base_spec = step_spec(inputs)
    train_layouts = _train_layouts(inputs, t)
    rollout_layouts = _rollout_layouts(inputs, t)
    space = fitting = 0
    scored: list[tuple[float, float, Layout]] = []
    links = Links(t.cluster, t.efficiency)
    m_prime = (mem - CONSTANT_GIB) / (1 + FRAGMENTATION)
    ctx = _RolloutSearch(inputs, t, mode, base_spec, links, m_prime)
    for base, lora in _variants(inputs, mode):
        trains, n_train = _train_half(inputs, t, base, lora, train_layouts, m_prime)
        rolls, n_roll = _rollout_half(ctx, base, lora, rollout_layouts)
        space += n_train * n_roll
        scored.extend(_pair(base, lora, trains, rolls, mem))
        fitting += _count_fitting(trains, rolls, mem)
    if not scored:
        raise ConfigError(
            f"no layout of {arch.model_type or 'the model'} fits {gpus} x {mem:g} GiB in the "
            "searched space; add GPUs (--gpus), memory (--gpu-mem) or widen plan.search."
        )
    scored.sort(key=lambda x: (x[0], x[1], x[2].describe()))
    k = top or s.top
    finalists = scored[:k]
    front = _memory_front(scored)
    ranked = tuple(_score(base_spec, lay, peak, mem) for _, peak, lay in finalists)
    pareto = tuple(_score(base_spec, lay, peak, mem) for _, peak, lay in front)
    baseline = None
    if mode == "lora" and t.own_layout:
        baseline = _baseline(inputs, base_spec, mem)
    result = SearchResult(
        mode=mode,
        gpus=gpus,
        gpu_mem_gib=mem,
        ranked=ranked,
        pareto=pareto,
        baseline=baseline,
        space=space,
        fitting=fitting,
        seconds=time.perf_counter() - started,
        explanation=(),
        held=_held(inputs, mode),
    )
    from agentgym.plan.explain import explain

    return replace(result, explanation=explain(result))


def _count_fitting(trains: list, rolls: list, mem: float) -> int:
    """How many (training, rollout) pairs fit, counted without pairing them.

    A pair fits when ``train + kept <= M`` and ``both + rollout <= M`` (``M`` the budget
    before constants and fragmentation), so sorted lists and bisection count them.
    """
    m = (mem - CONSTANT_GIB) / (1 + FRAGMENTATION)
    t_sorted = sorted(x[1] for x in trains)
    b_sorted = sorted(x[2] for x in trains)
    count = 0
    for _, gib, kept, _, _ in rolls:
        if kept:  # train + rollout <= M (and both <= train)
            count += bisect.bisect_right(t_sorted, m - gib + 1e-12)
        else:  # train <= M holds for every kept training candidate
            count += bisect.bisect_right(b_sorted, m - gib + 1e-12)
    return count


def _score(base: StepSpec, layout: Layout, peak: float, mem: float) -> Scored:
    spec = replace(
        base,
        mode="lora" if layout.lora is not None else "full",
        lora=layout.lora,
        parallel=layout.parallel,
        micro_batch_size=layout.micro_batch_size,
        activation_checkpointing=layout.activation_checkpointing,
        base_dtype=layout.base_dtype,
        rollout=layout.rollout,
        engine_dtype=layout.base_dtype if layout.lora is not None else "bf16",
    )
    return Scored(layout, peak, mem - peak, step_time(spec))


def _baseline(inputs: PlanInputs, spec: StepSpec, mem: float) -> Scored | None:
    """The config's own layout, scored the same way (``None`` when it has no engine)."""
    if inputs.rollout is None:
        return None
    tm = train_memory(
        inputs.arch,
        lora=inputs.lora,
        parallel=inputs.parallel,
        train=inputs.train,
        base_dtype=inputs.base_dtype,
    )
    rm = rollout_memory(
        inputs.arch, inputs.lora, inputs.rollout, inputs.rollout.weight_dtype or inputs.base_dtype
    )
    peak = peak_gib(tm, rm)
    layout = Layout(
        inputs.base_dtype,
        inputs.lora,
        inputs.parallel,
        inputs.train.micro_batch_size,
        inputs.train.activation_checkpointing,
        inputs.rollout,
    )
    return Scored(layout, peak, mem - peak, step_time(spec))


def _held(inputs: PlanInputs, mode: str) -> tuple[str, ...]:
    if mode == "full":
        return ("full fine-tune: every weight in bf16, the engine in bf16",)
    s = inputs.timing.search  # type: ignore[union-attr]
    out = []
    if not s.base_weights:
        out.append(f"base weights {inputs.base_dtype} (plan.search.base_weights widens it)")
    if not s.lora_ranks and not s.lora_targets:
        out.append(
            f"adapter r={inputs.lora.r} on {targets_name(inputs.lora)} (plan.search.lora_ranks "
            "/ lora_targets widen it)"
        )
    return tuple(out)


def disaggregated_option(inputs: PlanInputs, result: SearchResult):
    """The best MegaScale-Infer-style rollout for the winner's training layout, or ``None``.

    The engine may use what the trainer's resident state (weights, adapter, optimizer)
    leaves of each GPU; see :mod:`.disagg`.
    """
    from agentgym.plan.disagg import best_disaggregated

    t = inputs.timing
    if t is None or not inputs.arch.is_moe or not result.ranked:
        return None
    win = result.ranked[0].layout
    train = replace(
        inputs.train,
        micro_batch_size=win.micro_batch_size,
        activation_checkpointing=win.activation_checkpointing,
    )
    tm = train_memory(
        inputs.arch, lora=win.lora, parallel=win.parallel, train=train, base_dtype=win.base_dtype
    )
    budget = (result.gpu_mem_gib - CONSTANT_GIB) / (1 + FRAGMENTATION) - tm.both
    dtype = win.base_dtype if win.lora is not None else "bf16"
    return best_disaggregated(
        inputs.arch,
        t.workload,
        gpus=result.gpus,
        budget_gib=budget,
        max_len=win.rollout.max_model_len,
        weight_dtype=dtype,
        kv_dtype=win.rollout.kv_cache_dtype,
        cluster=t.cluster,
        eff=t.efficiency,
    )
