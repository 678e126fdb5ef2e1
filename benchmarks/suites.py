"""Benchmark suites: frozen lists of tasks with fixed seeds, sampling and metrics.

A :class:`Suite` names every task it runs (an environment id, its ``gym.make``
arguments and the ``reset`` seeds), how many samples each task gets, the sampling
parameters and the metrics it reports. Its :meth:`Suite.content_hash` covers the suite
definition, the registered spec of every environment it uses (id with version, entry
point, default arguments) and :data:`SCORING_VERSION`, the version of the metric code in
:mod:`agentgym.benchmarks.metrics`. Every result carries the hash, and results with
different hashes are never compared, so changing a suite, an environment's registered
version or the scoring rules never mixes old and new numbers.

Suites reach environments only through their ids; this module imports no environment
code.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentgym import ConfigError, UnknownNameError

#: Version of the scoring code (success rules, metric definitions). Bump it whenever a
#: metric's definition changes; it is part of every suite hash.
SCORING_VERSION = 1

#: Metric names a suite may ask for (see :mod:`agentgym.benchmarks.metrics`).
KNOWN_METRICS: tuple[str, ...] = (
    "accuracy",
    "pass_at_k",
    "pass_rate",
    "mean_tokens",
    "balanced",
    "reward",
    "test_fraction",
)

#: How an episode counts as a success (see :func:`agentgym.benchmarks.metrics.success`).
SUCCESS_RULES: tuple[str, ...] = ("correct", "full_reward", "all_tests")


@dataclass(frozen=True)
class SuiteEntry:
    """One group of tasks of a suite: one environment configuration and its seeds.

    Attributes:
        name: short label, unique within the suite (``level-3``, ``hard``).
        env_id: the registered environment id, version included.
        seeds: the ``reset`` seeds; each seed is one task.
        env_kwargs: keyword arguments for ``gym.make``.
    """

    name: str
    env_id: str
    seeds: tuple[int, ...]
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "seeds", tuple(int(s) for s in self.seeds))
        object.__setattr__(self, "env_kwargs", dict(self.env_kwargs))
        if not self.name or "/" in self.name:
            raise ConfigError(f"Suite entry name must be non-empty without '/', got {self.name!r}.")
        if not self.seeds:
            raise ConfigError(f"Suite entry {self.name!r} has no seeds; give at least one.")
        if len(set(self.seeds)) != len(self.seeds):
            raise ConfigError(f"Suite entry {self.name!r} repeats a seed; seeds must be unique.")

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "env_id": self.env_id,
            "env_kwargs": dict(self.env_kwargs),
            "seeds": list(self.seeds),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SuiteEntry:
        seeds = d.get("seeds")
        if isinstance(seeds, Mapping):  # {"start": 0, "stop": 20}
            seeds = range(int(seeds.get("start", 0)), int(seeds["stop"]))
        if seeds is None:
            raise ConfigError(f"Suite entry {d.get('name')!r} needs 'seeds' (a list).")
        return cls(
            name=str(d["name"]),
            env_id=str(d["env_id"]),
            seeds=tuple(seeds),
            env_kwargs=dict(d.get("env_kwargs") or {}),
        )


@dataclass(frozen=True)
class Suite:
    """A frozen benchmark: tasks, samples per task, sampling and metrics.

    Attributes:
        name: the suite's name (``math-balanced``).
        version: bumped by hand whenever the definition changes on purpose.
        entries: the task groups.
        samples_per_task: k in avg@k and pass@k.
        temperature / top_p / max_tokens: sampling for every policy call.
        metrics: metric names to report (see :data:`KNOWN_METRICS`).
        primary_metric: the leaderboard ranks by this one (higher is better).
        plot_metric: the y axis of the leaderboard's score-versus-tokens plot.
        success: how an episode counts as solved (see :data:`SUCCESS_RULES`).
        reference_tokens / max_credit_tokens: the token scale of the ``balanced`` score.
        seed: base of the per-request sampling seeds.
        description: one line for people.
    """

    name: str
    version: int
    entries: tuple[SuiteEntry, ...]
    samples_per_task: int = 1
    temperature: float = 0.6
    top_p: float = 0.95
    max_tokens: int = 4096
    metrics: tuple[str, ...] = ("accuracy", "pass_at_k", "mean_tokens")
    primary_metric: str = "accuracy"
    plot_metric: str = "accuracy"
    success: str = "full_reward"
    reference_tokens: int = 512
    max_credit_tokens: int = 8192
    seed: int = 0
    description: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "entries", tuple(self.entries))
        object.__setattr__(self, "metrics", tuple(self.metrics))
        if not self.entries:
            raise ConfigError(f"Suite {self.name!r} has no entries.")
        names = [e.name for e in self.entries]
        if len(set(names)) != len(names):
            raise ConfigError(f"Suite {self.name!r} has duplicate entry names: {names}.")
        if self.samples_per_task < 1:
            raise ConfigError(f"samples_per_task must be >= 1, got {self.samples_per_task}.")
        if self.max_tokens < 1 or self.temperature < 0 or not 0 < self.top_p <= 1:
            raise ConfigError("Suite needs max_tokens >= 1, temperature >= 0, 0 < top_p <= 1.")
        unknown = [m for m in self.metrics if m not in KNOWN_METRICS]
        if unknown:
            raise ConfigError(
                f"Suite {self.name!r}: unknown metric(s) {unknown}. Known: {list(KNOWN_METRICS)}."
            )
        for attr in ("primary_metric", "plot_metric"):
            if getattr(self, attr) not in self.metrics:
                raise ConfigError(
                    f"Suite {self.name!r}: {attr}={getattr(self, attr)!r} is not one of its "
                    f"metrics {list(self.metrics)}."
                )
        if self.success not in SUCCESS_RULES:
            raise ConfigError(
                f"Suite {self.name!r}: success rule {self.success!r} is not one of "
                f"{list(SUCCESS_RULES)}."
            )
        if not 0 < self.reference_tokens < self.max_credit_tokens:
            raise ConfigError("Suite needs 0 < reference_tokens < max_credit_tokens.")

    @property
    def num_tasks(self) -> int:
        return sum(len(e.seeds) for e in self.entries)

    @property
    def env_ids(self) -> list[str]:
        return sorted({e.env_id for e in self.entries})

    def to_dict(self) -> dict[str, Any]:
        """The canonical definition (what the hash covers, minus env specs)."""
        return {
            "name": self.name,
            "version": self.version,
            "description": self.description,
            "entries": [e.to_dict() for e in self.entries],
            "samples_per_task": self.samples_per_task,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_tokens,
            "metrics": list(self.metrics),
            "primary_metric": self.primary_metric,
            "plot_metric": self.plot_metric,
            "success": self.success,
            "reference_tokens": self.reference_tokens,
            "max_credit_tokens": self.max_credit_tokens,
            "seed": self.seed,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Suite:
        d = dict(d)
        try:
            entries = tuple(SuiteEntry.from_dict(e) for e in d.pop("entries"))
            return cls(entries=entries, **d)
        except (KeyError, TypeError) as e:
            raise ConfigError(f"Not a valid suite definition ({e}).") from e

    def env_specs(self) -> dict[str, dict[str, Any]]:
        """The registered spec of every env the suite uses; raises if one is missing."""
        import gymnasium as gym

        import agentgym  # noqa: F401  (registers the built-in envs)

        out: dict[str, dict[str, Any]] = {}
        for env_id in self.env_ids:
            if env_id not in gym.registry:
                known = sorted(i for i in gym.registry if i.startswith("agentgym/"))
                raise ConfigError(
                    f"Suite {self.name!r} needs the environment {env_id!r}, which is not "
                    f"registered here (registered agentgym envs: {', '.join(known) or 'none'}). "
                    "Install or update the package that provides it (`agentgym list` shows "
                    "what is registered), or run another suite."
                )
            spec = gym.spec(env_id)
            ep = spec.entry_point
            if not isinstance(ep, str):
                ep = f"{getattr(ep, '__module__', '?')}:{getattr(ep, '__qualname__', repr(ep))}"
            out[env_id] = {
                "id": spec.id,
                "version": spec.version,
                "entry_point": ep,
                "kwargs": _canonical(spec.kwargs),
                "max_episode_steps": spec.max_episode_steps,
            }
        return out

    def content_hash(self) -> str:
        """sha256 of the suite definition, its envs' registered specs and the scoring version."""
        payload = {
            "suite": self.to_dict(),
            "envs": self.env_specs(),
            "scoring_version": SCORING_VERSION,
        }
        return hashlib.sha256(_canonical_json(payload).encode()).hexdigest()

    def limited(self, limit: int | None) -> Suite:
        """The same suite with only the first ``limit`` tasks of each entry (a quick run).

        The hash of a limited suite is *not* recomputed: callers keep the full suite's hash
        so that a quick run and a full run share one result folder and one resume file.
        """
        if limit is None:
            return self
        if limit < 1:
            raise ConfigError(f"limit must be >= 1, got {limit}.")
        entries = tuple(
            SuiteEntry(e.name, e.env_id, e.seeds[:limit], e.env_kwargs) for e in self.entries
        )
        return Suite.from_dict({**self.to_dict(), "entries": [e.to_dict() for e in entries]})


