"""Files the grader shares with the project, made and used without trusting the project.

Runs in the grader's process inside the grading sandbox (Python 3.8+, standard library).
The project's processes write into the directories the tests hand them (``tmp_path``,
the app's ``DATA_DIR``), and can turn any name there into a symlink, a FIFO or a hard link
at any moment. So:

* :func:`make_dir` creates such a directory with its final mode in one ``mkdir`` (no
  create-then-chmod window), under an unguessable name, in a parent the project cannot
  write; shared directories get the sticky bit, so the project cannot rename or remove
  what the grader put there.
* The file functions (``from apptest import files``: :func:`read_bytes`,
  :func:`read_text`, :func:`write_bytes`, :func:`write_text`, :func:`append_bytes`,
  :func:`append_text`, :func:`open`, :func:`exists`, :func:`getsize`, :func:`listdir`,
  :func:`sqlite`) are how hidden tests touch a path the project can reach. They walk the
  path one directory at a time from ``/`` (or the working directory) holding each
  directory open (``O_NOFOLLOW``: a rename after a step redirects nothing), refuse a
  symlink anywhere, open the file with ``O_NOFOLLOW | O_NONBLOCK`` (a FIFO cannot block
  them) and refuse, after ``fstat``, anything but a regular file with one link. What they
  read, the grader reads itself: the project cannot answer in its file's place. Where
  the project made a file or directory the grader's user may not read or write (a 0600
  ``mkstemp`` file), they ask the project's own process to add that permission
  (``chmod``, with the project's privileges: harmless whatever the path points to) and
  try again.

The grader runs as an unprivileged user of its own (no ``CAP_DAC_OVERRIDE``), so even a
plain ``open`` of a hidden test could not write where the grader's code lives; these
functions keep it from following the project's symlinks to read what it should not, or
from blocking on a FIFO. ``check-task`` flags hidden tests that use plain ``open`` (or
``pathlib``'s reads and writes, ``os.listdir``, ``sqlite3.connect``) instead.
"""

from __future__ import annotations

import builtins
import errno
import fcntl
import io
import os
import secrets
import stat
import tempfile

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


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_FILE_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
#: the largest file :func:`read_bytes` reads
MAX_READ = 64 << 20


def _split(path) -> tuple:
    """(the directory the walk starts from, the path's components)."""
    path = os.fspath(path)
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        raise UnsafePath(f"{path!r}: give a path to a file by name, without '..'")
    return ("/" if path.startswith("/") else "."), parts


def _refusal(e: OSError, where: str, dir_fd: int, name: str) -> OSError:
    """The error for a refused open of ``name`` in ``dir_fd`` (``where`` for the message)."""
    if e.errno in (errno.ELOOP, errno.ENOTDIR):
        try:
            link = stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
        except OSError:
            link = False
        if link or e.errno == errno.ELOOP:
            return UnsafePath(f"{where} is a symlink (not followed)")
    if e.errno == errno.ENOTDIR:
        return UnsafePath(f"{where} is not a directory")
    if e.errno == errno.ENXIO:
        return UnsafePath(f"{where} is a FIFO or a socket, not a file")
    return e


def _allow(path: str, dir_fd: int, name: str, want: int) -> bool:
    """Ask the project's process to add the permission bits ``want`` (for everyone) to
    ``path``, which the project made; whether it did."""
    try:
        mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
    except OSError:
        return False
    if stat.S_ISLNK(mode) or mode & want == want:
        return False
    try:
        import apptest  # the project's side of the boundary (imported by the runner first)

        apptest.remote_module("os").chmod(os.path.abspath(path), stat.S_IMODE(mode) | want)
    except Exception:  # the project's process is gone or refused: the error stands
        return False
    return True


def _walk(path) -> tuple:
    """An open descriptor of the directory that holds ``path``'s last component, and that
    component. Every directory on the way is opened with ``O_NOFOLLOW``."""
    anchor, parts = _split(path)
    prefix = "/" if anchor == "/" else ""
    for _attempt in range(len(parts) + 1):
        fd = os.open(anchor, _DIR_FLAGS)
        try:
            for i, part in enumerate(parts[:-1]):
                where = prefix + "/".join(parts[: i + 1])
                try:
                    nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except PermissionError:
                    if _allow(where, fd, part, 0o005):
                        raise _Retry() from None
                    raise
                except OSError as e:
                    raise _refusal(e, where, fd, part) from None
                os.close(fd)
                fd = nfd
        except _Retry:
            os.close(fd)
            continue
        except BaseException:
            os.close(fd)
            raise
        return fd, parts[-1]
    raise PermissionError(errno.EACCES, "permission denied", os.fspath(path))


