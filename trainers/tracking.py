"""Experiment tracking: a run's metrics, timeline and plots also go to TensorBoard / W&B.

``run.report_to`` names where a run reports, as TRL and transformers' ``report_to`` do:
``jsonl`` (the run folder's own ``metrics.jsonl`` and ``timeline.jsonl``, always
written: the trainer reads them back for its tables and plots), ``tensorboard`` (event
files in ``<output_dir>/tensorboard``), ``wandb`` (Weights & Biases; files in
``<output_dir>/wandb``), or ``all``.

How it hooks in: :func:`start_tracking` opens the trackers for a run folder and attaches
them to the run's :class:`~agentgym.trainers.logging.JsonlWriter` objects, so every row
written to ``metrics.jsonl`` is also logged (numbers only, at the row's ``step``) and
every ``timeline.jsonl`` span adds to the step's ``timeline/<phase>_s``;
:func:`~agentgym.trainers.logging.plot_run` hands the PNG plots to the trackers of the
folder and closes them (otherwise they close when the process exits).

What each tracker also records: the run's resolved config and the git commit of the
code (with whether the work tree had changes), also written to ``run_info.json`` in the
run folder. W&B runs offline (files only, no network) unless ``WANDB_MODE`` says
otherwise or an API key is set up (``wandb login``, ``WANDB_API_KEY``); ``wandb sync
<output_dir>/wandb/offline-run-*`` uploads an offline run later. The project is
``WANDB_PROJECT`` (default ``agentgym``) and the run's name its folder's name.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import platform
import subprocess
import sys
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from agentgym import ConfigError, UnknownNameError

#: the names ``run.report_to`` takes (``all``: every one of them)
REPORTERS = ("jsonl", "tensorboard", "wandb")

_EXTRA_HINT = "pip install 'agentgym-toolkit[tracking]'"


def check_report_to(value: Any) -> list[str]:
    """``run.report_to`` as a checked list (a single name or a list; ``all``)."""
    names = [value] if isinstance(value, str) else list(value or [])
    out: list[str] = []
    for name in names:
        if name == "all":
            out += [n for n in REPORTERS if n not in out]
        elif name == "none":
            continue
        elif name not in REPORTERS:
            raise UnknownNameError("run.report_to entry", name, (*REPORTERS, "all"))
        elif name not in out:
            out.append(name)
    return out


def git_info(where: str | Path | None = None) -> dict[str, Any]:
    """The git commit of the code (this package's checkout) and whether it had changes."""
    root = Path(where) if where is not None else Path(__file__).resolve().parent
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10
        )
        if commit.returncode != 0:
            return {"git_commit": None}
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=30,
        )
        return {
            "git_commit": commit.stdout.strip(),
            "git_dirty": bool(status.stdout.strip()) if status.returncode == 0 else None,
        }
    except (OSError, subprocess.SubprocessError):
        return {"git_commit": None}


