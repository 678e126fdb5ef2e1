from calc.evaluator import Calculator


def test_precedence():
    calc = Calculator()
    assert calc.evaluate("1 + 2 * 3") == 7
    assert calc.evaluate("x = 4") == 4
    assert calc.evaluate("x ^ 2 / 8") == 2.0
