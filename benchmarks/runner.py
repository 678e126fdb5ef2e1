"""The suite runner: resumable benchmark runs that end in a ``result.json``.

Layout of a run (``OUT`` is ``--out``)::

    OUT/<suite>-<hash12>/suite.json                 the suite definition, env specs, hash
    OUT/<suite>-<hash12>/<policy-slug>/episodes.jsonl   one line per finished episode
    OUT/<suite>-<hash12>/<policy-slug>/result.json      metrics, per-task outcomes, usage

Each episode is appended to ``episodes.jsonl`` the moment it finishes (one ``write`` of
one line), tagged in ``metrics`` with its suite entry (``bench/entry``) and its sample
index. A run that is killed loses only the episodes in flight. Running the same command
again reads the file (a torn last line, from a kill mid-write, is cut off first), skips
every ``(entry, seed, sample)`` already there and runs the rest, then scores everything
in the file. Because the folder name holds the suite hash, a changed suite or env
version starts a fresh folder instead of mixing results.

Episodes run through :func:`agentgym.rollout_async`, one task sample per call, on
``concurrency`` workers that share one thread pool; environments are made by id with
``gym.make`` and reused across episodes of the same suite entry.

``result.json`` also says how episodes were graded: ``grading.sandboxes`` counts the
sandbox backends named in the episodes' reward breakdowns, and
``graded_without_isolation`` is true when any episode says its grader was not isolated
from the code it graded (AppGen on the local backend, an explicit unsafe opt-in); the
leaderboard marks such results. ``retried_attempts`` / ``retried_by_reason`` count the
attempts that failed and were played again (``retries``), whether or not a retry scored.

Each sample ``s`` of a task uses the sampling seed ``derive_seed(suite seed, entry, s)``
(and the rollout derives per-request seeds from it), so a resumed run sends the same
requests an uninterrupted run would have sent.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import hashlib
import json
import os
import platform
import re
import time
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from agentgym import (
    ConfigError,
    DataError,
    Episode,
    LocalEnvs,
    Progress,
    SamplingParams,
    iter_episodes,
)
from agentgym.benchmarks.metrics import (
    TaskOutcome,
    compute_metrics,
    episode_prompt_tokens,
    episode_tokens,
    metric_label,
)
from agentgym.benchmarks.suites import Suite, iter_tasks

RESULT_SCHEMA = "agentgym.bench.result/1"
EPISODES_FILE = "episodes.jsonl"
RESULT_FILE = "result.json"
#: episodes that failed for infrastructure reasons: kept for the record, never scored; a
#: later run of the same command plays those tasks again
FAILURES_FILE = "failures.jsonl"
SUITE_FILE = "suite.json"

#: Keys the runner adds to ``Episode.metrics``.
ENTRY_KEY = "bench/entry"
ENTRY_NAME_KEY = "bench/entry_name"

TaskKey = tuple[int, int, int]  # (entry index, seed, sample)


# ------------------------------------------------------------------------------ naming


def policy_slug(spec: str) -> str:
    """A folder name for a policy spec: readable, and unique per spec.

    Specs made only of ``[A-Za-z0-9._-]`` are used as they are; anything else is
    replaced by ``-`` and an 8-hex digest of the exact spec is appended, so two specs
    never share a folder.
    """
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", spec).strip("-.")[:72] or "policy"
    if slug != spec:
        slug += "-" + hashlib.sha256(spec.encode()).hexdigest()[:8]
    return slug


def suite_dir_name(suite: Suite, suite_hash: str) -> str:
    return f"{suite.name}-{suite_hash[:12]}"


def _strip_userinfo(url: str) -> str:
    parts = urlsplit(url)
    if parts.username or parts.password:
        host = parts.hostname or ""
        if parts.port:
            host += f":{parts.port}"
        return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))
    return url


def describe_policy(spec: str, policy: Any, label: str | None = None) -> dict[str, Any]:
    """What a result records about its policy (never an API key)."""
    scheme, _, rest = spec.partition(":")
    default_label = spec
    if scheme == "scripted" and rest:
        default_label = f"{rest.rpartition(':')[2]} (scripted)"
    d: dict[str, Any] = {
        "spec": _strip_userinfo(spec) if scheme == "openai" else spec,
        "label": label or default_label,
        "name": str(getattr(policy, "name", type(policy).__name__)),
        "kind": scheme if rest else spec,
    }
    if scheme == "openai":
        d["model"] = getattr(policy, "model", rest.partition("@")[0])
        base_url = getattr(policy, "base_url", None)
        if base_url:
            d["base_url"] = _strip_userinfo(str(base_url))
            d["spec"] = _strip_userinfo(spec)
    elif scheme == "hf":
        path, _, adapter = rest.partition("@")
        d["model_path"] = path
        d["adapter"] = adapter or None
    elif scheme == "scripted":
        d["function"] = rest
    return d


# ------------------------------------------------------------------------------ reading


def repair_torn_tail(path: Path) -> int:
    """Cut a final line that has no newline (a write killed half-way). Returns bytes cut."""
    if not path.exists():
        return 0
    size = path.stat().st_size
    if size == 0:
        return 0
    with path.open("rb+") as f:
        f.seek(-1, os.SEEK_END)
        if f.read(1) == b"\n":
            return 0
        # find the last newline, scanning back in blocks
        pos = size
        keep = 0
        while pos > 0:
            step = min(65536, pos)
            pos -= step
            f.seek(pos)
            block = f.read(step)
            i = block.rfind(b"\n")
            if i >= 0:
                keep = pos + i + 1
                break
        f.truncate(keep)
    return size - keep


def task_key(ep: Episode) -> TaskKey | None:
    """``(entry, seed, sample)`` of an episode the runner wrote, else None."""
    entry = ep.metrics.get(ENTRY_KEY)
    if entry is None or ep.seed is None:
        return None
    return int(entry), int(ep.seed), int(ep.sample)


def load_done(path: Path, suite: Suite) -> dict[TaskKey, Episode]:
    """Episodes already in ``path`` that belong to ``suite`` (first copy of each key)."""
    done: dict[TaskKey, Episode] = {}
    if not path.exists():
        return done
    valid = {
        (i, seed, s) for i, _entry, seed in iter_tasks(suite) for s in range(suite.samples_per_task)
    }
    for ep in iter_episodes(path):
        key = task_key(ep)
        if key is None or key not in valid or ep.failed:
            continue
        entry = suite.entries[key[0]]
        if ep.env_id != entry.env_id or ep.metrics.get(ENTRY_NAME_KEY, entry.name) != entry.name:
            raise DataError(
                f"{path}: an episode tagged as entry {key[0]} ({entry.name}) was played on "
                f"{ep.env_id}, not {entry.env_id}. The file does not belong to this suite; "
                "move it away or pick another --out."
            )
        done.setdefault(key, ep)
    return done


# ------------------------------------------------------------------------------ running


def _sampling_for(suite: Suite, entry_name: str, sample: int) -> SamplingParams:
    from agentgym import derive_seed

    return SamplingParams(
        max_tokens=suite.max_tokens,
        temperature=suite.temperature,
        top_p=suite.top_p,
        seed=derive_seed("agentgym-bench", suite.seed, entry_name, sample),
    )


def _resolve_policy(policy: str | Any, label: str | None) -> tuple[str, Any]:
    """``(spec, policy object)`` of a policy spec or a policy object."""
    from agentgym import make_policy

    if isinstance(policy, str):
        return policy, make_policy(policy)
    spec = str(getattr(policy, "name", None) or label or type(policy).__name__)
    return spec, policy


def _pending_jobs(
    suite: Suite, done: dict[TaskKey, Episode], limit: int | None, max_episodes: int | None
) -> list[TaskKey]:
    """The ``(entry, seed, sample)`` keys still to play, in suite order."""
    target = suite.limited(limit)
    jobs = [
        (i, seed, s)
        for i, _entry, seed in iter_tasks(target)
        for s in range(suite.samples_per_task)
        if (i, seed, s) not in done
    ]
    if max_episodes is not None:
        jobs = jobs[: max(0, max_episodes)]
    return jobs


@dataclass
class _RunLog:
    """Where a run's finished episodes go: its files, its progress bar and its tallies."""

    rdir: Path
    ep_path: Path
    done: dict[TaskKey, Episode]
    resumed: int
    bar: Progress
    on_episode: Callable[[Episode], Any] | None
    failed: list[Episode] = field(default_factory=list)
    new_reward: float = 0.0

    def save(self, ep: Episode) -> None:
        """Append ``ep`` to ``episodes.jsonl`` in one write."""
        line = ep.to_json() + "\n"
        with self.ep_path.open("a", encoding="utf-8") as f:
            f.write(line)

    def record(self, ep: Episode, i: int, s: int, name: str) -> None:
        """Tag a finished episode with its entry and sample, then save it or set it aside."""
        ep.sample = s
        ep.metrics[ENTRY_KEY] = i
        ep.metrics[ENTRY_NAME_KEY] = name
        if ep.failed:
            self.failed.append(ep)
            with (self.rdir / FAILURES_FILE).open("a", encoding="utf-8") as f:
                f.write(ep.to_json() + "\n")
            self.bar.update(1, {"failed": len(self.failed)})
            return
        self.save(ep)
        self.done[(i, int(ep.seed or 0), s)] = ep
        self.new_reward += ep.reward
        bar = self.bar
        bar.update(1, {"mean_reward(new)": self.new_reward / (bar.done + 1 - self.resumed)})
        if self.on_episode is not None:
            self.on_episode(ep)


