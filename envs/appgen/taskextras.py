"""The full-stack and staged parts of an AppGen task: ``[app]``, ``[services]``, ``[[stages]]``,
``[requirements]``, ``[visible]`` and ``forgetful/``, parsed and checked.

:mod:`.taskset` calls :func:`parse_extras` while loading a task directory; every field is
documented in ``docs/envs/appgen-tasks.md``. Errors are :class:`agentgym.DataError`
naming the file and the field.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentgym import DataError

_ENV_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")
_RESERVED_ENV = {"PORT", "DATA_DIR", "PATH", "HOME"}
_APP_KEYS = {"command", "port", "ready_path", "startup_timeout", "browser", "page_timeout"}


@dataclass(frozen=True)
class AppSettings:
    """``[app]``: how the project's server is started for the hidden tests.

    Attributes:
        command: run in the project root as the project's user, with ``PORT``,
            ``DATA_DIR`` and the services' URL variables in its environment.
        port: the port the spec promises when ``PORT`` is unset (shown to the agent).
        ready_path: polled until it answers (any status) before a test uses the app.
        startup_timeout: seconds the app may take to answer.
        browser: the hidden tests drive the front end in headless Chromium.
        page_timeout: seconds a page action (``page.wait_*``, a click, a load) waits for
            what the test expects before the test fails.
    """

    command: str
    port: int = 8000
    ready_path: str = "/"
    startup_timeout: float = 15.0
    browser: bool = False
    page_timeout: float = 10.0


@dataclass(frozen=True)
class ServiceSpec:
    """``[services.NAME]``: a mock external service started from a hidden fixture."""

    name: str
    fixture: str  # relative to tests_hidden/
    env: str  # the variable that gives the app the service's base URL


@dataclass(frozen=True)
class Stage:
    """One request of a staged task: its text and the solution files the oracle writes then."""

    text: str
    oracle: tuple[str, ...] = ()


@dataclass(frozen=True)
class Requirement:
    """``[requirements.NAME]``: something the user asked for, and in which stage (1-based)."""

    name: str
    stage: int
    text: str


def _app(where: Path, raw: Any) -> AppSettings | None:
    if raw is None:
        return None
    if not isinstance(raw, dict) or not isinstance(raw.get("command"), str):
        raise DataError(f'{where}: [app] needs command = "..." (how the server starts).')
    unknown = set(raw) - _APP_KEYS
    if unknown:
        raise DataError(
            f"{where}: unknown [app] key(s) {sorted(unknown)}; known: {sorted(_APP_KEYS)}."
        )
    port = raw.get("port", 8000)
    if not isinstance(port, int) or not 1024 <= port <= 65535:
        raise DataError(f"{where}: [app] port must be an integer in 1024..65535, got {port!r}.")
    path = raw.get("ready_path", "/")
    if not isinstance(path, str) or not path.startswith("/"):
        raise DataError(f"{where}: [app] ready_path must start with '/', got {path!r}.")
    wait = raw.get("startup_timeout", 15.0)
    if isinstance(wait, bool) or not isinstance(wait, int | float) or wait <= 0:
        raise DataError(f"{where}: [app] startup_timeout must be a number > 0, got {wait!r}.")
    page_wait = raw.get("page_timeout", 10.0)
    if isinstance(page_wait, bool) or not isinstance(page_wait, int | float) or page_wait <= 0:
        raise DataError(f"{where}: [app] page_timeout must be a number > 0, got {page_wait!r}.")
    return AppSettings(
        command=raw["command"],
        port=port,
        ready_path=path,
        startup_timeout=float(wait),
        browser=bool(raw.get("browser", False)),
        page_timeout=float(page_wait),
    )


def _services(where: Path, raw: Any, hidden: dict[str, bytes]) -> tuple[ServiceSpec, ...]:
    if not isinstance(raw, dict):
        raise DataError(f"{where}: [services] must be a table of [services.NAME] tables.")
    out = []
    envs = set()
    for name, spec in sorted(raw.items()):
        if not isinstance(spec, dict) or not isinstance(spec.get("fixture"), str):
            raise DataError(
                f'{where}: [services.{name}] needs fixture = "file under tests_hidden/".'
            )
        env = spec.get("env", f"{name.upper()}_URL")
        if not isinstance(env, str) or not _ENV_NAME.match(env) or env in _RESERVED_ENV | envs:
            raise DataError(
                f"{where}: [services.{name}] env must be an unused UPPER_CASE variable name "
                f"(not {sorted(_RESERVED_ENV)}), got {env!r}."
            )
        if spec["fixture"] not in hidden:
            raise DataError(
                f"{where}: [services.{name}] fixture {spec['fixture']!r} is not a file under "
                "tests_hidden/ (fixtures must stay hidden from the agent)."
            )
        envs.add(env)
        out.append(ServiceSpec(name=name, fixture=spec["fixture"], env=env))
    return tuple(out)


def _stages(root: Path, where: Path, raw: Any, solution: dict[str, bytes]) -> tuple[Stage, ...]:
    if not isinstance(raw, list) or not raw:
        raise DataError(f'{where}: [[stages]] must be a list of tables with file = "stages/N.md".')
    out = []
    seen: set[str] = set()
    for i, st in enumerate(raw, start=1):
        path = root / str(st.get("file", "")) if isinstance(st, dict) else None
        if path is None or not path.is_file():
            raise DataError(f'{where}: stage {i} needs file = "..." naming an existing file.')
        oracle = tuple(st.get("oracle", ()))
        bad = [p for p in oracle if p not in solution or p in seen]
        if bad:
            raise DataError(
                f"{where}: stage {i} oracle names files not in solution/ or already written "
                f"by an earlier stage: {bad}."
            )
        seen.update(oracle)
        out.append(Stage(text=path.read_text(encoding="utf-8"), oracle=oracle))
    return tuple(out)


def _requirements(where: Path, raw: Any, n_stages: int, used: set[str]) -> tuple[Requirement, ...]:
    if not isinstance(raw, dict):
        raise DataError(f"{where}: [requirements] must be a table of [requirements.NAME] tables.")
    out = []
    for name, spec in sorted(raw.items()):
        stage = spec.get("stage", 1) if isinstance(spec, dict) else None
        text = spec.get("text") if isinstance(spec, dict) else None
        if not isinstance(stage, int) or not 1 <= stage <= max(1, n_stages):
            raise DataError(f"{where}: [requirements.{name}] stage must be 1..{max(1, n_stages)}.")
        if not isinstance(text, str) or not text.strip():
            raise DataError(f'{where}: [requirements.{name}] needs text = "what was asked".')
        out.append(Requirement(name=name, stage=stage, text=text.strip()))
    unknown = used - {r.name for r in out}
    if unknown:
        raise DataError(
            f"{where}: hidden tests are marked with requirement(s) {sorted(unknown)} that "
            "[requirements] does not define."
        )
    return tuple(out)


def _visible(where: Path, raw: Any, visible_ids: set[str], hidden_ids: set[str]):
    if not isinstance(raw, dict):
        raise DataError(f'{where}: [visible] maps "file::test" to a list of hidden test ids.')
    out = []
    for vid, covers in sorted(raw.items()):
        if vid not in visible_ids:
            raise DataError(f"{where}: [visible] names {vid!r}, which is not a visible test.")
        if not isinstance(covers, list) or not covers or not set(covers) <= hidden_ids:
            raise DataError(
                f"{where}: [visible] {vid!r} must list hidden test ids (file::test) that exist; "
                f"unknown: {sorted(set(covers) - hidden_ids) if isinstance(covers, list) else covers}."
            )
        out.append((vid, tuple(covers)))
    return tuple(out)


def parse_extras(
    root: Path,
    meta: dict[str, Any],
    hidden: dict[str, bytes],
    solution: dict[str, bytes],
    expected: list,
    visible_ids: set[str],
) -> dict[str, Any]:
    """The AppTask fields of the full-stack and staged sections (see the module docstring)."""
    where = root / "task.toml"
    stages = _stages(root, where, meta["stages"], solution) if "stages" in meta else ()
    used = {r for t in expected for r in t.requirements}
    requirements = _requirements(where, meta.get("requirements", {}), len(stages), used)
    hidden_ids = {t.test_id for t in expected}
    return {
        "app": _app(where, meta.get("app")),
        "services": _services(where, meta.get("services", {}), hidden),
        "stages": stages,
        "requirements": requirements,
        "visible_covers": _visible(where, meta.get("visible", {}), visible_ids, hidden_ids),
    }