class _Retry(Exception):
    pass


def _open_fd(path, flags: int, want: int) -> int:
    """A descriptor of the regular file ``path`` (see the module docstring); ``want``: the
    permission bits the project's process is asked to add when the grader lacks them."""
    for _attempt in range(3):
        dfd, name = _walk(path)
        try:
            try:
                fd = os.open(name, flags | _FILE_FLAGS, 0o666, dir_fd=dfd)
            except PermissionError:
                if _allow(os.fspath(path), dfd, name, want):
                    continue
                raise
            except OSError as e:
                raise _refusal(e, os.fspath(path), dfd, name) from None
        finally:
            os.close(dfd)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            os.close(fd)
            what = "has other hard links" if stat.S_ISREG(st.st_mode) else "is not a regular file"
            raise UnsafePath(f"{os.fspath(path)} {what}")
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        return fd
    raise PermissionError(errno.EACCES, "permission denied", os.fspath(path))


_MODES = {
    "r": (os.O_RDONLY, 0o444, False),
    "w": (os.O_WRONLY | os.O_CREAT, 0o222, True),
    "a": (os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o222, False),
    "r+": (os.O_RDWR, 0o666, False),
}


def open(path, mode: str = "r", encoding: str | None = None):
    """``open(path, mode)`` for a path the project can reach: ``r``, ``w``, ``a``, ``r+``,
    with ``b`` for bytes (text is UTF-8 unless ``encoding`` says otherwise)."""
    key = mode.replace("b", "")
    if key not in _MODES or mode.count("b") > 1:
        raise ValueError(f"files.open: unsupported mode {mode!r}")
    flags, want, truncate = _MODES[key]
    fd = _open_fd(path, flags, want)
    if truncate:  # only once the file is known to be the project's regular file
        os.ftruncate(fd, 0)
    if "b" in mode:
        return os.fdopen(fd, mode, buffering=-1)
    return io.TextIOWrapper(os.fdopen(fd, mode + "b"), encoding=encoding or "utf-8")


def read_bytes(path, limit: int = MAX_READ) -> bytes:
    with open(path, "rb") as f:
        return f.read(limit)


def read_text(path, encoding: str = "utf-8") -> str:
    return read_bytes(path).decode(encoding)


def write_bytes(path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


def write_text(path, text: str, encoding: str = "utf-8") -> None:
    write_bytes(path, text.encode(encoding))


def append_bytes(path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def append_text(path, text: str, encoding: str = "utf-8") -> None:
    append_bytes(path, text.encode(encoding))


def lstat(path) -> os.stat_result:
    """The status of ``path`` itself (a symlink is not followed, and none on the way)."""
    dfd, name = _walk(path)
    try:
        return os.stat(name, dir_fd=dfd, follow_symlinks=False)
    finally:
        os.close(dfd)


def exists(path) -> bool:
    try:
        lstat(path)
    except FileNotFoundError:
        return False
    return True


def getsize(path) -> int:
    st = lstat(path)
    if not stat.S_ISREG(st.st_mode):
        raise UnsafePath(f"{os.fspath(path)} is not a regular file")
    return st.st_size


def listdir(path) -> list:
    """The names in the directory ``path``, sorted (a symlinked directory is refused)."""
    for _attempt in range(3):
        dfd, name = _walk(path)
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=dfd)
        except PermissionError:
            if _allow(os.fspath(path), dfd, name, 0o005):
                continue
            raise
        except OSError as e:
            raise _refusal(e, os.fspath(path), dfd, name) from None
        finally:
            os.close(dfd)
        try:
            return sorted(os.listdir(fd))
        finally:
            os.close(fd)
    raise PermissionError(errno.EACCES, "permission denied", os.fspath(path))


def sqlite(path):
    """A ``sqlite3`` connection to a private copy of the database ``path`` (with its
    ``-wal`` and ``-journal`` files), read through these functions: the grader inspects
    what the project wrote without opening the project's path with SQLite."""
    import sqlite3

    copy = tempfile.mkdtemp(prefix=".agentgym-db-")
    target = os.path.join(copy, "db")
    for suffix in ("", "-wal", "-journal"):
        if suffix and not exists(os.fspath(path) + suffix):
            continue
        with builtins.open(target + suffix, "wb") as f:
            f.write(read_bytes(os.fspath(path) + suffix))
    return sqlite3.connect(target)
