"""T-PPO's truncated pool: a fixed number of episodes in flight, each response extended by
at most a window of tokens per step ("successive batching", arXiv 2506.15050).

The pool holds ``rollout.batch_tasks x rollout.group_size`` episode *slots*. Each episode
is played by :func:`agentgym.rollout_async` (so env hosts, failure records and envs kept
between steps work as in the all-sync rollout) as a task on an event loop the pool owns
for the whole run: between steps the tasks stay suspended in their policy calls. The
policy they see (:class:`_SlotPolicy`) hands each turn to the pool and waits.
``rollout.episode_timeout_s`` bounds each episode's own env calls (reset, step): the
waits for the pool, which span steps, are not counted.

One step (:meth:`TruncatedPool.advance`):

1. **Refill.** While ``group_size`` slots are free, the next task of the run's task
   stream starts a group of ``G`` episodes in them (the refill of T-PPO: a response that
   ended left its slot for a new one).
2. **Waves.** Every episode gets a budget of ``rollout.truncate_window`` tokens for the
   step. The loop runs until each episode waits for the model or has ended; the turns
   waiting with budget left go to ``engine.generate`` as one batch, each continued from
   the reply so far (``GenerationRequest.prefix``) by at most ``min(budget, tokens left
   under rollout.max_tokens)``. A turn that ends (eos, a stop string in the whole reply,
   ``rollout.max_tokens``) resolves its policy call, its env steps, and its episode may
   ask for the next turn with what is left of its budget in the next wave. A turn whose
   budget ran out waits for the next step with its prefix.
3. **Lag cap.** A turn that used its whole budget unfinished after spanning
   ``rollout.max_policy_lag`` policy updates is ended there (``finish_reason
   "length"``), so no response mixes more than ``max_policy_lag + 1`` policy versions.

Every generated token records the policy version (the trainer's step) that produced it.
The prefix's KV cache is not kept across steps: the next step prefills it again under
the updated policy (the HF engine cannot keep a cache across weight changes, and a cache
computed by the old weights would not be what the new policy conditions on).

Several ranks: slot ``s`` is played by engine replica ``s % replicas`` (on the rank that
drives it; with the HF engine every rank is a replica); the bookkeeping (which
slot plays what, the groups' ended episodes) is the same on every rank, which exchange
what their slots did after each step (:meth:`TruncatedPool.exchange`). A checkpoint
keeps every episode in flight as the replies it received and the reply so far of its
turn in flight; a resumed pool replays those replies into fresh envs (the same seeds and
actions give the same episode) and continues the turn in flight from its prefix.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from typing import Any

from agentgym import (
    Completion,
    ConfigError,
    Episode,
    Message,
    SamplingParams,
    derive_seed,
    rollout_async,
)
from agentgym.generation import GenerationRequest, encode_prompt, finish_completion
from agentgym.trainers.distributed import DistInfo, all_gather_objects
from agentgym.trainers.tppo.records import (
    Group,
    RankStep,
    Segment,
    SlotTask,
    TurnRecord,
    messages_digest,
)


class _Turn:
    """A policy turn in flight: its prompt, sampling, and the reply so far."""

    def __init__(
        self, index: int, messages: tuple[Message, ...], sampling: SamplingParams, prompt: Any
    ) -> None:
        self.index, self.messages, self.sampling = index, messages, sampling
        self.digest = messages_digest(messages)
        self.prompt_ids = tuple(prompt)
        self.ids: list[int] = []
        self.logprobs: list[float] = []
        self.versions: list[int] = []
        self.future: asyncio.Future[Completion] | None = None

    @property
    def waiting(self) -> bool:
        """The turn waits for tokens (its policy call has not been answered)."""
        return self.future is not None and not self.future.done()


class _Run:
    """An episode this rank plays in one slot (one attempt of it)."""

    def __init__(self, slot: int, task: SlotTask, attempt: int, replay: Sequence[TurnRecord]):
        self.slot, self.task, self.attempt = slot, task, attempt
        self.replay = list(replay)  # resume: recorded turns to hand back first
        self.turns: list[TurnRecord] = []  # the turns that ended
        self.turn: _Turn | None = None
        self.budget = 0
        self.lags: list[int] = []
        self.failed_attempts: list[str] = []
        # this step's tokens per turn: [start, ids, logprobs, prompt_ids]
        self.drafts: dict[int, list[Any]] = {}
        self.aio: asyncio.Task[list[Episode]] | None = None

    def records(self) -> list[TurnRecord]:
        """What a checkpoint keeps of the episode: ended turns, the turn in flight."""
        out = list(self.turns)
        if self.turn is not None:
            t = self.turn
            out.append(TurnRecord(t.digest, list(t.versions), None, list(t.ids), list(t.logprobs)))
        return out + self.replay


class _SlotPolicy:
    """The :class:`~agentgym.Policy` one episode's rollout calls: each turn goes to the
    pool, which answers once the turn has ended (possibly steps later), so the episode
    deadline does not count its calls."""

    waits_across_steps = True

    def __init__(self, pool: TruncatedPool, run: _Run) -> None:
        self.pool, self.run = pool, run

    async def __call__(self, messages: Sequence[Message], sampling: SamplingParams) -> Completion:
        return await self.pool._turn(self.run, tuple(messages), sampling)


class TruncatedPool:
    """The episodes in flight of a T-PPO run (see the module docstring).

    Args:
        engine: the rollout engine (its ``generate`` is called directly, in waves).
        tokenizer: the engine's tokenizer (prompts, replies' text).
        env_ids / env_kwargs: the configured envs' ids and ``gym.make`` kwargs.
        env_host: where env work runs (the rollout phase's ``LocalEnvs``).
        tasks: the run's task stream (``draw(1)`` per new group; quarantine).
        cfg: the run's config (``rollout``: group size, window, lag cap, sampling).
        dist: this process's place in the job.
    """

    def __init__(
        self,
        *,
        engine: Any,
        tokenizer: Any,
        env_ids: Sequence[str],
        env_kwargs: Sequence[dict[str, Any]],
        env_host: Any,
        tasks: Any,
        cfg: Any,
        dist: DistInfo,
    ) -> None:
        r = cfg.rollout
        self.engine, self.tokenizer, self.tasks, self.dist = engine, tokenizer, tasks, dist
        self.env_ids, self.env_kwargs, self.env_host = list(env_ids), list(env_kwargs), env_host
        self.group_size, self.window, self.max_lag = (
            r.group_size,
            r.truncate_window,
            r.max_policy_lag,
        )
        self.max_batch, self.retries, self.run_seed = r.max_batch, r.episode_retries, cfg.run.seed
        self.episode_timeout_s = r.episode_timeout_s
        self.sampling = SamplingParams(
            max_tokens=r.max_tokens, temperature=r.temperature, top_p=r.top_p, logprobs=True
        )
        self.size = r.batch_tasks * r.group_size
        #: the bookkeeping every rank holds alike: what each slot plays, the open groups
        self.slots: list[SlotTask | None] = [None] * self.size
        self.groups: dict[int, Group] = {}
        self.next_group = 0
        #: this rank's episodes in flight, by slot
        self.runs: dict[int, _Run] = {}
        self.version = 0
        self.loop = asyncio.new_event_loop()
        self._changed = asyncio.Event()

    # ------------------------------------------------------------------ one step
    def advance(self, version: int) -> RankStep:
        """Refill, then extend this rank's responses by one window under the policy of
        ``version`` (the trainer's step); returns what this rank's slots did. The
        bookkeeping is every rank's; the responses are extended on the rank that drives
        each engine replica, while its other ranks serve the engine's steps."""
        self.version = version
        self._refill()
        return self.engine.drive(self._extend_window) or RankStep()

    def _extend_window(self) -> RankStep:
        """This rank's responses, each extended by up to one window."""
        report = RankStep(active=len(self.runs))
        for run in self.runs.values():
            run.budget, run.drafts = self.window, {}
        while True:
            self._settle(report)
            ready = [
                run
                for _, run in sorted(self.runs.items())
                if run.turn is not None and run.turn.waiting and run.budget > 0
            ]
            if not ready:
                break
            self._extend(ready, report)
        for _, run in sorted(self.runs.items()):
            report.segments.extend(self._segments(run))
        report.segments.sort(key=lambda s: (s.slot, s.turn))
        report.ended.sort(key=lambda e: e[0])
        return report

    def exchange(self, mine: RankStep) -> tuple[RankStep, list[Group]]:
        """Every rank's step, merged in slot order; the bookkeeping takes the ended
        episodes in (their slots are free for the next refill). Returns the merged step
        and the groups it completed (in the order they were started)."""
        parts = all_gather_objects(mine, self.dist)
        step = RankStep(
            segments=sorted((s for p in parts for s in p.segments), key=lambda s: (s.slot, s.turn)),
            ended=sorted((e for p in parts for e in p.ended), key=lambda e: e[0]),
            lags=[lag for p in parts for lag in p.lags],
            lag_cuts=sum(p.lag_cuts for p in parts),
            retries=sum(p.retries for p in parts),
            active=sum(p.active for p in parts),
            tokens=sum(p.tokens for p in parts),
        )
        for slot, ep in step.ended:
            task = self.slots[slot]
            assert task is not None
            self.groups[task.group].episodes[task.sample] = ep
            self.slots[slot] = None
        done = [gid for gid in sorted(self.groups) if self.groups[gid].complete]
        return step, [self.groups.pop(gid) for gid in done]

    def slot_task(self, slot: int) -> SlotTask | None:
        return self.slots[slot]

    # ------------------------------------------------------------------ refill
    def _refill(self) -> None:
        free = [s for s in range(self.size) if self.slots[s] is None]
        while len(free) >= self.group_size:
            (env, (seed,)), *_ = self.tasks.draw(1).items()
            gid, self.next_group = self.next_group, self.next_group + 1
            self.groups[gid] = Group(env=env, seed=seed, size=self.group_size)
            for sample, slot in enumerate(free[: self.group_size]):
                self.slots[slot] = SlotTask(gid, env, seed, sample)
                if self._mine(slot):
                    self._start(slot, self.slots[slot], 0)
            free = free[self.group_size :]

    def _mine(self, slot: int) -> bool:
        """Slot ``slot`` is played here: slots are dealt to the engine's replicas, each
        played by the rank that drives its replica."""
        return self.engine.replicas.owns(slot)

    def _start(
        self, slot: int, task: SlotTask, attempt: int, replay: Sequence[TurnRecord] = ()
    ) -> _Run:
        run = _Run(slot, task, attempt, replay)
        env_id = self.env_ids[task.env]
        sampling = self.sampling.with_seed(
            derive_seed("tppo", self.run_seed, env_id, task.seed, task.sample)
        )
        coro = rollout_async(
            env_id,
            _SlotPolicy(self, run),
            seeds=[task.seed],
            sampling=sampling,
            concurrency=1,
            env_kwargs=self.env_kwargs[task.env],
            env_host=self.env_host,
            episode_timeout_s=self.episode_timeout_s,
        )
        run.aio = self.loop.create_task(coro)
        run.aio.add_done_callback(lambda _: self._changed.set())
        self.runs[slot] = run
        return run

    # ------------------------------------------------------------------ the event loop
    def _settle(self, report: RankStep) -> None:
        """Run the episodes until each waits for the model or has ended; take in the
        ended ones (an infrastructure failure is played again while retries last)."""
        while True:
            self.loop.run_until_complete(self._quiet())
            done = sorted(
                s for s, run in self.runs.items() if run.aio is not None and run.aio.done()
            )
            if not done:
                return
            for slot in done:
                self._ended(self.runs.pop(slot), report)

    async def _quiet(self) -> None:
        def busy(run: _Run) -> bool:
            return not run.aio.done() and not (run.turn is not None and run.turn.waiting)

        while any(busy(run) for run in self.runs.values()):
            self._changed.clear()
            await self._changed.wait()

    def _ended(self, run: _Run, report: RankStep) -> None:
        assert run.aio is not None
        (ep,) = run.aio.result()  # a configuration error raises here
        ep.sample = run.task.sample
        ep.metrics["tppo/lags"] = list(run.lags)
        if ep.failed:
            reason = ep.failure.reason if ep.failure is not None else "error"
            if run.attempt < self.retries:  # played again from the start, same seeds
                again = self._start(run.slot, run.task, run.attempt + 1)
                again.budget, again.failed_attempts = run.budget, [*run.failed_attempts, reason]
                report.retries += 1
                return
        else:
            report.segments.extend(self._segments(run))
        if run.failed_attempts:
            ep.metrics["rollout/failed_attempts"] = list(run.failed_attempts)
        report.ended.append((run.slot, ep))

    async def _turn(
        self, run: _Run, messages: tuple[Message, ...], sampling: SamplingParams
    ) -> Completion:
        """One policy call of ``run``'s episode: a replayed turn (resume), or a turn that
        waits in the pool until it has ended."""
        turn = _Turn(len(run.turns), messages, sampling, encode_prompt(self.tokenizer, messages))
        if run.replay:
            rec = run.replay.pop(0)
            if rec.digest != turn.digest:
                raise ConfigError(
                    f"{self.env_ids[run.task.env]} (seed {run.task.seed}) showed another "
                    f"prompt at turn {turn.index} than before the checkpoint: T-PPO's resume "
                    "replays the recorded replies into a fresh env, which needs an env that "
                    "is deterministic given its seed and the actions."
                )
            if rec.completion is not None:
                run.turns.append(rec)
                run.lags.append(rec.versions[-1] - rec.versions[0] if rec.versions else 0)
                return rec.completion
            turn.ids, turn.logprobs, turn.versions = rec.ids, rec.logprobs, rec.versions
        turn.future = self.loop.create_future()
        run.turn = turn
        self._changed.set()
        completion = await turn.future
        run.turns.append(TurnRecord(turn.digest, list(turn.versions), completion))
        run.turn = None
        return completion

    # ------------------------------------------------------------------ generation
    def _extend(self, ready: list[_Run], report: RankStep) -> None:
        """One wave: continue every ready turn by what its budget allows, in one batch."""
        requests = []
        for run in ready:
            t = run.turn
            assert t is not None
            n = min(run.budget, t.sampling.max_tokens - len(t.ids))
            seed = None if t.sampling.seed is None else derive_seed(t.sampling.seed, len(t.ids))
            requests.append(
                GenerationRequest(
                    t.messages,
                    dataclasses.replace(t.sampling, max_tokens=n, seed=seed, logprobs=True),
                    prefix=tuple(t.ids),
                )
            )
        outs: list[Completion] = []
        for k in range(0, len(requests), self.max_batch):
            outs.extend(self.engine.generate(requests[k : k + self.max_batch]))
        for run, c in zip(ready, outs, strict=True):
            t = run.turn
            assert t is not None
            new = list(c.token_ids)
            draft = run.drafts.setdefault(
                t.index, [len(t.ids), [], [], t.prompt_ids + tuple(t.ids)]
            )
            draft[1].extend(new)
            draft[2].extend(c.logprobs)
            t.ids.extend(new)
            t.logprobs.extend(c.logprobs)
            t.versions.extend([self.version] * len(new))
            run.budget -= len(new)
            report.tokens += len(new)
            whole = finish_completion(
                self.tokenizer,
                t.ids,
                t.logprobs,
                t.sampling,
                len(t.prompt_ids),
                eos_ids=getattr(self.engine, "eos_ids", None),
                engine_finish=c.finish_reason,
            )
            ended = whole.finish_reason != "length" or len(t.ids) >= t.sampling.max_tokens
            cut = (
                not ended
                and run.budget <= 0
                and bool(t.versions)
                and self.version - t.versions[0] >= self.max_lag
            )
            if ended or cut or not new:
                self._end_turn(run, t, whole, cut, report)

    def _end_turn(
        self, run: _Run, t: _Turn, whole: Completion, cut: bool, report: RankStep
    ) -> None:
        """The turn has ended: its tokens past a stop string are dropped, its lag is
        recorded, and its policy call gets the whole reply."""
        kept = len(whole.token_ids)
        draft = run.drafts.get(t.index)
        if draft is not None:  # a stop string ended the reply inside this step's tokens
            keep = max(0, kept - draft[0])
            draft[1], draft[2] = draft[1][:keep], draft[2][:keep]
        t.versions = t.versions[:kept]
        lag = t.versions[-1] - t.versions[0] if t.versions else 0
        report.lags.append(lag)
        run.lags.append(lag)
        if cut:
            report.lag_cuts += 1
            whole = dataclasses.replace(whole, finish_reason="length")
        assert t.future is not None
        t.future.set_result(whole)

    def _segments(self, run: _Run) -> list[Segment]:
        return [
            Segment(run.slot, turn, tuple(d[3]), tuple(d[1]), tuple(d[2]))
            for turn, d in sorted(run.drafts.items())
            if d[1]
        ]

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """The whole pool, JSON-ready (a collective: every rank calls it)."""
        mine = {
            slot: (run.attempt, [r.to_dict() for r in run.records()])
            for slot, run in self.runs.items()
        }
        played: dict[int, Any] = {}
        for part in all_gather_objects(mine, self.dist):
            played.update(part)
        slots = []
        for s, task in enumerate(self.slots):
            if task is None:
                slots.append(None)
                continue
            attempt, turns = played.get(s, (0, []))
            slots.append({**dataclasses.asdict(task), "attempt": attempt, "turns": turns})
        groups = [
            {
                "id": gid,
                "env": g.env,
                "seed": g.seed,
                "size": g.size,
                "episodes": {str(k): ep.to_dict() for k, ep in g.episodes.items()},
            }
            for gid, g in sorted(self.groups.items())
        ]
        return {"slots": slots, "groups": groups, "next_group": self.next_group}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Put a :meth:`state_dict` back: the bookkeeping, and this rank's episodes in
        flight, which replay their recorded turns when the next step runs them."""
        if len(state["slots"]) != self.size:
            raise ConfigError(
                f"the checkpoint's T-PPO pool has {len(state['slots'])} slots, this config "
                f"{self.size}: resume with the same rollout.batch_tasks and rollout.group_size."
            )
        self.next_group = int(state["next_group"])
        self.groups = {
            int(g["id"]): Group(
                env=int(g["env"]),
                seed=int(g["seed"]),
                size=int(g["size"]),
                episodes={int(k): Episode.from_dict(e) for k, e in g["episodes"].items()},
            )
            for g in state["groups"]
        }
        for s, d in enumerate(state["slots"]):
            if d is None:
                self.slots[s] = None
                continue
            task = SlotTask(int(d["group"]), int(d["env"]), int(d["seed"]), int(d["sample"]))
            self.slots[s] = task
            if self._mine(s):
                self._start(
                    s, task, int(d["attempt"]), [TurnRecord.from_dict(t) for t in d["turns"]]
                )

    def close(self) -> None:
        """Stop the episodes in flight (their envs are closed) and the event loop."""
        tasks = [run.aio for run in self.runs.values() if run.aio is not None]
        for t in tasks:
            t.cancel()
        if tasks and not self.loop.is_closed():
            self.loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        self.runs.clear()
        if not self.loop.is_closed():
            self.loop.close()
