"""Real-output-style grading cases (issue 19): answers as reasoning models write them.

Each case: (category, response, gold, expected verdict, why). The verdict is what a
careful reviewer of R1-style outputs on competition problems would give; ``why`` says
the reason. Cases in ``REJECT_CASES`` are graded with ``hedging="reject"``; all others
with the default (``"last"``). The kinds the issue names (several boxes, self-correction,
hedging, evaluation, labels, gold forms) are here; the forms of answers a reviewer meets
besides (fractions, thousands, units, intervals, matrices, choice letters, text, ...)
are in :mod:`real_output_forms`.
"""

from __future__ import annotations

from typing import NamedTuple


class Case(NamedTuple):
    category: str
    response: str
    gold: str
    correct: bool
    why: str


_LONG_WORK = (
    "Let me double check this by substituting back into the original equation. "
    "The left side becomes a sum of three terms; expanding each and collecting powers "
    "gives a quadratic whose discriminant we compute carefully from the coefficients. "
) * 3

C = Case
CASES: list[Case] = [
    # ------------------------------------------------------------------ multi_box
    C(
        "multi_box",
        r"\boxed{(4, 1)}, \boxed{(1, 4)}",
        "(1,4),(4,1)",
        True,
        "two ordered pairs boxed apart; the gold is the set of both pairs",
    ),
    C(
        "multi_box",
        r"\boxed{a = 12} \quad\text{and}\quad \boxed{b = 7}",
        "a=12, b=7",
        True,
        "labelled values in separate boxes joined by 'and'",
    ),
    C(
        "multi_box",
        r"\boxed{2}, \boxed{5}, \boxed{9}",
        r"\{2,5,9\}",
        True,
        "the elements of a set, one box each",
    ),
    C(
        "multi_box",
        r"The solutions are $x = \boxed{2}$ and $x = \boxed{-3}$.",
        "-3, 2",
        True,
        "roots boxed apart, in another order than the gold's list",
    ),
    C(
        "multi_box",
        r"Therefore $x = \boxed{2}$, $y = \boxed{3}$.",
        "(2,3)",
        True,
        "labels outside the boxes give the tuple's order",
    ),
    C(
        "multi_box",
        "x = \\boxed{1}\ny = \\boxed{-1}\nz = \\boxed{2}",
        "(1,-1,2)",
        True,
        "one labelled box per line",
    ),
    C(
        "multi_box",
        r"\boxed{m=5}, \boxed{n=8}",
        "$(m,n)=(5,8)$",
        True,
        "labelled values for a labelled tuple gold",
    ),
    C(
        "multi_box",
        r"\boxed{n=8}, \boxed{m=5}",
        "$(m,n)=(5,8)$",
        True,
        "the labels say which value is which, whatever the order",
    ),
    C(
        "multi_box",
        r"$PQ = \boxed{3}$ and $RS = \boxed{11}$",
        "$$PQ=3, RS=11$$",
        True,
        "segment lengths labelled outside their boxes",
    ),
    C(
        "multi_box",
        r"\boxed{\sqrt{2}} \text{ and } \boxed{-\sqrt{2}}",
        r"\pm\sqrt{2}",
        True,
        "both signs of a plus-minus gold, boxed apart",
    ),
    C(
        "multi_box",
        "So $a = \\boxed{12}$.\n\n" + _LONG_WORK + "so $b = \\boxed{7}$.",
        "a=12, b=7",
        True,
        "a found first, b after more work: two different labels",
    ),
    C(
        "multi_box",
        r"\boxed{\{1, 2\}}, i.e. \boxed{\{2, 1\}}",
        r"\{1,2\}",
        True,
        "the whole set restated in a second box",
    ),
    C("multi_box", r"\boxed{3}, \boxed{2}", "(2,3)", False, "an ordered pair in the wrong order"),
    C("multi_box", r"\boxed{2}, \boxed{5}", r"\{2,5,9\}", False, "an element is missing"),
    C(
        "multi_box",
        r"\boxed{2}, \boxed{5}, \boxed{9}, \boxed{11}",
        r"\{2,5,9\}",
        False,
        "an extra element",
    ),
    C(
        "multi_box",
        r"\boxed{1}, \boxed{2}",
        "[1,2)",
        False,
        "a half-open interval is one value, not two boxed endpoints",
    ),
    C(
        "multi_box",
        "So $x = \\boxed{2}$.\n\n" + _LONG_WORK + "so $x = \\boxed{5}$.",
        r"\{2,5\}",
        False,
        "the same unlabelled variable boxed again after more work replaces it",
    ),
    # ------------------------------------------------------------------ self_correction
    C(
        "self_correction",
        r"So \boxed{14}. Hmm, I dropped a sign; the answer is \boxed{-14}.",
        "-14",
        True,
        "the corrected, last answer counts",
    ),
    C(
        "self_correction",
        r"So \boxed{14}. Hmm, I dropped a sign; the answer is \boxed{-14}.",
        "14",
        False,
        "the first answer was withdrawn",
    ),
    C(
        "self_correction",
        "\\boxed{5}.\n\nWait, let me recheck. Actually it is \\boxed{6}.",
        "6",
        True,
        "'wait ... actually' corrects the answer",
    ),
    C(
        "self_correction",
        "\\boxed{5}.\n\nWait, let me recheck. Actually it is \\boxed{6}.",
        "5",
        False,
        "the withdrawn answer is not credited",
    ),
    C(
        "self_correction",
        "\\boxed{3}\n\n" + _LONG_WORK + "\nThe answer is \\boxed{4}.",
        "4",
        True,
        "reasoning between two answers: the last counts (math-verify, verl/DAPO)",
    ),
    C(
        "self_correction",
        "Answer: 3\nLet me redo the sum.\nAnswer: 4",
        "4",
        True,
        "the last answer line counts",
    ),
    C(
        "self_correction",
        r"The answer is \boxed{7}, not \boxed{9}.",
        "7",
        True,
        "a value ruled out with 'not' is not an answer",
    ),
    C(
        "self_correction",
        r"The answer is \boxed{7}, not \boxed{9}.",
        "9",
        False,
        "the ruled-out value is not credited",
    ),
    C(
        "self_correction",
        r"I first got \boxed{\frac{1}{3}} but that is wrong: \boxed{\frac{2}{3}}",
        r"\frac{2}{3}",
        True,
        "an answer declared wrong is replaced",
    ),
    C(
        "self_correction",
        r"The area is \boxed{12} and the perimeter \boxed{14}, so the answer is \boxed{26}.",
        "26",
        True,
        "boxed intermediate steps, then the conclusion",
    ),
    C(
        "self_correction",
        r"The area is \boxed{12} and the perimeter \boxed{14}, so the answer is \boxed{26}.",
        "12",
        False,
        "an intermediate step is not the answer",
    ),
    C(
        "multi_box",
        r"$x = \boxed{2}$, so $y = \boxed{3}$",
        "(2,3)",
        True,
        "labelled parts joined by 'so'",
    ),
    # ------------------------------------------------------------------ hedging
    C(
        "hedging",
        r"The answer is $\boxed{5}$ or $\boxed{6}$.",
        "5",
        False,
        "two candidates offered as alternatives (right one first)",
    ),
    C(
        "hedging",
        r"The answer is $\boxed{5}$ or $\boxed{6}$.",
        "6",
        False,
        "two candidates offered as alternatives (right one last)",
    ),
    C("hedging", r"\boxed{5} or maybe \boxed{6}", "5", False, "'or maybe' offers alternatives"),
    C(
        "hedging",
        r"The answer is \boxed{5}. It could also be \boxed{6}.",
        "6",
        False,
        "'could also be' adds a candidate, it does not correct",
    ),
    C("hedging", r"\boxed{5 \text{ or } 6}", "5", False, "alternatives inside one box"),
    C("hedging", r"it is either \boxed{A} or \boxed{C}", "A", False, "two choice letters"),
    C("hedging", "\\boxed{4}\nAnswer: 3", "3", False, "box and answer line disagree"),
    C(
        "hedging",
        r"\boxed{5}, that is, \boxed{5.0}",
        "5",
        True,
        "the same value restated is not a hedge",
    ),
    C(
        "hedging",
        r"\boxed{\frac{1}{2}} (or equivalently \boxed{0.5})",
        r"\frac{1}{2}",
        True,
        "'or equivalently' restates an equal value",
    ),
    C(
        "hedging",
        "The answer is $\\boxed{5}$.\n\nAlternatively, " + _LONG_WORK + "we get $\\boxed{6}$.",
        "6",
        False,
        "a second answer offered as an alternative after long work",
    ),
    C(
        "hedging",
        "The answer is $\\boxed{5}$.\n\nAlternatively, " + _LONG_WORK + "we get $\\boxed{5}$.",
        "5",
        True,
        "another method confirming the same answer",
    ),
    # ------------------------------------------------------------------ evaluation
    C("evaluation", r"\boxed{\cos(\pi)}", "-1", True, "a trigonometric value"),
    C("evaluation", r"\boxed{e^{2\pi i}}", "1", True, "Euler: e^{2 pi i} = 1"),
    C("evaluation", r"\boxed{e^{i\pi}}", "-1", True, "Euler: e^{i pi} = -1"),
    C(
        "evaluation",
        r"\boxed{\frac{1}{2}+\frac{\sqrt{3}}{2}i}",
        r"e^{i\pi/3}",
        True,
        "a complex exponential in Cartesian form",
    ),
    C("evaluation", r"\boxed{\sqrt{2}e^{i\pi/4}}", "1+i", True, "polar form of 1+i"),
    C("evaluation", r"\boxed{\frac{1+i}{2}}", r"\frac{1}{1-i}", True, "rationalised denominator"),
    C("evaluation", r"\boxed{\sin^2 x + \cos^2 x}", "1", True, "Pythagorean identity"),
    C("evaluation", r"\boxed{2\sin x\cos x}", r"\sin 2x", True, "double-angle identity"),
    C("evaluation", r"\boxed{1-2\sin^2 x}", r"\cos 2x", True, "double-angle identity for cos"),
    C("evaluation", r"\boxed{\tan\frac{\pi}{4}}", "1", True, "tan(pi/4) = 1"),
    C(
        "evaluation",
        r"\boxed{\sin 30^\circ}",
        r"\frac{1}{2}",
        True,
        "a degree sign inside a trigonometric function",
    ),
    C("evaluation", r"\boxed{e^{\ln 5}}", "5", True, "exp and log cancel"),
    C("evaluation", r"\boxed{\log_2 8}", "3", True, "a logarithm with a base"),
    C("evaluation", r"\boxed{\frac{\pi}{3}}", r"60^\circ", True, "radians for a gold in degrees"),
    C(
        "evaluation",
        r"\boxed{\dfrac{\pi}{3}}",
        "60°",
        True,
        "radians for a gold with a unicode degree",
    ),
    C(
        "evaluation",
        r"\boxed{\frac{\pi}{3}}",
        "60",
        False,
        "no degree sign on the gold: 60 is a number, not an angle",
    ),
    C("evaluation", r"\boxed{\frac{\pi}{4}}", r"60^\circ", False, "the wrong angle in radians"),
    C("evaluation", r"\boxed{e^{i\pi}}", "1", False, "e^{i pi} is -1"),
    C("evaluation", r"\boxed{2\sin^2 x - 1}", r"\cos 2x", False, "sign error in an identity"),
    C("evaluation", r"\boxed{\sin x}", r"\cos x", False, "different functions"),
    # ------------------------------------------------------------------ polynomials
    C("polynomials", r"\boxed{x^2+5x+6}", "(x+2)(x+3)", True, "expanded vs factored"),
    C("polynomials", r"\boxed{(x-1)^3}", "x^3-3x^2+3x-1", True, "factored vs expanded"),
    C("polynomials", r"\boxed{x(x+1)(x-1)}", "x^3-x", True, "fully factored"),
    C("polynomials", r"\boxed{2(x+3)}", "2x+6", True, "a common factor taken out"),
    C(
        "polynomials",
        r"\boxed{\frac{x^2-1}{x-1}}",
        "x+1",
        True,
        "equal where both are defined (a reviewer accepts the unsimplified form)",
    ),
    C("polynomials", r"\boxed{(x-1)^3}", "x^3-3x^2-3x-1", False, "one coefficient differs"),
    C("polynomials", r"\boxed{(x+2)(x-3)}", "x^2+5x+6", False, "a wrong root"),
    # ------------------------------------------------------------------ labels
    C("labels", r"\boxed{t = \ln 5}", r"t_{0} = \ln 5", True, "subscripted label on the gold"),
    C("labels", r"\boxed{x_1 = 3}", "x = 3", True, "subscripted label on the answer"),
    C("labels", r"\boxed{3}", "x = 3", True, "no label on the answer"),
    C("labels", r"\boxed{\theta = \frac{\pi}{6}}", r"\frac{\pi}{6}", True, "a Greek label"),
    C("labels", r"\boxed{f(2) = 7}", "7", True, "a function value as label"),
    C("labels", r"\boxed{\angle ABC = 40^\circ}", r"40^\circ", True, "an angle name as label"),
    C("labels", r"\boxed{x_1 = 2, x_2 = 3}", "2, 3", True, "indexed roots vs a list"),
    C(
        "labels",
        r"\boxed{x_1 = 3, x_2 = 2}",
        "x_1=2, x_2=3",
        True,
        "roots of an equation: their indices carry no order",
    ),
    C("labels", r"\boxed{b = 7, a = 12}", "a=12, b=7", True, "labelled values in another order"),
    C("labels", r"\boxed{12, 7}", "a=12, b=7", True, "values in the gold's order"),
    C("labels", r"\boxed{7, 12}", "a=12, b=7", False, "values in the wrong order"),
    C("labels", r"\boxed{a = 7, b = 12}", "a=12, b=7", False, "labels with swapped values"),
    C("labels", r"\boxed{\text{Area} = 24}", "24", True, "a word as label"),
    # ------------------------------------------------------------------ gold_forms
    C("gold_forms", r"\boxed{(5,8)}", "$(m,n)=(5,8)$", True, "a labelled tuple gold in $...$"),
    C("gold_forms", r"\boxed{m=5, n=8}", "$(m,n)=(5,8)$", True, "one label per value"),
    C("gold_forms", r"\boxed{(8,5)}", "$(m,n)=(5,8)$", False, "the tuple reversed"),
    C(
        "gold_forms",
        r"\boxed{PQ = 3, RS = 11}",
        "$$PQ=3, RS=11$$",
        True,
        "several labelled values in $$...$$",
    ),
    C("gold_forms", r"\boxed{3, 11}", "$$PQ=3, RS=11$$", True, "values in the gold's order"),
    C(
        "gold_forms",
        r"\boxed{(-\infty,-1)\cup(2,\infty)}",
        r"x<-1 \text{ or } x>2",
        True,
        "a union of intervals vs inequalities joined by 'or'",
    ),
    C(
        "gold_forms",
        r"\boxed{x < -1 \text{ or } x > 2}",
        r"(-\infty,-1)\cup(2,\infty)",
        True,
        "inequalities joined by 'or' vs a union",
    ),
    C(
        "gold_forms",
        r"\boxed{x \le -1 \text{ or } x \ge 2}",
        r"(-\infty,-1)\cup(2,\infty)",
        False,
        "closed endpoints for an open gold",
    ),
    C("gold_forms", r"\boxed{2 < x \le 5}", "(2,5]", True, "a double inequality vs an interval"),
    C("gold_forms", r"\boxed{[2, 5)}", r"2 \le x < 5", True, "an interval vs a double inequality"),
    C("gold_forms", r"\boxed{\{1,2,3\}}", "1,2,3", True, "a set vs a list of solutions"),
    C("gold_forms", r"\boxed{3, 1, 2}", r"\{1,2,3\}", True, "a list vs a set, any order"),
    C("gold_forms", r"\boxed{5:9}", "5:9", True, "a ratio"),
    C("gold_forms", r"\boxed{10:18}", "5:9", True, "an unreduced ratio"),
    C("gold_forms", r"\boxed{\frac{5}{9}}", "5:9", True, "a ratio as a fraction"),
    C("gold_forms", r"\boxed{9:5}", "5:9", False, "the ratio inverted"),
    C(
        "gold_forms",
        r"\boxed{\frac{3}{4}}",
        r"$\boxed{\dfrac{3}{4}}$",
        True,
        "a boxed gold inside $...$",
    ),
    # ------------------------------------------------------------------ anti_gaming
    C(
        "anti_gaming",
        r"\boxed{1}, \boxed{2}, \boxed{3}, \boxed{4}, \boxed{5}, \boxed{6}, \boxed{7}",
        "7",
        False,
        "every candidate boxed",
    ),
    C(
        "anti_gaming",
        r"\boxed{2}, \boxed{5}, \boxed{7}",
        r"\{2,5\}",
        False,
        "an extra candidate in a multi-part answer",
    ),
    C("anti_gaming", r"\boxed{\pm 3}", "3", False, "plus-minus for a single value"),
    C("anti_gaming", r"\boxed{4 = 3}", "3", False, "a false equation ending in the gold"),
    C("anti_gaming", r"\boxed{x}", "3", False, "a variable is not a value"),
    C(
        "anti_gaming",
        r"\boxed{3}, not \boxed{3}",
        "3",
        True,
        "ruling out a copy of the answer leaves the answer",
    ),
    C(
        "anti_gaming",
        r"\boxed{e^{2\pi i}+x-x}",
        "1",
        True,
        "a needlessly long form of the right value is still right",
    ),
    C("anti_gaming", r"\boxed{1.0000001}", "1", False, "close is not equal for an exact gold"),
]

