"""``agentgym/BalancedMath-v0``: the environment class (see its docstring)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from agentgym import (
    ActResult,
    ConfigError,
    ConversationEnv,
    InfraError,
    MemoryConfig,
    Message,
    Task,
    TokenCounter,
    UnknownNameError,
)
from agentgym.envs.math.extract import extract_answer, remove_boxes
from agentgym.envs.math.generator import (
    ANSWER_FORMATS,
    KINDS,
    LEVELS,
    Problem,
    format_answer,
    generate,
    parse_task_id,
)
from agentgym.envs.math.grading import DEFAULT_HEDGING, DEFAULT_TIMEOUT_S, HEDGING_MODES, grade
from agentgym.envs.math.pool import warm_up
from agentgym.envs.math.rewards import RewardConfig
from agentgym.envs.math.sources import MathItem, load_hard, load_problems

__all__ = ["CONTINUE_MESSAGE", "DEFAULT_TEMPLATES", "BalancedMathEnv"]

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

#: The env's reply (memory mode) to a turn that gives no final answer yet.
CONTINUE_MESSAGE = "Continue. When you reach the final answer, state it in the required format."

MATH_SUMMARY_PROMPT = (
    "{reason} Summarise your work on the problem so far: the approach, the intermediate results "
    "you trust, and what remains to do. Only the problem and this summary will be shown to "
    "you in the new context. Reply with the summary only."
)

#: Act turns allowed in memory mode when ``max_turns`` is not given.
MEMORY_MAX_TURNS = 32


@dataclass(frozen=True)
class _Current:
    task_id: str
    problem: str
    answer: str
    generated: Problem | None = None
    item: MathItem | None = None


class BalancedMathEnv(ConversationEnv):
    """Maths problems rewarded for a correct answer reached with few reasoning tokens.

    **Description.** One problem per episode: from a procedural generator (arithmetic,
    fractions, percentages, linear and quadratic equations, systems, simplification,
    word problems; three levels; deterministic by seed), from the bundled set of harder
    problems, or from a JSONL/Parquet file. "Balanced reasoning": the reward asks for the
    right answer with as few tokens as needed, so a policy learns to stop padding its
    reasoning, not to stop reasoning. Answers are checked by
    :func:`agentgym.envs.math.grade` (math-verify and sympy, extended, with a hard time
    bound).

    **Action.** The assistant's reply (``str``). It should end with the final answer in
    the configured format: ``\\boxed{...}`` (``answer_format="boxed"``, default) or a
    last line ``Answer: ...`` (``"answer_line"``, DAPO's format). Any text is accepted;
    a reply without an answer scores as incorrect.

    **Observation.** The message list of the current conversation: an optional system
    message, then the user message made from ``prompt_template`` and the problem. In
    memory mode later observations add the env's "continue" messages, and new
    conversations start from the problem and the memory summary.

    **Rewards.** ``0`` on every step but the last. The terminal reward is
    ``correctness + penalty``: correctness is ``correct_reward``/``incorrect_reward``
    (1/0, or DAPO's +1/-1 with ``reward_scheme="signed"``); the penalty is the selected
    token cost (``none``; ``linear``: ``-linear_lambda * n / linear_budget``; ``target``:
    ``-target_alpha * |n - target_tokens|``; ``overlong``: DAPO's soft overlong
    punishment with L_max = ``max_response_tokens`` and L_cache = ``overlong_cache``),
    where ``n`` counts every token the policy generated in the episode with
    ``count_tokens``. Linear and target costs charge only correct answers by default,
    overlong charges all (``token_cost_on`` overrides). See
    :mod:`agentgym.envs.math.rewards`.

    A reply the grader cannot judge because the grading machinery failed (a worker
    crashed, or the machine was too busy to check it in time) is not the agent's fault:
    ``step`` raises :class:`agentgym.InfraError` (``reason`` ``"grader_timeout"`` or
    ``"grader_crashed"``) instead of returning a reward, and the rollout records the
    episode as failed. An answer too costly to check (a power tower) is wrong.

    ``info["reward_breakdown"]`` at the terminal step: ``correct``, ``extracted``,
    ``gold``, ``format_ok``, ``answer_format``, ``found_format``, ``grade_reason``,
    ``grade_method``, ``response_tokens``, ``correctness_reward``, ``token_cost``,
    ``token_cost_applied``, ``token_penalty``, ``penalty_linear``, ``penalty_target``,
    ``penalty_overlong``, ``reward`` (and the base class's ``end_reason``, ``turns``,
    ``conversations``, ``policy_tokens``). Grading time is not in ``info`` (it is not
    deterministic): it is the episode metric ``grading_time_s``
    (:attr:`episode_metrics`, copied into ``Episode.metrics`` by the rollout).

    **Episode end.** Single turn (default): the first reply ends the episode
    (terminated). With ``memory`` on (multi-conversation reasoning under a small context
    budget): a reply that states a final answer ends the episode; otherwise the env
    answers ``"Continue..."``, and when the context fills up the base class asks for a
    summary and starts a new conversation from the problem and that summary. Truncated
    after ``max_turns`` act turns (default 32 in memory mode), ``max_total_tokens``
    policy tokens or ``memory.max_conversations`` conversations; a truncated episode is
    scored on its last reply.

    **Arguments.**

    * ``source``: ``"generator"`` (default), ``"hard"`` (the bundled set), or the path
      of a ``.jsonl``/``.parquet`` file.
    * ``kinds``, ``levels``: generator kinds (default all) and levels (default 1-3); a
      list or a comma-separated string.
    * ``problem_field``, ``answer_field``, ``solution_field``: column names of a data
      file (defaults cover the common public math RL sets).
    * ``answer_format``: ``"boxed"`` or ``"answer_line"``. ``strict_format``: an answer
      stated in another format is wrong (default False: graded anyway, ``format_ok``
      says which).
    * ``system_prompt`` (default none), ``prompt_template`` (must contain ``{problem}``;
      default depends on ``answer_format``).
    * ``reward_scheme``, ``correct_reward``, ``incorrect_reward``, ``token_cost``,
      ``token_cost_on``, ``max_response_tokens`` (1024), ``linear_lambda`` (0.1),
      ``linear_budget``, ``target_tokens``, ``target_alpha`` (0.001), ``overlong_cache``
      (``max_response_tokens // 4``): see Rewards.
    * ``grading_timeout_s``: bound on the grading of one reply (1.5 s).
    * ``hedging``: ``"last"`` (default; the last final answer counts, candidates
      offered as alternatives in it are wrong) or ``"reject"`` (every final answer the
      reply states must be right); see :func:`agentgym.envs.math.grade`.
    * ``memory``, ``count_tokens``, ``max_turns``, ``max_total_tokens``,
      ``render_mode``: as in :class:`~agentgym.env.ConversationEnv`. ``count_tokens``
      defaults to :func:`agentgym.tokens.approx_tokens` (UTF-8 bytes / 4, rounded up);
      pass the trainer's tokenizer count for exact token costs.

    ``reset(options={"task_id": ...})`` replays a task: ``gen/<kind>/<level>/<seed>``
    for the generator, ``<name>/<row>`` or ``hard/<id>`` for data; ``{"index": i}``
    picks row ``i`` of a data source.

    **Version history.** v0: first version; grading later learned self-correction,
    multi-box answers, hedging strictness (``hedging``) and equivalence by evaluation,
    and raises ``InfraError`` on grader failures (issues 17 and 19).
    """

    memory_defaults: ClassVar[dict[str, Any]] = {"summary_prompt": MATH_SUMMARY_PROMPT}

    def __init__(
        self,
        *,
        source: str = "generator",
        kinds: Sequence[str] | str | None = None,
        levels: Sequence[int] | int | str | None = None,
        problem_field: str | None = None,
        answer_field: str | None = None,
        solution_field: str | None = None,
        answer_format: str = "boxed",
        strict_format: bool = False,
        system_prompt: str | None = None,
        prompt_template: str | None = None,
        reward_scheme: str = "binary",
        correct_reward: float | None = None,
        incorrect_reward: float | None = None,
        token_cost: str = "none",
        token_cost_on: str | None = None,
        max_response_tokens: int = 1024,
        linear_lambda: float = 0.1,
        linear_budget: int | None = None,
        target_tokens: int | None = None,
        target_alpha: float = 0.001,
        overlong_cache: int | None = None,
        grading_timeout_s: float = DEFAULT_TIMEOUT_S,
        hedging: str = DEFAULT_HEDGING,
        memory: MemoryConfig | dict | bool | None = None,
        count_tokens: TokenCounter | None = None,
        max_turns: int | None = None,
        max_total_tokens: int | None = None,
        render_mode: str | None = None,
    ) -> None:
        mem = MemoryConfig.coerce(memory, **self.memory_defaults)
        if mem.enabled and max_turns is None:
            max_turns = MEMORY_MAX_TURNS
        super().__init__(
            memory=mem,
            count_tokens=count_tokens,
            max_turns=max_turns,
            max_total_tokens=max_total_tokens,
            render_mode=render_mode,
        )
        if answer_format not in ANSWER_FORMATS:
            raise UnknownNameError("answer_format", str(answer_format), ANSWER_FORMATS)
        self.answer_format = answer_format
        self.strict_format = bool(strict_format)
        self.system_prompt = _optional_str("system_prompt", system_prompt)
        template = _optional_str("prompt_template", prompt_template)
        if template is not None and "{problem}" not in template:
            raise ConfigError(
                "prompt_template must contain the placeholder {problem} (where the problem "
                f"text goes); got {template!r}."
            )
        self.prompt_template = template or DEFAULT_TEMPLATES[answer_format]
        if not isinstance(grading_timeout_s, int | float) or grading_timeout_s <= 0:
            raise ConfigError(f"grading_timeout_s must be > 0 seconds, got {grading_timeout_s!r}.")
        self.grading_timeout_s = float(grading_timeout_s)
        if hedging not in HEDGING_MODES:
            raise UnknownNameError("hedging", str(hedging), HEDGING_MODES)
        self.hedging = hedging
        self.rewards = RewardConfig(
            reward_scheme=reward_scheme,
            correct_reward=correct_reward,
            incorrect_reward=incorrect_reward,
            token_cost=token_cost,
            token_cost_on=token_cost_on,
            max_response_tokens=_as_int("max_response_tokens", max_response_tokens),
            linear_lambda=float(linear_lambda),
            linear_budget=None
            if linear_budget is None
            else _as_int("linear_budget", linear_budget),
            target_tokens=None
            if target_tokens is None
            else _as_int("target_tokens", target_tokens),
            target_alpha=float(target_alpha),
            overlong_cache=None
            if overlong_cache is None
            else _as_int("overlong_cache", overlong_cache),
        )
        if not isinstance(source, str) or not source:
            raise ConfigError(
                "source must be 'generator', 'hard' or the path of a .jsonl/.parquet file; "
                f"got {source!r}."
            )
        self.source = source
        self.kinds: tuple[str, ...] = ()
        self.levels: tuple[int, ...] = ()
        self.items: tuple[MathItem, ...] = ()
        if source == "generator":
            self.kinds = _parse_kinds(kinds)
            self.levels = _parse_levels(levels)
        else:
            if kinds is not None or levels is not None:
                raise ConfigError(
                    f"kinds and levels select generator problems; they do not apply to "
                    f"source={source!r}. Remove them or use source='generator'."
                )
            if source == "hard":
                self.items = load_hard()
            else:
                self.items = load_problems(
                    source,
                    problem_field=problem_field,
                    answer_field=answer_field,
                    solution_field=solution_field,
                )
            self._by_id = {it.task_id: i for i, it in enumerate(self.items)}
        self._current: _Current | None = None
        self._last_reply = ""

    # ------------------------------------------------------------------ hooks
    def _begin(self, seed: int | None, options: dict[str, Any] | None) -> Task:
        options = dict(options or {})
        unknown = set(options) - {"task_id", "index"}
        if unknown:
            raise UnknownNameError("reset option", sorted(unknown)[0], ("task_id", "index"))
        warm_up(block=False)  # start grading workers while the policy thinks
        self._current = self._pick(options)
        self._last_reply = ""
        prompt = self.prompt_template.replace("{problem}", self._current.problem)
        return Task(task_id=self._current.task_id, prompt=prompt, system=self.system_prompt)

    def _pick(self, options: dict[str, Any]) -> _Current:
        if self.source == "generator":
            if "index" in options:
                raise ConfigError("reset option 'index' applies to data sources; use task_id.")
            if "task_id" in options:
                kind, level, seed = parse_task_id(str(options["task_id"]))
            else:
                kind = self.kinds[int(self.np_random.integers(len(self.kinds)))]
                level = self.levels[int(self.np_random.integers(len(self.levels)))]
                seed = int(self.np_random.integers(0, 2**31 - 1))
            p = generate(seed, level, kind, answer_format=self.answer_format)
            return _Current(p.task_id, p.problem, p.answer, generated=p)
        if "task_id" in options:
            tid = str(options["task_id"])
            if tid not in self._by_id:
                raise UnknownNameError("task id", tid, list(self._by_id)[:50])
            index = self._by_id[tid]
        elif "index" in options:
            index = options["index"]
            if (
                isinstance(index, bool)
                or not isinstance(index, int)
                or not 0 <= index < len(self.items)
            ):
                raise ConfigError(
                    f"reset option index must be an int in 0..{len(self.items) - 1}, got {index!r}."
                )
        else:
            index = int(self.np_random.integers(len(self.items)))
        item = self.items[index]
        return _Current(item.task_id, item.problem, item.answer, item=item)

    def _act(self, action: str) -> ActResult:
        self._last_reply = action
        if not self.memory.enabled:
            return ActResult(done=True)
        found = extract_answer(action)
        if found.answer is not None or found.reason == "empty_answer":
            return ActResult(done=True)
        return ActResult(feedback=CONTINUE_MESSAGE)

    def _score(self, end_reason: str) -> tuple[float, dict[str, Any]]:
        cur = self.current
        result = grade(
            self._last_reply, cur.answer, timeout_s=self.grading_timeout_s, hedging=self.hedging
        )
        self.episode_metrics["grading_time_s"] = result.elapsed_s
        if result.infra_failure:
            what = (
                "a grading worker crashed or could not be started"
                if result.reason == "grader_crashed"
                else "the grader got too little CPU to finish in time (the machine is "
                "overloaded; fewer env threads or more cores help)"
            )
            raise InfraError(
                f"BalancedMath could not grade the reply to task {cur.task_id}: {what}. "
                "This is not the agent's fault: the episode cannot be scored.",
                reason=result.reason,
            )
        format_ok = self.answer_format in result.formats
        correct = result.correct and (format_ok or not self.strict_format)
        reason = result.reason
        if result.correct and not correct:
            reason = "wrong_format"
        tokens = self._policy_tokens
        reward, terms = self.rewards.score(correct, tokens)
        breakdown = {
            "reward": reward,
            "correct": correct,
            "extracted": result.extracted,
            "gold": cur.answer,
            "format_ok": format_ok,
            "answer_format": self.answer_format,
            "found_format": result.format,
            "grade_reason": reason,
            "grade_method": result.method,
            "response_tokens": tokens,
            **terms,
        }
        return reward, breakdown

    # ------------------------------------------------------------------ helpers
    @property
    def current(self) -> _Current:
        """The current problem (task id, statement, gold answer)."""
        if self._current is None:
            from agentgym import EnvStateError

            raise EnvStateError("No problem yet: call reset() first.")
        return self._current

    @property
    def gold_answer(self) -> str:
        return self.current.answer

    def worked_solution(self, style: str = "concise") -> str:
        """A worked solution of the current problem ending in the configured answer format.

        Args:
            style: ``"verbose"`` or ``"concise"``. Generator problems have both; data
                problems use the source's solution column (boxes unwrapped) for both, or
                just the final-answer statement when there is none.
        """
        if style not in ("verbose", "concise"):
            raise UnknownNameError("solution style", str(style), ("verbose", "concise"))
        cur = self.current
        if cur.generated is not None:
            return cur.generated.solution(style, self.answer_format)
        final = format_answer(cur.answer, self.answer_format)
        body = remove_boxes(cur.item.solution).strip() if cur.item and cur.item.solution else ""
        return f"{body}\n{final}" if body else final

    def oracle_action(self, observation: list[Message]) -> str:
        """The concise worked solution (a summary of it on a summary turn)."""
        if self.next_turn_kind == "summary":
            return "Plan: " + self.worked_solution("concise").splitlines()[0]
        return self.worked_solution("concise")


# ---------------------------------------------------------------------- argument parsing
def _optional_str(name: str, value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value or None
    raise ConfigError(f"{name} must be a string or None, got {type(value).__name__}.")


def _as_int(name: str, value: Any) -> int:
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be an integer, got {value!r}.")
    return value


def _split(value: Any) -> list[Any]:
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    if isinstance(value, int) and not isinstance(value, bool):
        return [value]
    if isinstance(value, list | tuple):
        return list(value)
    raise ConfigError(f"Expected a list or a comma-separated string, got {value!r}.")


def _parse_kinds(kinds: Any) -> tuple[str, ...]:
    if kinds is None:
        return KINDS
    out = []
    for k in _split(kinds):
        if k not in KINDS:
            raise UnknownNameError("problem kind", str(k), KINDS)
        out.append(k)
    if not out:
        raise ConfigError(f"kinds must name at least one of {', '.join(KINDS)}.")
    return tuple(dict.fromkeys(out))


def _parse_levels(levels: Any) -> tuple[int, ...]:
    if levels is None:
        return LEVELS
    out = []
    for v in _split(levels):
        try:
            level = int(v)
        except (TypeError, ValueError):
            level = -1
        if isinstance(v, bool) or level not in LEVELS:
            raise ConfigError(f"levels must be among {LEVELS}, got {v!r}.")
        out.append(level)
    if not out:
        raise ConfigError(f"levels must name at least one of {LEVELS}.")
    return tuple(dict.fromkeys(out))