async def _worker(
    queue: asyncio.Queue[TaskKey],
    suite: Suite,
    policy_obj: Any,
    log: _RunLog,
    env_host: LocalEnvs,
    retries: int,
) -> None:
    """Play queued task samples, one at a time, until the queue is empty."""
    from agentgym import rollout_async

    while True:
        try:
            i, seed, s = queue.get_nowait()
        except asyncio.QueueEmpty:
            return
        entry = suite.entries[i]

        def tag(ep: Episode, i: int = i, s: int = s, name: str = entry.name) -> None:
            log.record(ep, i, s, name)

        await rollout_async(
            entry.env_id,
            policy_obj,
            seeds=[seed],
            group_size=1,
            sampling=_sampling_for(suite, entry.name, s),
            concurrency=1,
            on_episode=tag,
            env_kwargs=dict(entry.env_kwargs),
            env_host=env_host,
            retries=retries,
        )


async def _run_workers(
    n_workers: int,
    start: Callable[[], Coroutine[Any, Any, None]],
    log: _RunLog,
    env_host: LocalEnvs,
    policy_obj: Any,
) -> None:
    """Run ``n_workers`` of ``start()`` at once; on a failure say how to resume; clean up."""
    try:
        async with asyncio.TaskGroup() as tg:
            for _ in range(n_workers):
                tg.create_task(start())
    except BaseExceptionGroup as eg:
        first = eg.exceptions[0]
        while isinstance(first, BaseExceptionGroup):
            first = first.exceptions[0]
        first.add_note(
            f"{len(log.done)} finished episodes are saved in {log.ep_path}; run the same "
            "command again to resume from there."
        )
        raise first from None
    finally:
        log.bar.close()
        env_host.close()
        aclose = getattr(policy_obj, "aclose", None)
        if aclose is not None:
            try:
                await aclose()
            except Exception:
                pass


