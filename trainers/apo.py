"""A*PO's first stage: the optimal value ``V*(x)`` of every training prompt, cached on disk.

A*PO (arXiv 2505.20686) trains in two stages. First, offline, it estimates each prompt's
optimal value from ``k`` samples of the *reference* policy (the warm start)::

    V*(x) = beta * log mean_k exp(r_k / beta)          (the best reward as beta -> 0)

Then it trains with one sample per prompt, advantage ``r - V*(x)`` (estimator ``apo``)
and a least-squares regression of ``beta' log pi/pi_ref`` onto it (loss ``apo``). One
sample per prompt instead of ``G`` is the method's point: the expensive sampling happens
once, before training, from a policy that does not change.

Which prompts: the run's own task stream, replayed
(:class:`~agentgym.trainers.rollout_phase.TaskStream`): the first ``run.max_steps x
rollout.batch_tasks`` tasks, plus a margin. The cache is a JSONL file (default
``<run.output_dir>/apo_values.jsonl``), one row per (policy, env id, seed); a row is
never recomputed, so the stage resumes where it stopped, and a different reference
policy (model, temperature, token cap, k, beta) gets rows of its own.

``agentgym apo-values CONFIG`` runs the stage; ``agentgym train`` with
``algorithm.advantage: apo`` runs it first for whatever is missing (one process).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from agentgym import ConfigError, Episode, Progress, SamplingParams, derive_seed, rollout_async
from agentgym.trainers.algorithm import optimal_value
from agentgym.trainers.config import TrainConfig
from agentgym.trainers.env_setup import env_corpus, env_kwargs, resolve_envs
from agentgym.trainers.rollout_phase import TaskStream

CACHE_FILE = "apo_values.jsonl"
#: tasks computed beyond ``max_steps x batch_tasks`` (a dropped or failed group draws more)
MARGIN = 0.25


def cache_path(cfg: TrainConfig) -> Path:
    """Where the run keeps its values (``algorithm.apo_values`` or the run folder)."""
    a = cfg.algorithm
    return Path(a.apo_values) if a.apo_values else Path(cfg.run.output_dir) / CACHE_FILE


def policy_key(cfg: TrainConfig) -> str:
    """A short hash of what decides the reference samples (model, sampling, k, beta)."""
    m, r, a = cfg.model, cfg.rollout, cfg.algorithm
    parts = [
        m.path
        or f"preset:{m.preset}:{json.dumps(m.preset_overrides, sort_keys=True)}:{m.init_seed}",
        m.tokenizer_vocab_size,
        r.temperature,
        r.top_p,
        r.max_tokens,
        a.apo_value_samples,
        a.apo_value_beta,
        cfg.run.seed,
    ]
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:16]


class ValueCache:
    """``V*`` by (policy key, env id, seed), read from and appended to a JSONL file."""

    def __init__(self, path: Path, policy: str) -> None:
        self.path, self.policy = Path(path), policy
        self.values: dict[tuple[str, int], float] = {}
        if self.path.exists():
            for line in self.path.read_text(encoding="utf-8").splitlines():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a torn last line of an interrupted stage
                if row.get("policy") == policy:
                    self.values[(str(row["env_id"]), int(row["seed"]))] = float(row["value"])

    def __contains__(self, key: tuple[str, int]) -> bool:
        return key in self.values

    def __len__(self) -> int:
        return len(self.values)

    def add(self, env_id: str, seed: int, rewards: Sequence[float], beta: float) -> float:
        """Compute ``V*`` from the reference rewards, keep it and append it to the file."""
        value = optimal_value(torch.tensor(list(rewards), dtype=torch.float64), beta)
        self.values[(env_id, seed)] = value
        self.path.parent.mkdir(parents=True, exist_ok=True)
        row = {
            "policy": self.policy,
            "env_id": env_id,
            "seed": seed,
            "value": value,
            "rewards": list(rewards),
            "beta": beta,
        }
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
        return value

    def values_for(self, episodes: Sequence[Episode]) -> torch.Tensor:
        """``V*`` of each episode's prompt; a missing one is an error that says what to run."""
        out = []
        for ep in episodes:
            key = (ep.env_id, int(ep.seed or 0))
            if key not in self.values:
                raise ConfigError(
                    f"A*PO has no V* for {ep.env_id} seed {ep.seed} in {self.path}: the run "
                    "drew more tasks than the value stage covered. Run `agentgym apo-values "
                    "CONFIG` with the run's config (it adds what is missing), then resume."
                )
            out.append(self.values[key])
        return torch.tensor(out, dtype=torch.float32)


