"""Errors raised by jobq."""


class QueueError(Exception):
    """A rejected request: bad input, unknown job, wrong state."""