async def run_suite_async(
    suite: Suite,
    policy: str | Any,
    *,
    out: str | Path = "bench_results",
    concurrency: int = 8,
    limit: int | None = None,
    label: str | None = None,
    progress: bool = False,
    on_episode: Callable[[Episode], Any] | None = None,
    max_episodes: int | None = None,
    retries: int = 2,
) -> dict[str, Any]:
    """Run (or resume) ``suite`` with ``policy`` and write ``result.json``; returns it.

    Args:
        suite: the suite to run.
        policy: a policy spec (``oracle``, ``openai:MODEL@URL``, ...) or a policy object
            (then pass ``label`` to name it; the spec recorded is its ``name``).
        out: the results root folder.
        concurrency: episodes in flight at once.
        limit: run only the first ``limit`` tasks of each entry (a quick partial run;
            the result says ``complete: false``). A later run without it resumes.
        label: the name shown on the leaderboard (default: the spec).
        progress: print progress to stderr.
        on_episode: called with each new episode after it is saved.
        max_episodes: stop after this many new episodes (the result is then partial);
            used to demonstrate and test resuming.
        retries: play an episode that failed for infrastructure reasons (a sandbox, a
            grader, the endpoint) again up to this many times. One that still fails is
            written to ``failures.jsonl``, counted in the result (``failed_episodes``,
            ``failed_by_reason``) and never scored; the result is then incomplete and
            the next run of the same command plays it again.
    """
    if concurrency < 1:
        raise ConfigError(f"concurrency must be >= 1, got {concurrency}.")
    suite_hash = suite.content_hash()  # raises a clear error for unregistered envs
    spec, policy_obj = _resolve_policy(policy, label)
    sdir = Path(out) / suite_dir_name(suite, suite_hash)
    rdir = sdir / policy_slug(spec)
    rdir.mkdir(parents=True, exist_ok=True)
    _write_json(
        sdir / SUITE_FILE,
        {"hash": suite_hash, "suite": suite.to_dict(), "envs": suite.env_specs()},
    )
    ep_path = rdir / EPISODES_FILE
    repair_torn_tail(ep_path)
    done = load_done(ep_path, suite)
    resumed = len(done)
    jobs = _pending_jobs(suite, done, limit, max_episodes)

    t0 = time.monotonic()
    bar = Progress(
        len(jobs) + resumed,
        desc=f"{suite.name} / {policy_slug(spec)}",
        unit="episode",
        start=resumed,
        enabled=progress,
    )
    log = _RunLog(rdir, ep_path, done, resumed, bar, on_episode)
    queue: asyncio.Queue[TaskKey] = asyncio.Queue()
    for job in jobs:
        queue.put_nowait(job)
    n_workers = max(1, min(concurrency, len(jobs)))
    # env work in this process's threads; envs kept from one task to the next
    env_host = LocalEnvs(n_workers, keep=True)
    await _run_workers(
        n_workers,
        lambda: _worker(queue, suite, policy_obj, log, env_host, retries),
        log,
        env_host,
        policy_obj,
    )

    result = score(
        suite,
        suite_hash,
        done.values(),
        policy=describe_policy(spec, policy_obj, label),
        wall_time_s=time.monotonic() - t0,
        resumed=resumed,
        new=len(done) - resumed,
        failed=log.failed,
    )
    _write_json(rdir / RESULT_FILE, result)
    result["_dir"] = str(rdir)
    return result


