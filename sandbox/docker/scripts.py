"""The shell and Python scripts a Docker sandbox runs inside its container, and their argv.

* the **wrapper** around every command: optionally cleans up after the previous holder
  (kills the sandbox user's processes, empties the writable places), changes into the
  working directory and ``exec``\\ s ``timeout -s KILL T`` around the command;
* the **file helper**, run with the image's ``python3`` as the sandbox user: writes,
  reads and lists workspace files, resolving every path (symlinks included) and refusing
  any that lands outside the workspace;
* **kill-all** (every process of the sandbox user) and the **OOM counter** reader.
"""

from __future__ import annotations

__all__ = [
    "BASE_ENV",
    "CLEAN",
    "CLEANED",
    "CLEANUP_FAILED",
    "CLEAN_PARTLY",
    "HELPER_TIMEOUT",
    "KEEPER_USER",
    "KILL_ALL",
    "KILL_ALL_ROOT",
    "NO_CLEAN",
    "READ_OOM",
    "WORKSPACE",
    "helper_argv",
    "is_root_user",
    "oom_kills",
    "wrapped_argv",
]

WORKSPACE = "/workspace"
#: uid:gid of the container's init and keeper: root, holding only the capabilities of
#: ``ROOT_CAPABILITIES`` (no CAP_KILL), so the sandbox user cannot signal them
KEEPER_USER = "0:0"


def is_root_user(user: str | None) -> bool:
    """Whether ``"uid:gid"`` is root (uid 0, whatever its gid): such a user's kill -1 would
    reach the container's init and keeper, so it is cleaned with :data:`KILL_ALL_ROOT`."""
    return user is not None and str(user).split(":", 1)[0] == "0"


#: what a command's environment starts from
BASE_ENV = {
    "HOME": WORKSPACE,
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "TMPDIR": "/tmp",
    "PYTHONDONTWRITEBYTECODE": "1",
}
#: seconds a file operation (the helper) may take
HELPER_TIMEOUT = 120.0
#: what the wrapper prints (exit 125) when it could not empty the writable places
CLEANUP_FAILED = "agentgym-sandbox: could not empty the workspace"
#: what the wrapper writes first on stderr once a clean has run: a cleaning exec whose
#: stderr does not start with it never ran its clean (the engine could not start it)
CLEANED = b"agentgym-sandbox: cleaned\n"
#: Memory a container may hold once its holder's processes and files are gone (anonymous
#: plus shared memory of its cgroup; page cache and kernel caches, which the kernel
#: reclaims, are not counted): the container's init, its keeper and the cleaning shell use
#: about 0.5 MiB. A container above it after a clean is replaced.
IDLE_MEMORY_BYTES = 8 << 20
# the places a command can write, emptied when a pooled sandbox changes hands
_WRITABLE = ("/workspace", "/tmp", "/dev/shm", "/dev/mqueue")
_GLOBS = " ".join(f"{d}/* {d}/.[!.]* {d}/..?*" for d in _WRITABLE)
_SYSVIPC = "/proc/sysvipc/shm /proc/sysvipc/sem /proc/sysvipc/msg"

#: Kill every process the sandbox user may signal, except this shell (kill -1 skips the
#: caller and pid 1). A builtin in a loop: no fork, so it works when the pids cgroup is
#: full; the loop catches processes forked while the first sweep ran.
KILL_ALL = 'i=0; while kill -9 -1 2>/dev/null && [ "$i" -lt 200 ]; do i=$((i+1)); done; exit 0'

# Whether the process of /proc entry $d is the container's keeper: ``sleep infinity``
# whose parent is pid 1 (its command line checked too: a root ``sleep 300`` whose parent
# was killed a moment before is pid 1's child as well). Builtins only (``read`` drops the
# NULs of a command line, and returns 1 at the end of one, having read it); in a function
# (it sets the positional parameters).
_IS_KEEPER = (
    '{ a=; read -r c < "$d/comm" && [ "$c" = sleep ] && read -r s < "$d/stat" && '
    's=${s##*) } && set -- $s && [ "$2" = 1 ] && read -r a < "$d/cmdline"; '
    '[ "$a" = sleepinfinity ]; }'
)

