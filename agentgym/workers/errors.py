"""Errors of the Ray env workers, both ends: a worker's report of an exception, and the
:class:`EnvWorkerError` the driver raises from it.

An env exception never crosses the process boundary as an object (it may not pickle):
the actor turns it into a report (type name, message, traceback text) with
:func:`guarded`, and the driver rebuilds an error from that report with
:func:`error_from_report`, mixed with the original type when it can be imported here.
"""

from __future__ import annotations

import importlib
import traceback
from collections.abc import Callable
from typing import Any

from agentgym.errors import AgentGymError

__all__ = ["EnvWorkerError", "error_from_report", "guarded"]


class EnvWorkerError(AgentGymError, RuntimeError):
    """An environment raised inside a Ray env worker, or the worker died.

    The message names the env, the call and the worker, and ends with the traceback as
    it happened in the worker. When the original exception type could be imported here,
    the raised object is also an instance of it, so ``except ConfigError`` (say) catches
    the same errors with and without workers (that type's own attributes are not
    restored: only the message and the traceback text travel).

    Attributes:
        reason: the failure's short code when the worker's error had one (an
            :class:`~agentgym.InfraError`'s), ``worker_lost`` when the worker died.
        env_id: the env whose call failed.
        remote_type: ``module.QualName`` of the exception raised in the worker.
        remote_traceback: its traceback text, as formatted in the worker.
    """

    def __init__(
        self,
        message: str,
        *,
        env_id: str | None = None,
        remote_type: str | None = None,
        remote_traceback: str | None = None,
    ) -> None:
        Exception.__init__(self, message)
        self.reason: str | None = None
        self.env_id = env_id
        self.remote_type = remote_type
        self.remote_traceback = remote_traceback

    def __str__(self) -> str:  # a KeyError base would otherwise quote the message
        return str(self.args[0]) if self.args else ""


def guarded(fn: Callable[[], Any]) -> tuple[str, Any]:
    """Run ``fn`` in the worker: ``("ok", result)``, or ``("error", report)`` if it raised.

    The report is plain data (``type`` as ``module.QualName``, ``message``,
    ``traceback``), so it reaches the driver whether or not the exception pickles.
    """
    try:
        return "ok", fn()
    except Exception as e:
        t = type(e)
        return "error", {
            "type": f"{t.__module__}.{t.__qualname__}",
            "message": str(e),
            "traceback": traceback.format_exc(),
            "reason": getattr(e, "reason", None)
            if isinstance(getattr(e, "reason", None), str)
            else None,
        }


def error_from_report(
    report: dict[str, str], *, env_id: str, method: str, worker: int, where: dict[str, Any]
) -> EnvWorkerError:
    """The error to raise in the driver for a worker's ``("error", report)`` reply.

    Args:
        report: what :func:`guarded` returned in the worker.
        env_id: the env whose call failed; ``method``: the call (``make``, ``step``...).
        worker: the actor's index; ``where``: its info (``pid``, ``host``) if known.
    """
    remote_type = report["type"]
    cls = _error_class(_import_type(remote_type))
    err = cls(
        f"{env_id} raised {remote_type.rpartition('.')[2]} in {method}() on Ray env "
        f"worker {worker} (pid {where.get('pid', '?')} on {where.get('host', '?')}): "
        f"{report['message']}\n\nTraceback in the worker:\n{report['traceback'].rstrip()}",
        env_id=env_id,
        remote_type=remote_type,
        remote_traceback=report["traceback"],
    )
    if report.get("reason"):  # an InfraError's reason travels with it
        err.reason = report["reason"]
    return err


#: worker exception type -> its EnvWorkerError subclass (made once per type)
_error_classes: dict[type, type] = {}


def _error_class(cause: type | None) -> type[EnvWorkerError]:
    """``EnvWorkerError``, mixed with the worker's exception type where Python allows it."""
    if (
        cause is None
        or not issubclass(cause, Exception)
        or issubclass(cause, (EnvWorkerError, StopIteration, StopAsyncIteration))
    ):
        return EnvWorkerError
    if cause not in _error_classes:
        try:
            _error_classes[cause] = type(
                f"EnvWorkerError[{cause.__name__}]", (EnvWorkerError, cause), {}
            )
        except TypeError:  # incompatible layouts or a final class
            _error_classes[cause] = EnvWorkerError
    return _error_classes[cause]


def _import_type(qualified: str) -> type | None:
    """The class named ``module.QualName`` if it imports here, else ``None``."""
    module, _, name = qualified.rpartition(".")
    try:
        obj: Any = importlib.import_module(module)
        for part in name.split("."):
            obj = getattr(obj, part)
    except Exception:
        return None
    return obj if isinstance(obj, type) else None
