"""A small router over http.server: JSON in and out, static files, one thread per request."""

import json
import mimetypes
import os
import re
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

STATIC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")


class HttpError(Exception):
    def __init__(self, status, message):
        super().__init__(message)
        self.status = status
        self.message = message


class Request:
    def __init__(self, handler, params):
        self.handler = handler
        self.params = params
        parts = urlsplit(handler.path)
        self.path = parts.path
        self.query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        size = int(handler.headers.get("Content-Length") or 0)
        self.raw = handler.rfile.read(size) if size else b""

    def json(self):
        try:
            data = json.loads(self.raw.decode("utf-8") or "null")
        except ValueError:
            raise HttpError(400, "the body is not valid JSON")
        if not isinstance(data, dict):
            raise HttpError(400, "the body must be a JSON object")
        return data


class Router:
    def __init__(self):
        self.routes = []

    def route(self, method, pattern):
        regex = re.compile("^" + re.sub(r"<(\w+)>", r"(?P<\1>[^/]+)", pattern) + "$")

        def register(fn):
            self.routes.append((method, regex, fn))
            return fn

        return register

    def dispatch(self, handler, method):
        path = urlsplit(handler.path).path
        allowed = False
        for m, regex, fn in self.routes:
            found = regex.match(path)
            if found:
                if m != method:
                    allowed = True
                    continue
                return fn(Request(handler, found.groupdict()))
        if method == "GET":
            static = serve_static(path)
            if static is not None:
                return static
        if allowed:
            raise HttpError(405, "method not allowed")
        raise HttpError(404, "not found")


def serve_static(path):
    name = "index.html" if path == "/" else path.lstrip("/")
    if ".." in name.split("/"):
        return None
    full = os.path.join(STATIC, name)
    if not os.path.isfile(full):
        return None
    with open(full, "rb") as f:
        body = f.read()
    ctype = mimetypes.guess_type(full)[0] or "application/octet-stream"
    if ctype.startswith("text/") or ctype.endswith("javascript"):
        ctype += "; charset=utf-8"
    return 200, body, ctype


def make_server(router, port):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def handle_method(self, method):
            try:
                result = router.dispatch(self, method)
            except HttpError as e:
                result = (e.status, {"error": e.message})
            except Exception as e:  # a bug: answer 500, keep serving
                result = (500, {"error": f"internal error: {e}"})
            status, body = result[0], result[1]
            ctype = result[2] if len(result) > 2 else "application/json"
            if status == 204:
                data = b""
            elif isinstance(body, bytes):
                data = body
            else:
                data = json.dumps(body).encode("utf-8")
            self.send_response(status)
            if data or status != 204:
                self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self.handle_method("GET")

        def do_POST(self):
            self.handle_method("POST")

        def do_PUT(self):
            self.handle_method("PUT")

        def do_PATCH(self):
            self.handle_method("PATCH")

        def do_DELETE(self):
            self.handle_method("DELETE")

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    return server


def run(router):
    port = int(os.environ.get("PORT") or 8000)
    server = make_server(router, port)
    print(f"listening on http://127.0.0.1:{port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


def data_path(filename):
    root = os.environ.get("DATA_DIR") or "data"
    os.makedirs(root, exist_ok=True)
    return os.path.join(root, filename)
