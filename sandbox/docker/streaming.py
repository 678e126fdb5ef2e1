"""One ``docker exec`` streamed: stdin fed, output demultiplexed into capped buffers, a
host-side deadline, and the exit code read back.

Output is read incrementally from the exec's raw socket with ``poll``; each stream keeps
at most its buffer's limit and the rest is read and dropped.
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agentgym import InfraError, SandboxError
from agentgym.sandbox.capture import CappedBuffer
from agentgym.sandbox.docker.scripts import WORKSPACE

log = logging.getLogger("agentgym.sandbox")

__all__ = [
    "ContainerGoneError",
    "EngineUnreachableError",
    "ExecEnd",
    "start_detached",
    "stream_exec",
]

#: seconds a command's output may stay open after the host-side kill
_AFTER_KILL = 10.0
_CHUNK = 256 * 1024


class ContainerGoneError(InfraError):
    """The container died under the sandbox (killed, stopped or removed from outside): an
    infrastructure failure (``reason="sandbox_died"``), never the command's doing.

    Attributes:
        detail: a short account of what happened, for the sandbox's ``broken`` state.
    """

    def __init__(self, message: str, detail: str) -> None:
        super().__init__(message, reason="sandbox_died")
        self.detail = detail


class EngineUnreachableError(InfraError):
    """The Docker engine stopped answering (``reason="docker_unreachable"``)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, reason="docker_unreachable")


def engine_errors() -> tuple[type[BaseException], ...]:
    """The exceptions the SDK raises when the engine cannot be reached."""
    from requests.exceptions import ConnectionError as RequestsConnectionError

    return (RequestsConnectionError, ConnectionError)


def unreachable(label: str, e: BaseException) -> EngineUnreachableError:
    """The error for a sandbox whose engine went away."""
    return EngineUnreachableError(
        f"The Docker engine stopped answering while sandbox {label} was in use ({e}). The "
        "episode cannot be scored; check `docker info` (the engine may be restarting)."
    )


def start_detached(
    api: Any, container_id: str, argv: list[str], *, user: str, env: Mapping[str, str], label: str
) -> None:
    """Start ``argv`` in the container as ``user`` and return at once (output discarded).

    Raises:
        ContainerGoneError: the engine refused the exec (container removed or stopped).
        EngineUnreachableError: the engine did not answer.
    """
    from docker.errors import APIError, NotFound

    try:
        exec_id = api.exec_create(
            container_id,
            argv,
            stdout=False,
            stderr=False,
            stdin=False,
            user=user,
            environment=dict(env) if env else None,
            workdir=WORKSPACE,
        )["Id"]
        api.exec_start(exec_id, detach=True)
    except (NotFound, APIError) as e:
        raise _gone(label, e) from e
    except engine_errors() as e:
        raise unreachable(label, e) from e


def _gone(label: str, e: BaseException) -> ContainerGoneError:
    return ContainerGoneError(
        f"Sandbox container {label} cannot run commands: {e}. It died or was removed from "
        "outside; the episode cannot be scored (a SandboxPool replaces the sandbox).",
        detail=f"the container is gone or stopped: {str(e)[:200]}",
    )


@dataclass(frozen=True)
class ExecEnd:
    """How one exec ended.

    Attributes:
        exit_code: the exec's exit code (-1 when it could not be read).
        duration: seconds from the start to the end of the output.
        host_killed: the output did not end by the deadline and the host stepped in.
        broken: why the container can no longer be trusted after this exec, or None.
    """

    exit_code: int
    duration: float
    host_killed: bool
    broken: str | None = None


#: how often a command that has printed nothing meanwhile has its container checked
LIVENESS_S = 10.0


def stream_exec(
    api: Any,
    container_id: str,
    argv: list[str],
    *,
    user: str,
    stdin: bytes | None,
    env: Mapping[str, str],
    deadline: float | None,
    stdout: CappedBuffer,
    stderr: CappedBuffer,
    on_deadline: Callable[[], object] | None = None,
    label: str = "",
    not_running: Callable[[], str | None] | None = None,
) -> ExecEnd:
    """Run ``argv`` in the container as ``user`` and stream it to the end.

    At ``deadline`` seconds a user command (``on_deadline`` given: it kills every process
    of the sandbox user) gets that kill and ``_AFTER_KILL`` more seconds to end its output;
    a system exec (kill, probe) is simply abandoned. Either way a stream that will not end
    marks the container broken.

    ``not_running`` (a liveness check: why the container cannot run, or None) is asked
    every :data:`LIVENESS_S` seconds of silence: a container paused or stopped under the
    command ends the exec within that, instead of at its deadline.

    Raises:
        ContainerGoneError: the engine refused the exec (container removed or stopped),
            or the liveness check found the container frozen under the command.
        EngineUnreachableError: the engine did not answer.
    """
    from docker.errors import APIError, NotFound

    demux = _Demux(stdout, stderr)
    start = time.monotonic()
    try:
        exec_id = api.exec_create(
            container_id,
            argv,
            stdout=True,
            stderr=True,
            stdin=stdin is not None,
            user=user,
            environment=dict(env) if env else None,
            workdir=WORKSPACE,
        )["Id"]
        sock = api.exec_start(exec_id, socket=True)
    except (NotFound, APIError) as e:
        raise _gone(label, e) from e
    except engine_errors() as e:
        raise unreachable(label, e) from e
    try:
        raw_sock, pending = _raw_socket(sock)
        demux.feed(pending)
        host_killed, stuck, frozen = _pump(
            raw_sock, demux, stdin, start, deadline, on_deadline, label, not_running
        )
    finally:
        _close_socket(sock)
    if frozen is not None:
        raise ContainerGoneError(
            f"Sandbox container {label} stopped running under a command ({frozen}): it was "
            "paused or stopped from outside. The episode cannot be scored; a SandboxPool "
            "replaces the sandbox.",
            detail=f"the container froze under a command: {frozen}",
        )
    duration = time.monotonic() - start
    broken = "a command's processes could not be killed" if stuck else None
    exit_code, gone = _exit_code(api, exec_id)
    if gone is not None:
        broken = f"the container is gone: {gone[:200]}"
    return ExecEnd(exit_code, duration, host_killed, broken)


