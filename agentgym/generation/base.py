"""The rollout-engine interface (:class:`RolloutEngine`) and the asyncio batching front-end.

:class:`RolloutEngine` declares everything the trainer loop and the rollouts use of an
engine; the loop calls these and nothing else:

* ``generate(requests) -> completions``: a *batch* of chat requests in, one
  :class:`~agentgym.Completion` per request out, with the sampled token ids and their
  log-probabilities under the sampling distribution (subclasses implement
  ``_generate``; the base class times the call and counts it).
* ``shares_weights``: whether the engine generates with the learner's own model object.
  Then the learner's update is already what the engine runs, and the loop skips the
  adapter sync; otherwise (the vLLM engine, :mod:`.vllm`, holds its own copy) the loop
  calls ``load_adapter(weights)`` after every update (LoRA weights, peft state-dict
  names).
* ``sleep()`` / ``wake()``: the loop calls ``sleep()`` before the training phase and
  ``wake()`` before the next rollout. A colocated engine that holds GPU memory of its
  own (vLLM) releases it while asleep, so the learner can use it; the default does
  nothing (the HF engine shares the trainer's model and has nothing to release).
* ``close()``: release what the engine holds and delete the files and folders it owns
  (:attr:`RolloutEngine.owned_paths`; a caller hands one over with
  :meth:`RolloutEngine.own`). The default releases nothing but those paths. Closing
  twice is harmless, and the paths are removed at garbage collection too.
* ``busy``: the wall-clock intervals in which the engine was generating; the loop turns
  them into its timeline and measures the "bubbles" (time in a rollout when the model
  sat idle waiting for environments).
* ``decode_stats``: how full its decode batches were (:class:`DecodeStats`): tokens
  decoded against decode steps times the rows each ``generate`` call started with
  (*decode utilization*), and the decode time spent with fewer than half of a call's
  rows still generating (the long tail of an all-sync rollout).
* ``as_policy(...)``: a :class:`~agentgym.Policy` whose concurrent calls are batched
  (:class:`BatchingPolicy`).

Environments do not call ``generate``: the rollout awaits a :class:`~agentgym.Policy`
per request. :class:`BatchingPolicy` turns those concurrent single calls into batched
``generate`` calls. Pending requests go to the engine together when

* ``max_batch`` requests are pending, or
* the caller said how many episodes are in flight (:meth:`BatchingPolicy.expect`,
  updated with :meth:`BatchingPolicy.episode_done`) and every one of them is waiting
  for the engine -- nothing more can arrive, or the oldest request has waited
  ``max_wait_s`` (an env that is slow to step does not hold the others back), or
* without that hint: no new request has arrived for ``gather_window_s``.

While the engine runs, new requests queue up for the next batch.

By default ``generate`` runs on the event loop's own thread (``inline=True``), which
blocks the loop while it generates. That is deliberate: torch keeps one OpenMP thread
team per calling thread, and once a second thread has run torch ops the two teams
compete for the cores -- measured on 2 cores, generation *and* training became 2.5x
slower for the rest of the process once generation moved to a helper thread. In the
all-sync loop nothing else needs the loop while the model generates (every episode in
flight is waiting for it); envs already stepping in their thread pool keep running.
"""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self, TypeVar

import torch

from agentgym import Completion, ConfigError, Message, SamplingParams
from agentgym.generation.layout import SINGLE_REPLICA, Replicas
from agentgym.generation.sync import Need

T = TypeVar("T")


@dataclass(frozen=True)
class GenerationRequest:
    """One chat request: the prompt messages and how to sample the reply.

    ``prefix``: token ids of the reply so far (T-PPO continues a response cut by its
    window): they follow the encoded prompt as context, and the completion holds only the
    tokens sampled after them (``sampling.max_tokens`` of them at most).
    """

    messages: tuple[Message, ...]
    sampling: SamplingParams
    prefix: tuple[int, ...] = ()


