import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

COMMAND = [sys.executable, "-m", "splitter"]
EXTRA_ENV = {}


@pytest.fixture
def app(tmp_path):
    """The app started as the graders start it: PORT and DATA_DIR in its environment."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    env = dict(os.environ, PORT=str(port), DATA_DIR=str(tmp_path / "data"), **EXTRA_ENV)
    proc = subprocess.Popen(
        COMMAND, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        if proc.poll() is not None:
            pytest.fail("the app exited: " + proc.stderr.read().decode()[-500:])
        try:
            urllib.request.urlopen(url + "/", timeout=1).close()
            break
        except urllib.error.HTTPError:
            break
        except OSError:
            time.sleep(0.05)
    yield url
    proc.kill()
    proc.wait()


def call(url, method="GET", body=None):
    """(status, parsed JSON or text) of one request."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            status, raw, ctype = resp.status, resp.read(), resp.headers.get("Content-Type", "")
    except urllib.error.HTTPError as e:
        status, raw, ctype = e.code, e.read(), e.headers.get("Content-Type", "")
    if "json" in ctype and raw:
        return status, json.loads(raw)
    return status, raw.decode("utf-8", "replace")


def test_add_member(app):
    status, member = call(app + "/api/members", "POST", {"name": "Ann"})
    assert status == 201 and member == {"name": "Ann"}
