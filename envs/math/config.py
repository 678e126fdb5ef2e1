"""BalancedMath's settings: :class:`BalancedMathConfig` and the groups it is made of.

``gym.make("agentgym/BalancedMath-v0", **kwargs)`` takes every setting as a flat keyword
(``levels=1``, ``token_cost="linear"``, ...), as configs' ``envs:`` sections and
``--env-arg`` write them. :meth:`BalancedMathConfig.with_settings` maps each flat name to
its group (:data:`SETTING_GROUPS`); code can also build the typed object and pass it as
``config=``::

    config = BalancedMathConfig(
        problems=MathProblems(kinds=("linear",), levels=(1,)),
        rewards=RewardConfig(token_cost="linear", linear_lambda=0.5),
    )
    env = gym.make("agentgym/BalancedMath-v0", config=config, count_tokens=counter)

Every group is frozen and checks itself in ``__post_init__``: a bad value fails when the
config is built (at ``make`` time), with a message that says what to pass.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentgym import ConfigError, MemoryConfig, UnknownNameError, config_check
from agentgym.envs.math.generator import ANSWER_FORMATS, KINDS, LEVELS
from agentgym.envs.math.grading import DEFAULT_HEDGING, DEFAULT_TIMEOUT_S, HEDGING_MODES
from agentgym.envs.math.rewards import RewardConfig

__all__ = [
    "DEFAULT_TEMPLATES",
    "MATH_SUMMARY_PROMPT",
    "MEMORY_MAX_TURNS",
    "SETTING_GROUPS",
    "SETTING_NAMES",
    "BalancedMathConfig",
    "MathAnswers",
    "MathLimits",
    "MathProblems",
]

DEFAULT_TEMPLATES = {
    "boxed": (
        "{problem}\n\nThink as much as the problem needs and no more. "
        "Put your final answer in \\boxed{}."
    ),
    "answer_line": (
        "Solve the problem below. Think as much as it needs and no more. The last line of "
        'your reply must be "Answer: " followed by your final answer.\n\n{problem}'
    ),
}

#: The summary instruction of BalancedMath's memory turns (``{reason}``: why the context ends).
MATH_SUMMARY_PROMPT = (
    "{reason} Summarise your work on the problem so far: the approach, the intermediate results "
    "you trust, and what remains to do. Only the problem and this summary will be shown to "
    "you in the new context. Reply with the summary only."
)

#: Act turns allowed in memory mode when ``max_turns`` is not given.
MEMORY_MAX_TURNS = 32


@dataclass(frozen=True)
class MathProblems:
    """Where the problems come from and which ones are drawn.

    Attributes:
        source: ``"generator"``, ``"hard"`` (the bundled set) or the path of a
            ``.jsonl``/``.parquet`` file (the file is read when the env is made).
        kinds: generator kinds (a sequence or a comma-separated string; ``None``: all
            of :data:`~agentgym.envs.math.generator.KINDS`). Stored as a tuple.
        levels: generator levels (a sequence, an int or a comma-separated string;
            ``None``: 1-3). Stored as a tuple of ints.
        problem_field / answer_field / solution_field: column names of a data file
            (``None``: the defaults of :mod:`~agentgym.envs.math.sources`).
    """

    source: str = "generator"
    kinds: Sequence[str] | str | None = None
    levels: Sequence[int] | int | str | None = None
    problem_field: str | None = None
    answer_field: str | None = None
    solution_field: str | None = None

    def __post_init__(self) -> None:
        config_check(
            isinstance(self.source, str) and bool(self.source),
            "source must be 'generator', 'hard' or the path of a .jsonl/.parquet file; "
            f"got {self.source!r}.",
        )
        if self.source != "generator":
            config_check(
                self.kinds is None and self.levels is None,
                f"kinds and levels select generator problems; they do not apply to "
                f"source={self.source!r}. Remove them or use source='generator'.",
            )
            return
        if self.kinds is not None:
            object.__setattr__(self, "kinds", _parse_kinds(self.kinds))
        if self.levels is not None:
            object.__setattr__(self, "levels", _parse_levels(self.levels))

    @property
    def kind_choices(self) -> tuple[str, ...]:
        """The generator kinds an episode draws from (every kind when none were given)."""
        return self.kinds or KINDS

    @property
    def level_choices(self) -> tuple[int, ...]:
        """The generator levels an episode draws from (1-3 when none were given)."""
        return self.levels or LEVELS


@dataclass(frozen=True)
class MathAnswers:
    """How the problem is asked and how the reply's answer is judged.

    Attributes:
        answer_format: ``"boxed"`` or ``"answer_line"`` (DAPO's ``Answer: ...`` line).
        strict_format: an answer stated in the other format is wrong (``False``: graded
            anyway; ``format_ok`` in the breakdown says which).
        system_prompt: an optional system message (``""`` counts as none).
        prompt_template: the user message, with ``{problem}`` where the problem goes
            (``None``: :data:`DEFAULT_TEMPLATES` of ``answer_format``).
        hedging: ``"last"`` or ``"reject"``; see :func:`agentgym.envs.math.grade`.
        grading_timeout_s: bound on the grading of one reply, in seconds.
    """

    answer_format: str = "boxed"
    strict_format: bool = False
    system_prompt: str | None = None
    prompt_template: str | None = None
    hedging: str = DEFAULT_HEDGING
    grading_timeout_s: float = DEFAULT_TIMEOUT_S

    def __post_init__(self) -> None:
        if self.answer_format not in ANSWER_FORMATS:
            raise UnknownNameError("answer_format", str(self.answer_format), ANSWER_FORMATS)
        object.__setattr__(self, "strict_format", bool(self.strict_format))
        object.__setattr__(
            self, "system_prompt", _optional_str("system_prompt", self.system_prompt)
        )
        template = _optional_str("prompt_template", self.prompt_template)
        config_check(
            template is None or "{problem}" in template,
            "prompt_template must contain the placeholder {problem} (where the problem "
            f"text goes); got {template!r}.",
        )
        object.__setattr__(self, "prompt_template", template)
        timeout = self.grading_timeout_s
        config_check(
            isinstance(timeout, int | float) and timeout > 0,
            f"grading_timeout_s must be > 0 seconds, got {timeout!r}.",
        )
        object.__setattr__(self, "grading_timeout_s", float(timeout))
        if self.hedging not in HEDGING_MODES:
            raise UnknownNameError("hedging", str(self.hedging), HEDGING_MODES)

    @property
    def template(self) -> str:
        """The prompt template in use: ``prompt_template`` or the format's default."""
        return self.prompt_template or DEFAULT_TEMPLATES[self.answer_format]


@dataclass(frozen=True)
class MathLimits:
    """How long an episode may run, and its memory-summary turns.

    Attributes:
        memory: a :class:`~agentgym.MemoryConfig`, a dict of its fields (which switches
            memory on), a bool or ``None`` (off). Stored as a ``MemoryConfig`` whose
            summary prompt defaults to :data:`MATH_SUMMARY_PROMPT`.
        max_turns: act turns before the episode is truncated (``None``: no limit in
            single-turn mode, :data:`MEMORY_MAX_TURNS` in memory mode).
        max_total_tokens: policy tokens before the episode is truncated (``None``: no
            limit).
    """

    memory: MemoryConfig | dict | bool | None = None
    max_turns: int | None = None
    max_total_tokens: int | None = None

    def __post_init__(self) -> None:
        memory = MemoryConfig.coerce(self.memory, summary_prompt=MATH_SUMMARY_PROMPT)
        object.__setattr__(self, "memory", memory)
        for name in ("max_turns", "max_total_tokens"):
            value = getattr(self, name)
            config_check(
                value is None or (isinstance(value, int | float) and value >= 1),
                f"{name} must be >= 1 or None, got {value!r}.",
            )

    @property
    def turn_limit(self) -> int | None:
        """``max_turns``, or :data:`MEMORY_MAX_TURNS` in memory mode when it is not given."""
        if self.max_turns is None and self.memory.enabled:
            return MEMORY_MAX_TURNS
        return self.max_turns


#: The groups of :class:`BalancedMathConfig`: field name -> settings class.
SETTING_GROUPS: dict[str, type] = {
    "problems": MathProblems,
    "answers": MathAnswers,
    "rewards": RewardConfig,
    "limits": MathLimits,
}

#: Each flat keyword ``make`` takes -> the group that holds it.
SETTING_NAMES: dict[str, str] = {
    f.name: group for group, cls in SETTING_GROUPS.items() for f in dataclasses.fields(cls)
}


@dataclass(frozen=True)
class BalancedMathConfig:
    """Every setting of ``agentgym/BalancedMath-v0``, in four groups.

    Attributes:
        problems: the problem source, generator kinds and levels, data-file columns.
        answers: answer format, prompt text and grading (hedging, time bound).
        rewards: the correctness reward and the token cost
            (:class:`~agentgym.envs.math.rewards.RewardConfig`).
        limits: memory-summary turns and the episode's turn and token limits.

    The token counter (``count_tokens``) and ``render_mode`` are not settings: they are
    passed to the env beside the config.
    """

    problems: MathProblems = field(default_factory=MathProblems)
    answers: MathAnswers = field(default_factory=MathAnswers)
    rewards: RewardConfig = field(default_factory=RewardConfig)
    limits: MathLimits = field(default_factory=MathLimits)

    def __post_init__(self) -> None:
        for group, cls in SETTING_GROUPS.items():
            value = getattr(self, group)
            config_check(
                isinstance(value, cls),
                f"BalancedMathConfig.{group} must be a {cls.__name__}, got "
                f"{type(value).__name__}; or pass the settings as keywords "
                "(BalancedMathConfig.from_settings(levels=1, token_cost='linear')).",
            )

    @classmethod
    def from_settings(cls, **settings: Any) -> BalancedMathConfig:
        """The default config with the given flat settings (``make``'s keywords)."""
        return cls().with_settings(**settings)

    def with_settings(self, **settings: Any) -> BalancedMathConfig:
        """A copy with the given flat settings replaced, each in its group.

        Args:
            **settings: any names of :data:`SETTING_NAMES` (``levels=1``,
                ``token_cost="linear"``, ...), with the values ``make`` accepts.

        Raises:
            UnknownNameError: a name that is no setting (with the closest ones).
            ConfigError: a value a group rejects.
        """
        unknown = sorted(set(settings) - set(SETTING_NAMES))
        if unknown:
            raise UnknownNameError(
                "BalancedMath setting",
                unknown[0],
                SETTING_NAMES,
                hint="See `agentgym info agentgym/BalancedMath-v0` for what each setting does.",
            )
        changes: dict[str, Any] = {}
        for group in SETTING_GROUPS:
            given = {k: v for k, v in settings.items() if SETTING_NAMES[k] == group}
            if group == "rewards":
                given = {k: _REWARD_COERCIONS.get(k, _same)(k, v) for k, v in given.items()}
            if given:
                changes[group] = dataclasses.replace(getattr(self, group), **given)
        return dataclasses.replace(self, **changes)

    def settings(self) -> dict[str, Any]:
        """Every setting as a flat ``{name: value}`` mapping (what ``make`` would take)."""
        return {name: getattr(getattr(self, group), name) for name, group in SETTING_NAMES.items()}


# ---------------------------------------------------------------------- value parsing
def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _same(name: str, value: Any) -> Any:
    return value


def _as_int(name: str, value: Any) -> Any:
    """An int from an int or a string of digits (``--env-arg`` values); None passes."""
    if value is None:
        return None
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)
    config_check(_is_int(value), f"{name} must be an integer, got {value!r}.")
    return value