def run_info(config: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What a tracker records about the run: the git commit, versions, the command."""
    from agentgym import __version__

    info = {
        **git_info(),
        "agentgym_version": __version__,
        "python": platform.python_version(),
        "command": " ".join(sys.argv),
    }
    if config is not None:
        info["config"] = dict(config)
    return info


def _numbers(row: Mapping[str, Any]) -> dict[str, float]:
    out = {}
    for k, v in row.items():
        if k == "step" or isinstance(v, bool):
            continue
        if hasattr(v, "item"):
            v = v.item()
        if isinstance(v, (int, float)) and math.isfinite(v):
            out[k] = float(v)
    return out


class Tracker:
    """One destination. Subclasses implement the ``_log_*`` methods and :meth:`close`."""

    name = "tracker"

    def log_metrics(self, row: Mapping[str, Any]) -> None:
        """A metrics row (``step`` plus named numbers)."""
        values = _numbers(row)
        if values:
            self._log_scalars(values, int(row.get("step", 0)))

    def log_timeline(self, step: int, seconds: Mapping[str, float]) -> None:
        """A step's seconds per phase."""
        self._log_scalars({f"timeline/{k}_s": v for k, v in seconds.items()}, step)

    def _log_scalars(self, values: Mapping[str, float], step: int) -> None:
        raise NotImplementedError

    def log_images(self, images: Sequence[Path], step: int) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class TensorBoardTracker(Tracker):
    """Event files under ``<run>/tensorboard`` (``tensorboard --logdir`` reads them)."""

    name = "tensorboard"

    def __init__(self, run_dir: Path, info: Mapping[str, Any]) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as e:
            raise ConfigError(
                f"run.report_to has 'tensorboard', which needs the tensorboard package: "
                f"{_EXTRA_HINT} ({e})."
            ) from e
        self.dir = run_dir / "tensorboard"
        self.writer = SummaryWriter(log_dir=str(self.dir))
        text = "```\n" + json.dumps(info, indent=2, default=str) + "\n```"
        self.writer.add_text("run/info", text, 0)
        self.writer.flush()

    def _log_scalars(self, values: Mapping[str, float], step: int) -> None:
        for k, v in values.items():
            self.writer.add_scalar(k, v, step)
        self.writer.flush()

    def log_images(self, images: Sequence[Path], step: int) -> None:
        import matplotlib.image

        for path in images:
            pixels = matplotlib.image.imread(str(path))[..., :3]
            self.writer.add_image(f"plots/{path.stem}", pixels, step, dataformats="HWC")
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def wandb_mode() -> str:
    """``WANDB_MODE`` when set; else ``online`` with an API key set up, else ``offline``."""
    mode = os.environ.get("WANDB_MODE")
    if mode:
        return mode
    if os.environ.get("WANDB_API_KEY"):
        return "online"
    try:
        import netrc

        hosts = netrc.netrc().hosts
    except (OSError, netrc.NetrcParseError):
        hosts = {}
    return "online" if any("wandb" in host for host in hosts) else "offline"


class WandbTracker(Tracker):
    """A Weights & Biases run (files under ``<run>/wandb``; see the module docstring)."""

    name = "wandb"

    def __init__(self, run_dir: Path, info: Mapping[str, Any]) -> None:
        try:
            import wandb
        except ImportError as e:
            raise ConfigError(
                f"run.report_to has 'wandb', which needs the wandb package: {_EXTRA_HINT} ({e})."
            ) from e
        self.wandb = wandb
        config = dict(info.get("config") or {})
        config.update({k: v for k, v in info.items() if k != "config"})
        os.environ.setdefault("WANDB_SILENT", "true")
        self.run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", "agentgym"),
            name=run_dir.resolve().name,
            dir=str(run_dir),
            config=config,
            mode=wandb_mode(),
            reinit="create_new",
        )
        self.last_step = -1

    def _log_scalars(self, values: Mapping[str, float], step: int) -> None:
        # W&B's steps only go forward: a resumed run's repeated steps are logged as they come
        step = max(step, self.last_step)
        self.last_step = step
        self.run.log(dict(values), step=step)

    def log_images(self, images: Sequence[Path], step: int) -> None:
        step = max(step, self.last_step)
        self.run.log({f"plots/{p.stem}": self.wandb.Image(str(p)) for p in images}, step=step)

    def close(self) -> None:
        self.run.finish()


_TRACKERS = {"tensorboard": TensorBoardTracker, "wandb": WandbTracker}