#: Root's version of KILL_ALL: a kill -1 as root would reach the container's init and keeper
#: (root too), so it walks /proc and spares pid 1 and the keeper. Only the host starts
#: root processes, so nothing else is spared.
KILL_ALL_ROOT = (
    'for d in /proc/[0-9]*; do p=${d#/proc/}; [ "$p" = 1 ] && continue; '
    f'[ "$p" = $$ ] && continue; if {_IS_KEEPER} 2>/dev/null; then continue; fi; '
    'kill -9 "$p" 2>/dev/null; done; exit 0'
)

#: the OOM-kill counter of the container's memory cgroup (v1, then v2)
READ_OOM = (
    "cat /sys/fs/cgroup/memory/memory.oom_control 2>/dev/null || "
    "cat /sys/fs/cgroup/memory.events 2>/dev/null; exit 0"
)

# The check at the end of a full clean (modes 1 and 3), a function of the most memory an
# idle container holds: the container is back to its idle state, measured, or the clean
# fails (exit 125, and the container is replaced):
# * no process but pid 1, one keeper and this shell (of any uid: a process another user's
#   pass should have killed counts too); a killed process may take a moment to exit;
# * no System V IPC object (segments, semaphore sets, message queues) of any user;
# * memory: anonymous plus shared memory of the container's cgroup (v1, else v2) at most
#   the given bytes.
_VERIFY = f"""verify() {{
  most=$1 n=0
  while :; do
    left= keepers=0
    for d in /proc/[0-9]*; do
      p=${{d#/proc/}}; [ "$p" = 1 ] && continue; [ "$p" = $$ ] && continue
      if {_IS_KEEPER}; then keepers=$((keepers+1)); [ $keepers = 1 ] && continue; fi
      read -r s < "$d/stat" || continue
      s=${{s##*) }}; set -- $s; [ "$1" = Z ] || [ "$1" = X ] || {{ left=$p; break; }}
    done
    [ -z "$left" ] && break
    n=$((n+1)); [ $n -gt 300 ] && fail "process $left is left"
    [ $n -gt 50 ] && sleep 0.02  # a killed process exits within a walk or two, mostly
  done
  for f in {_SYSVIPC}; do
    i=0; while read -r line; do i=$((i+1)); done < "$f"
    [ "$i" -gt 1 ] && fail "a System V IPC object is left ($f)"
  done
  m=0
  for f in /sys/fs/cgroup/memory/memory.stat /sys/fs/cgroup/memory.stat; do
    [ -r "$f" ] || continue
    while read -r k v; do
      case "$k" in total_rss|total_shmem|anon|shmem) m=$((m+v));; esac
    done < "$f"
    break
  done
  [ "$m" -gt "$most" ] && fail "the container holds $m bytes of memory once cleaned"
  return 0
}}"""

# The wrapper every exec runs: $1 = clean first (0: no; 1: kill this user's processes,
# empty the writable places, remove this user's System V IPC objects and check that the
# container is back to its idle state; 2: the same,
# leaving what this user may not remove to another user's pass, without the check; 3 and
# 4: as 1 and 2 for root, whose kill -1 would reach the container's keeper), $2 = working
# directory, $3 = timeout in seconds, $4 = the most memory an idle container holds (the
# check), then the command's argv. A clean that ran says so first on stderr (CLEANED);
# until then its stderr goes nowhere, so that nothing comes before that mark.
_WRAPPER = f"""
if [ "$1" != 0 ]; then
  exec 3>&2 2>/dev/null
  fail() {{ echo '{CLEANUP_FAILED}':" $1" >&3; exit 125; }}
  {_VERIFY}
  case "$1" in
    1|2) i=0; while kill -9 -1 && [ "$i" -lt 200 ]; do i=$((i+1)); done;;
    *) kill_root() {{ {KILL_ALL_ROOT.replace("; exit 0", "")}; }}; kill_root;;
  esac
  dirty=
  for f in {_GLOBS}; do if [ -e "$f" ] || [ -L "$f" ]; then dirty=1; break; fi; done
  if [ -n "$dirty" ]; then
    rm -rf -- {_GLOBS} || {{ chmod -R u+rwX {" ".join(_WRITABLE)}; rm -rf -- {_GLOBS}; }}
    if [ "$1" = 1 ] || [ "$1" = 3 ]; then
      for f in {_GLOBS}; do
        if [ -e "$f" ] || [ -L "$f" ]; then fail "$f is left"; fi
      done
    fi
  fi
  for f in {_SYSVIPC}; do
    i=0; while read -r line; do i=$((i+1)); done < "$f"
    if [ "$i" -gt 1 ]; then ipcrm --all >/dev/null; break; fi
  done
  if [ "$1" = 1 ] || [ "$1" = 3 ]; then verify "$4"; fi
  exec 2>&3 3>&-
  printf '%s\\n' '{CLEANED.decode().strip()}' >&2
fi
cd -- "$2" 2>/dev/null || {{ echo "agentgym-sandbox: no directory ${{2#{WORKSPACE}/}} in the workspace" >&2; exit 2; }}
t=$3; shift 4
exec timeout -s KILL "$t" "$@"
"""

