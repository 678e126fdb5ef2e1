"""A run folder holds one run: what ``agentgym train`` and ``agentgym sft`` check before
they write into ``run.output_dir``, and how a start-up that failed is cleaned away.

* :func:`describe_run`: what a folder already holds (a run's config, metrics rows,
  checkpoints, a saved model), in one line, or ``None`` for a folder with no run.
* :func:`prepare_run_folder`: the command's rule. A folder a live trainer holds is
  refused first, naming the holder (its lock, :mod:`agentgym.health`); so is a folder that
  is, holds or lies inside a folder the run reads (``model.path``): a run there would
  mix its files with the model's, and ``--overwrite`` would reach them. Without
  ``--resume`` a folder that holds a run is refused (two runs must never mix their
  metrics and checkpoints in one folder) unless ``--overwrite`` clears it first;
  ``--resume`` needs a checkpoint to resume from; ``--resume-if-present`` (for scripts
  and restarts) resumes when there is one and starts fresh otherwise. A resume is
  refused, before anything is written, when the folder holds the other command's run,
  when a setting the checkpoint's shapes depend on (:data:`RESUME_FIXED`) differs from
  the run's ``config.yaml``, when the parallel layout (``distributed.dp_shard/tp/ep/pp``:
  how the optimizer shards were split) differs, or when the steps asked for are fewer
  than those done.
* :func:`clean_failed_start`: a folder this command created and that holds nothing a
  user wants after a failed start-up (its config, the lock) is removed again.

``--overwrite`` removes only what agentgym writes into a run folder
(:data:`RUN_ENTRIES`, by name at the folder's top level), says what it removed and what
it left alone; anything else in the folder is the user's and stays. Files that are
caches rather than a run's results (A*PO's ``apo_values.jsonl``) survive it too: they
are keyed by what produced them and stay valid.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from agentgym import ConfigError

#: files ``--overwrite`` keeps: caches keyed by what produced them
KEPT_ON_OVERWRITE = frozenset({"apo_values.jsonl"})
#: what ``agentgym train`` / ``agentgym sft`` (and the launcher, the trackers, the health
#: monitor) write at a run folder's top level: all that ``--overwrite`` may remove
RUN_ENTRIES = frozenset(
    {
        "config.yaml", "run.lock", "run_info.json", "metrics.jsonl", "samples.jsonl",
        "timeline.jsonl", "eval_table.md", "critic_pretrain.jsonl", "failures.jsonl",
        "quarantine.jsonl", "faults.jsonl", "plots", "checkpoints", "model", "engine",
        "ranks", "health", "faults", "tensorboard", "wandb",
    }
)  # fmt: skip
#: what a failed start-up may leave that nobody needs
START_UP_LEFTOVERS = frozenset({"config.yaml", "run.lock", "run_info.json"})
#: folders whose files a failed start-up may leave (the ranks' heartbeats, engine scratch)
START_UP_FOLDERS = frozenset({"health", "engine"})


#: settings a checkpoint's shapes (or meaning) depend on: a resume must keep them
RESUME_FIXED = (
    "model.path", "model.preset", "model.preset_overrides", "model.tokenizer_vocab_size",
    "model.architecture", "lora.enabled", "lora.r", "lora.target_modules",
    "lora.target_experts", "algorithm.name",
)  # fmt: skip


def _checkpoints(out: Path) -> list[str]:
    ckpt = out / "checkpoints"
    if not ckpt.is_dir():
        return []
    return sorted(p.name for p in ckpt.glob("step_*") if (p / "trainer_state.json").is_file())


def _rows(path: Path) -> int:
    if not path.is_file():
        return 0
    with path.open("rb") as f:
        return sum(1 for line in f if line.strip())


def has_checkpoint(out: str | Path) -> bool:
    """Whether ``out`` holds a checkpoint to resume from."""
    return bool(_checkpoints(Path(out)))


def describe_run(out: str | Path) -> str | None:
    """What ``out`` holds of a previous run, in words, or ``None`` (no run there)."""
    out = Path(out)
    if not out.is_dir():
        return None
    parts = []
    if (out / "config.yaml").is_file():
        parts.append("config.yaml")
    rows = _rows(out / "metrics.jsonl")
    if rows:
        parts.append(f"metrics.jsonl ({rows} rows)")
    ckpts = _checkpoints(out)
    if ckpts:
        parts.append(f"{len(ckpts)} checkpoint(s), the last {ckpts[-1]}")
    if (out / "model").is_dir() and any((out / "model").iterdir()):
        parts.append("a saved model (model/)")
    return ", ".join(parts) if parts else None


def prepare_run_folder(
    out: str | Path,
    *,
    command: str,
    resume: bool = False,
    resume_if_present: bool = False,
    overwrite: bool = False,
    reads: Iterable[str | Path | None] = (),
    settings: Mapping[str, Any] | None = None,
    max_steps: tuple[str, int] | None = None,
) -> bool:
    """Apply the command's rule to ``out`` (see the module docstring); returns whether
    the run resumes. ``reads``: the folders the run reads (its ``model.path``; ``None``
    entries are skipped). ``settings``: the run's config as a dict, compared with the
    saved one on a resume; ``max_steps``: its step limit as (key, value), e.g.
    ``("run.max_steps", 10)``. Raises :class:`~agentgym.ConfigError` saying what to do."""
    out = Path(out)
    _check_apart(out, reads)
    if out.is_dir():  # a live run's folder: name its holder (and never delete its files)
        from agentgym.health import RunLock

        RunLock(out).acquire(role=f"agentgym {command}").release()
    if overwrite and (resume or resume_if_present):
        raise ConfigError("--overwrite starts the run over and --resume continues it: choose one.")
    held = describe_run(out)
    if resume or resume_if_present:
        if _checkpoints(out):
            _check_resumable(out, command, settings, max_steps)
            return True
        if resume_if_present:
            return False
        what = f"it holds {held} but no checkpoint" if held else "it holds no run"
        raise ConfigError(
            f"--resume: nothing to resume in {out} ({what}). Drop --resume to start a run "
            f"there{', with --overwrite to replace what is there' if held else ''}, or use "
            "--resume-if-present (resume when a checkpoint exists, else start)."
        )
    if held is None:
        return False
    if not overwrite:
        raise ConfigError(
            f"{out} already holds a run ({held}). Continue it: agentgym {command} ... "
            f"--resume; start over, deleting it: --overwrite; or choose another "
            "run.output_dir."
        )
    _overwrite(out, command)
    return False


def _check_resumable(
    out: Path,
    command: str,
    settings: Mapping[str, Any] | None,
    max_steps: tuple[str, int] | None,
) -> None:
    """Refuse a resume that cannot continue the run in ``out`` (see the module docstring)."""
    saved = _saved_config(out)
    if saved is not None:
        kind = "train" if "rollout" in saved else "sft" if "data" in saved else None
        if kind is not None and kind != command:
            raise ConfigError(
                f"{out} holds an `agentgym {kind}` run; `agentgym {command} --resume` "
                f"continues only an `agentgym {command}` run. Give this one its own "
                f"run.output_dir (e.g. run.output_dir={out.parent / command})."
            )
        for key in RESUME_FIXED if settings is not None else ():
            old, new = _get(saved, key), _get(settings, key)
            if _same_setting(key, old, new):
                continue
            raise ConfigError(
                f"--resume: {key} is {new!r} here but {old!r} in {out / 'config.yaml'}; a "
                "checkpoint continues only with the settings that made it. Drop "
                f"{key}={new} to continue the run, or start a new one (another "
                "run.output_dir, or --overwrite)."
            )
        if settings is not None:
            _check_same_layout(out, saved, settings)
    ckpts = _checkpoints(out)
    done = int(ckpts[-1].removeprefix("step_")) if ckpts else 0
    if max_steps is not None and max_steps[1] is not None and done > max_steps[1]:
        key, asked = max_steps
        raise ConfigError(
            f"--resume: {out} has done {done} steps already (checkpoint {ckpts[-1]}), more "
            f"than {key}={asked}: nothing is left to run. {key} counts from the start of the "
            f"run, not from the checkpoint: for {asked} more steps use "
            f"{key}={done + asked}."
        )


#: how a checkpoint's optimizer shards were split (the ranks check it again on loading)
LAYOUT_SIZES = ("dp_shard", "tp", "ep", "pp")


def _check_same_layout(out: Path, saved: Mapping[str, Any], settings: Mapping[str, Any]) -> None:
    """Refuse, before any process starts, a resume under another dp_shard/tp/ep/pp: each
    rank's optimizer shard fits only the layout that wrote it (an unset size is 1)."""

    def sizes(tree: Mapping[str, Any]) -> dict[str, Any]:
        return {k: _get(tree, f"distributed.{k}") or 1 for k in LAYOUT_SIZES}

    written, here = sizes(saved), sizes(settings)
    if written != here:
        raise ConfigError(
            f"--resume: the checkpoints in {out} were written with distributed {written} "
            f"and this run is {here}: resume with the same dp_shard/tp/ep/pp (the adapter "
            "itself loads under any layout: start a new run from it with model.path / the "
            "saved adapter)."
        )


