"""Fixtures for full-stack tasks: the app as a running server, mock services, a browser page.

Runs in the grader's process inside the grading sandbox (Python 3.8+). The runner
registers this plugin with the task's ``[app]`` and ``[services]`` settings; hidden tests
ask for the fixtures by name:

* ``app``: the project started with the task's command (``[app] command``) as the
  project's user, in the project's root, with ``PORT`` (a free port on ``127.0.0.1``),
  ``DATA_DIR`` (a fresh directory for its database, shared and sticky, made with its
  final mode under an unguessable name) and one variable per mock service
  (its URL) in the environment; ready once ``ready_path`` answers. :class:`App` has the
  base ``url``, HTTP helpers (``get``, ``post``, ``put``, ``delete``, ``request``: each
  returns a :class:`Response` of plain data), and ``stop()``, ``start()``, ``restart()``
  (the same ``DATA_DIR``: persistence is tested by restarting).
* ``services``: name -> :class:`apptest_services.MockService`, reset before each test.
* ``page``: a fresh tab of the grader's headless Chromium (:mod:`apptest_browser`).

The project's process is started through :mod:`apptest` (``subprocess`` of the project's
worker), so it runs as the project's user and is killed with the test's worker; the
grader talks to it only over HTTP on loopback, and what comes back is bytes it parses
itself.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import time
import urllib.error
import urllib.parse
import urllib.request

import apptest
import apptest_files
import pytest

#: largest response body read from the app
MAX_RESPONSE = 8 << 20
_state: dict = {
    "app": None,
    "services": {},
    "browser": None,
    "launch": None,
    "read": None,
    "scratch": None,
}


def configure(app: dict | None, services: dict, launch_browser, read, scratch: str) -> None:
    """Called by the runner: the task's app settings, its services, how to start the
    browser (the runner allows that one process), how to read a hidden file, and the
    grader's scratch directory (the project may enter it, not list or write it)."""
    _state.update(
        app=app, services_spec=services or {}, launch=launch_browser, read=read, scratch=scratch
    )


def shutdown() -> None:
    for service in _state["services"].values():
        try:
            service.close()
        except Exception:
            pass
    browser = _state.get("browser")
    if browser is not None:
        browser.close()


