"""The sections of ``agentgym sft``'s config: where examples come from and how to fit them.

The model, LoRA, envs and eval sections are the trainer's
(:mod:`agentgym.trainers.config`), with SFT's own defaults; the run section is SFT's
own (:class:`SFTRun`), so that a trainer key SFT spells differently (``run.max_steps``,
``run.save_every``: SFT counts its steps in ``train``) is an error naming SFT's key
instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentgym import UnknownNameError
from agentgym import config_check as _check
from agentgym.trainers.config import EnvSpec, EvalConfig, LoraSettings, ModelConfig, OptimConfig
from agentgym.trainers.schedule import SCHEDULES
from agentgym.trainers.tracking import check_report_to


@dataclass
class SFTRun:
    """Where an SFT run writes and how it runs (``run:``).

    Attributes:
        output_dir: run directory (model/, metrics.jsonl, checkpoints/, plots/,
            config.yaml).
        seed: seeds example order, line dropout, the adapter init and eval sampling.
        keep_checkpoints: how many recent checkpoints to keep.
        threads: torch CPU threads (``None``: torch's default).
        progress: show a progress bar (plain lines when not on a terminal).
        plots: write PNG plots (``plots/``) at the end.
        report_to: where the metrics go: ``jsonl`` (always), ``tensorboard``, ``wandb``,
            ``all`` (:mod:`agentgym.trainers.tracking`).

    The length of the run is ``train.max_steps`` / ``train.epochs``, the checkpoint
    period ``train.save_every``.
    """

    output_dir: str = "runs/sft"
    seed: int = 0
    keep_checkpoints: int = 2
    threads: int | None = None
    progress: bool = True
    plots: bool = True
    report_to: list[str] = field(default_factory=lambda: ["jsonl"])

    def __post_init__(self) -> None:
        self.report_to = check_report_to(self.report_to)
        _check(self.keep_checkpoints >= 1, "run.keep_checkpoints must be >= 1.")
        _check(self.threads is None or self.threads >= 1, "run.threads must be >= 1 or null.")


@dataclass
class SFTData:
    """Where SFT examples come from.

    Attributes:
        source: ``worked_solution`` (reset each env on a seed and ask
            ``env.unwrapped.worked_solution(**solution_kwargs)`` for the reply to the
            first observation) or ``oracle`` (play the env's oracle policy and train on
            every turn, memory summaries included).
        solution_kwargs: keyword arguments of ``worked_solution`` (e.g. ``style``).
        num_tasks: training tasks (seeds ``seed_start ...``).
        seed_start: first training seed.
        line_dropout: worked solutions only: drop each line but the last (the final
            answer) with this probability, independently per example (seeded). A
            warm start trained on one fixed template puts probability ~1 on every
            structural token, leaving RL nothing shorter to sample; a little line
            dropout keeps the structure uncertain. 0 turns it off.
    """

    source: str = "worked_solution"
    solution_kwargs: dict[str, Any] = field(default_factory=dict)
    num_tasks: int = 2000
    seed_start: int = 0
    line_dropout: float = 0.0

    def __post_init__(self) -> None:
        if self.source not in ("worked_solution", "oracle"):
            raise UnknownNameError("data.source", self.source, ("worked_solution", "oracle"))
        _check(self.num_tasks >= 1, "data.num_tasks must be >= 1.")
        _check(
            0 <= self.line_dropout < 1,
            f"data.line_dropout must be in [0, 1), got {self.line_dropout}.",
        )


@dataclass
class SFTTrain:
    """Supervised optimisation.

    Attributes:
        epochs: passes over the examples (``max_steps`` wins when set).
        max_steps: optimizer steps (``null``: from ``epochs``).
        save_every: write a checkpoint every this many steps, and always after the last
            one (0: after the last only). ``agentgym sft --resume`` continues from the
            newest; a first SIGTERM / Ctrl-C writes one after the step in progress.
        batch_size: examples per optimizer step.
        lr / warmup_steps / weight_decay / max_grad_norm: AdamW with linear warm-up,
            then the ``schedule``'s decay.
        schedule: ``cosine`` (to ``min_lr_ratio x lr``), ``wsd`` (``lr`` held, then a
            linear decay to ``min_lr_ratio x lr`` over the last ``decay_fraction`` of
            the steps) or ``constant``; :mod:`agentgym.trainers.schedule`, the one the
            learner runs for every loop.
        group_by_length: draw batches from groups of this many batches sorted by length,
            so that a batch holds examples of similar length and little padding (0: plain
            random batches).
        length_groups: run each batch as this many length-sorted micro-batches, each
            padded to its own longest example; the gradient is that of the whole batch
            (1: one padded batch).
        pack_width: pack each batch's examples into rows of at most this many tokens,
            each example attending only to itself (:mod:`agentgym.trainers.token_rows`; the gradient is
            that of the padded batch); 0: one padded row per example.
    """

    epochs: float = 3.0
    max_steps: int | None = None
    save_every: int = 200
    batch_size: int = 32
    lr: float = 3e-3
    warmup_steps: int = 20
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    schedule: str = "cosine"
    min_lr_ratio: float = 0.1
    decay_fraction: float = 0.2
    group_by_length: int = 0
    length_groups: int = 1
    pack_width: int = 0

    def __post_init__(self) -> None:
        _check(self.length_groups >= 1, "train.length_groups must be >= 1.")
        _check(self.pack_width >= 0, "train.pack_width must be >= 0 (0: off).")
        if self.schedule not in SCHEDULES:
            raise UnknownNameError("train.schedule", self.schedule, SCHEDULES)
        _check(0 <= self.min_lr_ratio <= 1, "train.min_lr_ratio must be in [0, 1].")
        _check(0 < self.decay_fraction <= 1, "train.decay_fraction must be in (0, 1].")
        _check(
            self.pack_width == 0 or self.length_groups == 1,
            "train.pack_width and train.length_groups both cut padding: set one of them "
            "(packing leaves none to cut; length_groups: 1).",
        )
        _check(self.group_by_length >= 0, "train.group_by_length must be >= 0 (0: off).")
        _check(self.epochs > 0, "train.epochs must be > 0.")
        _check(
            self.max_steps is None or self.max_steps >= 1, "train.max_steps must be >= 1 or null."
        )
        _check(self.save_every >= 0, f"train.save_every must be >= 0, got {self.save_every}.")
        _check(self.batch_size >= 1, "train.batch_size must be >= 1.")
        _check(self.lr > 0, "train.lr must be > 0.")
        _check(self.warmup_steps >= 0, "train.warmup_steps must be >= 0.")
        _check(self.max_grad_norm >= 0, "train.max_grad_norm must be >= 0 (0: no clipping).")
        _check(self.weight_decay >= 0, "train.weight_decay must be >= 0.")

    @property
    def optim(self) -> OptimConfig:
        """These settings as the learner's ``optim`` section (AdamW with betas 0.9 and
        0.95, the schedule over the run's optimizer steps)."""
        return OptimConfig(
            lr=self.lr,
            warmup_steps=self.warmup_steps,
            schedule=self.schedule,
            min_lr_ratio=self.min_lr_ratio,
            decay_fraction=self.decay_fraction,
            weight_decay=self.weight_decay,
            betas=[0.9, 0.95],
            max_grad_norm=self.max_grad_norm,
        )


@dataclass
class SFTConfig:
    """``agentgym sft``: supervised warm start on worked solutions or oracle turns."""

    run: SFTRun = field(default_factory=SFTRun)
    model: ModelConfig = field(default_factory=ModelConfig)
    lora: LoraSettings = field(default_factory=lambda: LoraSettings(enabled=False))
    envs: list[EnvSpec] = field(default_factory=lambda: [EnvSpec()])
    data: SFTData = field(default_factory=SFTData)
    train: SFTTrain = field(default_factory=SFTTrain)
    eval: EvalConfig = field(default_factory=lambda: EvalConfig(at_ends=True, num_tasks=64))
    max_tokens: int = 256

    def __post_init__(self) -> None:
        _check(len(self.envs) >= 1, "envs must list at least one environment.")
        _check(self.max_tokens >= 1, "max_tokens must be >= 1.")
