"""Output capture shared by the backends: capped byte buffers and shell-style exit codes."""

from __future__ import annotations

__all__ = ["CappedBuffer", "exit_code_from_status"]


class CappedBuffer:
    """Collects up to ``limit`` bytes of a stream, counts and discards the rest."""

    __slots__ = ("_chunks", "kept", "limit", "total")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.kept = 0
        self.total = 0
        self._chunks: list[bytes] = []

    def feed(self, data: bytes) -> None:
        """Add ``data``; bytes past the limit are only counted."""
        self.total += len(data)
        room = self.limit - self.kept
        if room > 0:
            piece = data[:room]
            self._chunks.append(piece)
            self.kept += len(piece)

    def clear(self) -> None:
        """Forget everything fed so far (a backend retrying a run starts afresh)."""
        self.kept = 0
        self.total = 0
        self._chunks.clear()

    def drop_prefix(self, prefix: bytes) -> bool:
        """Remove ``prefix`` from the start of what was fed, if it is there (a marker the
        backend's own wrapper wrote before the command's output); whether it was."""
        value = self.getvalue()
        if not value.startswith(prefix):
            return False
        self._chunks = [value[len(prefix) :]]
        self.kept -= len(prefix)
        self.total -= len(prefix)
        return True

    @property
    def truncated(self) -> bool:
        """Whether more bytes arrived than were kept."""
        return self.total > self.kept

    def getvalue(self) -> bytes:
        """The kept bytes."""
        return b"".join(self._chunks)

    def text(self) -> str:
        """The kept bytes as text (UTF-8, bad bytes replaced)."""
        return self.getvalue().decode("utf-8", errors="replace")


def exit_code_from_status(returncode: int) -> int:
    """Shell-style exit code: a death by signal N (Python's ``-N``) becomes ``128 + N``."""
    return 128 - returncode if returncode < 0 else returncode
