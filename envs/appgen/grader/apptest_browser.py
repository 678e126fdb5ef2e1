"""A headless Chromium that hidden tests drive like a user: load pages, type, click, read.

Runs in the grader's process inside the grading sandbox (Python 3.8+, standard library).
The browser is Debian's ``chromium``, started by the grader with
``--remote-debugging-pipe``: the DevTools protocol (CDP) travels over two inherited pipes
(fd 3 and 4), never over a TCP port, so nothing else in the sandbox (the project's
processes least of all) can connect to it and drive it. It runs as the grader's user,
without Chromium's own sandbox (which needs namespaces the container does not give); the
pages it loads come from the project's server, and their scripts run inside the browser's
renderer, which has no way to the grader's files or to the pipes.

Every test gets a fresh browser context (its own cookies, storage and cache) and one page
in it: :class:`Page`. Input is real: clicks are mouse events at the element's centre,
typing is key and text-input events, so the page's own event handlers run as they would
for a person. What the tests read (text, values, counts) comes back as JSON values
through ``Runtime.evaluate``: plain data, never the page's objects.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import tempfile
import time

#: where Debian puts the browser
CANDIDATES = ("/usr/bin/chromium", "/usr/lib/chromium/chromium", "/usr/bin/chromium-browser")
FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-extensions",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-breakpad",
    "--disable-crash-reporter",
    "--disable-features=Translate,MediaRouter,OptimizationHints,DialMediaRouteProvider",
    "--disable-quic",
    "--mute-audio",
    "--no-zygote",
    "--renderer-process-limit=2",
    "--window-size=1280,900",
    "--remote-debugging-pipe",
)
#: seconds a click waits for another element to stop covering its target
COVERED_WAIT = 2.0
_SPECIAL_KEYS = {
    "Enter": ("Enter", 13, "\r"),
    "Tab": ("Tab", 9, ""),
    "Escape": ("Escape", 27, ""),
    "Backspace": ("Backspace", 8, ""),
}


class BrowserError(Exception):
    """The browser failed, went away, or did not answer in time."""


class PageError(AssertionError):
    """What a test asked of the page is not there (no such element, a wait ran out)."""


def find_chromium() -> str:
    for path in CANDIDATES:
        if os.access(path, os.X_OK):
            return path
    found = shutil.which("chromium")
    if found:
        return found
    raise BrowserError(
        "no chromium in the sandbox image: the image recipe must include Debian's "
        "'chromium' package (agentgym sandbox build-image)"
    )


class Browser:
    """One Chromium process, spoken to over the DevTools pipe."""

    def __init__(self, timeout: float = 30.0) -> None:
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix=".agentgym-browser-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        env = {
            "HOME": self.profile,
            "PATH": "/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "TMPDIR": self.profile,
        }
        argv = [find_chromium(), *FLAGS, f"--user-data-dir={self.profile}/p", "about:blank"]
        null = os.open(os.devnull, os.O_RDWR)
        actions = [
            (os.POSIX_SPAWN_DUP2, null, 0),
            (os.POSIX_SPAWN_DUP2, null, 1),
            (os.POSIX_SPAWN_DUP2, null, 2),
            (os.POSIX_SPAWN_DUP2, to_browser_r, 3),
            (os.POSIX_SPAWN_DUP2, from_browser_w, 4),
        ]
        try:
            self.pid = os.posix_spawn(argv[0], argv, env, file_actions=actions, setsid=True)
        finally:
            for fd in (to_browser_r, from_browser_w, null):
                os.close(fd)
        self._buffer = b""
        self._next_id = 0
        self._events: list = []
        self.closed = False
        self.call("Browser.getVersion", deadline=time.monotonic() + max(timeout, 30.0))

    # -- the protocol --------------------------------------------------------------------
    def _read_message(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError("the browser did not answer in time")
            ready, _, _ = select.select([self._from_browser], [], [], min(left, 1.0))
            if not ready:
                continue
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                self.closed = True
                raise BrowserError("the browser exited")
            self._buffer += chunk
        raw, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(raw.decode("utf-8"))

    def call(self, method: str, params=None, session: str = "", deadline: float = 0.0):
        """Send one command and wait for its answer; events that arrive meanwhile are kept."""
        if self.closed:
            raise BrowserError("the browser is closed")
        self._next_id += 1
        msg = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        data = json.dumps(msg).encode("utf-8") + b"\0"
        while data:
            data = data[os.write(self._to_browser, data) :]
        deadline = deadline or time.monotonic() + self.timeout
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == msg["id"]:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error'].get('message', reply['error'])}")
                return reply.get("result", {})
            if "method" in reply:
                self._events.append(reply)
                del self._events[:-500]

    def take_events(self, session: str, method: str) -> list:
        """Events ``method`` of ``session`` received so far (removed from the queue)."""
        out = [e for e in self._events if e.get("sessionId") == session and e["method"] == method]
        self._events = [e for e in self._events if e not in out]
        return out

    def pump(self, seconds: float) -> None:
        """Read events for ``seconds`` (or until none arrive)."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            ready, _, _ = select.select(
                [self._from_browser], [], [], max(0.0, end - time.monotonic())
            )
            if not ready:
                return
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                self.closed = True
                return
            self._buffer += chunk
            while b"\0" in self._buffer:
                raw, _, self._buffer = self._buffer.partition(b"\0")
                msg = json.loads(raw.decode("utf-8"))
                if "method" in msg:
                    self._events.append(msg)
            del self._events[:-500]

    def new_page(self) -> Page:
        """A page in a fresh browser context (cookies, storage and cache of its own)."""
        context = self.call("Target.createBrowserContext", {"disposeOnDetach": True})
        target = self.call(
            "Target.createTarget",
            {"url": "about:blank", "browserContextId": context["browserContextId"]},
        )
        session = self.call(
            "Target.attachToTarget", {"targetId": target["targetId"], "flatten": True}
        )
        page = Page(self, session["sessionId"], context["browserContextId"])
        for domain in ("Page.enable", "Runtime.enable"):
            self.call(domain, session=page.session)
        return page

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except OSError:
                pass
        for fd in (self._to_browser, self._from_browser):
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            os.waitpid(self.pid, 0)
        except OSError:
            pass
        shutil.rmtree(self.profile, ignore_errors=True)


