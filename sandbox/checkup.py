"""``agentgym sandbox doctor``'s checks: engine, image, a live sandbox, leftovers, build tools
and the local fallback, each with the fix for what it found."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

from agentgym import SandboxError
from agentgym.sandbox.docker import (
    IMAGE_ENV,
    REPOSITORY,
    DockerSandbox,
    default_image,
    docker_client,
    image_info,
    prune,
)
from agentgym.sandbox.local import available_levels

__all__ = ["Check", "doctor"]


@dataclass(frozen=True)
class Check:
    """One line of the doctor's report.

    Attributes:
        name: what was checked.
        status: ``"ok"``, ``"warn"`` or ``"fail"``.
        detail: what was found.
        fix: what to do about it (empty when nothing).
    """

    name: str
    status: str
    detail: str
    fix: str = ""


def doctor(image: str | None = None, *, smoke_test: bool = True) -> list[Check]:
    """Check the engine, the image, the permissions and the local fallback.

    Args:
        image: the image to check (default :func:`default_image`).
        smoke_test: start one sandbox and check it runs commands as a non-root user
            without network.
    """
    image = image or default_image()
    checks, engine_ok = _engine_checks()
    if engine_ok:
        checks += _image_checks(image, smoke_test)
        checks.append(_leftovers_check())
    checks.append(_build_tools_check())
    checks.append(_local_check())
    return checks


def _engine_checks() -> tuple[list[Check], bool]:
    """Whether an engine answers and enforces limits; and whether it answered."""
    checks: list[Check] = []
    engine_ok = False
    try:
        client = docker_client()
        version = client.version()
        info = client.info()
        engine_ok = True
        checks.append(
            Check(
                "engine",
                "ok",
                f"Docker {version.get('Version', '?')} (API {version.get('ApiVersion', '?')}), "
                f"cgroup v{info.get('CgroupVersion', '?')}, {info.get('NCPU', '?')} CPUs",
            )
        )
        missing = [k for k in ("MemoryLimit", "PidsLimit", "CpuCfsQuota") if not info.get(k, True)]
        if missing:
            checks.append(
                Check(
                    "limits",
                    "fail",
                    "the engine cannot enforce: " + ", ".join(missing),
                    "enable the memory, pids and cpu cgroup controllers on the host kernel "
                    "(cgroup_enable=memory on the kernel command line) and restart dockerd",
                )
            )
        else:
            checks.append(Check("limits", "ok", "memory, pids and CPU limits are enforced"))
    except SandboxError as e:
        checks.append(Check("engine", "fail", "no engine answers", str(e)))
    except Exception as e:  # permission problems and the like
        checks.append(Check("engine", "fail", f"{type(e).__name__}: {e}", _permission_fix()))
    return checks, engine_ok


def _image_checks(image: str, smoke_test: bool) -> list[Check]:
    """Whether the image is there, and (with ``smoke_test``) whether a sandbox of it runs."""
    found = image_info(image)
    if found is None:
        return [
            Check(
                "image",
                "fail",
                f"{image} is not there",
                "agentgym sandbox build-image"
                if image.startswith(REPOSITORY + ":")
                else f"build or load {image}, or unset {IMAGE_ENV}",
            )
        ]
    checks = [Check("image", "ok", f"{image} ({found['Size'] / 2**20:.0f} MiB)")]
    if smoke_test:
        checks.append(_smoke(image))
    return checks


def _leftovers_check() -> Check:
    """Whether containers of dead processes are left over."""
    try:
        leftovers = prune(dry_run=True)
        if leftovers:
            return Check(
                "leftovers",
                "warn",
                f"{len(leftovers)} container(s) of dead processes",
                "agentgym sandbox prune",
            )
        return Check("leftovers", "ok", "no containers of dead processes")
    except Exception as e:
        return Check("leftovers", "warn", f"could not list containers: {e}")


def _build_tools_check() -> Check:
    """Whether this machine can build the image (debootstrap, root)."""
    if shutil.which("debootstrap") is None:
        return Check(
            "build tools",
            "warn",
            "debootstrap is not installed (needed only to build the image)",
            "apt-get install -y debootstrap",
        )
    if os.geteuid() != 0:
        return Check(
            "build tools",
            "warn",
            "building the image needs root",
            "sudo .venv/bin/agentgym sandbox build-image",
        )
    return Check("build tools", "ok", "debootstrap present, running as root")


def _local_check() -> Check:
    """The best isolation level the local backend reaches here."""
    levels = available_levels()
    best = next((lvl for lvl, why in levels.items() if why is None), "rlimits")
    detail = f"best level here: {best}"
    fix = ""
    if best != "bwrap":
        detail += f" (bwrap: {levels['bwrap']})"
        fix = "apt-get install -y bubblewrap, and allow unprivileged user namespaces"
    return Check("local backend", "ok" if best == "bwrap" else "warn", detail, fix)


def _smoke(image: str) -> Check:
    """Start one sandbox and check it runs as non-root, without capabilities or network."""
    probe = (
        "echo uid=$(id -u); "
        "echo cap=$(sed -n 's/^CapEff:[[:space:]]*//p' /proc/self/status); "
        "echo nnp=$(sed -n 's/^NoNewPrivs:[[:space:]]*//p' /proc/self/status); "
        "echo net=$(ls /sys/class/net | tr '\\n' ' '); "
        "if touch /probe 2>/dev/null; then echo root=rw; else echo root=ro; fi"
    )
    try:
        with DockerSandbox(image=image) as sb:
            r = sb.run(probe, timeout=30)
    except Exception as e:
        return Check("sandbox", "fail", f"could not run a sandbox: {e}", _permission_fix())
    found = dict(line.partition("=")[::2] for line in r.stdout.splitlines() if "=" in line)
    problems = []
    if found.get("uid", "0") == "0":
        problems.append("commands run as root")
    if found.get("cap") != "0000000000000000":
        problems.append("capabilities are not dropped")
    if found.get("nnp") != "1":
        problems.append("no-new-privileges is off")
    if found.get("net", "").split() != ["lo"]:
        problems.append(f"network interfaces: {found.get('net', '?').strip()}")
    if found.get("root") != "ro":
        problems.append("the root filesystem is writable")
    if r.exit_code != 0 or problems:
        return Check(
            "sandbox",
            "fail",
            "; ".join(problems) or f"probe failed: {r.stderr.strip()[:200]}",
            "check the engine's security options and the limits (see docs/sandbox.md)",
        )
    return Check(
        "sandbox",
        "ok",
        f"runs as uid {found['uid']}, no capabilities, no-new-privileges, only lo, read-only root",
    )


def _permission_fix() -> str:
    return (
        "if this is a permission problem: add your user to the 'docker' group "
        "(sudo usermod -aG docker $USER) and log in again, or run as root"
    )
