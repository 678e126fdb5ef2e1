"""The default sandbox image: its recipe and name, built here from Debian packages, never pulled.

Nothing can be pulled from an image registry on these machines, so the image is made
locally in two steps:

1. ``debootstrap --variant=minbase`` writes a minimal Debian root filesystem with
   ``python3``, ``python3-pytest`` and ``sqlite3`` (Python's ``sqlite3`` module comes with
   ``python3``); package caches, lists and documentation are removed, and the tree is
   imported into Docker as the base image ``agentgym-sandbox-base:<tag>``.
2. A one-line Dockerfile on top adds the non-root user ``sandbox`` (uid 1000) and the
   ``/workspace`` directory, giving ``agentgym-sandbox:<tag>``.

``<tag>`` is a hash of the recipe (suite, packages, user layer), so changing the recipe
builds a new image and an unchanged recipe is never rebuilt: :func:`build_image` returns at
once when the tagged image exists.

Users with a registry can use any image instead (``AGENTGYM_SANDBOX_IMAGE`` or
``image=``): it needs ``sh``, coreutils (``timeout``, ``sleep``, ``rm``) and ``python3``.
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentgym import SandboxError
from agentgym.sandbox.docker.client import docker_client
from agentgym.sandbox.errors import SandboxUnavailableError

__all__ = [
    "IMAGE_ENV",
    "REPOSITORY",
    "BuildResult",
    "ImageRecipe",
    "build_image",
    "default_image",
    "host_apt_mirror",
    "image_info",
]

REPOSITORY = "agentgym-sandbox"
IMAGE_ENV = "AGENTGYM_SANDBOX_IMAGE"
MIRROR_ENV = "AGENTGYM_DEBIAN_MIRROR"
#: bump when the build steps change in a way the recipe fields do not show
RECIPE_VERSION = 1

_DOCKERFILE = """\
FROM {base}
RUN groupadd --gid {uid} {user} \\
 && useradd --uid {uid} --gid {uid} --home-dir /workspace --no-create-home --shell /bin/sh {user} \\
 && mkdir -p /workspace && chown {uid}:{uid} /workspace
ENV HOME=/workspace LANG=C.UTF-8 PATH=/usr/local/bin:/usr/bin:/bin PYTHONDONTWRITEBYTECODE=1
WORKDIR /workspace
USER {uid}:{uid}
CMD ["sleep", "infinity"]
"""

# removed from the root filesystem before import: caches and documentation
_TRIM = (
    "var/cache/apt/archives/*.deb",
    "var/cache/apt/*.bin",
    "var/lib/apt/lists/*",
    "var/log/*",
    "usr/share/doc/*",
    "usr/share/man/*",
    "usr/share/info/*",
)


@dataclass(frozen=True)
class ImageRecipe:
    """What goes into the default image.

    Attributes:
        suite: Debian release given to debootstrap.
        packages: packages added to the minimal base.
        user: name of the non-root user.
        uid: its uid and gid (commands run as ``uid:uid``).
    """

    suite: str = "bookworm"
    packages: tuple[str, ...] = (
        "python3",
        "python3-pytest",
        "sqlite3",
        "chromium",
        "fonts-dejavu-core",
        "dbus-x11",
    )
    user: str = "sandbox"
    uid: int = 1000

    def digest(self) -> str:
        """A hash of everything that decides the image's content."""
        spec = {
            "version": RECIPE_VERSION,
            "recipe": dataclasses.asdict(self),
            "dockerfile": _DOCKERFILE,
            "trim": _TRIM,
        }
        return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()

    def tag(self) -> str:
        """The image tag: the first 12 hex digits of :meth:`digest`."""
        return self.digest()[:12]

    def dockerfile(self, base: str) -> str:
        """The user layer's Dockerfile on top of ``base``."""
        return _DOCKERFILE.format(base=base, uid=self.uid, user=self.user)


def default_image(recipe: ImageRecipe | None = None) -> str:
    """The image sandboxes use: ``$AGENTGYM_SANDBOX_IMAGE`` if set, else the built one."""
    override = os.environ.get(IMAGE_ENV, "").strip()
    if override and recipe is None:
        return override
    return f"{REPOSITORY}:{(recipe or ImageRecipe()).tag()}"


@dataclass(frozen=True)
class BuildResult:
    """What :func:`build_image` did.

    Attributes:
        image: the image name.
        built: ``False`` when it already existed (nothing was done).
        seconds: time taken.
        size_mb: the image's size.
    """

    image: str
    built: bool
    seconds: float
    size_mb: float


