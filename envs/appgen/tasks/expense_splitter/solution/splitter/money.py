"""Money in cents, shown the way the group likes it (euros, '12.50 EUR')."""


class BadAmount(ValueError):
    pass


def cents(amount):
    if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not amount > 0:
        raise BadAmount("amount must be a number > 0")
    value = round(amount * 100)
    if abs(value - amount * 100) > 1e-6:
        raise BadAmount("amount has more than two decimals")
    return value


def show(value):
    sign = "-" if value < 0 else ""
    value = abs(value)
    return f"{sign}{value // 100}.{value % 100:02d} EUR"


def people_order(name):
    """People are listed alphabetically, ignoring case."""
    return (name.lower(), name)


def shares(total, payer, people):
    """Each person's share in cents; the payer pays the cents that do not split evenly."""
    base = total // len(people)
    out = {p: base for p in people}
    extra = total - base * len(people)
    if extra:
        out[payer if payer in out else sorted(people, key=people_order)[0]] += extra
    return out
