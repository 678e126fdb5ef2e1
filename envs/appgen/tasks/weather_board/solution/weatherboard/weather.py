import json
import os
import urllib.error
import urllib.parse
import urllib.request


class UnknownCity(Exception):
    pass


class ServiceDown(Exception):
    pass


def current(city):
    base = os.environ.get("WEATHER_URL", "http://127.0.0.1:9001").rstrip("/")
    url = base + "/v1/current?" + urllib.parse.urlencode({"city": city})
    try:
        with urllib.request.urlopen(url, timeout=3) as resp:
            return json.loads(resp.read().decode("utf-8"))
    except urllib.error.HTTPError as e:
        if e.code == 404:
            raise UnknownCity(city)
        raise ServiceDown(f"weather service answered {e.code}")
    except (OSError, ValueError) as e:
        raise ServiceDown(f"weather service unreachable: {e}")