#: Graded with ``hedging="reject"``: every final answer stated must be right.
REJECT_CASES: list[Case] = [
    C(
        "hedging_reject",
        r"So \boxed{14}. Hmm, I dropped a sign; the answer is \boxed{-14}.",
        "-14",
        False,
        "strict: a withdrawn wrong answer still counts against the reply",
    ),
    C(
        "hedging_reject",
        "\\boxed{3}\n\n" + _LONG_WORK + "\nThe answer is \\boxed{4}.",
        "4",
        False,
        "strict: an earlier different answer is not forgiven",
    ),
    C(
        "hedging_reject",
        r"\boxed{5}, that is, \boxed{5.0}",
        "5",
        True,
        "strict: restating the same value is fine",
    ),
    C(
        "hedging_reject",
        "So $a = \\boxed{12}$.\n\n" + _LONG_WORK + "so $b = \\boxed{7}$.",
        "a=12, b=7",
        True,
        "strict: parts of one answer are not different answers",
    ),
    C("hedging_reject", r"\boxed{5} or maybe \boxed{6}", "5", False, "strict: a hedge is wrong"),
    C(
        "hedging_reject",
        "<think>\n\\boxed{3}\n</think>\nThe answer is \\boxed{4}.",
        "4",
        True,
        "strict: the thinking is not a final answer",
    ),
]