def _as_float(name: str, value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a number, got {value!r}.") from None


#: flat reward settings that ``make`` converts before :class:`RewardConfig` checks them
_REWARD_COERCIONS = {
    "max_response_tokens": _as_int,
    "linear_budget": _as_int,
    "target_tokens": _as_int,
    "overlong_cache": _as_int,
    "linear_lambda": _as_float,
    "target_alpha": _as_float,
}


def _optional_str(name: str, value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value or None
    raise ConfigError(f"{name} must be a string or None, got {type(value).__name__}.")


def _split(value: Any) -> list[Any]:
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    if _is_int(value):
        return [value]
    if isinstance(value, list | tuple):
        return list(value)
    raise ConfigError(f"Expected a list or a comma-separated string, got {value!r}.")


def _parse_kinds(kinds: Any) -> tuple[str, ...]:
    out = []
    for k in _split(kinds):
        if k not in KINDS:
            raise UnknownNameError("problem kind", str(k), KINDS)
        out.append(k)
    config_check(bool(out), f"kinds must name at least one of {', '.join(KINDS)}.")
    return tuple(dict.fromkeys(out))


def _parse_levels(levels: Any) -> tuple[int, ...]:
    out = []
    for v in _split(levels):
        try:
            level = int(v)
        except (TypeError, ValueError):
            level = -1
        if isinstance(v, bool) or level not in LEVELS:
            raise ConfigError(f"levels must be among {LEVELS}, got {v!r}.")
        out.append(level)
    config_check(bool(out), f"levels must name at least one of {LEVELS}.")
    return tuple(dict.fromkeys(out))
