"""``generate``: a seed to a :class:`Problem`, through the family of its kind, cached.

The seed picks the kind and the level when they are not given (``Random("pick/<seed>")``)
and then feeds the family its own stream (``Random("<kind>/<level>/<seed>")``), so a
problem depends only on its task id, never on which other problems were made before it.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable

from agentgym import ConfigError, UnknownNameError
from agentgym.envs.math.generator.arithmetic import arithmetic
from agentgym.envs.math.generator.common import Draft, tex
from agentgym.envs.math.generator.fractions import fractions
from agentgym.envs.math.generator.linear import linear
from agentgym.envs.math.generator.percentages import percentages
from agentgym.envs.math.generator.problem import (
    ANSWER_FORMATS,
    KINDS,
    LEVELS,
    Problem,
    format_answer,
)
from agentgym.envs.math.generator.quadratic import quadratic
from agentgym.envs.math.generator.simplify import simplify
from agentgym.envs.math.generator.systems import systems
from agentgym.envs.math.generator.word import word

__all__ = ["CACHE_SIZE", "FAMILIES", "generate"]

#: The family that drafts each kind (same order as :data:`KINDS`).
FAMILIES: dict[str, Callable[[random.Random, int], Draft]] = {
    "arithmetic": arithmetic,
    "fractions": fractions,
    "percentages": percentages,
    "linear": linear,
    "quadratic": quadratic,
    "systems": systems,
    "simplify": simplify,
    "word": word,
}

#: Problems kept by :func:`generate`'s cache (a few MB at most). DAPO plays each task
#: ``G`` times, and every play resets an env on the same seed: without the cache each
#: reset would redo the sympy work (up to ~16 ms for a level-3 quadratic).
CACHE_SIZE = 4096


def generate(
    seed: int,
    level: int | None = None,
    kind: str | None = None,
    *,
    answer_format: str = "boxed",
) -> Problem:
    """The problem for ``seed`` (same arguments, same problem, on every machine).

    A pure function of its arguments, so results are cached (LRU, :data:`CACHE_SIZE`
    entries, keyed by the arguments when they are plain ``int``/``str``/``None``;
    :class:`Problem` is immutable, so callers share one object safely).

    Args:
        seed: any integer.
        level: 1, 2 or 3 (``None``: drawn from the seed).
        kind: one of :data:`KINDS` (``None``: drawn from the seed).
        answer_format: the final statement the worked solutions end in.

    Raises:
        UnknownNameError: an unknown ``kind`` or ``answer_format``.
        ConfigError: a ``level`` outside 1..3.
    """
    # exact types only: 5, 5.0, True and numpy's 5 compare equal as cache keys but
    # would put different objects in Problem.seed / Problem.level
    if (
        type(seed) is int
        and (level is None or type(level) is int)
        and (kind is None or type(kind) is str)
        and type(answer_format) is str
    ):
        return _generate_cached(seed, level, kind, answer_format)
    return _generate(seed, level, kind, answer_format)


@functools.lru_cache(maxsize=CACHE_SIZE)
def _generate_cached(seed: int, level: int | None, kind: str | None, answer_format: str) -> Problem:
    return _generate(seed, level, kind, answer_format)


def _generate(seed: int, level: int | None, kind: str | None, answer_format: str) -> Problem:
    """:func:`generate` without the cache."""
    if answer_format not in ANSWER_FORMATS:
        raise UnknownNameError("answer_format", answer_format, ANSWER_FORMATS)
    pick = random.Random(f"pick/{seed}")
    if kind is None:
        kind = pick.choice(KINDS)
    if kind not in FAMILIES:
        raise UnknownNameError("problem kind", kind, KINDS)
    if level is None:
        level = pick.choice(LEVELS)
    if level not in LEVELS:
        raise ConfigError(f"level must be one of {LEVELS}, got {level!r}.")
    rng = random.Random(f"{kind}/{level}/{seed}")
    problem, answer, concise, verbose = FAMILIES[kind](rng, level)
    gold = answer if isinstance(answer, str) else tex(answer)
    concise_body, verbose_body = " ".join(concise), "\n".join(verbose)
    final = format_answer(gold, answer_format)
    return Problem(
        problem=problem,
        answer=gold,
        verbose_solution=f"{verbose_body}\n{final}",
        concise_solution=f"{concise_body}\n{final}",
        kind=kind,
        level=level,
        seed=seed,
        verbose_body=verbose_body,
        concise_body=concise_body,
        answer_format=answer_format,
    )
