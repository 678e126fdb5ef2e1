"""The generated ``Problem`` record, its task ids and its final-answer formats.

Also the vocabulary every other module of the generator shares: the problem
:data:`KINDS`, the :data:`LEVELS` and the :data:`ANSWER_FORMATS`.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentgym import ConfigError, UnknownNameError

__all__ = [
    "ANSWER_FORMATS",
    "KINDS",
    "LEVELS",
    "Problem",
    "format_answer",
    "parse_task_id",
]

#: Problem families, one module each (``agentgym.envs.math.generator.<kind>``).
KINDS = (
    "arithmetic",
    "fractions",
    "percentages",
    "linear",
    "quadratic",
    "systems",
    "simplify",
    "word",
)
#: Difficulty levels every kind has.
LEVELS = (1, 2, 3)
#: How a worked solution states its final answer.
ANSWER_FORMATS = ("boxed", "answer_line")


def format_answer(answer: str, answer_format: str = "boxed") -> str:
    """The final-answer statement in ``answer_format`` (``boxed`` or ``answer_line``)."""
    if answer_format == "boxed":
        return f"The answer is \\boxed{{{answer}}}."
    if answer_format == "answer_line":
        return f"Answer: {answer}"
    raise UnknownNameError("answer_format", answer_format, ANSWER_FORMATS)


@dataclass(frozen=True)
class Problem:
    """One generated problem.

    Attributes:
        problem: the statement shown to the model.
        answer: the exact answer, as LaTeX (gold).
        verbose_solution / concise_solution: worked solutions ending in the answer
            statement of ``answer_format``.
        kind / level / seed: what generated it (``task_id`` is ``gen/<kind>/<level>/<seed>``).
        verbose_body / concise_body: the solutions without their final statement.
        answer_format: the format the two solutions end in.
    """

    problem: str
    answer: str
    verbose_solution: str
    concise_solution: str
    kind: str
    level: int
    seed: int
    verbose_body: str
    concise_body: str
    answer_format: str = "boxed"

    @property
    def task_id(self) -> str:
        return f"gen/{self.kind}/{self.level}/{self.seed}"

    def solution(self, style: str = "concise", answer_format: str | None = None) -> str:
        """The worked solution in ``style`` (``verbose``/``concise``) ending in ``answer_format``."""
        if style not in ("verbose", "concise"):
            raise UnknownNameError("solution style", style, ("verbose", "concise"))
        body = self.verbose_body if style == "verbose" else self.concise_body
        return f"{body}\n{format_answer(self.answer, answer_format or self.answer_format)}"


def parse_task_id(task_id: str) -> tuple[str, int, int]:
    """``"gen/linear/2/17"`` -> ``("linear", 2, 17)``; raises ConfigError otherwise."""
    parts = task_id.split("/")
    if len(parts) != 4 or parts[0] != "gen" or parts[1] not in KINDS:
        raise ConfigError(
            f"Not a generator task id: {task_id!r}. Expected gen/<kind>/<level>/<seed> with "
            f"kind in {', '.join(KINDS)}."
        )
    try:
        level, seed = int(parts[2]), int(parts[3])
    except ValueError:
        raise ConfigError(f"Level and seed of {task_id!r} must be integers.") from None
    if level not in LEVELS:
        raise ConfigError(f"Level of {task_id!r} must be one of {LEVELS}.")
    return parts[1], level, seed
