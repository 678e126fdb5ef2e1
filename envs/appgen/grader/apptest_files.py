"""Files the grader shares with the project, made and used without trusting the project.

Runs in the grader's process inside the grading sandbox (Python 3.8+, standard library).
The project's processes write into the directories the tests hand them (``tmp_path``,
the app's ``DATA_DIR``), and can turn any name there into a symlink, a FIFO or a hard link
at any moment. So:

* :func:`make_dir` creates such a directory with its final mode in one ``mkdir`` (no
  create-then-chmod window), under an unguessable name, in a parent the project cannot
  write; shared directories get the sticky bit, so the project cannot rename or remove
  what the grader put there.
"""

from __future__ import annotations

import os
import secrets
import stat

#: a directory both sides write: world-writable, sticky (only a file's owner renames it)
SHARED = 0o1777
#: a directory the project may enter but not list or write (the grader's scratch)
TRAVERSE_ONLY = 0o711
#: a directory of the grader alone
PRIVATE = 0o700


class UnsafePath(OSError):
    """A path the project could have redirected: a symlink, a FIFO, a device, a hard link,
    or a directory that is not what the grader made."""


def make_dir(parent: str, prefix: str, mode: int) -> str:
    """A new directory ``parent/prefix<random>`` with exactly ``mode``, owned by this
    process's user, made in one ``mkdir``. ``parent`` must be a directory the project
    cannot write (then nothing can be put in the new directory's place first)."""
    old = os.umask(0)
    try:
        for _ in range(100):
            path = os.path.join(parent, prefix + secrets.token_hex(6))
            try:
                os.mkdir(path, mode)
            except FileExistsError:
                continue
            break
        else:
            raise FileExistsError(f"no free name for a directory in {parent}")
    finally:
        os.umask(old)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise UnsafePath(f"{path} is not the directory the grader made")
    if stat.S_IMODE(st.st_mode) != mode:
        raise UnsafePath(f"{path} was made with mode {oct(stat.S_IMODE(st.st_mode))}")
    return path
