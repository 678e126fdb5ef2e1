"""The trainer's record of episodes that failed for infrastructure reasons.

An episode that could not be scored (:attr:`agentgym.Episode.failure`: a sandbox or
grader died, an env raised) never becomes a reward: the rollout phase drops its group and
quarantines its task. This module keeps the record a person reads afterwards and the run
reads on ``--resume``:

* ``failures.jsonl`` in the run folder: one row per failed episode (step, env id, seed,
  sample, reason, message, the failing call, the traceback's tail);
* ``quarantine.jsonl``: the tasks (env id, seed) never to draw again, so a resumed run does
  not replay a task that fails every time;
* the step's counts, ``episodes/failed`` and ``episodes/failed/<reason>``, and of the
  attempts played again after a failure, ``episodes/retried`` and
  ``episodes/retried/<reason>`` (``failures.jsonl`` has a ``recovered`` row for each
  episode scored after a retry);
* the stop rule: more than ``rollout.max_failed_share`` of a step's episodes failed.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from agentgym import Episode, InfraError, failed_attempts, retried_reasons

FAILURES_FILE = "failures.jsonl"
QUARANTINE_FILE = "quarantine.jsonl"

#: what to look at first, by failure reason
HINTS = {
    "sandbox_died": "`agentgym sandbox doctor` (is the Docker engine healthy?)",
    "docker_unreachable": "`agentgym sandbox doctor` (is the Docker engine running?)",
    "grader_timeout": "the machine's load (lower rollout.concurrency or rollout_workers)",
    "grader_crashed": "the machine's memory and the grading workers' logs",
    "worker_lost": "the Ray workers' logs and the nodes' memory",
    "policy_error": "the rollout engine",
}


def reasons(failed: Sequence[Episode]) -> dict[str, int]:
    """Failed episodes counted by reason, most common first."""
    return dict(Counter(e.failure.reason for e in failed if e.failure is not None).most_common())


def failure_counts(failed: Sequence[Episode], scored: Sequence[Episode] = ()) -> dict[str, int]:
    """The step's metrics: ``episodes/failed`` and ``episodes/failed/<reason>``; the
    attempts played again (of ``failed`` and ``scored`` episodes), ``episodes/retried``
    and ``episodes/retried/<reason>``."""
    out = {"episodes/failed": len(failed)}
    out.update({f"episodes/failed/{r}": n for r, n in reasons(failed).items()})
    retried = retried_reasons([*failed, *scored])
    out["episodes/retried"] = sum(retried.values())
    out.update({f"episodes/retried/{r}": n for r, n in retried.items()})
    return out


def record(
    run_dir: Path, step: int, failed: Sequence[Episode], recovered: Sequence[Episode] = ()
) -> str:
    """Append the failures and their tasks to the run folder, and a ``recovered`` row for
    each episode scored after failed attempts; returns a one-line summary."""
    with (run_dir / FAILURES_FILE).open("a", encoding="utf-8") as f:
        for ep in failed:
            row = {"step": step, "env_id": ep.env_id, "seed": ep.seed, "sample": ep.sample}
            f.write(json.dumps({**row, **(ep.failure.to_dict() if ep.failure else {})}) + "\n")
        for ep in recovered:
            row = {"step": step, "env_id": ep.env_id, "seed": ep.seed, "sample": ep.sample}
            attempts = failed_attempts(ep)
            f.write(json.dumps({**row, "recovered": True, "failed_attempts": attempts}) + "\n")
    if not failed:
        return (
            f"[agentgym train] step {step}: {len(recovered)} episode(s) scored after a retry "
            f"({retried_reasons(recovered)}); details in {run_dir / FAILURES_FILE}."
        )
    with (run_dir / QUARANTINE_FILE).open("a", encoding="utf-8") as f:
        for env_id, seed in sorted({(ep.env_id, int(ep.seed or 0)) for ep in failed}):
            f.write(json.dumps({"env_id": env_id, "seed": seed, "step": step}) + "\n")
    return summary(step, failed, run_dir)


def summary(step: int, failed: Sequence[Episode], run_dir: Path) -> str:
    """What a person reads on stderr: how many, why, the first one, where the rest is."""
    first = failed[0]
    counts = ", ".join(f"{k}: {v}" for k, v in reasons(failed).items())
    message = first.failure.message if first.failure else "?"
    return (
        f"[agentgym train] step {step}: {len(failed)} episode(s) failed ({counts}); first: "
        f"{first.env_id} seed {first.seed}: {message}. Their groups are dropped and their "
        f"tasks quarantined; details in {run_dir / FAILURES_FILE}."
    )


def read_quarantine(path: Path) -> set[tuple[str, int]]:
    """The quarantined tasks of a run folder (empty when there is none)."""
    if not path.exists():
        return set()
    out = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
            out.add((str(row["env_id"]), int(row["seed"])))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            continue  # a torn last line of a killed writer
    return out


def check_share(step: int, failed: Sequence[Episode], played: int, limit: float, run_dir: Path):
    """Raise when more than ``limit`` of the step's ``played`` episodes failed."""
    if not played or len(failed) / played <= limit:
        return
    counts = reasons(failed)
    checks = "; ".join(f"{r}: {HINTS[r]}" for r in counts if r in HINTS) or (
        "the tracebacks in " + str(run_dir / FAILURES_FILE)
    )
    raise InfraError(
        f"step {step}: {len(failed)} of {played} episodes failed ({counts}), more than "
        f"rollout.max_failed_share={limit:g}, so the run stops here; the last checkpoint "
        f"stays and --resume continues from it. Check first: {checks}. Every failure is in "
        f"{run_dir / FAILURES_FILE}.",
        reason="too_many_failures",
    )
