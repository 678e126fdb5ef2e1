from urllib.parse import unquote

from . import weather
from .db import Store
from .web import HttpError, Router, run

router = Router()
store = None


@router.route("POST", "/api/cities")
def add_city(req):
    name = req.json().get("name")
    if not isinstance(name, str) or not name.strip():
        raise HttpError(400, "name is required")
    try:
        found = weather.current(name.strip())
    except weather.UnknownCity:
        raise HttpError(400, f"unknown city {name.strip()}")
    except weather.ServiceDown as e:
        raise HttpError(502, str(e))
    name = found["city"]
    if name.lower() in (c.lower() for c in store.cities()):
        raise HttpError(409, f"{name} is already on the board")
    store.add(name)
    return 201, {"name": name}


@router.route("DELETE", "/api/cities/<name>")
def delete_city(req):
    if not store.delete(unquote(req.params["name"])):
        raise HttpError(404, "no such city")
    return 204, None


@router.route("GET", "/api/board")
def board(req):
    unit = store.unit()
    out = []
    for name in store.cities():
        try:
            w = weather.current(name)
        except (weather.UnknownCity, weather.ServiceDown):
            out.append({"name": name, "temp": None, "condition": "unavailable"})
            continue
        temp = w["temp_c"] if unit == "C" else w["temp_c"] * 9 / 5 + 32
        out.append({"name": name, "temp": round(temp, 1), "condition": w["condition"]})
    return 200, {"unit": unit, "cities": out}


@router.route("GET", "/api/settings")
def get_settings(req):
    return 200, {"unit": store.unit()}


@router.route("PUT", "/api/settings")
def put_settings(req):
    unit = req.json().get("unit")
    if unit not in ("C", "F"):
        raise HttpError(400, "unit must be C or F")
    store.set_unit(unit)
    return 200, {"unit": unit}


if __name__ == "__main__":
    store = Store()
    run(router)