def _pump(
    sock: socket.socket,
    demux: _Demux,
    stdin: bytes | None,
    start: float,
    deadline: float | None,
    on_deadline: Callable[[], object] | None,
    label: str,
    not_running: Callable[[], str | None] | None = None,
) -> tuple[bool, bool, str | None]:
    """Move bytes until the exec's stream ends.

    Returns whether the host had to step in, whether the stream never ended (the exec
    was abandoned), and why the container stopped running under it (``not_running``'s
    answer after :data:`LIVENESS_S` of silence), else None.
    """
    to_send = memoryview(stdin) if stdin else None
    if stdin is not None and not stdin:
        _shutdown_write(sock)
    poller = select.poll()
    fd = sock.fileno()
    flags = select.POLLIN | (select.POLLOUT if to_send is not None else 0)
    poller.register(fd, flags)
    killed = False
    limit_at = None if deadline is None else start + deadline
    heard = time.monotonic()  # the last output, or the last liveness check
    while True:
        wait_ms = None
        if not_running is not None:
            if time.monotonic() - heard >= LIVENESS_S:
                why = not_running()
                if why is not None:
                    return killed, False, why
                heard = time.monotonic()
            wait_ms = max(1, int((heard + LIVENESS_S - time.monotonic()) * 1000))
        if limit_at is not None:
            left = limit_at - time.monotonic()
            if left <= 0:
                if killed or on_deadline is None:
                    log.warning("sandbox %s: output did not end after a kill", label)
                    return True, True, None
                log.debug("sandbox %s: host-side kill at the deadline", label)
                on_deadline()
                killed = True
                limit_at = time.monotonic() + _AFTER_KILL
                continue
            wait_ms = (
                max(1, int(left * 1000)) if wait_ms is None else min(wait_ms, int(left * 1000) + 1)
            )
        for _, ev in poller.poll(wait_ms):
            if ev & select.POLLOUT and to_send is not None:
                try:
                    n = sock.send(to_send[:_CHUNK])
                    to_send = to_send[n:]
                except BlockingIOError:
                    n = 0
                except OSError:  # the command closed its stdin or exited
                    to_send = memoryview(b"")
                if not to_send:
                    to_send = None
                    _shutdown_write(sock)
                    poller.modify(fd, select.POLLIN)
            if ev & (select.POLLIN | select.POLLHUP | select.POLLERR):
                try:
                    data = sock.recv(_CHUNK)
                except BlockingIOError:
                    continue
                except OSError:
                    return killed, False, None
                if not data:
                    return killed, False, None
                demux.feed(data)
                heard = time.monotonic()


def _exit_code(api: Any, exec_id: str) -> tuple[int, str | None]:
    """The exec's exit code once the engine has it (-1 if it never does), and the error
    if the container went away under the command."""
    for _ in range(400):
        try:
            info = api.exec_inspect(exec_id)
        except Exception as e:  # the container went away under the command
            return -1, str(e)
        if not info.get("Running") and info.get("ExitCode") is not None:
            return int(info["ExitCode"]), None
        time.sleep(0.005)
    return -1, None


class _Demux:
    """Splits Docker's multiplexed exec stream (8-byte frame headers) into two buffers."""

    def __init__(self, out: CappedBuffer, err: CappedBuffer) -> None:
        self.out, self.err = out, err
        self.buf = bytearray()
        self.remaining = 0
        self.target = out

    def feed(self, data: bytes) -> None:
        self.buf += data
        while self.buf:
            if self.remaining == 0:
                if len(self.buf) < 8:
                    return
                kind = self.buf[0]
                self.remaining = int.from_bytes(self.buf[4:8], "big")
                del self.buf[:8]
                self.target = self.out if kind == 1 else self.err
                continue
            take = min(self.remaining, len(self.buf))
            self.target.feed(bytes(self.buf[:take]))
            del self.buf[:take]
            self.remaining -= take


def _raw_socket(sock: Any) -> tuple[socket.socket, bytes]:
    """The exec's raw socket, non-blocking, and any bytes the HTTP layer already buffered.

    The SDK reads the response headers through a buffered reader that may have pulled in
    the first output frames too; those bytes are taken from its buffer, then the socket is
    read directly.
    """
    raw = getattr(sock, "_sock", sock)
    if not isinstance(raw, socket.socket):
        raise SandboxError(
            "This Docker connection type (ssh or named pipe) is not supported by the "
            "sandbox; use a unix socket or tcp DOCKER_HOST."
        )
    raw.setblocking(False)
    pending = b""
    response = getattr(sock, "_response", None)
    if response is not None:
        try:
            pending = response.raw._fp.fp.peek() or b""
        except (AttributeError, BlockingIOError, OSError, ValueError):
            pending = b""
    return raw, pending


def _shutdown_write(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_WR)


def _close_socket(sock: Any) -> None:
    response = getattr(sock, "_response", None)
    for thing in (sock, getattr(sock, "_sock", None), response):
        if thing is not None:
            with contextlib.suppress(Exception):
                thing.close()
