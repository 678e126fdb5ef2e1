"""Registering agentgym environments with Gymnasium, and loading third-party plugins.

* Built-in envs come from the table in :mod:`agentgym.envs` (string entry points only, so
  registering imports no env code).
* Third-party packages declare an entry point in the group ``agentgym.envs``. On
  ``import agentgym`` every such entry point is loaded; loading it must register the
  package's envs, and if the loaded object is callable it is called (so a plugin may
  point at a ``register()`` function). A plugin that fails to load produces a warning
  naming it; it never breaks ``import agentgym``.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import re
import warnings
from typing import Any

import gymnasium as gym

from agentgym.errors import ConfigError, UnknownNameError

PLUGIN_GROUP = "agentgym.envs"
NAMESPACE = "agentgym"

_loaded_plugins: dict[str, str] = {}
_plugin_env_ids: dict[str, str] = {}  # env id -> plugin name that registered it


def register_builtin_envs() -> list[str]:
    """Register every row of ``agentgym.envs.ENV_SPECS``; returns the ids."""
    from agentgym.envs import ENV_SPECS

    ids = []
    for row in ENV_SPECS:
        if row["id"] not in gym.registry:
            gym.register(
                id=row["id"],
                entry_point=row["entry_point"],
                kwargs=dict(row.get("kwargs", {})),
                nondeterministic=bool(row.get("nondeterministic", False)),
                disable_env_checker=True,
                order_enforce=True,
            )
        ids.append(row["id"])
    return ids


def load_plugins() -> dict[str, str]:
    """Load every ``agentgym.envs`` entry point; returns {plugin name: status}."""
    try:
        eps = importlib.metadata.entry_points(group=PLUGIN_GROUP)
    except Exception as e:  # a broken metadata file must not break import
        warnings.warn(f"agentgym: could not list plugins: {e}", stacklevel=2)
        return {}
    for ep in eps:
        key = f"{ep.name} ({ep.value})"
        if key in _loaded_plugins and _loaded_plugins[key] == "ok":
            continue
        before = set(gym.registry)
        try:
            obj = ep.load()
            if callable(obj):
                obj()
            _loaded_plugins[key] = "ok"
            for env_id in set(gym.registry) - before:
                _plugin_env_ids[env_id] = ep.name
        except Exception as e:
            _loaded_plugins[key] = f"error: {type(e).__name__}: {e}"
            warnings.warn(
                f"agentgym: plugin {ep.name!r} (entry point {ep.value!r} in group "
                f"{PLUGIN_GROUP!r}) failed to load and was skipped: {type(e).__name__}: {e}. "
                "Fix or uninstall that package.",
                RuntimeWarning,
                stacklevel=2,
            )
    return dict(_loaded_plugins)


def agentgym_env_ids() -> list[str]:
    """Every registered id in the ``agentgym`` namespace, plus plugin envs, sorted."""
    ids = {i for i, spec in gym.registry.items() if spec.namespace == NAMESPACE}
    return sorted(ids | {i for i in _plugin_env_ids if i in gym.registry})


def plugin_of(env_id: str) -> str | None:
    """The plugin (entry point name) that registered ``env_id``, or None for built-ins."""
    return _plugin_env_ids.get(env_id)


def resolve_env_id(env_id: str) -> str:
    """Accept ``Name-vN`` as shorthand for ``agentgym/Name-vN``; unknown ids raise with hints.

    As in ``gym.make``, ``module:Env-vN`` first imports ``module`` (which registers the
    env) and then resolves ``Env-vN``.
    """
    if env_id in gym.registry:
        return env_id
    if ":" in env_id:
        module, _, env_id = env_id.partition(":")
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as e:
            raise UnknownNameError(
                "environment id",
                f"{module}:{env_id}",
                list(gym.registry.keys()),
                hint=f"module {module!r} could not be imported ({e}); is it installed or on PYTHONPATH?",
            ) from e
        return resolve_env_id(env_id)
    candidate = f"{NAMESPACE}/{env_id}"
    if "/" not in env_id and candidate in gym.registry:
        return candidate
    raise UnknownNameError(
        "environment id",
        env_id,
        list(gym.registry.keys()),
        hint="Run `agentgym list` to see the registered environments.",
    )


def make(env_id: str, **kwargs: Any) -> gym.Env:
    """``gym.make`` with agentgym's id shorthand and "did you mean" errors, for ids and
    for keyword arguments the env does not take."""
    resolved = resolve_env_id(env_id)
    try:
        return gym.make(resolved, **kwargs)
    except TypeError as e:
        bad = _unexpected_keyword(e)
        if bad is None or bad not in kwargs:
            if not kwargs:
                raise
            # a value of the wrong type that the env's own checks did not catch
            raise ConfigError(
                f"{resolved} could not be made with the arguments {kwargs!r}: "
                f"{str(e).split(' was raised from the environment creator')[0]}. Check the "
                f"values' types: `agentgym info {resolved}` describes each argument."
            ) from None
        known = env_arguments(resolved)
        raise UnknownNameError(
            f"argument for {resolved}",
            bad,
            known,
            hint=f"See `agentgym info {resolved}` for what each argument does.",
        ) from None


def _unexpected_keyword(error: TypeError) -> str | None:
    """The name in Python's "got an unexpected keyword argument 'x'", if that is the error."""
    match = re.search(r"unexpected keyword argument '([^']+)'", str(error))
    return match.group(1) if match else None


def env_arguments(env_id: str) -> list[str]:
    """The keyword arguments ``make`` accepts for ``env_id``: the env class's own, those
    of the classes it passes ``**kwargs`` on to, and Gymnasium's ``make`` options."""
    spec = gym.spec(resolve_env_id(env_id))
    entry = spec.entry_point
    if isinstance(entry, str):
        module, _, attr = entry.partition(":")
        entry = getattr(importlib.import_module(module), attr)
    names: list[str] = []
    for cls in getattr(entry, "__mro__", [entry]):
        init = cls.__dict__.get("__init__") if isinstance(cls, type) else cls
        if init is None:
            continue
        try:
            params = inspect.signature(init).parameters.values()
        except (TypeError, ValueError):
            continue
        names += [
            p.name
            for p in params
            if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]
        if not any(p.kind == p.VAR_KEYWORD for p in params):
            break  # it does not pass anything on
    gym_options = ["render_mode", "max_episode_steps", "disable_env_checker"]
    return sorted(set(names) | set(gym_options))
