"""Config files: dataclass sections, YAML, ``section.key=value`` overrides, printing.

The one loader every command uses. A command's config is a dataclass whose fields are
sections (dataclasses themselves), each with working defaults and checks in
``__post_init__``; the command owns its sections and keeps them next to its code (the
trainer's in ``agentgym.trainers.config``, the SFT stage's beside it, the planner's
``plan:`` section in its package). This module only knows dataclasses:

* :func:`load_config` reads YAML (or the defaults) and applies overrides written
  ``section.field=value`` (values parsed as YAML: ``rollout.group_size=16``,
  ``lora.target_modules=[q_proj,v_proj]``, ``envs.0.weight=2``);
* unknown keys, in the file or an override, raise with the closest known names, and
  with the sections that do have a key of that name (``run.max_steps`` for the SFT
  stage points at ``train.max_steps``);
* wrong types raise naming the key (``rollout.max_tokens must be an integer``);
* :func:`config_to_yaml` is what ``--print-config`` prints and what a run saves.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml

from agentgym.errors import ConfigError, UnknownNameError

T = TypeVar("T")


def config_check(cond: bool, msg: str) -> None:
    """Raise :class:`ConfigError` with ``msg`` unless ``cond``: for ``__post_init__`` checks."""
    if not cond:
        raise ConfigError(msg)


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _strip_optional(tp: Any) -> tuple[Any, bool]:
    args = typing.get_args(tp)
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return (rest[0] if len(rest) == 1 else tp), True
    return tp, False


def _convert(tp: Any, value: Any, where: str) -> Any:
    tp, optional = _strip_optional(tp)
    if value is None:
        if optional:
            return None
        raise ConfigError(f"{where} must not be null.")
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"{where} must be a mapping of {tp.__name__} fields, got {value!r}.")
        return config_from_dict(tp, value, where)
    origin = typing.get_origin(tp)
    if origin is list:
        (item,) = typing.get_args(tp) or (Any,)
        if isinstance(value, tuple):
            value = list(value)
        if not isinstance(value, list):
            raise ConfigError(f"{where} must be a list, got {value!r}.")
        return [_convert(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where} must be a mapping, got {value!r}.")
        return dict(value)
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where} must be true or false, got {value!r}.")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where} must be an integer, got {value!r}.")
        return value
    if tp is float:
        if isinstance(value, str):  # YAML 1.1 reads "5e-3" (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where} must be a number, got {value!r}.")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where} must be a string, got {value!r}.")
        return value
    return value


def config_from_dict(cls: type[T], data: dict[str, Any], where: str = "") -> T:
    """Build dataclass ``cls`` from a nested dict; unknown keys raise with suggestions."""
    hints = _hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    kwargs = {}
    for key, value in data.items():
        full = f"{where}.{key}" if where else str(key)
        if key not in names:
            known = [f"{where}.{n}" if where else n for n in names]
            raise UnknownNameError("config key", full, known)
        kwargs[key] = _convert(hints[key], value, full)
    try:
        return cls(**kwargs)
    except TypeError as e:
        raise ConfigError(f"{where or cls.__name__}: {e}") from e


def config_to_dict(cfg: Any) -> dict[str, Any]:
    """A config as plain nested dicts/lists (YAML-ready)."""
    return dataclasses.asdict(cfg)


def _schema_check(cls: type, path: list[str], full: str) -> None:
    """Raise UnknownNameError if ``path`` does not name a field of ``cls``."""
    tp: Any = cls
    for i, part in enumerate(path):
        tp, _ = _strip_optional(tp)
        if typing.get_origin(tp) is list:
            if not part.isdigit():
                raise ConfigError(
                    f"{'.'.join(path[:i])} is a list: index it with a number ({full})."
                )
            tp = typing.get_args(tp)[0]
            continue
        if typing.get_origin(tp) is dict:
            return  # free-form mapping (kwargs): anything goes below, its section checks it
        if not dataclasses.is_dataclass(tp):
            raise ConfigError(f"{'.'.join(path[:i])} is a value, not a section ({full}).")
        hints = _hints(tp)
        if part not in hints:
            prefix = ".".join(path[:i])
            known = [f"{prefix}.{n}" if prefix else n for n in hints]
            raise UnknownNameError(
                "config key",
                ".".join(path[: i + 1]),
                known,
                hint="`--print-config` lists every key with its value.",
            )
        tp = hints[part]


def apply_overrides(cls: type, data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``a.b.c=value`` overrides (values parsed as YAML) to a nested config dict.

    ``data`` should hold every section (defaults merged in), as :func:`load_config`
    prepares it; it is modified in place and returned.
    """
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} must look like section.key=value.")
        key, raw = item.split("=", 1)
        key = key.strip()
        if not key:
            raise ConfigError(f"override {item!r} has an empty key.")
        path = key.split(".")
        _schema_check(cls, path, key)
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError as e:
            raise ConfigError(f"override {item!r}: value is not valid YAML ({e}).") from e
        node: Any = data
        for i, part in enumerate(path[:-1]):
            if isinstance(node, list):
                idx = int(part)
                if idx >= len(node):
                    raise ConfigError(
                        f"override {key}: index {idx} is out of range ({len(node)} items)."
                    )
                node = node[idx]
            else:
                if node.get(part) is None:
                    node[part] = _default_section(cls, path[: i + 1])
                node = node[part]
        last = path[-1]
        if isinstance(node, list):
            idx = int(last)
            if idx >= len(node):
                raise ConfigError(
                    f"override {key}: index {idx} is out of range ({len(node)} items)."
                )
            node[idx] = value
        else:
            node[last] = value
    return data


