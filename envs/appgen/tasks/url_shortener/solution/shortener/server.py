"""The HTTP API."""

import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from shortener.store import ConflictError, LinkStore


class Handler(BaseHTTPRequestHandler):
    server_version = "shortener/1.0"

    def log_message(self, format, *args):
        pass

    @property
    def store(self):
        return self.server.store

    def _send(self, status, body=None, headers=()):
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        for key, value in headers:
            self.send_header(key, value)
        if body is not None:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status, message):
        self._send(status, {"error": message})

    def _route(self):
        parts = [p for p in self.path.split("?")[0].split("/") if p]
        if parts == ["api", "links"]:
            return "links", None
        if len(parts) == 3 and parts[:2] == ["api", "links"]:
            return "link", parts[2]
        if len(parts) == 1 and parts[0] != "api":
            return "redirect", parts[0]
        return None, None

    def _base(self):
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def do_GET(self):
        kind, code = self._route()
        if kind == "links":
            return self._send(200, self.store.list())
        if kind in ("link", "redirect"):
            link = self.store.get(code)
            if link is None:
                return self._error(404, f"no link with code {code!r}")
            if kind == "link":
                return self._send(200, link)
            self.store.hit(code)
            return self._send(302, None, [("Location", link["url"])])
        return self._error(404, "not found")

    def do_POST(self):
        kind, _ = self._route()
        if kind != "links":
            return self._error(405 if kind else 404, "method not allowed" if kind else "not found")
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"null")
        except ValueError:
            return self._error(400, "the body is not valid JSON")
        if not isinstance(body, dict) or "url" not in body:
            return self._error(400, 'expected a JSON object with "url"')
        try:
            link = self.store.create(body["url"], body.get("code"))
        except ValueError as e:
            return self._error(400, str(e))
        except ConflictError as e:
            return self._error(409, str(e))
        return self._send(201, {**link, "short_url": f"{self._base()}/{link['code']}"})

    def do_DELETE(self):
        kind, code = self._route()
        if kind != "link":
            return self._error(405 if kind else 404, "method not allowed" if kind else "not found")
        if not self.store.delete(code):
            return self._error(404, f"no link with code {code!r}")
        return self._send(204)

    def do_PUT(self):
        kind, _ = self._route()
        self._error(405 if kind else 404, "method not allowed" if kind else "not found")

    do_PATCH = do_PUT


def create_server(db_path, host="127.0.0.1", port=0):
    server = ThreadingHTTPServer((host, port), Handler)
    server.store = LinkStore(db_path)
    return server