def _saved_config(out: Path) -> dict[str, Any] | None:
    try:
        data = yaml.safe_load((out / "config.yaml").read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None
    return data if isinstance(data, dict) else None


def _get(tree: Mapping[str, Any], dotted: str) -> Any:
    node: Any = tree
    for part in dotted.split("."):
        if not isinstance(node, Mapping):
            return None
        node = node.get(part)
    return node


def _same_setting(key: str, old: Any, new: Any) -> bool:
    if key == "model.path" and old and new:
        return Path(str(old)).resolve() == Path(str(new)).resolve()
    if isinstance(old, list) or isinstance(new, list):  # YAML lists vs tuples
        return list(old or []) == list(new or [])
    return old == new


def _check_apart(out: Path, reads: Iterable[str | Path | None]) -> None:
    """Refuse an output folder that is, holds or lies inside a folder the run reads."""
    where = out.resolve()
    for read in reads:
        if read is None or not str(read):
            continue
        model = Path(read).resolve()
        if where == model:
            how = "is"
        elif model.is_relative_to(where):
            how = "holds"
        elif where.is_relative_to(model):
            how = "lies inside"
        else:
            continue
        raise ConfigError(
            f"run.output_dir {out} {how} model.path {read}: the run would write its files "
            "among the model's (and --overwrite could delete them). Choose a run.output_dir "
            f"outside it, e.g. run.output_dir=runs/{model.name or 'run'}-train."
        )


def _overwrite(out: Path, command: str) -> None:
    """Remove what agentgym wrote in ``out`` (:data:`RUN_ENTRIES`) and say what went and
    what was left alone."""
    removed, kept = [], []
    for entry in sorted(out.iterdir()):
        shown = entry.name + ("/" if entry.is_dir() and not entry.is_symlink() else "")
        if entry.name in KEPT_ON_OVERWRITE:
            kept.append(f"{shown} (a cache, still valid)")
            continue
        if entry.name not in RUN_ENTRIES:
            kept.append(shown)
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
        removed.append(shown)
    line = f"[agentgym {command}] --overwrite removed from {out}: {', '.join(removed) or 'nothing'}"
    if kept:
        line += f"; left alone: {', '.join(kept)}"
    print(line, file=sys.stderr, flush=True)


def folder_state(out: str | Path) -> bool:
    """Whether ``out`` exists with something in it (call before a start, for
    :func:`clean_failed_start`)."""
    out = Path(out)
    return out.is_dir() and any(out.iterdir())


def clean_failed_start(out: str | Path, existed: bool) -> bool:
    """After a failed start-up: remove ``out`` if this command created it and it holds
    only :data:`START_UP_LEFTOVERS` (and empty folders). Returns whether it did."""
    out = Path(out)
    if existed or not out.is_dir():
        return False
    for path in out.rglob("*"):
        if not path.is_file() or path.name in START_UP_LEFTOVERS:
            continue
        if path.relative_to(out).parts[0] in START_UP_FOLDERS:
            continue
        return False
    shutil.rmtree(out, ignore_errors=True)
    return True