def _default_section(cls: type, path: list[str]) -> Any:
    obj: Any = cls()
    for part in path:
        if isinstance(obj, list):
            obj = obj[int(part)]
        elif isinstance(obj, dict):  # a free-form mapping: a missing key starts empty
            obj = obj.get(part, {})
        else:
            obj = getattr(obj, part)
    return dataclasses.asdict(obj) if dataclasses.is_dataclass(obj) else obj


def load_config(
    cls: type[T], path: str | Path | None = None, overrides: list[str] | None = None
) -> T:
    """Read a YAML config (or the defaults when ``path`` is None) and apply overrides."""
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if p.is_dir():
            hint = (
                f" It looks like a run folder: its config is {p / 'config.yaml'}."
                if (p / "config.yaml").is_file()
                else ""
            )
            raise ConfigError(f"{str(p)!r} is a directory; pass the YAML config file.{hint}")
        if not p.is_file():
            raise ConfigError(f"config file {str(p)!r} does not exist.")
        try:
            loaded = yaml.safe_load(p.read_text(encoding="utf-8"))
        except yaml.YAMLError as e:
            raise ConfigError(f"{p}: not valid YAML ({e}).") from e
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"{p}: a config file must be a mapping of sections.")
        data = loaded
    try:
        if overrides:
            base = dataclasses.asdict(cls())  # type: ignore[call-arg]
            data = _deep_merge(base, data)
            data = apply_overrides(cls, data, overrides)
        return config_from_dict(cls, data)
    except UnknownNameError as e:
        if e.kind == "config key":
            _point_elsewhere(e, cls)
        raise


def _keys_named(cls: type, leaf: str, prefix: str = "") -> list[str]:
    """Every dotted key of the config schema ``cls`` whose last part is ``leaf``
    (sections inside lists and mappings are not searched)."""
    found = []
    for name, tp in _hints(cls).items():
        full = f"{prefix}{name}"
        if name == leaf:
            found.append(full)
        inner, _ = _strip_optional(tp)
        if dataclasses.is_dataclass(inner):
            found += _keys_named(inner, leaf, full + ".")  # type: ignore[arg-type]
    return found


def _point_elsewhere(err: UnknownNameError, cls: type) -> None:
    """An unknown key whose name exists in another section suggests that key instead
    (its near-spellings in the same section are less likely what was meant)."""
    leaf = err.name.rsplit(".", 1)[-1]
    elsewhere = [k for k in _keys_named(cls, leaf) if k != err.name]
    if elsewhere:
        where = ", ".join(repr(k) for k in elsewhere)
        err.suggestions = elsewhere
        err.args = (
            f"Unknown config key {err.name!r}: {leaf!r} is a key of another section. "
            f"Did you mean: {where}? `--print-config` lists every key with its value.",
        )


def _deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in top.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = v
    return out


def config_to_yaml(cfg: Any) -> str:
    """A config as YAML text, every field included (``--print-config``; loads back equal)."""
    return yaml.safe_dump(config_to_dict(cfg), sort_keys=False)


def save_config(cfg: Any, path: str | Path) -> None:
    """Write :func:`config_to_yaml` to ``path``."""
    Path(path).write_text(config_to_yaml(cfg), encoding="utf-8")
