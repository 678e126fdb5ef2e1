import json
import os
import urllib.error
import urllib.parse
import urllib.request


class UnknownPerson(Exception):
    pass


class ServiceDown(Exception):
    pass


def _call(method, path, body=None):
    base = os.environ.get("CALENDAR_URL", "http://127.0.0.1:9003").rstrip("/")
    data = None if body is None else json.dumps(body).encode("utf-8")
    req = urllib.request.Request(base + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=3) as resp:
            raw = resp.read()
    except urllib.error.HTTPError as e:
        if e.code == 404:
            raise UnknownPerson(path)
        raise ServiceDown(f"calendar answered {e.code}")
    except OSError as e:
        raise ServiceDown(f"calendar unreachable: {e}")
    return json.loads(raw.decode("utf-8")) if raw else None


def busy(person, date):
    path = f"/calendars/{urllib.parse.quote(person)}/busy?" + urllib.parse.urlencode({"date": date})
    return _call("GET", path)["busy"]


def add_event(person, date, start, end, title):
    _call("POST", f"/calendars/{urllib.parse.quote(person)}/events",
          {"date": date, "start": start, "end": end, "title": title})
