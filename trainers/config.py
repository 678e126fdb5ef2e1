"""The sections of ``agentgym train``'s config, shared in part by ``agentgym sft``.

A config file is YAML whose keys mirror the dataclasses below (nested sections)::

    model: {preset: tiny-qwen2}
    envs:
      - {id: agentgym/BalancedMath-v0, weight: 1.0, kwargs: {level: 1}}
    rollout: {group_size: 8, batch_tasks: 8, max_tokens: 128}
    algorithm: {advantage: grpo, eps_high: 0.28}

Loading, ``section.field=value`` overrides, "did you mean" on unknown keys and
``--print-config`` are the core's (:func:`agentgym.load_config`); each section checks
its values in ``__post_init__``, so a bad config fails at start-up with a message that
says what to change. The SFT stage's own sections live in :mod:`agentgym.trainers.sft`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from agentgym import UnknownNameError
from agentgym import config_check as _check
from agentgym.generation import HFEngineOptions, VLLMEngineOptions, engine_options
from agentgym.health import DetectorSettings
from agentgym.trainers.algorithm import AlgorithmConfig
from agentgym.trainers.critic_config import CriticConfig
from agentgym.trainers.schedule import SCHEDULES
from agentgym.trainers.tracking import check_report_to

# ----------------------------------------------------------------------------- sections


@dataclass
class RunConfig:
    """Where outputs go and how long to run.

    Attributes:
        output_dir: run directory (metrics.jsonl, checkpoints/, plots/, config.yaml).
        seed: seeds task order, sampling and the adapter init.
        max_steps: training steps (each: rollout, refill, update, sync).
        save_every: checkpoint every this many steps (0: only at the end).
        keep_checkpoints: how many recent checkpoints to keep.
        threads: torch CPU threads (``None``: torch's default).
        progress: show a progress bar (plain lines when not on a terminal).
        plots: write PNG plots at the end.
        report_to: where metrics, the timeline and the plots go: ``jsonl`` (always),
            ``tensorboard``, ``wandb``, ``all`` (:mod:`agentgym.trainers.tracking`).
        sample_episodes: episodes per step written to ``samples.jsonl`` (prompts,
            replies, rewards and their breakdown), spread from the step's worst reward
            to its best; 0 writes none.
    """

    output_dir: str = "runs/dapo"
    seed: int = 0
    max_steps: int = 20
    save_every: int = 10
    keep_checkpoints: int = 2
    threads: int | None = None
    progress: bool = True
    plots: bool = True
    report_to: list[str] = field(default_factory=lambda: ["jsonl"])
    sample_episodes: int = 4

    def __post_init__(self) -> None:
        self.report_to = check_report_to(self.report_to)
        _check(self.sample_episodes >= 0, "run.sample_episodes must be >= 0 (0: none).")
        _check(self.max_steps >= 0, f"run.max_steps must be >= 0, got {self.max_steps}.")
        _check(self.save_every >= 0, f"run.save_every must be >= 0, got {self.save_every}.")
        _check(self.keep_checkpoints >= 1, "run.keep_checkpoints must be >= 1.")
        _check(self.threads is None or self.threads >= 1, "run.threads must be >= 1 or null.")


@dataclass
class ModelConfig:
    """Which model to train.

    Attributes:
        path: a local Hugging Face model directory (``save_pretrained`` output, e.g. the
            ``model/`` folder an ``agentgym sft`` run writes). Takes precedence.
        preset: a built-in tiny model (``tiny-qwen2``, ``tiny-deepseek-v3``) built in
            process with an in-process tokenizer, when ``path`` is not given.
        preset_overrides: config fields replacing the preset's (``hidden_size: 64``).
        init_seed: weight init seed of a preset.
        tokenizer_vocab_size: presets only: learn BPE merges up to this size from the
            envs' text (``null``: byte-level, one token per character).
        architecture: the model's ``config.json`` fields (``hidden_size``,
            ``num_hidden_layers``, ...), for ``agentgym plan`` to size a model without
            downloading it (empty: it reads ``config.json`` in ``path``). Training ignores
            it; the weights' own config wins.
        quantize: the frozen base's Linear and expert weights stored weight-only in
            ``int8`` or ``fp8`` (torchao, one scale per output row) under a full-precision
            LoRA, or ``none``. One process, or a mesh without ``tp`` (docs/distributed.md).
        made_by: the command that writes ``path`` (``agentgym sft configs/...``): a run
            whose model is missing says to run it first.
        device: where the model trains and the HF engine generates: ``auto`` (the
            process's GPU, ``cuda:LOCAL_RANK``, when CUDA is present and the process
            group is not gloo; else ``cpu``), ``cpu``, ``cuda`` or ``cuda:N`` (one
            process only). Every strategy places the model the same way.
        dtype: the frozen base weights' dtype and the compute dtype of training
            (``bfloat16``: bf16 autocast around every forward, the trainable weights --
            LoRA, the critic's head, every weight in full fine-tuning -- kept as float32
            master copies, the convention of TRL and verl); ``float32``; ``auto``:
            ``bfloat16`` on a GPU that supports it, ``float32`` on CPU. The vLLM engine
            is given the same dtype unless ``rollout.engine_options.dtype`` names one.
    """

    path: str | None = None
    preset: str | None = "tiny-qwen2"
    preset_overrides: dict[str, Any] = field(default_factory=dict)
    init_seed: int = 0
    tokenizer_vocab_size: int | None = None
    architecture: dict[str, Any] = field(default_factory=dict)
    quantize: str = "none"
    made_by: str | None = None
    device: str = "auto"
    dtype: str = "auto"

    def __post_init__(self) -> None:
        _check(
            self.path is not None or self.preset is not None or bool(self.architecture),
            "model needs model.path (a local HF directory) or model.preset (a built-in tiny "
            "model); model.architecture alone (config.json fields) is enough for "
            "`agentgym plan` and `agentgym train --dry-run`.",
        )
        _check(
            self.device in ("auto", "cpu", "cuda")
            or (self.device.startswith("cuda:") and self.device[5:].isdigit()),
            f"model.device must be auto, cpu, cuda or cuda:N, got {self.device!r}.",
        )
        _check(
            self.dtype in ("auto", "float32", "bfloat16"),
            f"model.dtype must be auto, float32 or bfloat16, got {self.dtype!r} (float16 "
            "would need loss scaling, which the trainer does not do).",
        )
        if self.path is None and self.preset is not None:
            from agentgym.generation import PRESETS

            if self.preset not in PRESETS:
                raise UnknownNameError("model preset", self.preset, PRESETS)


@dataclass
class LoraSettings:
    """The LoRA adapter (peft).

    Attributes:
        enabled: train a LoRA adapter (``false``: full fine-tuning; SFT's default).
        r / alpha / dropout: LoRA rank, scaling numerator and dropout.
        target_modules: Linear leaf names to adapt (``null``: every attention
            projection).
        target_experts: on MoE models also adapt the fused routed-expert weights.
    """

    enabled: bool = True
    r: int = 8
    alpha: float = 16.0
    dropout: float = 0.0
    target_modules: list[str] | None = None
    target_experts: bool = True

    def __post_init__(self) -> None:
        _check(self.r >= 1, f"lora.r must be >= 1, got {self.r}.")
        _check(self.alpha > 0, f"lora.alpha must be > 0, got {self.alpha}.")
        _check(0 <= self.dropout < 1, f"lora.dropout must be in [0, 1), got {self.dropout}.")


@dataclass
class EnvSpec:
    """One training environment.

    Attributes:
        id: registered id (``agentgym/BalancedMath-v0``, a plugin's id, or ``Name-vN``).
        weight: mixing weight; each task is drawn from an env with probability
            proportional to its weight.
        kwargs: keyword arguments for ``gym.make`` (``count_tokens`` is set by the
            trainer to its tokenizer's count).
    """

    id: str = "agentgym/MemoryRecall-v0"
    weight: float = 1.0
    kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check(bool(self.id), "envs[].id must be a registered environment id.")
        _check(self.weight > 0, f"envs[].weight must be > 0, got {self.weight} for {self.id}.")


@dataclass
class RolloutConfig:
    """Sampling.

    Attributes:
        group_size: samples per task (G).
        batch_tasks: groups per training batch (after dynamic-sampling filtering).
        tasks_per_round: tasks drawn per generation round (``null``: ``batch_tasks``).
        max_tokens: generation cap per completion.
        temperature / top_p: sampling.
        concurrency: episodes in flight at once.
        max_batch: most requests per engine ``generate`` call.
        gather_window_s: how long the engine waits for more requests before a batch.
        engine: ``hf`` (embedded generation on the trainer's own model, the default) or
            ``vllm`` (GPU; LoRA adapters hot-swapped per step, asleep while training;
            see docs/vllm.md).
        engine_options: the engine's options, written as a mapping, checked when the
            config loads and read typed as :attr:`engine_settings`
            (:class:`~agentgym.generation.HFEngineOptions`: ``decode``,
            ``merge_lora``, ``fast_attention``, ``fused``;
            :class:`~agentgym.generation.VLLMEngineOptions`:
            ``gpu_memory_utilization``, ``max_model_len``, ``tensor_parallel_size``, ...).
        rollout_workers: ``0``: env work (make, reset, step, grading, sandboxes) in
            this process's thread pool. ``N``: in ``N`` Ray actors (docs/ray.md); the
            episodes are the same.
        ray_address: the Ray cluster to join (``host:port``, ``ray://...``, ``auto``);
            ``null``: start a local Ray (or join ``$RAY_ADDRESS``).
        episode_retries: play an episode that failed for infrastructure reasons (a
            sandbox or grader died, an env raised) again up to this many times, with the
            same seeds. One that still fails drops its group from the batch (dynamic
            sampling refills it), is counted (``episodes/failed``) and logged to
            ``failures.jsonl``, and its task is quarantined (skipped on resume).
        max_failed_share: stop the run when more than this share of a step's episodes
            failed (the message names the reasons and what to check).
        episode_timeout_s: a deadline for each attempt at an episode (training and
            evaluation): one that runs longer (a frozen sandbox, a hung engine call)
            fails with reason ``episode_timeout``, naming where it was stuck, and is
            retried as any failure; ``null``: no deadline. T-PPO's windows are not
            bounded by it.
        truncate_window: T-PPO (``algorithm.name=tppo``, docs/trainer.md): a pool of
            ``batch_tasks x group_size`` episodes stays in flight and each step extends
            every response by at most this many tokens; a response the window cut
            continues next step from its prefix (``null``: all-sync, every response
            generated to its end within the step).
        max_policy_lag: T-PPO: a response that spans this many policy updates is ended
            at the end of its window (``finish_reason`` ``length``), so no response
            mixes more than ``max_policy_lag + 1`` policy versions.
    """

    group_size: int = 8
    batch_tasks: int = 8
    tasks_per_round: int | None = None
    max_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    concurrency: int = 128
    max_batch: int = 256
    gather_window_s: float = 0.002
    engine: str = "hf"
    engine_options: dict[str, Any] = field(default_factory=dict)
    rollout_workers: int = 0
    ray_address: str | None = None
    episode_retries: int = 1
    max_failed_share: float = 0.25
    episode_timeout_s: float | None = 3600.0
    truncate_window: int | None = None
    max_policy_lag: int = 3

    def __post_init__(self) -> None:
        _check(
            self.truncate_window is None or self.truncate_window >= 1,
            "rollout.truncate_window must be >= 1 (tokens per response per step) or null.",
        )
        _check(self.max_policy_lag >= 1, "rollout.max_policy_lag must be >= 1.")
        _check(
            self.episode_timeout_s is None or self.episode_timeout_s > 0,
            "rollout.episode_timeout_s must be > 0 (seconds) or null (no deadline).",
        )
        _check(self.group_size >= 1, f"rollout.group_size must be >= 1, got {self.group_size}.")
        _check(self.batch_tasks >= 1, f"rollout.batch_tasks must be >= 1, got {self.batch_tasks}.")
        _check(
            self.tasks_per_round is None or self.tasks_per_round >= 1,
            "rollout.tasks_per_round must be >= 1 or null.",
        )
        _check(self.max_tokens >= 1, f"rollout.max_tokens must be >= 1, got {self.max_tokens}.")
        _check(self.temperature > 0, "rollout.temperature must be > 0 for RL (sampling).")
        _check(0 < self.top_p <= 1, f"rollout.top_p must be in (0, 1], got {self.top_p}.")
        self.engine_settings  # noqa: B018  (checks the engine's options at load time)
        _check(
            self.rollout_workers >= 0,
            f"rollout.rollout_workers must be >= 0 (0: no Ray), got {self.rollout_workers}.",
        )
        _check(
            self.ray_address is None or self.rollout_workers > 0,
            "rollout.ray_address needs rollout.rollout_workers >= 1 (the actors to start there).",
        )
        _check(self.concurrency >= 1, "rollout.concurrency must be >= 1.")
        _check(self.episode_retries >= 0, "rollout.episode_retries must be >= 0.")
        _check(
            0 <= self.max_failed_share <= 1,
            f"rollout.max_failed_share must be in [0, 1], got {self.max_failed_share}.",
        )
        _check(self.max_batch >= 1, "rollout.max_batch must be >= 1.")
        _check(self.gather_window_s >= 0, "rollout.gather_window_s must be >= 0.")

    @property
    def engine_settings(self) -> HFEngineOptions | VLLMEngineOptions:
        """``engine_options`` as the engine's typed options (checked when the config loads)."""
        return engine_options(self.engine, self.engine_options)


@dataclass
class OptimConfig:
    """AdamW on the trainable parameters, and the policy's learning-rate schedule.

    Attributes:
        lr: peak learning rate.
        warmup_steps: linear warm-up steps (optimizer steps).
        schedule: what follows the warm-up (:mod:`~agentgym.trainers.schedule`):
            ``constant`` (``lr``), ``cosine`` (half a cosine towards ``min_lr_ratio x
            lr``, which it reaches one step after the run's last) or ``wsd`` (``lr``
            held, then a straight line down to the floor over the last ``decay_fraction``
            of the run). A run's length in optimizer steps is ``run.max_steps x
            algorithm.updates_per_batch``: a step that skips its update (a dynamic-
            sampling batch with nothing to train) leaves the decay unfinished, and
            ``--resume`` with a larger ``run.max_steps`` stretches the schedule (the rate
            goes up again).
        min_lr_ratio / decay_fraction: the decay's floor and (``wsd``) its share of the run.
        weight_decay / betas / eps: AdamW's.
        max_grad_norm: gradient clipping (0: off).
    """

    lr: float = 1e-4
    warmup_steps: int = 0
    schedule: str = "constant"
    min_lr_ratio: float = 0.1
    decay_fraction: float = 0.2
    weight_decay: float = 0.0
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    eps: float = 1e-8
    max_grad_norm: float = 1.0

    def __post_init__(self) -> None:
        _check(self.lr > 0, f"optim.lr must be > 0, got {self.lr}.")
        _check(self.warmup_steps >= 0, "optim.warmup_steps must be >= 0.")
        if self.schedule not in SCHEDULES:
            raise UnknownNameError("optim.schedule", self.schedule, SCHEDULES)
        _check(0 <= self.min_lr_ratio <= 1, "optim.min_lr_ratio must be in [0, 1].")
        _check(0 < self.decay_fraction <= 1, "optim.decay_fraction must be in (0, 1].")
        _check(
            len(self.betas) == 2 and all(0 <= b < 1 for b in self.betas),
            "optim.betas must be two numbers in [0, 1).",
        )
        _check(self.max_grad_norm >= 0, "optim.max_grad_norm must be >= 0.")


@dataclass
class EvalConfig:
    """Held-out evaluation (greedy by default) every ``every`` steps.

    Attributes:
        every: evaluate every this many steps (0: only before and after training when
            ``at_ends`` is on).
        at_ends: also evaluate before the first and after the last step.
        num_tasks: held-out tasks per env.
        seed_start: held-out tasks use seeds ``seed_start + i``; training seeds count up
            from ``train_seed_start``, far below.
        temperature: 0 is greedy.
        max_tokens: generation cap (``null``: ``rollout.max_tokens``).
    """

    every: int = 0
    at_ends: bool = False
    num_tasks: int = 32
    seed_start: int = 1_000_000
    temperature: float = 0.0
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        _check(self.every >= 0, "eval.every must be >= 0.")
        _check(self.num_tasks >= 1, "eval.num_tasks must be >= 1.")
        _check(self.temperature >= 0, "eval.temperature must be >= 0.")


#: the learner backends ``distributed.strategy`` names (built by ``make_learner``)
STRATEGIES = ("none", "deepspeed", "fsdp2")


@dataclass
class DistributedConfig:
    """Multi-process training (``agentgym train CONFIG --nproc N``; see docs/distributed.md).

    Attributes:
        strategy: ``none`` (one process), ``deepspeed`` (ZeRO stage ``zero_stage``) or
            ``fsdp2`` (PyTorch ``fully_shard`` per decoder layer). Sharded strategies
            run under torchrun: the CLI launches it for you with ``--nproc``.
        zero_stage: DeepSpeed ZeRO stage, 2 (shard gradients and optimizer state) or 3
            (also the weights).
        backend: ``auto`` (nccl with CUDA, gloo without), ``gloo`` or ``nccl``.
        timeout_s: a collective that waits longer than this fails instead of hanging.
            A backstop only: the fault detector (the ``health`` section) finds a stalled
            rank in seconds. Raise it when ranks legitimately wait longer for each other
            (loading very large weights at different speeds). ``agentgym train`` refuses
            a value shorter than 1.5x the planner's estimate of a rollout and its scoring
            (``agentgym plan``), for configs the planner can size.
        on_fault: what the launcher does when the detector flags a rank (hung, slow,
            broken): ``warn`` (report and go on), ``stop`` (stop the run: non-zero exit,
            the last checkpoint stays), ``restart`` (stop, then resume from the last
            checkpoint while ``max_restarts`` allow; with none left it stops).
        max_restarts: how many times the launcher relaunches the ranks with
            ``--resume`` after a failure (a detected fault with ``on_fault: restart``, a
            crashed or killed rank). ``--max-restarts K`` sets it.

        dp_shard / tp / ep / pp: the device mesh of ``fsdp2`` (docs/distributed.md):
            FSDP2 shards, tensor-parallel ranks, expert-parallel groups (data parallel
            for the dense part; routed experts split over ``ep * tp`` ranks) and pipeline
            stages. Their product must equal the number of processes. All 1 (the
            default): plain sharded data parallelism over every process.
        activation_checkpointing: on the device mesh, each decoder layer keeps only its
            input for the backward pass and runs its forward again there (what
            ``agentgym plan`` assumes with ``plan.activation_checkpointing: true``): about
            one layer's activations instead of all of a stage's, for a second forward.
        pp_window: with ``pp > 1``, the most micro-batches one run of the 1F1B schedule
            takes (0, the default: all of a call's micro-batches in one run). PyTorch's
            pipeline stage allocates a receive buffer per micro-batch of a run, so a long
            update grows them without bound (the 671B config: 256 micro-batches, 56 GiB on
            a middle stage); windows of a few times ``pp`` bound them, at one pipeline
            bubble per window. Gradients add up over the windows: the same update.

    Generation under ZeRO-3 / FSDP2 gathers the full weights once per rollout, so that
    each rank generates its share of the tasks on its own (as TRL's
    ``ds3_gather_for_generation``).
    """

    strategy: str = "none"
    zero_stage: int = 3
    backend: str = "auto"
    timeout_s: float = 1800.0
    on_fault: str = "restart"
    max_restarts: int = 0
    dp_shard: int = 1
    tp: int = 1
    ep: int = 1
    pp: int = 1
    activation_checkpointing: bool = False
    pp_window: int = 0

    def __post_init__(self) -> None:
        _check(
            self.strategy in STRATEGIES,
            f"distributed.strategy must be {', '.join(STRATEGIES[:-1])} or {STRATEGIES[-1]}, "
            f"got {self.strategy!r}.",
        )
        _check(
            self.zero_stage in (2, 3),
            f"distributed.zero_stage must be 2 or 3, got {self.zero_stage}.",
        )
        _check(
            self.backend in ("auto", "gloo", "nccl"),
            f"distributed.backend must be auto, gloo or nccl, got {self.backend!r}.",
        )
        _check(self.timeout_s > 0, "distributed.timeout_s must be > 0.")
        if self.on_fault not in ("warn", "stop", "restart"):
            raise UnknownNameError(
                "distributed.on_fault", self.on_fault, ("warn", "stop", "restart")
            )
        _check(self.max_restarts >= 0, "distributed.max_restarts must be >= 0.")
        _check(
            isinstance(self.pp_window, int)
            and not isinstance(self.pp_window, bool)
            and (self.pp_window == 0 or self.pp_window >= self.pp),
            f"distributed.pp_window must be 0 (one schedule run per call) or at least "
            f"distributed.pp={self.pp} (1F1B needs a micro-batch per stage), got "
            f"{self.pp_window!r}.",
        )
        from agentgym.trainers.parallel import Layout

        layout = Layout.from_config(self)  # checks the four sizes
        _check(
            layout.is_default or self.strategy == "fsdp2",
            f"distributed {layout.describe()} runs on FSDP2's device mesh: set "
            "distributed.strategy=fsdp2.",
        )
        _check(
            isinstance(self.activation_checkpointing, bool),
            "distributed.activation_checkpointing must be true or false, got "
            f"{self.activation_checkpointing!r}.",
        )
        _check(
            not self.activation_checkpointing or not layout.is_default,
            "distributed.activation_checkpointing runs on the device mesh: set "
            "distributed.strategy=fsdp2 with dp_shard/tp/ep/pp (e.g. distributed.dp_shard=N "
            "for N processes), or set it to false.",
        )


@dataclass
class HealthConfig(DetectorSettings):
    """Heartbeats and the faulty-worker detector (docs/reliability.md).

    Every rank of a multi-process run and every Ray env worker reports a heartbeat with
    a few metrics; the launcher (ranks) or the trainer (Ray workers) compares each with
    its peers and flags one that is hung, slow or broken (``distributed.on_fault`` says
    what then happens to ranks, ``workers`` to Ray env workers).

    The detector's knobs (``hung_after_s``, ``stuck_after_s``, ``slow_factor``,
    ``window_s``, ``persist_s``, ``min_metrics``, ``max_errors``) are the fields of
    :class:`agentgym.health.DetectorSettings`, with their defaults and meaning there; this
    section adds them to its own, keyed flat (``health.hung_after_s``), and checks them.

    Attributes:
        enabled: heartbeats and detection on.
        heartbeat_s: seconds between heartbeats (and between the detector's looks).
        stop_grace_s: how long ranks asked to stop may take to save a checkpoint and
            exit before they are killed.
        workers: what happens to a faulty Ray env worker: ``warn``, ``replace`` (kill
            it and start a new one; its episodes are played again with the same seeds)
            or ``stop`` (replace it, then stop the run after the step).
    """

    enabled: bool = True
    heartbeat_s: float = 1.0
    stop_grace_s: float = 120.0
    workers: str = "replace"

    def __post_init__(self) -> None:
        _check(self.heartbeat_s > 0, "health.heartbeat_s must be > 0.")
        _check(
            self.hung_after_s >= 2 * self.heartbeat_s,
            f"health.hung_after_s must be at least twice health.heartbeat_s "
            f"({2 * self.heartbeat_s:g}), got {self.hung_after_s}.",
        )
        _check(self.stuck_after_s > 0, "health.stuck_after_s must be > 0.")
        _check(self.slow_factor > 1, f"health.slow_factor must be > 1, got {self.slow_factor}.")
        _check(
            self.window_s >= 2 * self.heartbeat_s,
            "health.window_s must hold at least two heartbeats (>= 2 * heartbeat_s).",
        )
        _check(self.persist_s >= 0, "health.persist_s must be >= 0.")
        _check(self.min_metrics >= 1, "health.min_metrics must be >= 1.")
        _check(self.max_errors >= 1, "health.max_errors must be >= 1.")
        _check(self.stop_grace_s > 0, "health.stop_grace_s must be > 0.")
        if self.workers not in ("warn", "replace", "stop"):
            raise UnknownNameError("health.workers", self.workers, ("warn", "replace", "stop"))

    def detector_settings(self) -> DetectorSettings:
        """The detector's knobs from this section (a plain :class:`DetectorSettings`)."""
        return DetectorSettings(**{f.name: getattr(self, f.name) for f in fields(DetectorSettings)})


@dataclass
class TrainConfig:
    """``agentgym train``: all-sync DAPO with LoRA."""

    run: RunConfig = field(default_factory=RunConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    lora: LoraSettings = field(default_factory=LoraSettings)
    envs: list[EnvSpec] = field(default_factory=lambda: [EnvSpec()])
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    critic: CriticConfig = field(default_factory=CriticConfig)  # PPO / VAPO (trainers/critic.py)
    optim: OptimConfig = field(default_factory=OptimConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    distributed: DistributedConfig = field(default_factory=DistributedConfig)
    health: HealthConfig = field(default_factory=HealthConfig)
    train_seed_start: int = 0
    #: ``agentgym plan``'s section, kept as written: the trainer never reads it, and the
    #: planner sits above the trainers (``agentgym.plan.PlanConfig`` types and checks it)
    plan: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check(len(self.envs) >= 1, "envs must list at least one environment.")
        from agentgym.trainers.algorithm import ESTIMATORS

        groups = ESTIMATORS[self.algorithm.advantage].needs_groups
        _check(
            self.rollout.group_size >= 2 or not groups,
            f"rollout.group_size must be >= 2 for the group advantage "
            f"{self.algorithm.advantage!r}, got {self.rollout.group_size} (with one sample "
            "per task use algorithm.advantage=reinforce++ or apo).",
        )
        _check(
            not self.algorithm.uses_critic or self.lora.enabled,
            f"algorithm.advantage={self.algorithm.advantage} needs a critic, which is a second "
            "LoRA adapter on the policy's base: set lora.enabled=true.",
        )
        if self.rollout.engine == "vllm":
            _check_vllm_wiring(self)
        _check(
            not self.algorithm.router_replay or self.rollout.engine == "hf",
            "algorithm.router_replay needs rollout.engine=hf: vLLM does not report the "
            "experts its routers chose.",
        )
        _check(
            self.rollout.group_size >= 2 or not self.algorithm.dynamic_sampling,
            "algorithm.dynamic_sampling drops groups whose rewards are all equal, so every "
            "group of one sample: set algorithm.dynamic_sampling=false with rollout.group_size=1.",
        )
        _check(
            self.train_seed_start + 1_000_000 <= self.eval.seed_start
            or self.eval.seed_start + 1_000_000 <= self.train_seed_start,
            "train_seed_start and eval.seed_start must be at least 1,000,000 apart so "
            "training never sees held-out tasks.",
        )
        from agentgym.trainers.tppo import check_config

        check_config(self)  # T-PPO's settings (rollout.truncate_window)
        from agentgym.trainers.parallel import check_train_config

        check_train_config(self)  # the device mesh against the model it would split


#: vLLM refuses sampling temperatures above this (as the OpenAI API does)
VLLM_MAX_TEMPERATURE = 2.0


def _check_vllm_wiring(cfg: TrainConfig) -> None:
    """Refuse what the vLLM engine cannot serve faithfully, before any weight is loaded."""
    for where, t in (("rollout.temperature", cfg.rollout.temperature),
                     ("eval.temperature", cfg.eval.temperature)):  # fmt: skip
        _check(
            t <= VLLM_MAX_TEMPERATURE,
            f"{where} is {t}, above {VLLM_MAX_TEMPERATURE:g}, which vLLM rejects: lower it, "
            "or use rollout.engine=hf.",
        )
    named = set(cfg.lora.target_modules or ())
    _check(
        "kv_b_proj" not in named,
        "lora.target_modules names kv_b_proj, which vLLM folds into its MLA decode "
        "matrices when it loads the model: the adapter would act in prefill only and the "
        "rollouts would not be the trained policy's. Leave kv_b_proj out (the default "
        "targets do), or use rollout.engine=hf.",
    )


# ----------------------------------------------------------------------------- a launch
#: file system types that live on one machine: a run folder several nodes share is never
#: on one of these
LOCAL_FILESYSTEMS = ("ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "overlay", "f2fs")


def check_launch(cfg: TrainConfig, *, world_size: int, nnodes: int) -> list[str]:
    """What a launch of ``world_size`` processes on ``nnodes`` nodes needs beyond each
    section's own checks; returns warning lines.

    * Several nodes share one run folder (checkpoints, heartbeats, the run lock): a
      relative ``run.output_dir`` is refused (each node would resolve it against its own
      working directory), a folder on a local file system is a warning.
    * ``rollout.concurrency`` below the episodes a step gives each rank that plays them
      (an engine replica's driver under vLLM, every rank with the embedded engine) keeps
      the engine part empty: a warning with the value to set.

    Raises:
        ConfigError: a relative ``run.output_dir`` with several nodes.
    """
    from pathlib import Path

    from agentgym import ConfigError

    out: list[str] = []
    folder = Path(cfg.run.output_dir)
    if nnodes > 1:
        if not folder.is_absolute():
            raise ConfigError(
                f"run.output_dir is the relative {cfg.run.output_dir!r} and this launch spans "
                f"{nnodes} nodes: each would write its own folder (heartbeats, checkpoints, "
                "the run lock are shared through it). Set run.output_dir to an absolute path "
                "on a file system every node mounts (run.output_dir=/shared/runs/NAME)."
            )
        fs = _filesystem(folder)
        if fs in LOCAL_FILESYSTEMS:
            out.append(
                f"run.output_dir {folder} is on a local file system ({fs}) on this node, but "
                f"the launch spans {nnodes} nodes: the others would not see it. Put it on a "
                "shared file system (NFS, Lustre, ...)."
            )
    share = -(-cfg.rollout.batch_tasks * cfg.rollout.group_size // _players(cfg, world_size))
    if cfg.rollout.concurrency < share:
        out.append(
            f"rollout.concurrency={cfg.rollout.concurrency} plays at most that many episodes "
            f"at once, but a step gives each rank that plays them {share} "
            f"(rollout.batch_tasks x group_size = "
            f"{cfg.rollout.batch_tasks * cfg.rollout.group_size} over "
            f"{_players(cfg, world_size)}): the engine runs part empty. Set "
            f"rollout.concurrency={share}."
        )
    return out


def _players(cfg: TrainConfig, world_size: int) -> int:
    """The ranks that play a step's episodes: one per vLLM engine replica, else all."""
    if cfg.rollout.engine != "vllm" or world_size <= 1:
        return max(world_size, 1)
    opts = cfg.rollout.engine_settings
    size = max(
        1, getattr(opts, "tensor_parallel_size", 1) * getattr(opts, "pipeline_parallel_size", 1)
    )
    return max(1, world_size // size)


def _filesystem(path: Any) -> str | None:
    """The type of the file system ``path`` (or its nearest existing parent) is on."""
    from pathlib import Path

    here = Path(path).absolute()
    while not here.exists() and here != here.parent:
        here = here.parent
    best, kind = "", None
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return None
    for line in mounts:
        parts = line.split()
        if len(parts) >= 3 and str(here).startswith(parts[1]) and len(parts[1]) >= len(best):
            best, kind = parts[1], parts[2]
    return kind
