"""The ``algorithm`` section of a trainer config: which loss, which advantages, DAPO's
switches, the mismatch correction and the value-based settings (read by the learner)."""

from __future__ import annotations

from dataclasses import dataclass, field

from agentgym import ConfigError, UnknownNameError
from agentgym import config_check as _check
from agentgym.trainers.algorithm.catalog import ESTIMATORS, LOSSES, TIS_MODES


@dataclass
class AlgorithmConfig:
    """The RL algorithm: loss, advantage estimator, DAPO's switches, mismatch correction.

    Attributes:
        name: a preset that sets the algorithm's pieces together (``null``, the default:
            every field as given; the fields' defaults are DAPO's): ``dapo`` (loss
            ``dapo``, advantage ``grpo``), ``grpo`` (GRPO as DeepSeekMath published it:
            loss ``grpo``, advantage ``grpo``, symmetric clip ``eps_high = eps_low =
            0.2``, KL to the reference ``kl_coef = 0.04``, no dynamic sampling, no
            overlong shaping), ``ppo`` (loss ``ppo``, advantage ``gae``
            with ``lam_policy = lam_critic = 0.95``, a critic), ``vapo`` (loss ``dapo``,
            advantage ``gae`` decoupled: ``lam_critic = 1``, length-adaptive
            ``lam_policy`` with ``lam_alpha = 0.05``; positive-example NLL ``nll_coef =
            0.1``; group sampling with dynamic sampling; set ``critic.pretrain_steps``
            for value pretraining), ``tppo`` (T-PPO over truncated rollouts, with
            ``rollout.truncate_window``: loss ``dapo``, advantage ``gae`` with
            ``lam_policy = 0.95``, ``lam_critic = 1`` (Monte-Carlo returns), no dynamic
            sampling). A preset sets only fields left at their defaults. It refuses a
            ``loss`` or ``advantage`` set to another (that would be another algorithm);
            its numbers (lambdas, ``lam_alpha``, ``nll_coef``, ...) are defaults that a
            config may tune.
        loss: the policy loss by name (``dapo``, ``grpo``, ``ppo``, ``gspo``, ``cispo``,
            ``reinforce``, ``apo``; see docs/trainer.md's table and
            :data:`~agentgym.trainers.algorithm.catalog.LOSSES`).
        advantage: the estimator by name (``grpo``, DAPO's; ``drgrpo``, ``rloo``,
            ``reinforce++``, ``apo``, ``apo_group``).
        normalize_std: divide ``grpo`` advantages by the group std.
        eps_low / eps_high: clip range ``[1 - eps_low, 1 + eps_high]`` (clip-higher).
        clip_c: ``ppo``'s dual-clip bound for negative advantages (> 1).
        kl_coef: KL-to-reference weight (0: off, DAPO's default; k3 estimator).
        apo_beta: the ``apo`` loss's ``beta`` (weight of the log-ratio it regresses).
        apo_value_beta: the ``beta`` of A*PO's value estimate
            ``V* = beta log mean exp(r / beta)`` (``agentgym apo-values``).
        apo_value_samples: reference samples per prompt for that estimate.
        apo_values: the value cache (a JSONL written by ``agentgym apo-values``;
            ``null``: ``<run.output_dir>/apo_values.jsonl``).
        tis: truncated importance sampling against the rollout engine's log-probs:
            ``off``, ``token`` (``min(exp(learner - engine), tis_cap)`` per token),
            ``sequence`` (the same from the sequence's summed log-ratio) or ``mask``
            (drop tokens whose ratio leaves ``tis_band``).
        tis_cap / tis_band: the truncation ``C`` and the kept ratio band.
        gamma: GAE's discount (``gae``).
        lam_policy / lam_critic: GAE's lambda for the policy's advantages and for the
            critic's targets (decoupled GAE when they differ).
        lam_alpha: VAPO's length-adaptive ``lam_policy = 1 - 1 / (lam_alpha * length)``
            per episode (``null``: the fixed ``lam_policy``).
        whiten_advantages: ``gae`` only: shift and scale the batch's token advantages to
            mean 0 and std 1 over all its policy tokens (as verl's, TRL's and CleanRL's
            PPO do). Raw GAE advantages are on the reward's scale (std about 0.1 for a
            0/1 reward on a task the policy mostly solves), so without it the policy's
            step is some ten times smaller than under the group-normalised ``grpo``.
        nll_coef: weight of VAPO's positive-example LM loss (``-logp`` on the tokens of
            correct episodes); 0: off.
        router_replay: MoE models: the rollout engine records the experts each router
            chose for every token, and the learner's forward uses those choices instead
            of recomputing its own top-k (the gate's weights are still computed and
            trained); the ``hf`` engine only (vLLM does not report routing).
        dynamic_sampling: drop groups whose rewards are all equal and generate more.
        max_generation_rounds: cap on generation rounds per step (the first included).
        on_cap: what to do when the cap is hit with fewer groups than ``batch_tasks``:
            ``train`` on what there is (with a warning), ``skip`` the update, or
            ``error``.
        overlong_penalty: add DAPO's soft overlong punishment to the reward.
        overlong_cache: its ramp width ``L_cache`` (``L_max`` = ``rollout.max_tokens``).
        overlong_mask: exclude episodes with a truncated completion from the loss.
        overlong_episodes: what to do with an episode the env cut off by its limits
            (``memory.max_conversations``, ``max_turns``, ``max_total_tokens``) before
            it gave its final answer: ``train`` it like any other (its reward, usually 0,
            gives it a negative advantage), or ``mask`` it (SUPO's overlong masking: it
            still counts in its group's advantage baseline but its tokens get no
            gradient, so running out of summary rounds does not teach the model to stop
            summarising). Its share is the step metric ``charts/overlong_share``.
        length_reward_coef: weight of Kimi k1.5's group-relative length reward (0: off).
        micro_batch_size: sequences per forward/backward pass.
        share_prompts: in a micro-batch, run a prompt that several samples share (the
            ``G`` samples of a task's first turn) through the model once, and only the
            replies per sample. Loss and gradients are the same either way; ``false``
            runs one full sequence per sample (for models whose forward cannot take a
            KV cache with gradients).
        updates_per_batch: optimizer steps per batch (mini-batches). 1 is strictly
            on-policy (the ratio is exactly 1 and only clipping-free gradients flow).
        kind_stats: log, per turn kind (act, summary), how far the update moved the
            log-probs of the batch's tokens in the direction of their advantages
            (``kinds/<kind>_logprob_gain``): a no-gradient forward pass over the batch
            before and one after the update. The kinds' token and turn counts are
            logged either way.
    """

    loss: str = "dapo"
    advantage: str = "grpo"
    normalize_std: bool = True
    eps_low: float = 0.2
    eps_high: float = 0.28
    clip_c: float = 3.0
    kl_coef: float = 0.0
    apo_beta: float = 1e-3
    apo_value_beta: float = 0.5
    apo_value_samples: int = 8
    apo_values: str | None = None
    tis: str = "off"
    tis_cap: float = 2.0
    tis_band: list[float] = field(default_factory=lambda: [0.5, 2.0])
    router_replay: bool = False
    name: str | None = None
    gamma: float = 1.0
    lam_policy: float = 0.95
    lam_critic: float = 0.95
    lam_alpha: float | None = None
    whiten_advantages: bool = True
    nll_coef: float = 0.0
    dynamic_sampling: bool = True
    max_generation_rounds: int = 3
    on_cap: str = "train"
    overlong_penalty: bool = False
    overlong_cache: int = 32
    overlong_mask: bool = False
    overlong_episodes: str = "train"
    length_reward_coef: float = 0.0
    micro_batch_size: int = 32
    share_prompts: bool = True
    updates_per_batch: int = 1
    kind_stats: bool = False

    def __post_init__(self) -> None:
        self._apply_preset()
        if self.advantage not in ESTIMATORS:
            raise UnknownNameError("algorithm.advantage", self.advantage, ESTIMATORS)
        if self.loss not in LOSSES:
            raise UnknownNameError("algorithm.loss", self.loss, LOSSES)
        if self.tis not in TIS_MODES:
            raise UnknownNameError("algorithm.tis", self.tis, TIS_MODES)
        _check(self.clip_c > 1, f"algorithm.clip_c must be > 1, got {self.clip_c}.")
        _check(self.apo_beta > 0, f"algorithm.apo_beta must be > 0, got {self.apo_beta}.")
        _check(self.apo_value_beta >= 0, "algorithm.apo_value_beta must be >= 0.")
        _check(self.apo_value_samples >= 1, "algorithm.apo_value_samples must be >= 1.")
        _check(self.tis_cap >= 1, f"algorithm.tis_cap must be >= 1, got {self.tis_cap}.")
        _check(
            len(self.tis_band) == 2 and 0 <= self.tis_band[0] <= 1 <= self.tis_band[1],
            f"algorithm.tis_band must be [low <= 1, high >= 1], got {self.tis_band}.",
        )
        if self.overlong_episodes not in OVERLONG_EPISODES:
            raise UnknownNameError(
                "algorithm.overlong_episodes", self.overlong_episodes, OVERLONG_EPISODES
            )
        if self.on_cap not in ("train", "skip", "error"):
            raise UnknownNameError("algorithm.on_cap", self.on_cap, ("train", "skip", "error"))
        _check(0 <= self.eps_low < 1, f"algorithm.eps_low must be in [0, 1), got {self.eps_low}.")
        _check(self.eps_high >= 0, f"algorithm.eps_high must be >= 0, got {self.eps_high}.")
        _check(self.kl_coef >= 0, f"algorithm.kl_coef must be >= 0, got {self.kl_coef}.")
        _check(self.max_generation_rounds >= 1, "algorithm.max_generation_rounds must be >= 1.")
        _check(self.overlong_cache >= 1, "algorithm.overlong_cache must be >= 1.")
        _check(self.length_reward_coef >= 0, "algorithm.length_reward_coef must be >= 0.")
        _check(self.micro_batch_size >= 1, "algorithm.micro_batch_size must be >= 1.")
        _check(self.updates_per_batch >= 1, "algorithm.updates_per_batch must be >= 1.")
        _check(0 < self.gamma <= 1, f"algorithm.gamma must be in (0, 1], got {self.gamma}.")
        for name in ("lam_policy", "lam_critic"):
            value = getattr(self, name)
            _check(0 <= value <= 1, f"algorithm.{name} must be in [0, 1], got {value}.")
        _check(self.lam_alpha is None or self.lam_alpha > 0, "algorithm.lam_alpha must be > 0.")
        _check(self.nll_coef >= 0, "algorithm.nll_coef must be >= 0.")

    @property
    def uses_critic(self) -> bool:
        """Whether the advantages come from a critic (the ``critic`` section is used)."""
        return ESTIMATORS[self.advantage].needs_critic

    def _apply_preset(self) -> None:
        """Set the fields ``name``'s preset governs that were left at their defaults."""
        if self.name is None:
            return
        if self.name not in PRESETS:
            raise UnknownNameError("algorithm.name", self.name, PRESETS)
        defaults = AlgorithmConfig.__dataclass_fields__
        for key, value in PRESETS[self.name].items():
            current, default = getattr(self, key), defaults[key].default
            if current == default:
                setattr(self, key, value)
            elif current != value and key in PRESET_DEFINES:
                raise ConfigError(
                    f"algorithm.name={self.name} sets algorithm.{key}={value!r}, but the config "
                    f"sets {current!r}: drop one of them (or leave algorithm.name unset)."
                )


