"""``python -m agentgym.cli.torchrun ARGS``: torchrun (``python -m torch.distributed.run
ARGS``) as ``agentgym train --nproc N`` launches it, without torchrun's traceback.

When a rank stops on purpose it has already said why in one line: a configuration error
(``agentgym train: error: ...``, exit status 2) or a polite stop on Ctrl-C / SIGTERM
("stopped after step N on SIGINT; its checkpoint is saved", 128 + the signal). torchrun
then raised ``ChildFailedError`` with a page of traceback and logged "failed (exitcode:
2) local_rank: 0 ... of binary" besides. Here the failure ends torchrun with the rank's
own exit status (the launcher, :func:`agentgym.health.supervise`, reads it), and the log
line is dropped for those exit statuses; a rank that crashes (any other status) still gets
both, its traceback above them.
"""

from __future__ import annotations

import logging
import re
import signal

#: exit statuses of a rank that stopped on purpose and said why
MEANT = {2, 128 + signal.SIGINT, 128 + signal.SIGTERM}
#: the torchrun loggers that report a rank's failure
LOGGERS = (
    "torch.distributed.elastic.multiprocessing.api",
    "torch.distributed.elastic.agent.server.api",
    "torch.distributed.elastic.agent.server.local_elastic_agent",
)


class _Meant(logging.Filter):
    """Drop torchrun's "failed (exitcode: N)" record when N is in :data:`MEANT`."""

    def filter(self, record: logging.LogRecord) -> bool:
        found = re.search(r"failed \(exitcode: (-?\d+)\)", record.getMessage())
        return found is None or int(found.group(1)) not in MEANT


def status_of(exitcode: int) -> int:
    """A process status as a shell reports it (a signal's death: 128 + its number)."""
    return 128 - exitcode if exitcode < 0 else exitcode


def main() -> int:
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun

    for name in LOGGERS:  # a filter applies to the records of its own logger only
        logging.getLogger(name).addFilter(_Meant())
    try:
        torchrun()
    except ChildFailedError as e:
        _rank, failure = e.get_first_failure()
        status = status_of(failure.exitcode)
        if status not in MEANT:
            raise
        return status
    except SignalException as e:
        return 128 + int(e.sigval)
    except KeyboardInterrupt:
        return 128 + signal.SIGINT
    return 0


if __name__ == "__main__":
    from agentgym.cli.fast_exit import exit_now

    exit_now(main())