def _canonical(obj: Any) -> Any:
    """JSON-native, key-sorted form of registry kwargs (unknown objects become their repr)."""
    if isinstance(obj, Mapping):
        return {str(k): _canonical(v) for k, v in sorted(obj.items(), key=lambda kv: str(kv[0]))}
    if isinstance(obj, list | tuple):
        return [_canonical(v) for v in obj]
    if obj is None or isinstance(obj, bool | int | float | str):
        return obj
    if hasattr(obj, "__dataclass_fields__"):
        from dataclasses import asdict

        return _canonical(asdict(obj))
    return repr(obj)


def _canonical_json(obj: Any) -> str:
    return json.dumps(_canonical(obj), sort_keys=True, separators=(",", ":"), ensure_ascii=True)


# ---------------------------------------------------------------------------- built-ins

MATH_ENV = "agentgym/BalancedMath-v0"
MEMORY_ENV = "agentgym/MemoryRecall-v0"
APPGEN_ENV = "agentgym/AppGen-v0"

#: Levels of the math generator covered by ``math-balanced`` (the generator has 1-3).
MATH_LEVELS: tuple[int, ...] = (1, 2, 3)
#: Generated problems per level.
MATH_TASKS_PER_LEVEL = 20
#: Reset seeds that pick each of the 44 problems of BalancedMath-v0's bundled hard set
#: exactly once (the env picks a hard problem at random from the seed; these are the
#: first seeds that reach each problem). tests/benchmarks checks they are still distinct.
MATH_HARD_SEEDS: tuple[int, ...] = (
    0, 1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 14, 15, 16, 17, 19, 21, 22, 23, 24, 25, 27,
    30, 31, 32, 34, 37, 38, 39, 42, 52, 68, 70, 74, 87, 98, 104, 105, 118, 121, 174, 176,
)  # fmt: skip


