"""The backend-independent parts: limits, path rules, results, option errors."""

from __future__ import annotations

import pytest

from agentgym.errors import ConfigError, SandboxError
from agentgym.sandbox import ExecResult, SandboxLimits, SandboxPathError, open_sandbox
from agentgym.sandbox.capture import CappedBuffer, exit_code_from_status
from agentgym.sandbox.inputs import check_relative_path, command_argv


def test_limits_defaults_are_valid_and_overridable():
    lim = SandboxLimits.from_kwargs(memory_mb=256, pids=64)
    assert (lim.memory_mb, lim.pids, lim.network) == (256, 64, False)
    assert lim.output_limit == 64 * 1024


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("memory_mb", 0),
        ("memory_mb", 8),
        ("timeout", 0),
        ("timeout", -1.0),
        ("cpus", 0),
        ("pids", 2),
        ("output_limit", 0),
        ("workspace_mb", 0),
        ("user", "0:0"),
        ("user", "root"),
        ("network", "no"),
        ("memory_mb", True),
        ("cpu_seconds", 0),
    ],
)
def test_limits_reject_bad_values(field, value):
    with pytest.raises(ConfigError, match=field):
        SandboxLimits(**{field: value})


def test_unknown_limit_suggests_the_right_name():
    with pytest.raises(ConfigError, match="memory_mb"):
        SandboxLimits.from_kwargs(memory_mib=100)
    with pytest.raises(ConfigError, match="memory_mb"):
        open_sandbox("local", memory_mib=100)


def test_unknown_backend_suggests_the_right_name():
    with pytest.raises(ConfigError, match="'docker'"):
        open_sandbox("dockr")


@pytest.mark.parametrize(
    ("path", "norm"),
    [("a.py", "a.py"), ("./src//main.py", "src/main.py"), ("a/./b/", "a/b"), ("..x", "..x")],
)
def test_relative_paths_are_normalised(path, norm):
    assert check_relative_path(path) == norm


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("/etc/passwd", "absolute"),
        ("../x", r"'\.\.'"),
        ("a/../../x", r"'\.\.'"),
        ("a/..", r"'\.\.'"),
        ("", "Empty"),
        (".", "workspace itself"),
        ("a\x00b", "NUL"),
    ],
)
def test_bad_paths_are_refused_with_the_reason(path, why):
    with pytest.raises(SandboxPathError, match=why):
        check_relative_path(path)


def test_capped_buffer_keeps_the_head_and_counts_the_rest():
    buf = CappedBuffer(5)
    for chunk in (b"abc", b"defgh", b"ij"):
        buf.feed(chunk)
    assert buf.getvalue() == b"abcde"
    assert (buf.total, buf.kept, buf.truncated) == (10, 5, True)
    exact = CappedBuffer(3)
    exact.feed(b"xyz")
    assert not exact.truncated


def test_command_argv_and_exit_codes():
    assert command_argv("echo hi") == ["sh", "-c", "echo hi"]
    assert command_argv(("ls", "-l")) == ["ls", "-l"]
    for bad in ("", "   ", [], ["a", 1]):
        with pytest.raises(SandboxError):
            command_argv(bad)
    assert exit_code_from_status(-9) == 137
    assert exit_code_from_status(3) == 3


def test_exec_result_flags_and_dict():
    r = ExecResult(exit_code=0, stdout="x", stderr="", stderr_truncated=True)
    assert r.ok and r.truncated
    assert not ExecResult(exit_code=0, stdout="", stderr="", timed_out=True).ok
    assert r.to_dict()["stderr_truncated"] is True