def run_suite(suite: Suite, policy: str | Any, **kwargs: Any) -> dict[str, Any]:
    """Synchronous :func:`run_suite_async`."""
    return asyncio.run(run_suite_async(suite, policy, **kwargs))


# ------------------------------------------------------------------------------ scoring


def score(
    suite: Suite,
    suite_hash: str,
    episodes: Iterable[Episode],
    *,
    policy: dict[str, Any],
    wall_time_s: float = 0.0,
    resumed: int = 0,
    new: int = 0,
    failed: Iterable[Episode] = (),
) -> dict[str, Any]:
    """The result record of a run from its episodes (see the module docstring); ``failed``
    are this run's episodes that could not be scored (counted, never scored)."""
    episodes, failed = list(episodes), list(failed)
    from agentgym import retried_reasons

    retried = retried_reasons([*episodes, *failed])  # attempts played again, scored or not
    reasons: dict[str, int] = {}
    for ep in failed:
        reason = ep.failure.reason if ep.failure is not None else "error"
        reasons[reason] = reasons.get(reason, 0) + 1
    from agentgym import __version__

    by_task: dict[tuple[int, int], TaskOutcome] = {}
    for i, entry, seed in iter_tasks(suite):
        by_task[(i, seed)] = TaskOutcome(
            task=f"{entry.name}/{seed}", entry=entry.name, env_id=entry.env_id, seed=seed
        )
    eps = sorted(
        (ep for ep in episodes if task_key(ep) is not None and not ep.failed),
        key=lambda e: task_key(e) or (0, 0, 0),
    )
    completion_tokens = prompt_tokens = calls = 0
    episode_time = 0.0
    for ep in eps:
        key = task_key(ep)
        assert key is not None
        by_task[(key[0], key[1])].add(ep, suite.success)
        completion_tokens += episode_tokens(ep)
        prompt_tokens += episode_prompt_tokens(ep)
        calls += len(ep.turns)
        t_start, t_end = ep.metrics.get("time/start"), ep.metrics.get("time/end")
        if isinstance(t_start, int | float) and isinstance(t_end, int | float):
            episode_time += max(0.0, t_end - t_start)
    k = suite.samples_per_task
    outcomes = list(by_task.values())
    kw = {
        "k": k,
        "reference_tokens": suite.reference_tokens,
        "max_credit_tokens": suite.max_credit_tokens,
    }
    by_entry = {
        entry.name: compute_metrics(
            [t for t in outcomes if t.entry == entry.name], suite.metrics, **kw
        )
        for entry in suite.entries
    }
    expected = suite.num_tasks * k
    return {
        "schema": RESULT_SCHEMA,
        "suite": _suite_record(suite, suite_hash),
        "policy": policy,
        "complete": len(eps) == expected,
        "episodes": len(eps),
        "expected_episodes": expected,
        "tasks_scored": sum(1 for t in outcomes if t.n > 0),
        "metrics": compute_metrics(outcomes, suite.metrics, **kw),
        "labels": {m: metric_label(m, k) for m in suite.metrics},
        "confidence_interval": "95% percentile bootstrap over tasks (2000 resamples, seed 0)",
        "by_entry": by_entry,
        "tasks": [t.to_dict() for t in outcomes if t.n > 0],
        **_grading(eps),
        "usage": {
            "completion_tokens": completion_tokens,
            "prompt_tokens": prompt_tokens,
            "policy_calls": calls,
        },
        "wall_time_s": round(wall_time_s, 3),
        "episode_time_s": round(episode_time, 3),
        "resumed_episodes": resumed,
        "new_episodes": new,
        "failed_episodes": len(failed),
        "failed_by_reason": reasons,
        "retried_attempts": sum(retried.values()),
        "retried_by_reason": retried,
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "agentgym_version": __version__,
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
    }