def math_balanced() -> Suite:
    """Generator levels 1-3 (20 problems each) plus each problem of the bundled hard set."""
    entries = [
        SuiteEntry(f"level-{lv}", MATH_ENV, tuple(range(MATH_TASKS_PER_LEVEL)), {"levels": lv})
        for lv in MATH_LEVELS
    ]
    entries.append(SuiteEntry("hard", MATH_ENV, MATH_HARD_SEEDS, {"source": "hard"}))
    return Suite(
        name="math-balanced",
        version=1,
        description=(
            "Balanced-reasoning maths: generated problems of levels 1-3 and the bundled "
            "hard set; the balanced score credits correct answers by their length."
        ),
        entries=tuple(entries),
        samples_per_task=4,
        temperature=0.6,
        top_p=0.95,
        max_tokens=4096,
        metrics=("balanced", "accuracy", "pass_at_k", "mean_tokens"),
        primary_metric="balanced",
        plot_metric="accuracy",
        success="correct",
        reference_tokens=256,
        max_credit_tokens=4096,
    )


def memory_recall() -> Suite:
    """MemoryRecall-v0 at its defaults and with a longer document (32 tasks each)."""
    return Suite(
        name="memory-recall",
        version=1,
        description="Carry facts across conversations through memory summaries.",
        entries=(
            SuiteEntry("default", MEMORY_ENV, tuple(range(32))),
            SuiteEntry(
                "long",
                MEMORY_ENV,
                tuple(range(32)),
                {"num_facts": 4, "num_distractors": 20, "chunk_size": 3},
            ),
        ),
        samples_per_task=2,
        temperature=0.6,
        top_p=0.95,
        max_tokens=512,
        metrics=("reward", "accuracy", "pass_at_k", "mean_tokens"),
        primary_metric="reward",
        plot_metric="reward",
        success="full_reward",
    )