class Trackers:
    """The trackers of one run folder, fed by its JSONL writers (see the module doc)."""

    def __init__(self, run_dir: Path, trackers: Sequence[Tracker]) -> None:
        self.run_dir = run_dir
        self.trackers = list(trackers)
        self._spans: dict[int, dict[str, float]] = {}
        self._lock = threading.Lock()
        self.closed = False

    def on_row(self, stream: str, row: Mapping[str, Any]) -> None:
        """A row written to ``<stream>.jsonl`` (``metrics`` or ``timeline``)."""
        if self.closed:
            return
        with self._lock:
            if stream == "timeline":
                step = int(row.get("step", 0))
                phases = self._spans.setdefault(step, {})
                name = str(row.get("phase"))
                phases[name] = phases.get(name, 0.0) + float(row["end"]) - float(row["start"])
                return
            self._flush_timeline(before=int(row.get("step", 0)) + 1)
            for t in self.trackers:
                t.log_metrics(row)

    def _flush_timeline(self, before: int | None = None) -> None:
        for step in sorted(self._spans):
            if before is not None and step >= before:
                continue
            seconds = self._spans.pop(step)
            for t in self.trackers:
                t.log_timeline(step, seconds)

    def log_images(self, images: Iterable[Path]) -> None:
        images = [Path(p) for p in images]
        if self.closed or not images:
            return
        with self._lock:
            self._flush_timeline()
            step = max((getattr(t, "last_step", 0) for t in self.trackers), default=0)
            for t in self.trackers:
                t.log_images(images, step)

    def close(self) -> None:
        """Flush and close every tracker (W&B finishes its run). Idempotent."""
        if self.closed:
            return
        with self._lock:
            self._flush_timeline()
            self.closed = True
        _OPEN.pop(self.run_dir, None)
        for t in self.trackers:
            t.close()


#: the open trackers per run folder (resolved), for plot_run and close_tracking
_OPEN: dict[Path, Trackers] = {}


def start_tracking(
    config: Any,
    run_dir: str | Path,
    *writers: Any,
    enabled: bool = True,
    report_to: Sequence[str] | None = None,
) -> Trackers | None:
    """Open the trackers a run's ``run.report_to`` names for ``run_dir`` and feed them the
    rows of ``writers`` (:class:`~agentgym.trainers.logging.JsonlWriter`; the file's stem
    says what a row is). Writes ``run_info.json``. ``enabled=False`` (ranks other than
    0): nothing. Returns ``None`` when only ``jsonl`` is asked for.

    Args:
        config: the run's config (a dataclass with a ``run`` section, or a mapping),
            recorded with the run.
        report_to: instead of ``config.run.report_to``.
    """
    if report_to is None:
        report_to = getattr(getattr(config, "run", None), "report_to", None) or ["jsonl"]
    names = check_report_to(report_to)
    if not enabled:
        return None
    run = Path(run_dir)
    run.mkdir(parents=True, exist_ok=True)
    cfg = _config_dict(config)
    info = run_info(cfg)
    (run / "run_info.json").write_text(json.dumps(info, indent=2, default=str) + "\n")
    wanted = [n for n in names if n in _TRACKERS]
    if not wanted:
        return None
    previous = _OPEN.pop(run.resolve(), None)
    if previous is not None:
        previous.close()
    opened: list[Tracker] = []
    try:
        for name in wanted:
            opened.append(_TRACKERS[name](run, info))
    except BaseException:
        for t in opened:
            t.close()
        raise
    trackers = Trackers(run.resolve(), opened)
    _OPEN[trackers.run_dir] = trackers
    for writer in writers:
        writer.attach(trackers)
    return trackers


def trackers_for(run_dir: str | Path) -> Trackers | None:
    """The open trackers of a run folder, if any."""
    return _OPEN.get(Path(run_dir).resolve())


def close_tracking(run_dir: str | Path | None = None) -> None:
    """Close the trackers of ``run_dir`` (``None``: of every run). Idempotent."""
    targets = list(_OPEN.values()) if run_dir is None else [trackers_for(run_dir)]
    for t in targets:
        if t is not None:
            t.close()


def _config_dict(config: Any) -> dict[str, Any] | None:
    if config is None:
        return None
    if isinstance(config, Mapping):
        return dict(config)
    from agentgym import config_to_dict

    return config_to_dict(config)


atexit.register(close_tracking)