def stage_tasks(cfg: TrainConfig, env_ids: Sequence[str]) -> list[tuple[int, int]]:
    """(env index, seed) of the tasks the run will draw, in order (with the margin)."""
    per_step = cfg.rollout.tasks_per_round or cfg.rollout.batch_tasks
    n = int(cfg.run.max_steps * per_step * (1 + MARGIN)) + per_step
    drawn = TaskStream(cfg, env_ids).draw(n)
    return [(k, seed) for k, seeds in sorted(drawn.items()) for seed in seeds]


def compute_apo_values(
    cfg: TrainConfig, *, say: Callable[[str], None] = print, progress: bool = True
) -> ValueCache:
    """Run the value stage for every task of the run not yet in the cache; returns it.

    The reference policy is the configured model as it is loaded (the warm start, before
    any adapter), sampled at ``rollout.temperature`` with ``k = algorithm.apo_value_samples``
    samples per prompt. An episode that fails (infrastructure) leaves its prompt out; the
    next run of the stage tries it again.
    """
    from agentgym.generation import make_engine, place_model
    from agentgym.trainers.models import build_model_and_tokenizer
    from agentgym.trainers.runtime import setup_torch

    env_ids = resolve_envs(cfg.envs)
    cache = ValueCache(cache_path(cfg), policy_key(cfg))
    todo: dict[int, list[int]] = defaultdict(list)
    for k, seed in stage_tasks(cfg, env_ids):
        if (env_ids[k], seed) not in cache:
            todo[k].append(seed)
    missing = sum(len(v) for v in todo.values())
    if not missing:
        return cache
    say(
        f"[agentgym apo-values] V* for {missing} prompts ({len(cache)} cached) from "
        f"{cfg.algorithm.apo_value_samples} reference samples each -> {cache.path}"
    )
    setup_torch(cfg.run.threads, cfg.run.seed)
    model, tokenizer = build_model_and_tokenizer(
        cfg.model, corpus=lambda: env_corpus(cfg.envs, seed_start=cfg.train_seed_start)
    )
    model = place_model(model, cfg.model)  # the trainer's device and dtype
    engine = make_engine("hf", model=model, tokenizer=tokenizer, seed=cfg.run.seed)
    policy = engine.as_policy(max_batch=cfg.rollout.max_batch)
    r = cfg.rollout
    sampling = SamplingParams(
        max_tokens=r.max_tokens,
        temperature=r.temperature,
        top_p=r.top_p,
        seed=derive_seed("apo-values", cfg.run.seed),
    )
    bar = Progress(missing, desc="apo-values", unit="prompt", enabled=progress)
    failed = 0
    model.eval()
    try:
        with torch.no_grad():
            for k, seeds in sorted(todo.items()):
                for start in range(0, len(seeds), max(1, r.batch_tasks)):
                    chunk = seeds[start : start + max(1, r.batch_tasks)]
                    episodes = asyncio.run(
                        rollout_async(
                            env_ids[k],
                            policy,
                            seeds=chunk,
                            group_size=cfg.algorithm.apo_value_samples,
                            sampling=sampling,
                            concurrency=r.concurrency,
                            env_kwargs=env_kwargs(cfg.envs[k], tokenizer),
                            retries=r.episode_retries,
                        )
                    )
                    by_seed: dict[int, list[Episode]] = defaultdict(list)
                    for ep in episodes:
                        by_seed[int(ep.seed or 0)].append(ep)
                    for seed in chunk:
                        eps = by_seed.get(seed, [])
                        if not eps or any(e.failed for e in eps):
                            failed += 1
                        else:
                            cache.add(
                                env_ids[k],
                                seed,
                                [e.reward for e in eps],
                                cfg.algorithm.apo_value_beta,
                            )
                        bar.update(1)
    finally:
        bar.close()
        policy.close()
        engine.close()
    if failed:
        say(
            f"[agentgym apo-values] {failed} prompts had failed episodes and got no V*; run "
            "the stage again to retry them."
        )
    return cache


def ensure_values(cfg: TrainConfig, *, world_size: int, say: Callable[[str], None]) -> ValueCache:
    """The run's value cache, computing what is missing first (one process only)."""
    env_ids = resolve_envs(cfg.envs)
    cache = ValueCache(cache_path(cfg), policy_key(cfg))
    complete = all((env_ids[k], s) in cache for k, s in stage_tasks(cfg, env_ids))
    if complete:
        return cache
    if world_size > 1:
        raise ConfigError(
            f"A*PO's value cache {cache.path} is incomplete; compute it first in one process: "
            "`agentgym apo-values CONFIG` (same config and overrides), then start the run."
        )
    return compute_apo_values(cfg, say=say, progress=cfg.run.progress)
