"""The wardrobe the hidden tests load (not a test module)."""

ITEMS = [
    ("T-shirt", "top", 1, False),
    ("Linen shirt", "top", 2, False),
    ("Wool sweater", "top", 4, False),
    ("Jeans", "bottom", 3, False),
    ("Cargo SHORTS", "bottom", 1, False),
    ("Thermal trousers", "bottom", 5, False),
    ("Rain jacket", "outer", 3, True),
    ("Down coat", "outer", 5, False),
    ("Sneakers", "shoes", 2, False),
    ("Rubber boots", "shoes", 4, True),
]


def load(app, shorts=True):
    for name, kind, warmth, rain_ok in ITEMS:
        if not shorts and "shorts" in name.lower():
            continue
        r = app.post("/api/items", {"name": name, "kind": kind, "warmth": warmth, "rain_ok": rain_ok})
        assert r.status == 201, r