class Response:
    """An HTTP response as plain data: ``status``, ``headers`` (lower-case names),
    ``body`` (bytes), ``text`` and :meth:`json`."""

    def __init__(self, status: int, headers: dict, body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def json(self):
        try:
            return json.loads(self.body.decode("utf-8"))
        except ValueError as e:
            raise AssertionError(f"the response is not JSON ({e}): {self.text[:200]!r}") from None

    def __repr__(self) -> str:
        return f"<Response {self.status} {self.text[:80]!r}>"


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


def http(method: str, url: str, json_body=None, data=None, headers=None, timeout=10.0) -> Response:
    """One HTTP request from the grader; redirects are not followed."""
    headers = dict(headers or {})
    if json_body is not None:
        data = json.dumps(json_body).encode("utf-8")
        headers.setdefault("Content-Type", "application/json")
    elif isinstance(data, dict):
        data = urllib.parse.urlencode(data).encode("ascii")
        headers.setdefault("Content-Type", "application/x-www-form-urlencoded")
    elif isinstance(data, str):
        data = data.encode("utf-8")
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with _OPENER.open(req, timeout=timeout) as resp:
            status, hdrs, body = resp.status, resp.headers, resp.read(MAX_RESPONSE)
    except urllib.error.HTTPError as e:
        status, hdrs, body = e.code, e.headers, e.read(MAX_RESPONSE)
    return Response(status, {k.lower(): v for k, v in hdrs.items()}, body)


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class AppFailed(AssertionError):
    """The app did not start (it exited, or never answered on its port)."""


class App:
    """The project's app, running as the project's user. See the module docstring."""

    def __init__(self, settings: dict, workdir: str, services: dict) -> None:
        self.settings = settings
        self.workdir = workdir
        # made with its final mode in one mkdir, under a name the project cannot guess
        self.data_dir = apptest_files.make_dir(workdir, "data-", apptest_files.SHARED)
        self.log_path = os.path.join(workdir, "app.log")
        self.services = services
        self.proc = None
        #: more environment variables for the next start() (a test's own settings)
        self.extra_env: dict = {}
        self.port = 0
        self.url = ""
        self.starts = 0

    def env(self) -> dict:
        osmod = apptest.remote_module("os")
        env = dict(osmod.environ.copy())
        env.update({k: str(v) for k, v in self.settings.get("env", {}).items()})
        env.update({k: str(v) for k, v in self.extra_env.items()})
        env["PORT"] = str(self.port)
        env["DATA_DIR"] = self.data_dir
        for name, spec in self.settings.get("service_env", {}).items():
            env[spec] = self.services[name].url
        return env

    def start(self) -> App:
        """Start the app (a new port each time) and wait until it answers."""
        if self.proc is not None:
            raise AssertionError("the app is already running; stop() it first")
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        argv = shlex.split(self.settings["command"])
        log = apptest.remote_module("builtins").open(self.log_path, "ab")
        sp = apptest.subprocess
        self.proc = sp.Popen(
            argv,
            stdin=sp.DEVNULL,
            stdout=log,
            stderr=sp.STDOUT,
            env=self.env(),
            start_new_session=True,
        )
        log.close()
        self.starts += 1
        self._wait_ready(float(self.settings.get("startup_timeout", 15)))
        return self

    def _wait_ready(self, timeout: float) -> None:
        end = time.monotonic() + timeout
        path = self.settings.get("ready_path", "/")
        while True:
            code = self.proc.poll()
            if code is not None:
                self.proc = None
                raise AppFailed(
                    f"the app ({self.settings['command']}) exited with code {code} before it "
                    f"answered on port {self.port}; its last output: {self.log_tail()!r}"
                )
            try:
                http("GET", self.url + path, timeout=2.0)
                return
            except (OSError, ValueError):
                pass
            if time.monotonic() >= end:
                raise AppFailed(
                    f"the app ({self.settings['command']}) did not answer on 127.0.0.1:"
                    f"{self.port} (from $PORT) within {timeout:g}s; its last output: "
                    f"{self.log_tail()!r}"
                )
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop the app (SIGKILL to its process group, as a crash or power cut would)."""
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        try:
            pid = proc.pid
            apptest.remote_module("os").killpg(pid, 9)
            proc.wait(10)
        except Exception:
            pass

    def restart(self) -> App:
        self.stop()
        return self.start()

    def log_tail(self, chars: int = 300) -> str:
        """The end of the app's log, which the project's process wrote (and could have
        turned into a symlink or a FIFO: read without following or blocking)."""
        try:
            data = apptest_files.read_bytes(self.log_path)[-chars:]
        except OSError:
            return ""
        return data.decode("utf-8", "replace")

    # -- HTTP ---------------------------------------------------------------------------------
    def request(self, method: str, path: str, json=None, data=None, headers=None, timeout=10.0):
        return http(method, self.url + path, json, data, headers, timeout)

    def get(self, path: str, **kw) -> Response:
        return self.request("GET", path, **kw)

    def post(self, path: str, json=None, **kw) -> Response:
        return self.request("POST", path, json=json, **kw)

    def put(self, path: str, json=None, **kw) -> Response:
        return self.request("PUT", path, json=json, **kw)

    def patch(self, path: str, json=None, **kw) -> Response:
        return self.request("PATCH", path, json=json, **kw)

    def delete(self, path: str, **kw) -> Response:
        return self.request("DELETE", path, **kw)


def _workdir() -> str:
    """A fresh directory for one app (its log, its data directory): shared and sticky,
    made with its final mode in the grader's scratch."""
    return apptest_files.make_dir(_state["scratch"], "a", apptest_files.SHARED)


class FullStack:
    """The plugin object: fixtures ``services``, ``app``, ``page``."""

    @pytest.fixture
    def services(self):
        if not _state["services"] and _state["services_spec"]:
            import apptest_services

            _state["services"] = apptest_services.start_services(
                _state["services_spec"], _state["read"]
            )
        for service in _state["services"].values():
            service.reset()
        return _state["services"]

    @pytest.fixture
    def app(self, services):
        settings = _state["app"]
        if not settings:
            raise RuntimeError("this task has no [app] section in task.toml")
        app = App(settings, _workdir(), services)
        app.start()
        yield app
        app.stop()

    @pytest.fixture
    def app_factory(self, services):
        """``make()`` gives an App that is not started yet (to test start-up itself)."""
        made = []

        def make() -> App:
            made.append(App(_state["app"], _workdir(), services))
            return made[-1]

        yield make
        for a in made:
            a.stop()

    @pytest.fixture
    def page(self):
        browser = _state.get("browser")
        if browser is None or browser.closed:
            browser = _state["browser"] = _state["launch"]()
        tab = browser.new_page()
        tab.timeout = float((_state["app"] or {}).get("page_timeout", tab.timeout))
        yield tab
        tab.close()
