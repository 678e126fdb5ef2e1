"""``agentgym/BalancedMath-v0``: the environment class (see its docstring)."""

from __future__ import annotations

import inspect
from dataclasses import MISSING, dataclass, fields
from typing import Any, ClassVar

from agentgym import (
    ActResult,
    ConfigError,
    ConversationEnv,
    InfraError,
    Message,
    Task,
    TokenCounter,
    UnknownNameError,
)
from agentgym.envs.math.config import (
    DEFAULT_TEMPLATES,
    MATH_SUMMARY_PROMPT,
    MEMORY_MAX_TURNS,
    SETTING_GROUPS,
    SETTING_NAMES,
    BalancedMathConfig,
    MathProblems,
)
from agentgym.envs.math.extract import extract_answer, remove_boxes
from agentgym.envs.math.generator import Problem, format_answer, generate, parse_task_id
from agentgym.envs.math.grading import grade
from agentgym.envs.math.pool import warm_up
from agentgym.envs.math.sources import MathItem, load_hard, load_problems

__all__ = [
    "CONTINUE_MESSAGE",
    "DEFAULT_TEMPLATES",
    "ENV_ID",
    "MATH_SUMMARY_PROMPT",
    "MEMORY_MAX_TURNS",
    "BalancedMathEnv",
]

ENV_ID = "agentgym/BalancedMath-v0"

#: The env's reply (memory mode) to a turn that gives no final answer yet.
CONTINUE_MESSAGE = "Continue. When you reach the final answer, state it in the required format."

