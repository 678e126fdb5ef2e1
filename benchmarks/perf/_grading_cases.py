"""Real-output-style (response, gold, truth) pairs by category, for the grading benchmark.

Each template is (category, response, gold, truth): ``truth`` is the verdict a careful
reviewer gives (see tests/envs/math/real_output_cases.py for the reasons); ``{k}`` and
the other fields are filled with a varying integer so that no two pairs are alike.
"""

from __future__ import annotations

_TEMPLATES: list[tuple[str, str, str, bool]] = [
    # several boxes for a multi-part gold
    (
        "multi_box",
        "The solutions are $x = \\boxed{{{k}}}$ and $x = \\boxed{{-{kp1}}}$.",
        "-{kp1}, {k}",
        True,
    ),
    ("multi_box", "\\boxed{{({k}, 1)}}, \\boxed{{(1, {k})}}", "(1,{k}),({k},1)", True),
    (
        "multi_box",
        "\\boxed{{a = {k}}} \\quad\\text{{and}}\\quad \\boxed{{b = {kp1}}}",
        "a={k}, b={kp1}",
        True,
    ),
    ("multi_box", "\\boxed{{{k}}}, \\boxed{{{kp1}}}", "\\{{{k},{kp1},{kp2}\\}}", False),
    ("multi_box", "\\boxed{{{kp1}}}, \\boxed{{{k}}}", "({k},{kp1})", False),
    # the last final answer counts
    (
        "self_correction",
        "So \\boxed{{{k}}}. Hmm, I dropped a sign; the answer is \\boxed{{-{k}}}.",
        "-{k}",
        True,
    ),
    (
        "self_correction",
        "So \\boxed{{{k}}}. Hmm, I dropped a sign; the answer is \\boxed{{-{k}}}.",
        "{k}",
        False,
    ),
    (
        "self_correction",
        "\\boxed{{{k}}}.\n\nWait, let me recheck. Actually it is \\boxed{{{kp1}}}.",
        "{kp1}",
        True,
    ),
    (
        "self_correction",
        "<think>\nMaybe \\boxed{{{k}}}? No.\n</think>\n\nThe answer is $\\boxed{{{kp1}}}$.",
        "{kp1}",
        True,
    ),
    (
        "self_correction",
        "<think>\nMaybe \\boxed{{{k}}}? No.\n</think>\n\nThe answer is $\\boxed{{{kp1}}}$.",
        "{k}",
        False,
    ),
    # candidates offered as alternatives
    ("hedging", "The answer is $\\boxed{{{k}}}$ or $\\boxed{{{kp1}}}$.", "{k}", False),
    ("hedging", "The answer is \\boxed{{{k}}}. It could also be \\boxed{{{kp1}}}.", "{kp1}", False),
    ("hedging", "\\boxed{{{k} \\text{{ or }} {kp1}}}", "{k}", False),
    ("hedging", "\\boxed{{{k}}}, that is, \\boxed{{{k}.0}}", "{k}", True),
    # equivalence by evaluation
    ("evaluation", "\\boxed{{{k} e^{{2\\pi i}}}}", "{k}", True),
    ("evaluation", "\\boxed{{{k}\\cos(\\pi)}}", "-{k}", True),
    ("evaluation", "\\boxed{{{k}(\\sin^2 x + \\cos^2 x)}}", "{k}", True),
    ("evaluation", "\\boxed{{{k2}\\sin x\\cos x}}", "{k}\\sin 2x", True),
    ("evaluation", "\\boxed{{{k} e^{{i\\pi}}}}", "{k}", False),
    ("evaluation", "\\boxed{{{k}\\sin x}}", "{k}\\cos x", False),
    # degrees and radians
    ("degrees", "\\boxed{{\\frac{{{k}\\pi}}{{180}}}}", "{k}^\\circ", True),
    ("degrees", "\\boxed{{{k}^\\circ}}", "{k}", True),
    ("degrees", "\\boxed{{\\frac{{{kp1}\\pi}}{{180}}}}", "{k}^\\circ", False),
    # labels on either side
    ("labels", "\\boxed{{t = \\ln {k}}}", "t_{{0}} = \\ln {k}", True),
    ("labels", "\\boxed{{x_1 = {k}}}", "x = {k}", True),
    ("labels", "\\boxed{{{k}, {kp1}}}", "a={k}, b={kp1}", True),
    ("labels", "\\boxed{{b = {kp1}, a = {k}}}", "a={k}, b={kp1}", True),
    ("labels", "\\boxed{{{kp1}, {k}}}", "a={k}, b={kp1}", False),
    # gold answers written with labels, inequalities, ratios
    ("gold_forms", "\\boxed{{({k},{kp1})}}", "$(m,n)=({k},{kp1})$", True),
    ("gold_forms", "\\boxed{{PQ = {k}, RS = {kp1}}}", "$$PQ={k}, RS={kp1}$$", True),
    (
        "gold_forms",
        "\\boxed{{(-\\infty,-{k})\\cup({k},\\infty)}}",
        "x<-{k} \\text{{ or }} x>{k}",
        True,
    ),
    (
        "gold_forms",
        "\\boxed{{x \\le -{k} \\text{{ or }} x \\ge {k}}}",
        "(-\\infty,-{k})\\cup({k},\\infty)",
        False,
    ),
    ("gold_forms", "\\boxed{{{k2}:{k2p2}}}", "{k}:{kp1}", True),
    ("gold_forms", "\\boxed{{{kp1}:{k}}}", "{k}:{kp1}", False),
    # expanded vs factored
    ("polynomials", "\\boxed{{x^2+{k2p1}x+{kkp1}}}", "(x+{k})(x+{kp1})", True),
    ("polynomials", "\\boxed{{(x+{k})(x-{kp1})}}", "x^2+{k2p1}x+{kkp1}", False),
    # fractions, mixed numbers, repeating decimals
    ("fractions", "\\boxed{{0.\\overline{{{k}}}}}", "\\frac{{{k}}}{{{nines}}}", True),
    ("fractions", "\\boxed{{{k} 1/2}}", "\\frac{{{k2p1}}}{{2}}", True),
    ("fractions", "\\boxed{{\\frac{{{k}}}{{{kp1}}}}}", "\\frac{{{kp1}}}{{{k}}}", False),
    # thousands separators
    ("thousands", "\\boxed{{{thou}}}", "{thou_plain}", True),
    ("thousands", "\\boxed{{{thou_latex}}}", "{thou_plain}", True),
    ("thousands", "\\boxed{{{thou}}}", "{thou_next}", False),
    # scientific notation
    ("scientific", "\\boxed{{{k}.5\\times 10^{{3}}}}", "{k}500", True),
    ("scientific", "\\boxed{{{k}.5e3}}", "{k}500", True),
    ("scientific", "\\boxed{{{k}.5\\times 10^{{4}}}}", "{k}500", False),
    # percentages
    ("percentages", "\\boxed{{{k}\\%}}", "\\frac{{{k}}}{{100}}", True),
    ("percentages", "\\boxed{{{k} \\text{{ percent}}}}", "{k}", True),
    ("percentages", "\\boxed{{{k}\\%}}", "\\frac{{{k}}}{{1000}}", False),
    # units
    ("units", "\\boxed{{{k}\\text{{ cm}}^2}}", "{k}", True),
    ("units", "\\boxed{{{k}\\pi \\text{{ cm}}}}", "{k}\\pi", True),
    ("units", "\\boxed{{{kp1} \\text{{ meters}}}}", "{k}", False),
    # intervals and inequalities
    ("intervals", "\\boxed{{[{k}, \\infty)}}", "x \\ge {k}", True),
    ("intervals", "\\boxed{{x<{k}}}", "(-\\infty, {k})", True),
    ("intervals", "\\boxed{{({k}, \\infty)}}", "x \\ge {k}", False),
    # matrices and vectors
    (
        "matrices",
        "\\boxed{{\\begin{{bmatrix}}{k}&1\\\\0&\\frac{{1}}{{2}}\\end{{bmatrix}}}}",
        "\\begin{{pmatrix}}{k}&1\\\\0&0.5\\end{{pmatrix}}",
        True,
    ),
    (
        "matrices",
        "\\boxed{{({k}, {kp1}, 1)}}",
        "\\begin{{pmatrix}}{k}\\\\{kp1}\\\\1\\end{{pmatrix}}",
        True,
    ),
    (
        "matrices",
        "\\boxed{{\\begin{{pmatrix}}{k}&0\\\\1&2\\end{{pmatrix}}}}",
        "\\begin{{pmatrix}}{k}&1\\\\0&2\\end{{pmatrix}}",
        False,
    ),
    # multiple choice
    ("choice", "\\boxed{{\\textbf{{({L})}}\\ {k}}}", "{L}", True),
    ("choice", "The answer is ({L}).", "{L}", True),
    ("choice", "\\boxed{{{O}}}", "{L}", False),
    # text answers
    ("text", "\\boxed{{\\text{{{Word}}}}}", "{word}", True),
    ("text", "\\boxed{{\\text{{{Other}}}}}", "{word}", False),
]

