"""The time model: seconds per step of the all-sync loop, by phase, and what bounds it.

A step of the all-sync loop runs its phases one after another on the same GPUs:

1. rollout: prefill and decode of the step's episodes (:mod:`.rollout_time`), while
   the env and reward work on the critical path (``plan.workload.env_seconds``) leaves
   every GPU idle;
2. the engine goes to sleep (its weights to the host at level 1) and the trainer runs
   the log-prob passes and the update (:mod:`.train_time`);
3. the adapter (LoRA) or the weights (full fine-tune) go to the engine, which wakes up.

:func:`step_time` adds these up for one :class:`StepSpec` and returns a
:class:`StepTime`: seconds by phase, tokens per second per GPU, MFU, the idle share and
the critical resource. Pure arithmetic on the specs: no GPU, no weights.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Literal

from agentgym.plan.architecture import Architecture, LoraSpec, count_lora_parameters
from agentgym.plan.hardware import Cluster
from agentgym.plan.links import Links
from agentgym.plan.rollout_time import (
    EngineShape,
    RolloutTime,
    Tally,
    engine_weight_bytes,
    rollout_time,
)
from agentgym.plan.settings import Efficiency
from agentgym.plan.specs import ParallelSpec, RolloutSpec
from agentgym.plan.train_time import TrainTime, train_time
from agentgym.plan.workload import Workload

#: resources that are waiting, not working
IDLE_RESOURCES = ("env (CPU, sandboxes)", "pipeline bubble")


@dataclass(frozen=True)
class StepSpec:
    """Everything one step's time depends on.

    Attributes:
        arch: the model.
        mode: ``lora`` (frozen base, adapter trained) or ``full`` (every weight).
        lora: the adapter (``None`` for a full fine-tune).
        parallel: the training layout.
        micro_batch_size / activation_checkpointing: the training step.
        pipeline_window: the most micro-batches per run of the 1F1B schedule (0: all of
            an update's in one run); each run has its own bubble.
        base_dtype: the frozen base's Linear dtype (full fine-tunes train in bf16).
        rollout: the engine's layout (it spans every GPU: colocated).
        engine_dtype: the engine's weight dtype (``None``: the base's; bf16 for full).
        workload: what a step generates and trains.
        cluster: GPUs and links.
        eff: the efficiency assumptions.
        generation_rounds: mean generation rounds per step (dynamic sampling).
        cuda_graphs: the engine decodes with CUDA graphs (``enforce_eager`` off).
        offload_train_state: the trainer's weights, gradients and optimizer state go to
            the host during rollout (what colocated full fine-tuning stacks do).
    """

    arch: Architecture
    mode: Literal["lora", "full"]
    lora: LoraSpec | None
    parallel: ParallelSpec
    micro_batch_size: int
    activation_checkpointing: bool
    base_dtype: str
    rollout: RolloutSpec
    workload: Workload
    cluster: Cluster
    eff: Efficiency = field(default_factory=Efficiency)
    engine_dtype: str | None = None
    generation_rounds: float = 1.0
    cuda_graphs: bool = True
    offload_train_state: bool = False
    pipeline_window: int = 0

    def engine_shape(self) -> EngineShape:
        """The rollout engine as :mod:`.rollout_time` sees it."""
        dtype = self.engine_dtype or (self.base_dtype if self.mode == "lora" else "bf16")
        return EngineShape(
            arch=self.arch,
            rollout=self.rollout,
            weight_dtype=dtype,
            lora=self.lora if self.mode == "lora" else None,
            cluster=self.cluster,
            eff=self.eff,
            cuda_graphs=self.cuda_graphs,
        )


@dataclass(frozen=True)
class StepTime:
    """The modelled step.

    Attributes:
        phases: seconds by phase, in the order the loop runs them.
        resources: seconds attributed to each resource (compute, HBM bandwidth, NVLink,
            network, PCIe, host I/O, launch/host overhead, env, pipeline bubble).
        idle: seconds every GPU waits, by cause (env, bubble, rollout tail, sync/sleep).
        gpus: GPUs of the run.
        batch_tokens: prompt + response tokens of the step's sequences.
        train_flops: useful training FLOPs (forward + backward, no recomputation).
        all_flops: useful FLOPs of the whole step (rollout, log-probs, training).
        peak_flops: bf16 peak FLOP/s of one GPU (the MFU denominator).
        decode_memory_bound: share of decode time that was HBM-bandwidth-bound.
        decode_tokens_per_s_per_gpu: decode throughput at full concurrency.
    """

    phases: dict[str, float]
    resources: dict[str, float]
    idle: dict[str, float]
    gpus: int
    batch_tokens: float
    train_flops: float
    all_flops: float
    peak_flops: float
    decode_memory_bound: float
    decode_tokens_per_s_per_gpu: float
    train_seconds: float

    @property
    def seconds(self) -> float:
        """Seconds per step."""
        return sum(self.phases.values())

    @property
    def tokens_per_s_per_gpu(self) -> float:
        """The step's prompt + response tokens per second per GPU (NeMo-RL's measure)."""
        return self.batch_tokens / self.seconds / self.gpus

    @property
    def mfu(self) -> float:
        """Useful FLOPs of the whole step over the GPUs' bf16 peak for the step."""
        return self.all_flops / (self.seconds * self.gpus * self.peak_flops)

    @property
    def train_mfu(self) -> float:
        """Training MFU: forward + backward FLOPs over the training phase's peak."""
        if self.train_seconds <= 0:
            return 0.0
        return self.train_flops / (self.train_seconds * self.gpus * self.peak_flops)

    @property
    def idle_share(self) -> float:
        """Share of the step during which the GPUs wait (see :attr:`idle`)."""
        return min(1.0, sum(self.idle.values()) / self.seconds)

    @property
    def critical_resource(self) -> str:
        """The working resource with the most seconds."""
        working = {k: v for k, v in self.resources.items() if k not in IDLE_RESOURCES}
        return max(working, key=working.__getitem__) if working else "none"

    def to_dict(self) -> dict[str, object]:
        """JSON-ready numbers (``agentgym plan --json``)."""
        return {
            "seconds": self.seconds,
            "phases": dict(self.phases),
            "resources": dict(self.resources),
            "idle": dict(self.idle),
            "idle_share": self.idle_share,
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
            "mfu": self.mfu,
            "train_mfu": self.train_mfu,
            "critical_resource": self.critical_resource,
            "decode_memory_bound": self.decode_memory_bound,
            "decode_tokens_per_s_per_gpu": self.decode_tokens_per_s_per_gpu,
        }