_HELPERS = """
(() => {
  const one = (sel) => {
    const el = document.querySelector(sel);
    if (!el) throw new Error('no element matches ' + sel);
    return el;
  };
  const visible = (el) => {
    const s = getComputedStyle(el);
    const r = el.getBoundingClientRect();
    return s.display !== 'none' && s.visibility !== 'hidden' && r.width > 0 && r.height > 0;
  };
  return {one, visible};
})()
"""


class Page:
    """One browser tab, driven as a person would drive it. Selectors are CSS selectors.

    Reads (``text``, ``texts``, ``value``, ``count``, ``attr``, ``visible``, ``eval``)
    return plain JSON values. ``wait_*`` methods poll until the page shows what they wait
    for (pages update after their requests finish) and raise :class:`PageError` at the
    timeout, naming what was expected and what the page showed.
    """

    def __init__(self, browser: Browser, session: str, context: str) -> None:
        self.browser = browser
        self.session = session
        self.context = context
        self.timeout = 10.0
        self.dialogs: list = []  # (type, message) of alert/confirm/prompt boxes, accepted
        self.errors: list = []  # uncaught exceptions of the page's scripts

    def _call(self, method: str, params=None):
        result = self.browser.call(method, params, session=self.session)
        self._handle_events()
        return result

    def _handle_events(self) -> None:
        for ev in self.browser.take_events(self.session, "Page.javascriptDialogOpening"):
            p = ev.get("params", {})
            self.dialogs.append((p.get("type"), p.get("message")))
            self.browser.call("Page.handleJavaScriptDialog", {"accept": True}, session=self.session)
        for ev in self.browser.take_events(self.session, "Runtime.exceptionThrown"):
            details = ev.get("params", {}).get("exceptionDetails", {})
            text = details.get("exception", {}).get("description") or details.get("text")
            self.errors.append(str(text)[:300])

    def eval(self, expression: str):
        """The value of a JavaScript expression in the page (awaited if a promise), as JSON."""
        result = self._call(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
        )
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            raise PageError(str(text).splitlines()[0][:300])
        return result.get("result", {}).get("value")

    def _js(self, body: str, *args):
        """Run ``body`` as a function of ``h`` (helpers) and ``args`` (JSON values)."""
        return self.eval(f"(function(h, args){{{body}}})({_HELPERS}, {json.dumps(list(args))})")

    # -- navigation -------------------------------------------------------------------------
    def goto(self, url: str) -> None:
        """Load ``url`` and wait for its load event."""
        self.browser.take_events(self.session, "Page.loadEventFired")
        result = self._call("Page.navigate", {"url": url})
        if result.get("errorText"):
            raise PageError(f"could not load {url}: {result['errorText']}")
        self._wait_load()

    def reload(self) -> None:
        self.browser.take_events(self.session, "Page.loadEventFired")
        self._call("Page.reload", {"ignoreCache": True})
        self._wait_load()

    def _wait_load(self) -> None:
        end = time.monotonic() + self.timeout
        while time.monotonic() < end:
            if self.browser.take_events(self.session, "Page.loadEventFired"):
                self._handle_events()
                return
            self.browser.pump(0.05)
            self._handle_events()
        raise PageError("the page did not finish loading in time")

    @property
    def url(self) -> str:
        return self.eval("location.href")

    # -- input ------------------------------------------------------------------------------
    def _center(self, selector: str) -> tuple:
        """Where a click on ``selector`` lands: the element's centre, once it has kept its
        place for two reads 50 ms apart and no other element covers that point (a page
        that is still filling its lists moves its buttons; a click then would hit whatever
        moved there). A covered element is clicked anyway after :data:`COVERED_WAIT`
        seconds (an overlay the page means to be clicked through); a missing or hidden
        one fails at once."""
        end = time.monotonic() + self.timeout
        covered_since = None
        last = None
        while True:
            x, y, hit = self._js(
                "const el = h.one(args[0]); el.scrollIntoView({block: 'center'});"
                "const r = el.getBoundingClientRect();"
                "if (!h.visible(el)) throw new Error('element is not visible: ' + args[0]);"
                "const x = r.left + r.width / 2, y = r.top + r.height / 2;"
                "const at = document.elementFromPoint(x, y);"
                "return [x, y, !!at && (at === el || el.contains(at))];",
                selector,
            )
            now = time.monotonic()
            covered_since = None if hit else (covered_since or now)
            stable = last == (x, y)
            if stable and (hit or now - covered_since >= COVERED_WAIT or now >= end):
                return x, y
            if now >= end:
                raise PageError(f"{selector} kept moving for {self.timeout:g}s")
            last = (x, y)
            self.browser.pump(0.05)
            self._handle_events()

    def click(self, selector: str) -> None:
        """Click the element's centre with the mouse (it must be visible)."""
        x, y = self._center(selector)
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            params = {"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1}
            if kind == "mouseMoved":
                params["button"] = "none"
            self._call("Input.dispatchMouseEvent", params)
        self.browser.pump(0.02)
        self._handle_events()

    def focus(self, selector: str) -> None:
        self._js("const el = h.one(args[0]); el.focus(); return true;", selector)

    def fill(self, selector: str, text: str) -> None:
        """Clear a field and type ``text`` into it (input events, as from a keyboard)."""
        self.click(selector)
        self._js(
            "const el = h.one(args[0]); el.focus();if ('select' in el) el.select(); return true;",
            selector,
        )
        self.press("Backspace")
        if text:
            self._call("Input.insertText", {"text": text})

    def type(self, text: str) -> None:
        """Type ``text`` where the focus is."""
        self._call("Input.insertText", {"text": text})

    def press(self, key: str, selector: str | None = None) -> None:
        """Press a key (``Enter``, ``Tab``, ``Escape``, ``Backspace``) on the focused element."""
        if selector:
            self.focus(selector)
        name, code, text = _SPECIAL_KEYS[key]
        down = {"type": "keyDown", "key": name, "code": name, "windowsVirtualKeyCode": code}
        if text:
            down["text"] = text
        self._call("Input.dispatchKeyEvent", down)
        self._call(
            "Input.dispatchKeyEvent",
            {"type": "keyUp", "key": name, "code": name, "windowsVirtualKeyCode": code},
        )
        self.browser.pump(0.02)
        self._handle_events()

    def select(self, selector: str, value: str) -> None:
        """Choose the option with ``value`` (or with that text) in a ``<select>``."""
        ok = self._js(
            "const el = h.one(args[0]);"
            "const opt = [...el.options].find(o => o.value === args[1] || o.text === args[1]);"
            "if (!opt) return false; el.focus(); el.value = opt.value;"
            "el.dispatchEvent(new Event('input', {bubbles: true}));"
            "el.dispatchEvent(new Event('change', {bubbles: true})); return true;",
            selector,
            value,
        )
        if not ok:
            raise PageError(f"{selector} has no option {value!r}")

    def set_checked(self, selector: str, checked: bool = True) -> None:
        """Click a checkbox or radio button until it is (un)checked."""
        if self._js("return h.one(args[0]).checked;", selector) != checked:
            self.click(selector)

    # -- reading ----------------------------------------------------------------------------
    def count(self, selector: str) -> int:
        return self._js("return document.querySelectorAll(args[0]).length;", selector)

    def exists(self, selector: str) -> bool:
        return self.count(selector) > 0

    def text(self, selector: str) -> str:
        """The element's visible text (``innerText``), stripped."""
        return self._js("return h.one(args[0]).innerText.trim();", selector)

    def texts(self, selector: str) -> list:
        """The visible text of every matching element, in document order."""
        return self._js(
            "return [...document.querySelectorAll(args[0])].map(e => e.innerText.trim());",
            selector,
        )

    def value(self, selector: str) -> str:
        return self._js("return String(h.one(args[0]).value);", selector)

    def attr(self, selector: str, name: str):
        return self._js("return h.one(args[0]).getAttribute(args[1]);", selector, name)

    def checked(self, selector: str) -> bool:
        return bool(self._js("return !!h.one(args[0]).checked;", selector))

    def visible(self, selector: str) -> bool:
        return bool(
            self._js(
                "const el = document.querySelector(args[0]); return !!el && h.visible(el);",
                selector,
            )
        )

    def html(self, selector: str = "body") -> str:
        return self._js("return h.one(args[0]).outerHTML;", selector)

    # -- waiting ----------------------------------------------------------------------------
    def wait(self, check, what: str, timeout: float | None = None):
        """Poll ``check()`` until it returns a true value; return it. PageError at timeout."""
        end = time.monotonic() + (self.timeout if timeout is None else timeout)
        last = None
        while True:
            try:
                last = check()
                if last:
                    return last
            except PageError as e:
                last = f"({e})"
            if time.monotonic() >= end:
                raise PageError(f"waited for {what}; the page showed {last!r}")
            self.browser.pump(0.05)
            self._handle_events()

    def wait_for(self, selector: str, timeout: float | None = None) -> None:
        """Until an element matching ``selector`` is visible."""
        self.wait(lambda: self.visible(selector), f"{selector} to be visible", timeout)

    def wait_gone(self, selector: str, timeout: float | None = None) -> None:
        self.wait(lambda: not self.visible(selector), f"{selector} to disappear", timeout)

    def wait_text(self, selector: str, text: str, timeout: float | None = None) -> str:
        """Until some element matching ``selector`` contains ``text``; returns its text."""

        def check():
            return next((t for t in self.texts(selector) if text in t), None)

        return self.wait(check, f"{text!r} in {selector}", timeout)

    def wait_count(self, selector: str, n: int, timeout: float | None = None) -> None:
        self.wait(lambda: self.count(selector) == n, f"{n} x {selector}", timeout)

    def close(self) -> None:
        try:
            self.browser.call("Target.disposeBrowserContext", {"browserContextId": self.context})
        except BrowserError:
            pass
