"""Free-slot arithmetic on minutes since midnight."""

DAY_START, DAY_END, STEP = 9 * 60, 17 * 60, 30


def to_minutes(hhmm):
    h, m = hhmm.split(":")
    return int(h) * 60 + int(m)


def to_text(minutes):
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def free_slots(busy, length):
    """busy: list of (start, end) minutes; slots of ``length`` minutes overlapping none."""
    out = []
    start = DAY_START
    while start + length <= DAY_END:
        end = start + length
        if all(end <= b0 or start >= b1 for b0, b1 in busy):
            out.append((start, end))
        start += STEP
    return out
