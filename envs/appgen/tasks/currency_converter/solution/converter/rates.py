import json
import os
import urllib.error
import urllib.parse
import urllib.request


class ServiceError(Exception):
    pass


class UnknownCurrency(Exception):
    pass


def _get(path):
    base = os.environ.get("RATES_URL", "http://127.0.0.1:9000").rstrip("/")
    try:
        with urllib.request.urlopen(base + path, timeout=3) as resp:
            return json.loads(resp.read().decode("utf-8"))
    except urllib.error.HTTPError as e:
        if e.code == 404:
            raise UnknownCurrency(path)
        raise ServiceError(f"rates service answered {e.code}")
    except (OSError, ValueError) as e:
        raise ServiceError(f"rates service unreachable: {e}")


def currencies():
    return _get("/currencies")


def latest(base):
    data = _get("/latest?" + urllib.parse.urlencode({"base": base}))
    return data["rates"]