@dataclass
class DecodeStats:
    """What an engine's decoding computed, summed over its ``generate`` calls.

    Attributes:
        decode_steps: decode steps the model ran.
        row_steps_used: row-steps that produced a token (tokens decoded).
        row_steps_total: row-steps computed for every row still in the batch (a row
            that finished may stay a few steps before it leaves).
        slot_steps: decode steps times the rows their call started with: what a batch
            that never shrank would have decoded. ``row_steps_used / slot_steps`` is the
            decode utilization (1: every row generated until the call's last step).
        decode_s: seconds spent in decode steps (prefill not included).
        tail_s: of those, seconds spent while fewer than half of the call's rows were
            still generating.
    """

    decode_steps: int = 0
    row_steps_used: int = 0
    row_steps_total: int = 0
    slot_steps: int = 0
    decode_s: float = 0.0
    tail_s: float = 0.0

    @property
    def utilization(self) -> float:
        """Tokens decoded / (decode steps x rows each call started with); 0 with none."""
        return self.row_steps_used / self.slot_steps if self.slot_steps else 0.0

    def since(self, earlier: DecodeStats) -> DecodeStats:
        """What was decoded after ``earlier`` (a copy taken before)."""
        return DecodeStats(
            *(getattr(self, f) - getattr(earlier, f) for f in DecodeStats.__dataclass_fields__)
        )

    def copy(self) -> DecodeStats:
        return dataclasses.replace(self)

    def add_step(self, rows: int, seconds: float) -> None:
        """Account one step of an engine that batches continuously (requests enter and
        leave between steps, so its batch never waits on a slow row): ``rows`` requests
        were in it."""
        if rows <= 0:
            return
        self.decode_steps += 1
        self.row_steps_used += rows
        self.row_steps_total += rows
        self.slot_steps += rows
        self.decode_s += seconds

    def add_lengths(self, lengths: Sequence[int], seconds: float) -> None:
        """Account one call from its replies' lengths alone (an engine that does not see
        its own decode steps, like vLLM): one step per token of the longest reply, a row
        generating until its length, the tail time a share of ``seconds`` by steps."""
        n, steps = len(lengths), max(lengths, default=0)
        if n == 0 or steps == 0:
            return
        used = sum(lengths)
        # steps at which fewer than half the rows were still generating
        tail = sum(1 for t in range(steps) if 2 * sum(1 for x in lengths if x > t) < n)
        self.decode_steps += steps
        self.row_steps_used += used
        self.row_steps_total += used
        self.slot_steps += steps * n
        self.decode_s += seconds
        self.tail_s += seconds * tail / steps