@lru_cache(maxsize=256)
def _adapter_params(arch: Architecture, lora: LoraSpec) -> int:
    return count_lora_parameters(arch, lora)


def sync_seconds(spec: StepSpec, links: Links) -> tuple[float, float, Tally]:
    """(weight or adapter sync, sleep and wake) seconds of one step, with their tally."""
    eff, tally = spec.eff, Tally()
    shape = spec.engine_shape()
    if spec.mode == "lora" and spec.lora is not None:
        adapter = _adapter_params(spec.arch, spec.lora) * 2.0  # bf16, written + read
        sync = 2 * adapter / (eff.host_io_gbps * 1e9) + eff.sync_fixed_s
        tally.add("host I/O", sync)
    else:
        sync = links.p2p(engine_weight_bytes(shape), spans=spec.cluster.nodes > 1)
        sync += eff.sync_fixed_s
        tally.add("network" if spec.cluster.nodes > 1 else "NVLink", sync)
    level = spec.rollout.sleep_level
    moved = engine_weight_bytes(shape)
    if level == 1:  # weights to pinned host memory and back
        sleep = 2 * links.pcie(moved)
        tally.add("PCIe", sleep)
    elif level == 2:  # weights dropped, reloaded from the checkpoint files at wake
        sleep = moved / (eff.host_io_gbps * 1e9)
        tally.add("host I/O", sleep)
    else:
        sleep = 0.0
    return sync, sleep, tally


def step_time(spec: StepSpec) -> StepTime:
    """Model one step of the all-sync loop (see the module docstring)."""
    links = Links(spec.cluster, spec.eff)
    roll: RolloutTime = rollout_time(spec.engine_shape(), spec.workload, spec.generation_rounds)
    train: TrainTime = train_time(
        spec.arch,
        work=spec.workload,
        lora=spec.lora if spec.mode == "lora" else None,
        parallel=spec.parallel,
        base_dtype=spec.base_dtype,
        micro_batch_size=spec.micro_batch_size,
        checkpointing=spec.activation_checkpointing,
        cluster=spec.cluster,
        eff=spec.eff,
        offload_state=spec.offload_train_state,
        pipeline_window=spec.pipeline_window,
    )
    sync, sleep, sync_tally = sync_seconds(spec, links)
    env = spec.workload.env_seconds
    phases = {
        "rollout: prefill": roll.prefill,
        "rollout: decode": roll.decode,
        "env/reward (GPUs idle)": env,
        "engine sleep/wake": sleep,
        "train: log-prob passes": train.logprobs,
        "train: forward+backward": train.compute,
        "train: TP/EP/PP communication": train.comm,
        "train: per-layer overhead": train.overhead,
        "train: pipeline bubble": train.bubble,
        "train: gradient sync": train.grad_sync,
        "train: optimizer": train.optimizer,
        "train: state offload": train.offload,
        "weight/adapter sync": sync,
    }
    tally = Tally()
    tally.merge(roll.tally)
    tally.merge(train.tally)
    tally.merge(sync_tally)
    tally.add("env (CPU, sandboxes)", env)
    idle = {
        "env/reward": env,
        "rollout tail (few sequences left)": roll.tail_idle,
        "pipeline bubble": train.bubble,
        "sleep/wake and sync": sleep + sync + train.offload,
    }
    train_s = train.compute + train.comm + train.overhead + train.bubble
    train_s += train.grad_sync + train.optimizer
    return StepTime(
        phases={k: v for k, v in phases.items() if v > 0 or k.startswith("rollout")},
        resources=dict(sorted(tally.seconds.items(), key=lambda kv: -kv[1])),
        idle={k: v for k, v in idle.items() if v > 0},
        gpus=spec.cluster.gpus,
        batch_tokens=spec.workload.batch_tokens,
        train_flops=train.useful_flops,
        all_flops=train.useful_flops + train.logprob_flops + roll.flops,
        peak_flops=spec.cluster.gpu.flops("bf16"),
        decode_memory_bound=roll.memory_bound_share,
        decode_tokens_per_s_per_gpu=roll.full_batch_tokens_per_s,
        train_seconds=train_s,
    )
