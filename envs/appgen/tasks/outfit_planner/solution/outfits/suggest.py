"""Choosing an outfit for one day. The user's standing preferences live here."""

from .db import KINDS

#: the user gets cold easily: plan with a temperature this much below the forecast
COLD_OFFSET = 3.0


def needed_warmth(felt):
    for limit, warmth in ((5, 5), (10, 4), (15, 3), (20, 2)):
        if felt < limit:
            return warmth
    return 1


def allowed(item, rain):
    if "shorts" in item["name"].lower():  # the user never wears shorts
        return False
    if rain and item["kind"] in ("outer", "shoes") and not item["rain_ok"]:
        return False
    return True


def pick(candidates, need):
    if not candidates:
        return None
    warm_enough = [i for i in candidates if i["warmth"] >= need]
    if warm_enough:
        return min(warm_enough, key=lambda i: (i["warmth"], i["id"]))
    return min(candidates, key=lambda i: (-i["warmth"], i["id"]))


def display(temp_c):
    return f"{temp_c:.1f} °C"


def suggest(city, day, items):
    felt = round(day["temp_c"] - COLD_OFFSET, 1)
    need = needed_warmth(felt)
    outfit = {}
    for kind in KINDS:
        if kind == "outer" and felt >= 15:
            outfit[kind] = None
            continue
        outfit[kind] = pick([i for i in items if i["kind"] == kind and allowed(i, day["rain"])], need)
    return {
        "city": city,
        "date": day["date"],
        "temp_c": day["temp_c"],
        "felt_c": felt,
        "rain": day["rain"],
        "display": display(day["temp_c"]),
        "outfit": outfit,
    }