# File transfer helper. Exit 3 with a JSON error on stdout for what the caller did wrong.
_HELPER = r"""
import json, os, stat, sys
ROOT = "/workspace"
def fail(kind, path, detail=""):
    sys.stdout.write(json.dumps({"error": kind, "path": path, "detail": detail}))
    sys.exit(3)
def resolve(rel):
    real = os.path.realpath(os.path.join(ROOT, rel))
    if real != ROOT and not real.startswith(ROOT + "/"):
        fail("escape", rel, real)
    return real
op = sys.argv[1]
if op == "write":
    data = sys.stdin.buffer.read()
    nl = data.index(b"\n")
    entries = json.loads(data[:nl])
    pos = nl + 1
    plan = []
    for rel, size in entries:
        real = resolve(rel)
        if real == ROOT or os.path.isdir(real):
            fail("isdir", rel)
        plan.append((rel, real, data[pos:pos + size]))
        pos += size
    for rel, real, content in plan:
        try:
            os.makedirs(os.path.dirname(real), exist_ok=True)
            fd = os.open(real, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
            with os.fdopen(fd, "wb") as f:
                f.write(content)
        except OSError as e:
            fail("oserror", rel, f"{e.strerror} (errno {e.errno})")
elif op == "read":
    rel, limit = sys.argv[2], int(sys.argv[3])
    real = resolve(rel)
    try:
        st = os.stat(real)
    except FileNotFoundError:
        fail("missing", rel)
    if not stat.S_ISREG(st.st_mode):
        fail("notfile", rel)
    if st.st_size > limit:
        fail("toolarge", rel, str(st.st_size))
    with open(real, "rb") as f:
        sys.stdout.buffer.write(f.read(limit + 1))
elif op == "list":
    out = []
    for d, dirs, files in os.walk(ROOT):
        for name in files:
            p = os.path.join(d, name)
            if stat.S_ISREG(os.lstat(p).st_mode):
                out.append(os.path.relpath(p, ROOT))
    sys.stdout.write(json.dumps(sorted(out)))
"""


#: clean modes of :func:`wrapped_argv`
NO_CLEAN, CLEAN, CLEAN_PARTLY = 0, 1, 2


def wrapped_argv(
    argv: list[str], *, clean: int, workdir: str, timeout: float, root: bool = False
) -> list[str]:
    """``argv`` inside the wrapper, run in ``workdir`` (absolute, in the container) and
    killed with everything it started after ``timeout``. First, with ``clean`` =
    :data:`CLEAN`, every process of the exec's user is killed (``root=True``: every root
    process but the container's init and keeper) and the writable places are emptied
    (exit 125 if something stays); with :data:`CLEAN_PARTLY` the same, but what this user
    may not remove is left for another user's pass."""
    mode = int(clean) + (2 if clean and root else 0)
    return [
        "sh",
        "-c",
        _WRAPPER,
        "agentgym-sandbox",
        str(mode),
        workdir,
        f"{timeout:.3f}",
        str(IDLE_MEMORY_BYTES),
        *argv,
    ]


def helper_argv(args: list[str]) -> list[str]:
    """The file helper's argv for ``args`` (``["write"]``, ``["read", rel, limit]``, ``["list"]``)."""
    return ["python3", "-I", "-S", "-c", _HELPER, *args]


def oom_kills(report: str) -> int:
    """The ``oom_kill`` count in what :data:`READ_OOM` printed (0 when absent)."""
    count = 0
    for line in report.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill" and value.strip().isdigit():
            count = max(count, int(value))
    return count
