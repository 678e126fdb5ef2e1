"""Errors raised by calc."""


class CalcError(Exception):
    """A problem with an expression; ``position`` is where (or None)."""

    def __init__(self, message, position=None):
        super().__init__(message)
        self.position = position
