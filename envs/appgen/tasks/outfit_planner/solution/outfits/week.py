"""The week plan and the home city (the user's second request)."""

from . import weather
from .suggest import suggest
from .web import HttpError


def register(router, store, city_of):
    @router.route("GET", "/api/week")
    def week(req):
        try:
            days = int(req.query.get("days", "5"))
        except ValueError:
            raise HttpError(400, "days must be a number")
        if not 1 <= days <= 7:
            raise HttpError(400, "days must be from 1 to 7")
        city = city_of(req)
        forecast = fetch(city, days)
        items = store.items()
        return 200, {"city": city, "days": [suggest(city, d, items) for d in forecast]}

    @router.route("GET", "/api/settings")
    def get_settings(req):
        return 200, {"city": store.get_setting("city")}

    @router.route("PUT", "/api/settings")
    def put_settings(req):
        city = req.json().get("city")
        if not isinstance(city, str) or not city.strip():
            raise HttpError(400, "city must be a name")
        store.set_setting("city", city.strip())
        return 200, {"city": city.strip()}


def fetch(city, days):
    try:
        return weather.forecast(city, days)
    except weather.UnknownCity:
        raise HttpError(404, f"unknown city {city}")
    except weather.ServiceDown as e:
        raise HttpError(502, str(e))
