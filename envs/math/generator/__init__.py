"""Procedural maths problems with exact answers and worked solutions.

``generate(seed, level=..., kind=...)`` is a pure function of its arguments: the same
seed, level and kind give the same problem on every machine (it draws from
``random.Random(seed)``). Answers are computed exactly with sympy.

Kinds and what each level asks:

=============  ===========================  ==========================  ============================
kind           level 1                      level 2                     level 3
=============  ===========================  ==========================  ============================
arithmetic     a+b, a-b, a*b                a+b*c, (a-b)*c              (a+b)*c - d/e
fractions      a/b + c/d                    a/b * c/d, a/b / c/d        a/b + c/d - e/f
percentages    p% of n                      n increased/decreased by p% p% up then q% down; x as % of y
linear         ax + b = c                   ax + b = cx + d             a(x + b) = c(x - d) + e
quadratic      monic, integer roots         non-monic, rational roots   irrational roots (formula)
systems        x + y = s, x - y = d         2x2, integer solution       2x2, larger coefficients
simplify       combine like terms           expand (x + a)(x + b)       cancel a common factor
word           totals, sharing              speed/distance, tickets     ages, work rates
=============  ===========================  ==========================  ============================

Each problem carries two worked solutions ending in the final-answer statement: a
*concise* one (the steps, nothing else) and a *verbose* one (restates the goal, explains
each step and checks the result), 2-4 times longer. Both are short templated texts
(about 10-150 tokens) so that a tiny model can learn them; the quickstart fine-tunes on
verbose solutions and then uses a token cost to make the model concise.

Modules:

* :mod:`~agentgym.envs.math.generator.problem` -- :class:`Problem`, task ids, answer
  formats, :data:`KINDS` and :data:`LEVELS`;
* :mod:`~agentgym.envs.math.generator.dispatch` -- :func:`generate` (kind and level
  from the seed, the family of that kind, the cache);
* one module per kind (``arithmetic``, ``fractions``, ``percentages``, ``linear``,
  ``quadratic``, ``systems``, ``simplify``, ``word``), each turning ``(rng, level)``
  into a problem, its answer and its solution steps;
* :mod:`~agentgym.envs.math.generator.common` -- number and polynomial text those share.
"""

from __future__ import annotations

from agentgym.envs.math.generator.dispatch import CACHE_SIZE, generate
from agentgym.envs.math.generator.problem import (
    ANSWER_FORMATS,
    KINDS,
    LEVELS,
    Problem,
    format_answer,
    parse_task_id,
)

__all__ = [
    "ANSWER_FORMATS",
    "CACHE_SIZE",
    "KINDS",
    "LEVELS",
    "Problem",
    "format_answer",
    "generate",
    "parse_task_id",
]
