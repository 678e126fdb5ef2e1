"""The protocol every backend shares, checked on a toy backend: ``Sandbox.run`` (and the
file calls) check their inputs, cap the output and build the result once, in the base
class; backend selection is decided in one place, ``agentgym.sandbox``."""

from __future__ import annotations

import pytest

from agentgym import ConfigError, SandboxError
from agentgym.sandbox import (
    BACKENDS,
    ExecResult,
    Sandbox,
    SandboxLimits,
    SandboxPathError,
    SandboxPool,
    check_backend,
    resolve_backend,
)
from agentgym.sandbox.base import ExecStatus
from agentgym.sandbox.capture import CappedBuffer


class EchoSandbox(Sandbox):
    """A backend that runs nothing: ``_exec`` records what it was given and echoes stdin."""

    backend = "toy"
    isolation = "none"

    def __init__(self, limits: SandboxLimits | None = None) -> None:
        super().__init__(limits or SandboxLimits())
        self.calls: list[dict] = []
        self.files: dict[str, bytes] = {}

    def _exec(self, argv, *, timeout, stdin, env, cwd, stdout: CappedBuffer, stderr: CappedBuffer):
        self.calls.append(
            {"argv": argv, "timeout": timeout, "stdin": stdin, "env": env, "cwd": cwd}
        )
        stdout.feed(stdin or b"")
        stderr.feed(b"e" * 10)
        return ExecStatus(exit_code=3, duration=0.5, timed_out=False, oom_killed=True)

    def _write_files(self, entries):
        self.files.update(entries)

    def _read_bytes(self, rel):
        return self.files[rel]

    def list_files(self):
        return sorted(self.files)

    def reset(self):
        self.files.clear()

    def close(self):
        self._closed = True


def test_run_checks_inputs_once_and_hands_the_backend_normal_forms():
    sb = EchoSandbox(SandboxLimits(timeout=7))
    result = sb.run("echo hi", stdin="héllo", env={"A": "1"}, cwd="./src//pkg/")
    [call] = sb.calls
    assert call["argv"] == ["sh", "-c", "echo hi"]
    assert call["timeout"] == 7.0  # the limits' default
    assert call["stdin"] == "héllo".encode()
    assert call["env"] == {"A": "1"}
    assert call["cwd"] == "src/pkg"
    assert isinstance(result, ExecResult)
    assert (result.exit_code, result.duration, result.oom_killed) == (3, 0.5, True)
    assert result.stdout == "héllo" and result.stderr == "e" * 10
    sb.run(["ls"], timeout=2, stdin=None)
    assert sb.calls[-1]["argv"] == ["ls"] and sb.calls[-1]["stdin"] is None
    assert sb.calls[-1]["cwd"] is None and sb.calls[-1]["timeout"] == 2.0


def test_run_caps_output_at_the_limit_and_says_so():
    sb = EchoSandbox(SandboxLimits(output_limit=4))
    result = sb.run("cat", stdin=b"0123456789")
    assert result.stdout == "0123" and result.stdout_truncated
    assert result.stderr == "eeee" and result.stderr_truncated and result.truncated


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"timeout": 0}, SandboxError, "timeout"),
        ({"env": {"A=B": "x"}}, SandboxError, "env"),
        ({"cwd": "../up"}, SandboxPathError, r"'\.\.'"),
        ({"stdin": 42}, SandboxError, "stdin"),
    ],
)
def test_bad_run_arguments_never_reach_the_backend(kwargs, error, match):
    sb = EchoSandbox()
    with pytest.raises(error, match=match):
        sb.run("true", **kwargs)
    assert sb.calls == []


def test_closed_or_broken_sandboxes_refuse_to_run():
    sb = EchoSandbox()
    sb._broken = "the toy fell over"
    assert sb.broken
    with pytest.raises(SandboxError, match="the toy fell over"):
        sb.run("true")
    sb.close()
    with pytest.raises(SandboxError, match="closed"):
        sb.run("true")
    assert sb.calls == []


def test_file_calls_check_paths_before_the_backend_sees_them():
    sb = EchoSandbox()
    with pytest.raises(SandboxPathError):
        sb.write_files({"ok.py": "x", "/abs.py": "y"})
    assert sb.files == {}  # a refused batch writes nothing
    sb.write_files({"./pkg//a.py": "print(1)"})
    assert sb.files == {"pkg/a.py": b"print(1)"}
    assert sb.read_file("pkg/./a.py") == "print(1)"
    with pytest.raises(SandboxPathError):
        sb.read_bytes("../etc/passwd")


def test_backend_names_are_checked_in_one_place():
    assert BACKENDS == ("auto", "docker", "local")
    assert check_backend("local") == "local"
    with pytest.raises(ConfigError, match="Choose one of auto, docker, local"):
        check_backend("podman")
    with pytest.raises(ConfigError, match="AppGen's sandbox argument must be one of"):
        check_backend("podman", argument="AppGen's sandbox argument")
    with pytest.raises(ConfigError, match="'docker'"):
        resolve_backend("dockr")
    assert resolve_backend("docker") == "docker" and resolve_backend("local") == "local"
    assert resolve_backend("auto") in ("docker", "local")
    assert resolve_backend("auto", remember=True) == resolve_backend("auto", remember=True)


def test_the_pool_says_which_backend_it_resolved():
    with SandboxPool(size=1, backend="local", warm=0) as pool:
        assert pool.backend == "local"
    with SandboxPool(size=1, warm=0, factory=EchoSandbox) as pool:
        assert pool.backend == "auto"  # a factory decides itself; the argument is kept
        with pool.sandbox() as sb:
            assert isinstance(sb, EchoSandbox)