def appgen() -> Suite:
    """Every AppGen-v0 task once per seed 0..23 (one seed per task), two samples each.

    Version 2: the 12 full-stack tasks joined the 12 library tasks."""
    return Suite(
        name="appgen",
        version=2,
        description=(
            "Multi-file application generation (libraries and full-stack web apps), "
            "graded by each task's tests."
        ),
        entries=(SuiteEntry("tasks", APPGEN_ENV, tuple(range(24))),),
        samples_per_task=2,
        temperature=0.6,
        top_p=0.95,
        max_tokens=4096,
        metrics=("pass_rate", "pass_at_k", "test_fraction", "mean_tokens"),
        primary_metric="pass_rate",
        plot_metric="pass_rate",
        success="all_tests",
        reference_tokens=2048,
        max_credit_tokens=32768,
    )


_BUILTIN: dict[str, Callable[[], Suite]] = {
    "math-balanced": math_balanced,
    "memory-recall": memory_recall,
    "appgen": appgen,
}
_USER: dict[str, Suite] = {}


def register_suite(suite: Suite, *, overwrite: bool = False) -> None:
    """Make ``suite`` available by name to :func:`get_suite` and ``agentgym bench``."""
    if not overwrite and (suite.name in _BUILTIN or suite.name in _USER):
        raise ConfigError(
            f"A suite named {suite.name!r} already exists; pick another name or pass "
            "overwrite=True."
        )
    _USER[suite.name] = suite


def suite_names() -> list[str]:
    return sorted({*_BUILTIN, *_USER})


def get_suite(name_or_path: str | Path) -> Suite:
    """A suite by name, or loaded from a ``.json`` / ``.yaml`` definition file."""
    s = str(name_or_path)
    if s in _USER:
        return _USER[s]
    if s in _BUILTIN:
        return _BUILTIN[s]()
    path = Path(s)
    if path.suffix in (".json", ".yaml", ".yml"):
        if not path.is_file():
            raise ConfigError(f"Suite file {path} does not exist.")
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".json":
            data = json.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
        if not isinstance(data, Mapping):
            raise ConfigError(f"Suite file {path} must hold a mapping (a suite definition).")
        return Suite.from_dict(data)
    raise UnknownNameError(
        "suite",
        s,
        suite_names(),
        hint="Pass a built-in suite name or a path to a .json/.yaml suite definition.",
    )


def iter_tasks(suite: Suite) -> Iterable[tuple[int, SuiteEntry, int]]:
    """``(entry index, entry, seed)`` for every task of the suite, in order."""
    for i, entry in enumerate(suite.entries):
        for seed in entry.seeds:
            yield i, entry, seed
