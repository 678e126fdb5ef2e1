"""The ``critic`` section of a trainer config, without torch (the critic itself is in
:mod:`.critic`): a config is checked before any process imports torch."""

from __future__ import annotations

from dataclasses import dataclass

from agentgym import config_check as _check


@dataclass
class CriticConfig:
    """The critic (used when ``algorithm.advantage`` is ``gae``: PPO, VAPO).

    Attributes:
        share_base: ``true``: the critic is a second LoRA adapter plus a value head on the
            policy's own frozen base (no second copy of the base weights). ``false``: the
            critic is a separate model read from ``path`` plus a value head, all of its
            weights trained (verl's layout: typically a smaller model than the policy).
        path: the separate critic model (``share_base: false``): a local Hugging Face
            directory (``save_pretrained`` output) whose tokenizer is the policy's (it
            reads the policy's token ids; the vocabulary sizes must match).
        r / alpha: the critic adapter's LoRA rank and scaling numerator (``share_base:
            true`` only).
        target_modules: Linear leaf names to adapt (``null``: the policy adapter's;
            ``share_base: true`` only).
        lr: the critic's learning rate (the adapter or separate model, and the head).
        value_clip: PPO's value clip (``null``: no clip).
        value_coef: weight of the value loss in the critic's update.
        updates_per_batch: optimizer steps the critic takes on each mini-batch (the
            policy takes one); more than 1 fits the values faster (PPO's epochs).
        pretrain_steps: VAPO's value pretraining: before any policy update, train the
            critic alone for up to this many steps on rollouts of the warm-start policy
            (0: off; the critic then starts from a value of 0 everywhere, and its first
            advantages are biased: the docs say what that risks).
        pretrain_updates: the critic's optimizer steps on each pretraining round's batch.
        pretrain_explained_variance: stop value pretraining early once the critic's
            explained variance on a step reaches this.
    """

    share_base: bool = True
    path: str | None = None
    r: int = 8
    alpha: float = 16.0
    target_modules: list[str] | None = None
    lr: float = 1e-3
    value_clip: float | None = 0.2
    value_coef: float = 1.0
    updates_per_batch: int = 1
    pretrain_steps: int = 0
    pretrain_updates: int = 4
    pretrain_explained_variance: float = 0.6

    def __post_init__(self) -> None:
        _check(
            self.share_base or bool(self.path),
            "critic.share_base: false needs critic.path: a local model directory for the "
            "separate critic (or share_base: true for an adapter on the policy's base).",
        )
        _check(
            self.path is None or not self.share_base,
            "critic.path is read only with critic.share_base: false (with share_base: true "
            "the critic is an adapter on the policy's own base): set share_base: false, or "
            "drop critic.path.",
        )
        _check(self.r >= 1, f"critic.r must be >= 1, got {self.r}.")
        _check(self.lr > 0, f"critic.lr must be > 0, got {self.lr}.")
        _check(
            self.value_clip is None or self.value_clip > 0,
            "critic.value_clip must be > 0 or null.",
        )
        _check(self.value_coef > 0, "critic.value_coef must be > 0.")
        _check(self.pretrain_steps >= 0, "critic.pretrain_steps must be >= 0.")
        _check(self.updates_per_batch >= 1, "critic.updates_per_batch must be >= 1.")
        _check(self.pretrain_updates >= 1, "critic.pretrain_updates must be >= 1.")