class RolloutEngine:
    """Base class of generation engines: the interface the trainer loop uses (see the
    module docstring). Subclasses implement :meth:`_generate` and :meth:`load_adapter`,
    say whether they share the learner's weights, and override :meth:`sleep`,
    :meth:`wake` and :meth:`close` when they hold something of their own.

    Attributes:
        shares_weights: the engine generates with the learner's own model object, so
            adapter syncs are no-ops and the loop skips :meth:`load_adapter`. ``False``
            (the default): the engine holds its own copy of the weights and must be
            sent every update.
        record_routing: attach each MoE router's expert choices to the completions
            (``Completion.routing``) for router replay; engines that cannot leave it off
            (the trainer refuses router replay with them at start-up).
        busy: ``(start, end)`` ``time.monotonic()`` intervals spent generating.
        calls / requests: how many batched calls and requests were served.
        decode_stats: decode steps, tokens and tail time (:class:`DecodeStats`).
    """

    shares_weights: bool = False
    record_routing: bool = False
    #: which engine replica this rank belongs to (one process: the only one, driven here)
    replicas: Replicas = SINGLE_REPLICA

    def __init__(self) -> None:
        self.busy: list[tuple[float, float]] = []
        self.calls = 0
        self.requests = 0
        self.decode_stats = DecodeStats()
        self._lock = threading.Lock()
        self._owned: list[Path] = []
        # the owned paths go when the engine is garbage-collected, even unclosed
        weakref.finalize(self, _remove_paths, self._owned)

    # ------------------------------------------------------------------ generation

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        """Generate one completion per request, as one batch (blocking)."""
        if not requests:
            return []
        with self._lock:
            t0 = time.monotonic()
            try:
                out = self._generate(list(requests))
            finally:
                self.busy.append((t0, time.monotonic()))
                self.calls += 1
                self.requests += len(requests)
        if len(out) != len(requests):
            raise RuntimeError(
                f"engine returned {len(out)} completions for {len(requests)} requests"
            )
        return out

    def _generate(self, requests: list[GenerationRequest]) -> list[Completion]:
        raise NotImplementedError

    def as_policy(
        self, *, max_batch: int = 256, gather_window_s: float = 0.002, max_wait_s: float = 1.0
    ) -> BatchingPolicy:
        """A :class:`~agentgym.Policy` whose concurrent calls are batched."""
        return BatchingPolicy(
            self, max_batch=max_batch, gather_window_s=gather_window_s, max_wait_s=max_wait_s
        )

    def reset_stats(self) -> None:
        """Forget the recorded busy intervals and call counts."""
        self.busy.clear()
        self.calls = self.requests = 0

    # ------------------------------------------------------------------ weights

    def load_adapter(
        self, weights: Mapping[str, torch.Tensor], experts: range | None = None
    ) -> None:
        """Use these adapter weights (peft state-dict names) for the next generations
        (``experts``: the fused-expert tensors hold those experts' rows only)."""
        raise NotImplementedError

    def adapter_needs(self, shapes: Mapping[str, Any], num_experts: int = 0) -> dict[str, Need]:
        """What this rank's worker serves of an adapter with tensors ``shapes`` (peft
        names): by default every tensor, whole (:class:`~.sync.AdapterSync` asks)."""
        return {name: Need() for name in shapes}

    # ------------------------------------------------------------------ replicas
    def drive(self, work: Callable[[], T]) -> T | None:
        """Run ``work`` (a rollout on this engine) where it belongs: on the rank that
        drives this engine's replica, while its other ranks serve the engine steps and get
        ``None`` (:mod:`.lockstep`). An engine on one rank just runs it."""
        return work()

    # ------------------------------------------------------------------ colocation

    def sleep(self) -> None:
        """Release what the engine holds on the accelerator while the trainer trains.

        Called by the loop before the training phase. The default does nothing: an engine
        that shares the trainer's model has nothing of its own to release.
        """

    def wake(self) -> None:
        """Undo :meth:`sleep` before the next generation (default: nothing to do)."""

    # ------------------------------------------------------------------ lifetime

    @property
    def owned_paths(self) -> tuple[Path, ...]:
        """The files and folders this engine deletes when it is closed."""
        return tuple(self._owned)

    def own(self, path: str | Path) -> Path:
        """Hand ``path`` (a file or a folder) to the engine: it is deleted on :meth:`close`
        (or when the engine is garbage-collected). Returns the path."""
        owned = Path(path)
        self._owned.append(owned)
        return owned

    def close(self) -> None:
        """Release what the engine holds and delete :attr:`owned_paths`.

        The default has nothing else to release. Closing twice is harmless; an engine
        must not be used after it is closed.
        """
        _remove_paths(self._owned)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _remove_paths(paths: list[Path]) -> None:
    """Delete these files or folders (what is already gone is skipped) and forget them."""
    for path in paths:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    paths.clear()


