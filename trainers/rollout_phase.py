"""The rollout phase of a DAPO step: draw tasks, play them, keep the informative groups.

:class:`RolloutPhase` owns what the trainer needs to generate a batch: the task stream
(which env each task comes from, by weight, and its reset seed), where env work runs (a
thread pool and the env instances kept from step to step, or Ray actors), and DAPO's
dynamic sampling: groups whose shaped rewards are all equal carry no signal and are
dropped, and more tasks are drawn until ``rollout.batch_tasks`` groups are kept or
``algorithm.max_generation_rounds`` is reached.

Under several ranks each engine replica plays its share of a round's tasks (on the rank
that drives it: ``engine.drive``; with the HF engine every rank is a replica of its own)
and every rank receives every replica's episodes, in the order one process would have
produced them, so every rank makes the same filtering decisions on the same batch.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from agentgym import (
    ConfigError,
    Episode,
    LocalEnvs,
    RayEnvWorkers,
    SamplingParams,
    derive_seed,
    episode_accuracy,
    rollout_async,
)
from agentgym.trainers.algorithm import informative_groups, length_reward, overlong_penalty
from agentgym.trainers.config import TrainConfig
from agentgym.trainers.distributed import DistInfo, all_gather_objects

Group = list[Episode]


def shaped_rewards(
    episodes: Sequence[Episode], group_ids: torch.Tensor, cfg: TrainConfig
) -> torch.Tensor:
    """Env reward plus the configured shaping terms, one per episode."""
    algo = cfg.algorithm
    r = torch.tensor([e.reward for e in episodes], dtype=torch.float32)
    if algo.overlong_penalty:
        longest = torch.tensor(
            [max((t.completion.num_tokens or 0 for t in e.turns), default=0) for e in episodes],
            dtype=torch.float32,
        )
        cache = min(algo.overlong_cache, cfg.rollout.max_tokens)
        # a truncated completion has exactly max_tokens tokens: count it as over the limit
        over = torch.tensor(
            [any(t.completion.truncated for t in e.turns) for e in episodes], dtype=torch.bool
        )
        longest = torch.where(over, longest + 1, longest)
        r = r + overlong_penalty(longest, cfg.rollout.max_tokens, cache)
    if algo.length_reward_coef > 0:
        lengths = torch.tensor([e.num_policy_tokens for e in episodes], dtype=torch.float32)
        correct = torch.tensor(
            [(episode_accuracy(e) or 0.0) >= 1.0 for e in episodes], dtype=torch.bool
        )
        r = r + algo.length_reward_coef * length_reward(lengths, correct, group_ids)
    return r


def group_episodes(episodes: Sequence[Episode]) -> list[Group]:
    """Episodes grouped by task (in first-seen order), each group ordered by sample."""
    groups: dict[Any, Group] = {}
    for ep in episodes:
        groups.setdefault(ep.group_key, []).append(ep)
    return [sorted(g, key=lambda e: e.sample) for g in groups.values()]


@dataclass
class Collected:
    """What one rollout phase produced.

    Attributes:
        kept: the informative groups, at most ``rollout.batch_tasks`` (draw order).
        episodes: every scored episode played, kept or not (for the step's charts).
        failed: episodes that could not be scored (infrastructure failures, after
            ``rollout.episode_retries``); their groups are dropped and their tasks
            quarantined.
        batches: the requests of each engine batch (HF) or step's arrivals (vLLM).
        rounds: generation rounds run.
        groups_seen / groups_dropped: groups played, and those dropped as all-equal.
        groups_failed: groups dropped because an episode of theirs failed.
        capped: fewer than ``batch_tasks`` groups were kept when the rounds ran out.
    """

    kept: list[Group] = field(default_factory=list)
    episodes: list[Episode] = field(default_factory=list)
    batches: list[int] = field(default_factory=list)
    failed: list[Episode] = field(default_factory=list)
    rounds: int = 0
    groups_seen: int = 0
    groups_dropped: int = 0
    groups_failed: int = 0
    capped: bool = False

    @property
    def played(self) -> int:
        """Episodes played, scored or failed (the failed share divides by it)."""
        return len(self.failed) + len(self.episodes)


class TaskStream:
    """The training tasks in draw order: an env chosen by ``envs[].weight`` from a seeded
    RNG, and the next reset seed (counting up from ``train_seed_start``).

    The stream is part of a checkpoint (:meth:`state_dict`), so a resumed run draws what
    the interrupted one would have; tasks in :attr:`quarantined` (their episodes failed)
    are skipped. ``agentgym apo-values`` replays the same stream to know which prompts the
    run will see.
    """

    def __init__(self, cfg: TrainConfig, env_ids: Sequence[str]) -> None:
        self.cfg, self.env_ids = cfg, list(env_ids)
        weights = np.array([e.weight for e in cfg.envs], dtype=np.float64)
        self.env_weights = (weights / weights.sum()).tolist()
        self.next_seed = cfg.train_seed_start
        self.rng = random.Random(derive_seed("tasks", cfg.run.seed))
        #: (env id, seed) of tasks whose episodes failed: never drawn again
        self.quarantined: set[tuple[str, int]] = set()

    def state_dict(self) -> dict[str, Any]:
        """The stream's position and its quarantined tasks, JSON-ready (for a checkpoint)."""
        return {
            "next_seed": self.next_seed,
            "task_rng": json.loads(json.dumps(self.rng.getstate())),
            "quarantined": sorted([env, seed] for env, seed in self.quarantined),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue the stream where :meth:`state_dict` left it."""
        self.next_seed = int(state["next_seed"])
        self.rng.setstate(_as_tuples(state["task_rng"]))
        self.quarantine(state.get("quarantined", []))

    def quarantine(self, tasks: Iterable[tuple[str, int]]) -> None:
        """Never draw these tasks (env id, seed) again: their episodes failed. The one
        place the quarantine grows (a failed group, T-PPO's failed episodes, the run
        folder's ``quarantine.jsonl`` on resume)."""
        self.quarantined.update((str(env), int(seed)) for env, seed in tasks)

    def draw(self, n: int) -> dict[int, list[int]]:
        """``n`` fresh training tasks: env index -> reset seeds (env chosen by weight)."""
        by_env: dict[int, list[int]] = defaultdict(list)
        drawn = 0
        while drawn < n:
            k = self.rng.choices(range(len(self.env_ids)), weights=self.env_weights)[0]
            seed = self.next_seed
            self.next_seed += 1
            if (self.env_ids[k], seed) in self.quarantined:
                continue  # its episodes failed before (a resumed run replays the stream)
            by_env[k].append(seed)
            drawn += 1
        if self.next_seed > self.cfg.eval.seed_start > self.cfg.train_seed_start:
            raise ConfigError("training seeds ran into eval.seed_start; move eval.seed_start up.")
        return dict(by_env)


class RolloutPhase:
    """Generates each step's batch; see the module docstring.

    Args:
        cfg: the run's config.
        env_ids: the registered id of each configured env.
        env_kwargs: ``gym.make`` keyword arguments of each env (the tokenizer's counter).
        dist: this process's place in the job.
        engine: the rollout engine: which replica this rank is (``engine.replicas``) and
            where a rollout runs (``engine.drive``).
    """

    def __init__(
        self,
        cfg: TrainConfig,
        env_ids: Sequence[str],
        env_kwargs: Sequence[dict[str, Any]],
        dist: DistInfo,
        engine: Any,
    ) -> None:
        self.cfg, self.env_ids, self.env_kwargs, self.dist = cfg, list(env_ids), env_kwargs, dist
        self.engine = engine
        self.tasks = TaskStream(cfg, env_ids)
        # where env work runs, for the whole run: Ray actors (rollout.rollout_workers), or
        # this process's threads with the env instances kept from step to step (a thread
        # pool per round cost ~20 ms of idle time a step; a gym.make per step more)
        self.env_host: LocalEnvs | RayEnvWorkers
        if cfg.rollout.rollout_workers > 0:
            self.env_host = RayEnvWorkers(
                cfg.rollout.rollout_workers, address=cfg.rollout.ray_address
            )
        else:
            self.env_host = LocalEnvs(max(1, min(8, cfg.rollout.concurrency)), keep=True)

    # ------------------------------------------------------------------ the task stream
    @property
    def quarantined(self) -> set[tuple[str, int]]:
        """Tasks never to draw again (see :class:`TaskStream`)."""
        return self.tasks.quarantined

    def state_dict(self) -> dict[str, Any]:
        """The task stream's position (for a checkpoint)."""
        return self.tasks.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue the task stream where :meth:`state_dict` left it."""
        self.tasks.load_state_dict(state)

    def quarantine(self, episodes: Iterable[Episode]) -> None:
        """Never draw these episodes' tasks again (:meth:`TaskStream.quarantine`)."""
        self.tasks.quarantine((ep.env_id, int(ep.seed or 0)) for ep in episodes)

    def draw_tasks(self, n: int) -> dict[int, list[int]]:
        """``n`` fresh training tasks (see :meth:`TaskStream.draw`)."""
        return self.tasks.draw(n)

    # ------------------------------------------------------------------ one phase
    def collect(self, policy: Any, step: int) -> Collected:
        """Rounds of generation until the batch holds ``batch_tasks`` informative groups
        (or ``max_generation_rounds`` ran); ``policy`` is the engine's batching policy."""
        cfg, algo, r = self.cfg, self.cfg.algorithm, self.cfg.rollout
        out = Collected()
        before = len(policy.batch_sizes)
        per_round = r.tasks_per_round or r.batch_tasks
        while len(out.kept) < r.batch_tasks and out.rounds < algo.max_generation_rounds:
            need = r.batch_tasks - len(out.kept)
            n = per_round if out.rounds == 0 else max(need, min(per_round, need * 2))
            sampling = self._sampling(step, out.rounds)
            episodes = self._round(policy, self.draw_tasks(n), sampling)
            out.rounds += 1
            out.episodes.extend(e for e in episodes if not e.failed)
            out.failed.extend(e for e in episodes if e.failed)
            groups = group_episodes(episodes)
            out.groups_seen += len(groups)
            for g in groups:
                if any(e.failed for e in g):  # an unscored sample: the group means nothing
                    out.groups_failed += 1
                    self.quarantine(g[:1])
                    continue
                gid = torch.zeros(len(g), dtype=torch.long)
                rewards = shaped_rewards(g, gid, cfg)
                if not algo.dynamic_sampling or bool(informative_groups(rewards, gid).all()):
                    out.kept.append(g)
                else:
                    out.groups_dropped += 1
            if not algo.dynamic_sampling:
                break
        out.capped = len(out.kept) < r.batch_tasks
        out.kept = out.kept[: r.batch_tasks]
        out.batches = list(policy.batch_sizes[before:])
        return out

    def _sampling(self, step: int, round_index: int) -> SamplingParams:
        r = self.cfg.rollout
        return SamplingParams(
            max_tokens=r.max_tokens,
            temperature=r.temperature,
            top_p=r.top_p,
            seed=derive_seed("sample", self.cfg.run.seed, step, round_index),
            logprobs=True,
        )

    def _round(
        self, policy: Any, tasks: dict[int, list[int]], sampling: SamplingParams
    ) -> list[Episode]:
        """Play every task's group; under several ranks, each engine replica plays its
        share and every rank receives every episode, in the order one process would have
        produced them."""
        engine = self.engine
        if self.dist.world_size == 1:
            return asyncio.run(self._play(policy, tasks, sampling))
        flat = [(k, seed) for k, seeds in sorted(tasks.items()) for seed in seeds]
        mine: dict[int, list[int]] = defaultdict(list)
        for k, seed in engine.replicas.deal(flat):
            mine[k].append(seed)
        played = engine.drive(lambda: asyncio.run(self._play(policy, dict(mine), sampling)))
        episodes = [ep for part in all_gather_objects(played or [], self.dist) for ep in part]
        position = {task: i for i, task in enumerate(flat)}
        env_of_seed = {seed: k for k, seed in flat}
        return sorted(episodes, key=lambda e: (position[(env_of_seed[e.seed], e.seed)], e.sample))

    async def _play(
        self, policy: Any, tasks: dict[int, list[int]], sampling: SamplingParams
    ) -> list[Episode]:
        r = self.cfg.rollout
        if not tasks:  # a replica dealt nothing this round
            return []
        total = sum(len(v) for v in tasks.values()) * r.group_size
        coros = []
        streams = []
        for stream, (k, seeds) in enumerate(sorted(tasks.items())):
            share = max(1, round(r.concurrency * len(seeds) * r.group_size / max(total, 1)))
            streams.append((len(seeds) * r.group_size, share))
            coros.append(
                rollout_async(
                    self.env_ids[k],
                    policy,
                    seeds=seeds,
                    group_size=r.group_size,
                    sampling=sampling,
                    concurrency=share,
                    env_kwargs=self.env_kwargs[k],
                    on_episode=lambda _ep, i=stream: policy.episode_done(i),
                    env_host=self.env_host,
                    retries=r.episode_retries,
                    episode_timeout_s=r.episode_timeout_s,
                )
            )
        policy.expect(streams)
        try:
            results = await asyncio.gather(*coros)
        finally:
            policy.expect(None)
        return [ep for eps in results for ep in eps]

    def close(self) -> None:
        """Close the envs kept for reuse and stop the threads or the Ray workers."""
        self.env_host.close()


def _as_tuples(state: Any) -> Any:
    """A JSON-read RNG state back into the tuples ``random.setstate`` wants."""
    if isinstance(state, list):
        return tuple(_as_tuples(s) for s in state)
    return state