_WORDS = [("Yes", "No"), ("Odd", "Even"), ("Monday", "Tuesday"), ("True", "False")]


def _values(k: int) -> dict[str, object]:
    word, other = _WORDS[k % len(_WORDS)]
    thou = k * 1000 + k
    return {
        "k": k,
        "kp1": k + 1,
        "kp2": k + 2,
        "k2": 2 * k,
        "k2p1": 2 * k + 1,
        "k2p2": 2 * k + 2,
        "kkp1": k * (k + 1),
        "nines": 10 ** len(str(k)) - 1,
        "thou": f"{thou:,}",
        "thou_latex": f"{thou:,}".replace(",", "{,}"),
        "thou_plain": thou,
        "thou_next": thou + 1,
        "L": "ABCDE"[k % 5],
        "O": "ABCDE"[(k + 1) % 5],
        "Word": word,
        "word": word.lower(),
        "Other": other,
    }


def real_output_pairs(per_template: int) -> list[tuple[str, str, str, bool]]:
    """``(response, gold, category, truth)`` for every template, ``per_template`` each."""
    out = []
    for i in range(per_template):
        vals = _values(3 + 7 * i)
        for category, response, gold, truth in _TEMPLATES:
            out.append((response.format(**vals), gold.format(**vals), category, truth))
    return out