#: ``algorithm.overlong_episodes``: episodes cut off before their answer are trained
#: like any other, or masked (SUPO)
OVERLONG_EPISODES = ("train", "mask")

#: the fields that make a preset the algorithm it is (a config may not set them to
#: something else); the rest of a preset's fields are tunable defaults
PRESET_DEFINES = frozenset({"loss", "advantage"})

#: what each ``algorithm.name`` sets (fields left at their defaults only)
PRESETS: dict[str, dict[str, object]] = {
    "dapo": {"loss": "dapo", "advantage": "grpo"},
    # GRPO as DeepSeekMath published it (arXiv 2402.03300, eq. 3): a symmetric clip,
    # each sequence's token mean averaged over the sequences, the k3 KL to the reference
    # with beta 0.04; none of DAPO's additions (dynamic sampling, overlong shaping)
    "grpo": {
        "loss": "grpo",
        "advantage": "grpo",
        "eps_low": 0.2,
        "eps_high": 0.2,
        "kl_coef": 0.04,
        "dynamic_sampling": False,
        "overlong_penalty": False,
        "overlong_mask": False,
    },
    "ppo": {"loss": "ppo", "advantage": "gae", "lam_policy": 0.95, "lam_critic": 0.95},
    "vapo": {
        "loss": "dapo",
        "advantage": "gae",
        "lam_critic": 1.0,
        "lam_alpha": 0.05,
        "nll_coef": 0.1,
    },
    # T-PPO (arXiv 2506.15050): PPO with clip-higher over truncated rollouts
    # (rollout.truncate_window); the critic learns Monte-Carlo returns (lam_critic 1)
    "tppo": {
        "loss": "dapo",
        "advantage": "gae",
        "lam_policy": 0.95,
        "lam_critic": 1.0,
        "dynamic_sampling": False,
    },
}
