"""A policy over an engine that batches continuously: requests enter as they come.

:class:`~.base.BatchingPolicy` gathers concurrent calls into one ``generate`` per batch,
which returns when the batch's slowest reply is done: right for an engine that decodes a
fixed batch (the HF engine). An engine that steps (vLLM) can take a request at any step
and hand back each reply as soon as it ends. :class:`StreamingPolicy` serves it that way:
each ``await policy(messages, sampling)`` is submitted before the engine's next step, the
engine steps while anything is in flight, and every finished reply resolves its caller at
once -- so an episode whose reply ended steps its environment and asks for its next turn
while other episodes' replies are still decoding (multi-turn arrivals join a running
batch).

The engine's side (:class:`~.vllm.VLLMEngine`): ``submit(requests) -> ids``,
``advance() -> [(id, completion)]`` (one step), ``abort(ids)``, ``in_flight``.

Like :class:`~.base.BatchingPolicy`, the engine runs on the event loop's thread (torch
keeps one thread team per calling thread: generating from a helper thread slows both
generation and training on a small machine); between two steps the loop runs whatever
became ready, so finished replies reach their environments (which step in threads).
A caller that is cancelled (an episode's deadline) has its request aborted.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from agentgym import Completion, Message, SamplingParams
from agentgym.generation.base import GenerationRequest


class StreamingPolicy:
    """A :class:`~agentgym.Policy` over a stepping engine (see the module docstring).

    Args:
        engine: an engine with ``submit``, ``advance``, ``abort`` and ``in_flight``.
    """

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: list[tuple[GenerationRequest, asyncio.Future[Completion]]] = []
        self._waiting: dict[str, asyncio.Future[Completion]] = {}
        self._wake: asyncio.Event | None = None
        self._driver: asyncio.Task[None] | None = None
        #: requests per engine step that entered it (a step's arrivals)
        self.batch_sizes: list[int] = []

    async def __call__(self, messages: Sequence[Message], sampling: SamplingParams) -> Completion:
        loop = asyncio.get_running_loop()
        if self._loop is not loop or self._driver is None or self._driver.done():
            self._restart(loop)
        fut: asyncio.Future[Completion] = loop.create_future()
        self._queue.append((GenerationRequest(tuple(messages), sampling), fut))
        assert self._wake is not None
        self._wake.set()
        return await fut

    def _restart(self, loop: asyncio.AbstractEventLoop) -> None:
        """A new event loop (each rollout runs one): what the last one left in the engine
        is aborted, and a driver task starts on this loop."""
        if self._waiting:
            self.engine.abort(list(self._waiting))
        self._loop, self._queue, self._waiting = loop, [], {}
        self._wake = asyncio.Event()
        self._driver = loop.create_task(self._drive())

    async def _drive(self) -> None:
        wake = self._wake
        assert wake is not None
        while True:
            if not self._queue and not self._waiting:
                wake.clear()
                await wake.wait()
            self._enter()
            self._abort_cancelled()
            if not self._waiting:
                continue
            try:
                done = self.engine.advance()
            except Exception as e:  # every caller in flight gets the error
                for fut in self._waiting.values():
                    if not fut.done():
                        fut.set_exception(e)
                self.engine.abort(list(self._waiting))
                self._waiting.clear()
                continue
            for rid, completion in done:
                fut = self._waiting.pop(rid, None)
                if fut is not None and not fut.done():
                    fut.set_result(completion)
            await asyncio.sleep(0)  # let answered callers step their envs and ask again

    def _enter(self) -> None:
        """The queued calls enter the engine before its next step."""
        live = [(r, f) for r, f in self._queue if not f.cancelled()]
        self._queue = []
        if not live:
            return
        try:
            ids = self.engine.submit([r for r, _ in live])
        except Exception as e:  # a request the engine refuses (too long): its callers fail
            for _, fut in live:
                if not fut.done():
                    fut.set_exception(e)
            return
        self.batch_sizes.append(len(ids))
        for rid, (_, fut) in zip(ids, live, strict=True):
            self._waiting[rid] = fut

    def _abort_cancelled(self) -> None:
        gone = [rid for rid, f in self._waiting.items() if f.cancelled()]
        if gone:
            self.engine.abort(gone)
            for rid in gone:
                del self._waiting[rid]

    # the batching hints of BatchingPolicy: a streaming engine needs none
    def expect(self, streams: Sequence[tuple[int, int]] | None) -> None:
        """Accepted for :class:`~.base.BatchingPolicy`'s callers; nothing to do here."""

    def episode_done(self, stream: int = 0) -> None:
        """Accepted for :class:`~.base.BatchingPolicy`'s callers; nothing to do here."""

    def close(self) -> None:
        if self._driver is not None and not self._driver.done():
            self._driver.cancel()
        if self._waiting:
            self.engine.abort(list(self._waiting))
            self._waiting.clear()