class BatchingPolicy:
    """Gathers concurrent ``await policy(messages, sampling)`` calls into engine batches.

    Args:
        engine: anything with ``generate(list[GenerationRequest]) -> list[Completion]``.
        max_batch: most requests per ``generate`` call.
        gather_window_s: without an :meth:`expect` hint: after a request arrives, wait
            this long for more before launching a batch (reset by each arrival).
        max_wait_s: with the hint: the longest the oldest request waits for the rest.
        inline: run ``generate`` on the event loop's thread (see the module docstring);
            ``False`` runs it in a helper thread so the loop stays responsive (for
            engines that do not compute in this process, like an HTTP server).
    """

    def __init__(
        self,
        engine: Any,
        *,
        max_batch: int = 256,
        gather_window_s: float = 0.002,
        max_wait_s: float = 1.0,
        inline: bool = True,
    ) -> None:
        if max_batch < 1:
            raise ConfigError(f"max_batch must be >= 1, got {max_batch}.")
        if gather_window_s < 0:
            raise ConfigError(f"gather_window_s must be >= 0, got {gather_window_s}.")
        self.engine = engine
        self.max_batch = max_batch
        self.gather_window_s = gather_window_s
        self.max_wait_s = max_wait_s
        self._expected: list[list[int]] | None = None  # per stream: [remaining, concurrency]
        self._first_pending = 0.0
        self._pending: list[tuple[GenerationRequest, asyncio.Future[Completion]]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._worker: asyncio.Task[None] | None = None
        self._last_arrival = 0.0
        self.inline = inline
        self._executor = (
            None
            if inline
            else ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentgym-engine")
        )
        self.batch_sizes: list[int] = []

    async def __call__(self, messages: Sequence[Message], sampling: SamplingParams) -> Completion:
        loop = asyncio.get_running_loop()
        if self._loop is not loop or self._worker is None or self._worker.done():
            self._loop = loop
            self._pending = []
            self._wake = asyncio.Event()
            self._worker = loop.create_task(self._run())
        fut: asyncio.Future[Completion] = loop.create_future()
        if not self._pending:
            self._first_pending = time.monotonic()
        self._pending.append((GenerationRequest(tuple(messages), sampling), fut))
        self._last_arrival = time.monotonic()
        self._wake.set()
        return await fut

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        wake = self._wake
        if wake is None:  # pragma: no cover - set by __call__ before the task starts
            return
        while True:
            if not self._pending:
                await wake.wait()
            wake.clear()
            await self._gather()
            batch, self._pending = self._pending[: self.max_batch], self._pending[self.max_batch :]
            live = [(r, f) for r, f in batch if not f.cancelled()]
            if not live:
                continue
            self.batch_sizes.append(len(live))
            try:
                batch_requests = [r for r, _ in live]
                if self._executor is None:
                    outs = self.engine.generate(batch_requests)
                else:
                    outs = await loop.run_in_executor(
                        self._executor, self.engine.generate, batch_requests
                    )
            except Exception as e:  # hand the error to every waiting caller
                for _, f in live:
                    if not f.done():
                        f.set_exception(e)
                continue
            for (_, f), c in zip(live, outs, strict=True):
                if not f.done():
                    f.set_result(c)
            # let the callers we just answered step their envs and ask again, so their
            # next requests join one batch instead of trickling in one by one
            self._last_arrival = time.monotonic()
            if self._pending:
                self._first_pending = self._last_arrival

    async def _gather(self) -> None:
        """Wait until the pending requests should go to the engine (see the module doc)."""
        while len(self._pending) < self.max_batch:
            now = time.monotonic()
            if self._expected is not None:
                active = sum(min(rem, cap) for rem, cap in self._expected)
                if len(self._pending) >= active or now - self._first_pending >= self.max_wait_s:
                    return
                await asyncio.sleep(0.0005)
                continue
            quiet = now - self._last_arrival
            if quiet >= self.gather_window_s:
                return
            await asyncio.sleep(self.gather_window_s - quiet)

    def expect(self, streams: Sequence[tuple[int, int]] | None) -> None:
        """Say which episodes will call from now on: per stream (one rollout each),
        ``(episodes, concurrency)``; at any moment ``min(remaining, concurrency)`` of a
        stream's episodes are in flight. ``None`` removes the hint.
        """
        self._expected = None if streams is None else [[int(n), max(1, int(c))] for n, c in streams]

    def episode_done(self, stream: int = 0) -> None:
        """An episode of ``stream`` has finished (it will not call again)."""
        if self._expected is not None and 0 <= stream < len(self._expected):
            self._expected[stream][0] = max(0, self._expected[stream][0] - 1)

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False)
