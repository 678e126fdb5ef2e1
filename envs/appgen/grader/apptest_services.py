"""Mock external services (weather, currency rates, calendar, mail relay) for hidden tests.

Runs in the grader's process inside the grading sandbox (Python 3.8+, standard library).
A task names its services in ``task.toml`` (``[services.NAME]``: a fixture file under
``tests_hidden/`` and the environment variable that gives the app the service's URL).
Each service is an HTTP server on ``127.0.0.1`` (a free port) served by threads of the
grader's process: the project reaches it over loopback like any client, and cannot read
its fixture, change its answers or stop it (it runs as the grader's user).

A fixture is JSON::

    {"routes": [
      {"method": "GET", "path": "/v1/current", "query": {"city": "Oslo"},
       "status": 200, "json": {"temp_c": 4.5}},
      {"method": "GET", "path": "/v1/current", "status": 404, "json": {"error": "unknown city"}}
    ]}

The first route whose method, path and query (a subset of the request's) match answers
(``json``, or ``body`` with ``headers``); no match answers 404. Every request is recorded
(:attr:`MockService.requests`). Tests steer a service during a test: ``fail(status,
times)`` answers errors, ``slow(seconds)`` delays answers, ``handler = fn`` answers with
the test's own function; :meth:`MockService.reset` (run before every test) undoes them.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

#: largest request body a mock reads
MAX_BODY = 1 << 20
#: requests kept per test
MAX_RECORDED = 2000


class Request:
    """One request the app made: ``method``, ``path``, ``query`` (name -> first value),
    ``headers`` (lower-case names), ``body`` (text) and :meth:`json`."""

    def __init__(self, method: str, path: str, query: dict, headers: dict, body: str) -> None:
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body

    def json(self):
        return json.loads(self.body) if self.body else None

    def __repr__(self) -> str:
        return f"<{self.method} {self.path} {self.query}>"


class MockService:
    """One mock service: routes from its fixture, recorded requests, test controls."""

    def __init__(self, name: str, fixture: dict) -> None:
        self.name = name
        self.routes = list(fixture.get("routes", []))
        self.requests: list = []
        self._lock = threading.Lock()
        self.reset()
        service = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def _serve(self) -> None:
                service._answer(self)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _serve

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    # -- controls for tests -------------------------------------------------------------------
    def reset(self) -> None:
        """Forget recorded requests and undo ``fail``, ``slow`` and ``handler``."""
        with self._lock:
            self.requests = []
        self.failures_left = 0
        self.failure_status = 503
        self.delay = 0.0
        self.handler = None

    def fail(self, status: int = 503, times: int = 1_000_000) -> None:
        """Answer the next ``times`` requests with ``status`` and an error body."""
        self.failure_status = status
        self.failures_left = times

    def slow(self, seconds: float) -> None:
        """Wait ``seconds`` before answering each request."""
        self.delay = float(seconds)

    def calls(self, method: str | None = None, path: str | None = None) -> list:
        """Recorded requests, optionally only those of ``method`` and ``path``."""
        with self._lock:
            found = list(self.requests)
        return [
            r
            for r in found
            if (method is None or r.method == method) and (path is None or r.path == path)
        ]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # -- serving ------------------------------------------------------------------------------
    def _answer(self, h: BaseHTTPRequestHandler) -> None:
        parsed = urllib.parse.urlsplit(h.path)
        query = {k: v[0] for k, v in urllib.parse.parse_qs(parsed.query).items()}
        size = min(int(h.headers.get("Content-Length") or 0), MAX_BODY)
        body = h.rfile.read(size).decode("utf-8", "replace") if size > 0 else ""
        headers = {k.lower(): v for k, v in h.headers.items()}
        request = Request(h.command, parsed.path, query, headers, body)
        with self._lock:
            if len(self.requests) < MAX_RECORDED:
                self.requests.append(request)
        if self.delay:
            time.sleep(self.delay)
        if self.failures_left > 0:
            self.failures_left -= 1
            status, payload, extra = self.failure_status, {"error": "service unavailable"}, {}
        elif self.handler is not None:
            status, payload = self.handler(request)
            extra = {}
        else:
            status, payload, extra = self._route(request)
        if isinstance(payload, (bytes, str)):
            data = payload.encode("utf-8") if isinstance(payload, str) else payload
            ctype = extra.pop("Content-Type", "text/plain; charset=utf-8")
        else:
            data = json.dumps(payload).encode("utf-8")
            ctype = "application/json"
        try:
            h.send_response(status)
            h.send_header("Content-Type", ctype)
            h.send_header("Content-Length", str(len(data)))
            for k, v in extra.items():
                h.send_header(k, v)
            h.end_headers()
            h.wfile.write(data)
        except OSError:
            pass  # the app hung up

    def _route(self, request: Request) -> tuple:
        for route in self.routes:
            if route.get("method", "GET").upper() != request.method:
                continue
            if route.get("path") != request.path:
                continue
            want = route.get("query") or {}
            if any(request.query.get(k) != str(v) for k, v in want.items()):
                continue
            if "json" in route:
                return int(route.get("status", 200)), route["json"], dict(route.get("headers", {}))
            return (
                int(route.get("status", 200)),
                str(route.get("body", "")),
                dict(route.get("headers", {})),
            )
        return 404, {"error": f"no such resource: {request.method} {request.path}"}, {}


def start_services(specs: dict, read) -> dict:
    """Start every service of ``specs`` (name -> {"fixture": path}); ``read(path)`` gives
    a fixture's bytes. Returns name -> :class:`MockService`."""
    services = {}
    for name, spec in sorted(specs.items()):
        fixture = json.loads(read(spec["fixture"]).decode("utf-8"))
        services[name] = MockService(name, fixture)
    return services