def build_image(
    image: str | None = None,
    *,
    recipe: ImageRecipe | None = None,
    mirror: str | None = None,
    force: bool = False,
    progress: Callable[[str], None] = print,
) -> BuildResult:
    """Build the sandbox image (cached: returns at once when it exists).

    Args:
        image: name to give it (default :func:`default_image` of the recipe).
        recipe: what to build (default :class:`ImageRecipe`).
        mirror: Debian mirror URL for debootstrap (default: ``$AGENTGYM_DEBIAN_MIRROR``,
            else the main archive this host's apt uses, else debootstrap's default).
        force: rebuild even if the image exists.
        progress: called with one line per step.

    Raises:
        SandboxUnavailableError: no engine, no debootstrap, not root; says how to fix.
        SandboxError: a build step failed (the message carries its output's tail).
    """
    recipe = recipe or ImageRecipe()
    image = image or f"{REPOSITORY}:{recipe.tag()}"
    client = docker_client()
    start = time.monotonic()
    existing = image_info(image)
    if existing is not None and not force:
        return BuildResult(image, False, time.monotonic() - start, existing["Size"] / 2**20)

    if shutil.which("debootstrap") is None:
        raise SandboxUnavailableError(
            "debootstrap is not installed; it builds the image's root filesystem. Fix: "
            "apt-get install -y debootstrap (scripts/ensure_docker.sh does this)."
        )
    if os.geteuid() != 0:
        raise SandboxUnavailableError(
            "Building the image needs root (debootstrap creates device nodes and chroots). "
            "Fix: run `sudo .venv/bin/agentgym sandbox build-image` once."
        )
    mirror = mirror or os.environ.get(MIRROR_ENV) or host_apt_mirror(recipe.suite)
    base = f"{REPOSITORY}-base:{recipe.tag()}"
    workdir = tempfile.mkdtemp(prefix="agentgym-rootfs-", dir=os.environ.get("AGENTGYM_BUILD_DIR"))
    rootfs = os.path.join(workdir, "rootfs")
    try:
        progress(f"[build-image] debootstrap {recipe.suite} (+{', '.join(recipe.packages)})")
        cmd = [
            "debootstrap",
            "--variant=minbase",
            f"--include={','.join(recipe.packages)}",
            recipe.suite,
            rootfs,
        ]
        if mirror:
            cmd.append(mirror)
        _run_step(cmd, progress)
        for pattern in _TRIM:
            for path in glob.glob(os.path.join(rootfs, pattern)):
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    os.unlink(path)
        progress(f"[build-image] importing the root filesystem as {base}")
        tar = subprocess.Popen(
            ["tar", "--numeric-owner", "-C", rootfs, "-cf", "-", "."],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            assert tar.stdout is not None
            repo, tag = base.rsplit(":", 1)
            client.api.import_image_from_stream(tar.stdout, repository=repo, tag=tag)
        finally:
            tar.stdout.close() if tar.stdout else None
            tar_err = tar.stderr.read().decode(errors="replace") if tar.stderr else ""
            if tar.wait() != 0:
                raise SandboxError(f"tar of the root filesystem failed: {tar_err[-1000:]}")
        if image_info(base) is None:
            raise SandboxError(f"Docker did not create {base} from the root filesystem.")
        progress(f"[build-image] adding the user layer -> {image}")
        _build_layer(client, recipe, base, image)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    info = image_info(image)
    if info is None:
        raise SandboxError(f"The build finished but {image} is not there.")
    seconds = time.monotonic() - start
    progress(f"[build-image] built {image} ({info['Size'] / 2**20:.0f} MiB) in {seconds:.0f} s")
    return BuildResult(image, True, seconds, info["Size"] / 2**20)


def image_info(image: str) -> dict[str, Any] | None:
    """What the engine knows of ``image`` (``docker inspect``), or None when it is not there.

    Raises:
        SandboxUnavailableError: no engine answers.
    """
    from docker.errors import ImageNotFound, NotFound

    try:
        return docker_client().api.inspect_image(image)
    except (ImageNotFound, NotFound):
        return None


def _run_step(cmd: list[str], progress: Callable[[str], None]) -> None:
    """Run a build command; show its milestones; on failure raise with its output's tail."""
    noisy = ("I: Retrieving", "I: Validating", "I: Extracting", "I: Unpacking", "I: Configuring")
    tail: list[str] = []
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        line = line.rstrip()
        tail = [*tail[-40:], line]
        if line and not line.startswith(noisy):
            progress(f"[build-image]   {line}")
    if proc.wait() != 0:
        raise SandboxError(
            f"{cmd[0]} failed (exit {proc.returncode}). Its last lines:\n"
            + "\n".join(tail)
            + f"\nFix the cause above (network to the Debian mirror? set {MIRROR_ENV}) and "
            "run `agentgym sandbox build-image` again."
        )


def _build_layer(client: object, recipe: ImageRecipe, base: str, image: str) -> None:
    from docker.errors import BuildError

    dockerfile = recipe.dockerfile(base).encode()
    try:
        client.images.build(  # type: ignore[attr-defined]
            fileobj=io.BytesIO(dockerfile),
            tag=image,
            rm=True,
            forcerm=True,
            pull=False,
            network_mode="none",
            labels={"agentgym.sandbox.recipe": recipe.digest()},
        )
    except BuildError as e:
        log = "".join(str(chunk.get("stream", chunk.get("error", ""))) for chunk in e.build_log)
        raise SandboxError(f"The user layer did not build: {e.msg}\n{log[-2000:]}") from e


def host_apt_mirror(suite: str) -> str | None:
    """The Debian archive URL this host's apt uses for ``suite``, if it can be read."""
    candidates: list[str] = []
    for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError:
            continue
        for stanza in re.split(r"\n\s*\n", text):
            fields = {}
            for line in stanza.splitlines():
                if ":" in line and not line.lstrip().startswith("#"):
                    key, _, value = line.partition(":")
                    fields[key.strip().lower()] = value.strip()
            suites = fields.get("suites", "").split()
            if "deb" in fields.get("types", "").split() and suite in suites:
                candidates += fields.get("uris", "").split()
    for path in ["/etc/apt/sources.list", *sorted(glob.glob("/etc/apt/sources.list.d/*.list"))]:
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except OSError:
            continue
        for line in lines:
            parts = line.split("#", 1)[0].split()
            if len(parts) >= 3 and parts[0] == "deb":
                rest = [p for p in parts[1:] if not p.startswith("[")]
                if len(rest) >= 2 and rest[1] == suite:
                    candidates.append(rest[0])
    for url in candidates:
        if "security" not in url:
            return url
    return None