#: What the constructor takes besides the settings.
_OWN_ARGUMENTS = ("config", "count_tokens", "render_mode")


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

    **Arguments.** Every setting is a keyword of ``make`` (the names below) and a field
    of one group of the frozen :class:`~agentgym.envs.math.config.BalancedMathConfig`;
    ``config=`` takes a ready config, and keywords given with it replace its fields. An
    unknown keyword fails at ``make`` time with the closest names.

    * ``config``: a :class:`~agentgym.envs.math.config.BalancedMathConfig` (default:
      every setting at its default).
    * Problems (``config.problems``): ``source``: ``"generator"`` (default), ``"hard"``
      (the bundled set), or the path of a ``.jsonl``/``.parquet`` file. ``kinds``,
      ``levels``: generator kinds (default all) and levels (default 1-3); a list or a
      comma-separated string. ``problem_field``, ``answer_field``, ``solution_field``:
      column names of a data file (defaults cover the common public math RL sets).
    * Answers (``config.answers``): ``answer_format``: ``"boxed"`` or
      ``"answer_line"``. ``strict_format``: an answer stated in another format is wrong
      (default False: graded anyway, ``format_ok`` says which). ``system_prompt``
      (default none), ``prompt_template`` (must contain ``{problem}``; default depends
      on ``answer_format``). ``hedging``: ``"last"`` (default; the last final answer
      counts, candidates offered as alternatives in it are wrong) or ``"reject"``
      (every final answer the reply states must be right); see
      :func:`agentgym.envs.math.grade`. ``grading_timeout_s``: bound on the grading of
      one reply (1.5 s).
    * Rewards (``config.rewards``, a :class:`~agentgym.envs.math.rewards.RewardConfig`):
      ``reward_scheme``, ``correct_reward``, ``incorrect_reward``, ``token_cost``,
      ``token_cost_on``, ``max_response_tokens`` (1024), ``linear_lambda`` (0.1),
      ``linear_budget``, ``target_tokens``, ``target_alpha`` (0.001), ``overlong_cache``
      (``max_response_tokens // 4``): see Rewards.
    * Limits (``config.limits``): ``memory``, ``max_turns`` (default 32 in memory
      mode), ``max_total_tokens``: as in :class:`~agentgym.env.ConversationEnv`.
    * ``count_tokens``, ``render_mode`` (not settings: passed beside the config): as in
      :class:`~agentgym.env.ConversationEnv`. ``count_tokens`` defaults to
      :func:`agentgym.tokens.approx_tokens` (UTF-8 bytes / 4, rounded up); pass the
      trainer's tokenizer count for exact token costs.

    ``reset(options={"task_id": ...})`` replays a task: ``gen/<kind>/<level>/<seed>``
    for the generator, ``<name>/<row>`` or ``hard/<id>`` for data; ``{"index": i}``
    picks row ``i`` of a data source.

    **Version history.** v0: first version; grading later learned self-correction,
    multi-box answers, hedging strictness (``hedging``) and equivalence by evaluation,
    and raises ``InfraError`` on grader failures (issues 17 and 19); the settings
    became :class:`~agentgym.envs.math.config.BalancedMathConfig`, with the same
    keywords and behaviour (issue 29).
    """

    memory_defaults: ClassVar[dict[str, Any]] = {"summary_prompt": MATH_SUMMARY_PROMPT}

    def __init__(
        self,
        config: BalancedMathConfig | None = None,
        *,
        count_tokens: TokenCounter | None = None,
        render_mode: str | None = None,
        **settings: Any,
    ) -> None:
        """Make the env from ``config`` and/or keyword settings (see **Arguments**).

        Args:
            config: a ready :class:`BalancedMathConfig` (``None``: the defaults).
            count_tokens: the token counter (``None``: ``approx_tokens``).
            render_mode: Gymnasium's render mode (``"ansi"``, ``"human"`` or ``None``).
            **settings: flat settings (``levels=1``, ``token_cost="linear"``, ...); they
                replace the fields of ``config``.

        Raises:
            UnknownNameError: a keyword that is no argument (with the closest names).
            ConfigError: a bad value, or a data file that cannot be read.
        """
        config = _resolve_config(config, settings)
        self.config = config
        limits, answers = config.limits, config.answers
        super().__init__(
            memory=limits.memory,
            count_tokens=count_tokens,
            max_turns=limits.turn_limit,
            max_total_tokens=limits.max_total_tokens,
            render_mode=render_mode,
        )
        self.answer_format = answers.answer_format
        self.strict_format = answers.strict_format
        self.system_prompt = answers.system_prompt
        self.prompt_template = answers.template
        self.grading_timeout_s = answers.grading_timeout_s
        self.hedging = answers.hedging
        self.rewards = config.rewards
        self.source = config.problems.source
        self.kinds: tuple[str, ...] = ()
        self.levels: tuple[int, ...] = ()
        self.items: tuple[MathItem, ...] = ()
        if self.source == "generator":
            self.kinds = tuple(config.problems.kind_choices)
            self.levels = tuple(config.problems.level_choices)
        else:
            self.items = _load_items(config.problems)
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


# ---------------------------------------------------------------------- construction
def _resolve_config(config: Any, settings: dict[str, Any]) -> BalancedMathConfig:
    """The env's settings: ``config`` (or the defaults) with the keyword ``settings`` applied."""
    unknown = sorted(set(settings) - set(SETTING_NAMES))
    if unknown:
        raise UnknownNameError(
            f"argument for {ENV_ID}",
            unknown[0],
            [*SETTING_NAMES, *_OWN_ARGUMENTS],
            hint=f"See `agentgym info {ENV_ID}` for what each argument does.",
        )
    if config is None:
        config = BalancedMathConfig()
    elif not isinstance(config, BalancedMathConfig):
        raise ConfigError(
            "config must be an agentgym.envs.math.BalancedMathConfig or None, got "
            f"{type(config).__name__}; or pass the settings as keywords (levels=1, "
            "token_cost='linear', ...)."
        )
    return config.with_settings(**settings) if settings else config


def _load_items(problems: MathProblems) -> tuple[MathItem, ...]:
    """The problems of a data source: the bundled hard set or a user's file."""
    if problems.source == "hard":
        return load_hard()
    return load_problems(
        problems.source,
        problem_field=problems.problem_field,
        answer_field=problems.answer_field,
        solution_field=problems.solution_field,
    )


def _init_signature() -> inspect.Signature:
    """The constructor's signature with each setting as a keyword, so that ``help``,
    :func:`inspect.signature` and :func:`agentgym.registration.env_arguments` list what
    ``**settings`` accepts."""
    param = inspect.Parameter
    params = [
        param("self", param.POSITIONAL_OR_KEYWORD),
        param(
            "config",
            param.POSITIONAL_OR_KEYWORD,
            default=None,
            annotation="BalancedMathConfig | None",
        ),
        param("count_tokens", param.KEYWORD_ONLY, default=None, annotation="TokenCounter | None"),
        param("render_mode", param.KEYWORD_ONLY, default=None, annotation="str | None"),
    ]
    for cls in SETTING_GROUPS.values():
        for f in fields(cls):
            default = param.empty if f.default is MISSING else f.default
            params.append(param(f.name, param.KEYWORD_ONLY, default=default, annotation=f.type))
    return inspect.Signature(params, return_annotation="None")


BalancedMathEnv.__init__.__signature__ = _init_signature()  # type: ignore[attr-defined]
