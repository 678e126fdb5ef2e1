"""A bounded pool of warm sandboxes, so an episode does not pay for a container start.

``acquire()`` hands out a sandbox nobody else holds, clean: no files and no processes of
its previous holder. ``release()`` gives it back. How a sandbox is cleaned depends on the
backend: a Docker sandbox is cleaned lazily, as the first step of its next command (inside
the same ``docker exec``, so handing a sandbox over costs no extra exec), and that step
checks the container is back to its idle state (else it is replaced); a local sandbox is
emptied at release. With ``reuse=False`` no sandbox serves two holders: a released one is
closed and a fresh one started in its place, in the background, so the next ``acquire``
still finds a warm sandbox (what a reset cannot clear, such as a container's counters of
processes started or memory used, then never reaches another holder).

A sandbox that broke (container gone, closed by its holder, could not be cleaned) is
thrown away and replaced. The pool never holds more than ``size`` sandboxes; ``acquire``
waits (up to its timeout) when all are in use. It is safe to use from many threads, and
``acquire_async`` / ``sandbox_async`` serve asyncio code. ``close()`` (or leaving the
``with`` block) closes every sandbox, including those still handed out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from agentgym import ConfigError, SandboxError
from agentgym.sandbox.backends import open_sandbox, resolve_backend
from agentgym.sandbox.base import Sandbox
from agentgym.sandbox.docker import prune as prune_leftovers
from agentgym.sandbox.limits import SandboxLimits

log = logging.getLogger("agentgym.sandbox")

__all__ = ["SandboxPool"]


class SandboxPool:
    """Keeps up to ``size`` warm sandboxes and hands them out one holder at a time.

    Example::

        with SandboxPool(size=4) as pool:
            with pool.sandbox() as sb:
                sb.write_files({"t.py": "print(1)"})
                sb.run("python3 t.py")

    Args:
        size: most sandboxes at once (handed out plus idle).
        backend: ``"docker"``, ``"local"`` or ``"auto"`` (resolved once, at creation).
        limits: limits of every sandbox; ``**limit_overrides`` change single fields.
        image: Docker image (default: the built one).
        level: local isolation level (default: the strongest available).
        warm: how many sandboxes to start right away (default: ``size``).
        prune: for Docker, first remove containers left by dead processes.
        factory: build sandboxes with this instead (tests, custom backends).
        reuse: hand a released sandbox, reset, to the next holder (default); ``False``:
            close it and start a fresh one in the background (every holder gets a sandbox
            no one held before).

    Raises:
        ConfigError: ``size`` or ``warm`` out of range, or a bad limit.
        SandboxUnavailableError: the backend cannot be used here.
    """

    def __init__(
        self,
        size: int = 4,
        *,
        backend: str = "auto",
        limits: SandboxLimits | None = None,
        image: str | None = None,
        level: str | None = None,
        warm: int | None = None,
        prune: bool = True,
        factory: Callable[[], Sandbox] | None = None,
        reuse: bool = True,
        **limit_overrides: Any,
    ) -> None:
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise ConfigError(f"SandboxPool size must be an integer >= 1, got {size!r}.")
        warm = size if warm is None else warm
        if not isinstance(warm, int) or not 0 <= warm <= size:
            raise ConfigError(f"SandboxPool warm must be between 0 and size={size}, got {warm!r}.")
        self.size = size
        self.reuse = bool(reuse)
        self._backend = backend
        if factory is None:
            lim = SandboxLimits.from_kwargs(limits, **limit_overrides)
            chosen = self._backend = resolve_backend(backend, image=image, level=level)
            if backend == "auto":
                log.info("SandboxPool: using the %s backend", chosen)

            def factory() -> Sandbox:
                return open_sandbox(chosen, limits=lim, image=image, level=level)

            if chosen == "docker" and prune:
                removed = prune_leftovers()
                if removed:
                    log.info("SandboxPool: removed %d leftover container(s)", len(removed))
        elif limits is not None or limit_overrides:
            raise ConfigError("Give either factory= or limits, not both.")
        self._factory: Callable[[], Sandbox] = factory
        self._cond = threading.Condition()
        self._idle: list[Sandbox] = []
        self._busy: dict[int, Sandbox] = {}
        self._pending = 0  # being created, checked or replaced
        self._closed = False
        self.created = 0
        self.replaced = 0
        if warm:
            self._pending += warm
            with ThreadPoolExecutor(max_workers=min(warm, 8)) as ex:
                results = list(ex.map(lambda _: self._try_create(), range(warm)))
            errors = [r for r in results if isinstance(r, BaseException)]
            with self._cond:
                self._pending -= warm
                self._idle.extend(r for r in results if isinstance(r, Sandbox))
            if errors:
                self.close()
                raise errors[0]

    # -- handing out ----------------------------------------------------------------------
    def acquire(self, timeout: float | None = None) -> Sandbox:
        """A clean sandbox for the caller alone; give it back with :meth:`release`.

        Args:
            timeout: seconds to wait when all ``size`` sandboxes are in use (``None``:
                wait as long as it takes).

        Raises:
            SandboxError: the pool is closed, or no sandbox became free in time.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                if self._closed:
                    raise SandboxError("This SandboxPool is closed; create a new one.")
                if self._idle:
                    sb: Sandbox | None = self._idle.pop()
                    break
                if self._total() < self.size:
                    sb = None
                    break
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise SandboxError(
                        f"No sandbox became free within {timeout} s: all {self.size} are in "
                        "use. Release sandboxes when done (use `with pool.sandbox():`) or "
                        "create the pool with a larger size."
                    )
                self._cond.wait(left)
            self._pending += 1
        try:
            if sb is not None and not sb.healthy():
                log.info("SandboxPool: replacing a broken sandbox")
                _close_quietly(sb)
                sb = None
                self.replaced += 1
            if sb is None:
                sb = self._create()
        except BaseException:
            with self._cond:
                self._pending -= 1
                self._cond.notify()
            raise
        with self._cond:
            self._pending -= 1
            if self._closed:
                _close_quietly(sb)
                raise SandboxError("This SandboxPool was closed while acquiring.")
            self._busy[id(sb)] = sb
        return sb

    def release(self, sandbox: Sandbox) -> None:
        """Give a sandbox back. It is cleaned before anyone sees it again; a broken or
        closed one is thrown away (and replaced in the background).

        Raises:
            SandboxError: the sandbox was not acquired from this pool (or was released twice).
        """
        with self._cond:
            if self._busy.pop(id(sandbox), None) is None:
                raise SandboxError(
                    "This sandbox is not held from this pool (released twice, or acquired "
                    "elsewhere)."
                )
            closed = self._closed
            self._pending += 1
        usable = not closed and not sandbox.closed and not sandbox.broken
        if usable and not self.reuse:  # closed and replaced by a fresh one, off this thread
            threading.Thread(target=self._retire, args=(sandbox,), daemon=True).start()
            return
        keep = False
        if usable:
            try:
                sandbox.reset()
                keep = True
            except Exception as e:
                log.info("SandboxPool: dropping a sandbox that could not be reset: %s", e)
        if not keep:
            _close_quietly(sandbox)
        with self._cond:
            self._pending -= 1
            if keep:
                self._idle.append(sandbox)
            self._cond.notify()
        if not keep and not closed:
            self.replaced += 1
            threading.Thread(target=self._refill, daemon=True).start()

    @contextlib.contextmanager
    def sandbox(self, timeout: float | None = None) -> Iterator[Sandbox]:
        """``with pool.sandbox() as sb:`` acquires and always releases."""
        sb = self.acquire(timeout)
        try:
            yield sb
        finally:
            self.release(sb)

    # -- asyncio ----------------------------------------------------------------------------
    async def acquire_async(self, timeout: float | None = None) -> Sandbox:
        """:meth:`acquire` without blocking the event loop. If the awaiting task is
        cancelled, a sandbox acquired meanwhile goes back to the pool."""
        loop = asyncio.get_running_loop()
        fut = loop.run_in_executor(None, self.acquire, timeout)
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:

            def give_back(f: asyncio.Future[Sandbox]) -> None:
                if not f.cancelled() and f.exception() is None:
                    self.release(f.result())

            fut.add_done_callback(give_back)
            raise

    async def release_async(self, sandbox: Sandbox) -> None:
        """:meth:`release` without blocking the event loop."""
        await asyncio.to_thread(self.release, sandbox)

    @contextlib.asynccontextmanager
    async def sandbox_async(self, timeout: float | None = None) -> AsyncIterator[Sandbox]:
        """``async with pool.sandbox_async() as sb:``."""
        sb = await self.acquire_async(timeout)
        try:
            yield sb
        finally:
            await self.release_async(sb)

    # -- shutting down ------------------------------------------------------------------------
    def close(self) -> None:
        """Close every sandbox, idle and handed out. Idempotent."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            doomed = self._idle + list(self._busy.values())
            self._idle = []
            self._cond.notify_all()
        if doomed:
            try:
                with ThreadPoolExecutor(max_workers=min(len(doomed), 8)) as ex:
                    list(ex.map(_close_quietly, doomed))
            except RuntimeError:  # at interpreter exit no new threads: one at a time
                for sb in doomed:
                    _close_quietly(sb)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    @property
    def backend(self) -> str:
        """The backend the pool's sandboxes use: ``"docker"`` or ``"local"`` (``"auto"``
        resolved at creation); with a ``factory``, the ``backend`` argument as given."""
        return self._backend

    def stats(self) -> dict[str, int]:
        """Counts: ``size``, ``idle``, ``in_use``, ``created``, ``replaced``."""
        with self._cond:
            return {
                "size": self.size,
                "idle": len(self._idle),
                "in_use": len(self._busy),
                "created": self.created,
                "replaced": self.replaced,
            }

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> SandboxPool:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.close)

    def __repr__(self) -> str:
        s = self.stats()
        return (
            f"<SandboxPool {self.backend} size={s['size']} idle={s['idle']} in_use={s['in_use']}>"
        )

    # -- internals --------------------------------------------------------------------------
    def _total(self) -> int:
        return len(self._idle) + len(self._busy) + self._pending

    def _create(self) -> Sandbox:
        sb = self._factory()
        with self._cond:
            self.created += 1
        return sb

    def _try_create(self) -> Sandbox | BaseException:
        try:
            return self._create()
        except BaseException as e:
            return e

    def _retire(self, sandbox: Sandbox) -> None:
        """Close a released sandbox and start a fresh one in its place (``reuse=False``);
        its slot stays counted as pending meanwhile, so the pool never exceeds ``size``."""
        _close_quietly(sandbox)
        with self._cond:
            closed = self._closed
        result = None if closed else self._try_create()
        with self._cond:
            self._pending -= 1
            if isinstance(result, Sandbox):
                if self._closed:
                    _close_quietly(result)
                else:
                    self._idle.append(result)
            elif result is not None and not self._closed:  # closed meanwhile: no matter
                log.warning("SandboxPool: could not start a fresh sandbox: %s", result)
            self._cond.notify()

    def _refill(self) -> None:
        """Start one sandbox to replace a thrown-away one, if there is room."""
        with self._cond:
            if self._closed or self._total() >= self.size:
                return
            self._pending += 1
        result = self._try_create()
        with self._cond:
            self._pending -= 1
            if isinstance(result, Sandbox):
                if self._closed:
                    _close_quietly(result)
                else:
                    self._idle.append(result)
            else:
                log.warning("SandboxPool: could not start a replacement sandbox: %s", result)
            self._cond.notify()


def _close_quietly(sb: Sandbox) -> None:
    try:
        sb.close()
    except Exception as e:
        log.warning("could not close %r: %s", sb, e)