def _grading(eps: list[Episode]) -> dict[str, Any]:
    """How the episodes were graded: envs that grade in a sandbox name the backend, and
    whether the grader was kept apart from the graded code (AppGen: ``grader_isolated``
    is False on the local backend, an explicit unsafe opt-in)."""
    sandboxes: dict[str, int] = {}
    unisolated = 0
    for ep in eps:
        backend = (ep.reward_breakdown or {}).get("sandbox")
        if isinstance(backend, str):
            sandboxes[backend] = sandboxes.get(backend, 0) + 1
        unisolated += (ep.reward_breakdown or {}).get("grader_isolated") is False
    return {
        "grading": {"sandboxes": sandboxes, "unisolated_episodes": unisolated},
        "graded_without_isolation": unisolated > 0,
    }


def _suite_record(suite: Suite, suite_hash: str) -> dict[str, Any]:
    """What a result records about its suite."""
    return {
        "name": suite.name,
        "version": suite.version,
        "hash": suite_hash,
        "description": suite.description,
        "metrics": list(suite.metrics),
        "primary_metric": suite.primary_metric,
        "plot_metric": suite.plot_metric,
        "samples_per_task": suite.samples_per_task,
        "num_tasks": suite.num_tasks,
        "reference_tokens": suite.reference_tokens,
        "max_credit_tokens": suite.max_credit_tokens,
    }


def rescore(run_dir: str | Path, suite: Suite) -> dict[str, Any]:
    """Recompute a run's result from its episodes file (without running anything)."""
    rdir = Path(run_dir)
    old = json.loads((rdir / RESULT_FILE).read_text()) if (rdir / RESULT_FILE).exists() else {}
    suite_hash = suite.content_hash()
    done = load_done(rdir / EPISODES_FILE, suite)
    return score(suite, suite_hash, done.values(), policy=old.get("policy", {"spec": rdir.name}))


def _write_json(path: Path, data: Any) -> None:
    """Write JSON atomically (temp file + rename): a reader never sees half a file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n")
    os.replace(tmp, path)
