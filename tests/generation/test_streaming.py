"""The streaming policy over a stepping engine: requests enter as they come, replies
return as they end, a cancelled caller's request is aborted, a refused request fails its
callers only. A stepping engine of a few lines stands in for vLLM (the real one runs in
``test_vllm_ranks.py``): each request ends after as many steps as its prompt's length
in words, its reply the step it ended at."""

from __future__ import annotations

import asyncio

import pytest

from agentgym import Completion, ConfigError, Message, SamplingParams
from agentgym.generation import StreamingPolicy

SAMPLING = SamplingParams(max_tokens=8)


class SteppingEngine:
    """``submit`` / ``advance`` / ``abort`` / ``in_flight``, counting its steps."""

    def __init__(self) -> None:
        self.steps = 0
        self.left: dict[str, int] = {}
        self.entered: list[tuple[int, str, int]] = []  # (step, prompt, in flight then)
        self.aborted: list[str] = []
        self.next = 0

    @property
    def in_flight(self) -> int:
        return len(self.left)

    def submit(self, requests):
        ids = []
        for r in requests:
            text = r.messages[-1].content
            if text == "too long":
                raise ConfigError("a prompt does not fit max_model_len")
            self.entered.append((self.steps, text, self.in_flight))
            self.next += 1
            self.left[str(self.next)] = len(text.split())
            ids.append(str(self.next))
        return ids

    def advance(self):
        self.steps += 1
        done = []
        for rid in list(self.left):
            self.left[rid] -= 1
            if self.left[rid] == 0:
                del self.left[rid]
                done.append((rid, Completion(text=f"ended at step {self.steps}")))
        return done

    def abort(self, ids):
        for rid in ids:
            self.aborted.append(rid)
            self.left.pop(rid, None)


def _ask(policy, text):
    return policy([Message("user", text)], SAMPLING)


def test_a_second_turn_joins_requests_still_decoding():
    engine = SteppingEngine()
    policy = StreamingPolicy(engine)

    async def episode(first: str) -> list[str]:
        a = await _ask(policy, first)
        b = await _ask(policy, "and then")  # enters as soon as the first turn ended
        return [a.text, b.text]

    async def main():
        return await asyncio.gather(
            episode("short one"), episode("a much longer first prompt here")
        )

    short, long = asyncio.run(main())
    assert short == ["ended at step 2", "ended at step 4"]
    assert long == ["ended at step 6", "ended at step 8"]
    # the short episode's second turn entered at step 2 while the long one still decoded
    assert (2, "and then", 1) in engine.entered
    assert engine.steps == 8  # never a step waiting for the slowest of a batch


def test_a_cancelled_caller_has_its_request_aborted_and_the_others_finish():
    engine = SteppingEngine()
    policy = StreamingPolicy(engine)

    async def main():
        slow = asyncio.ensure_future(_ask(policy, " ".join(["w"] * 50)))
        fast = asyncio.ensure_future(_ask(policy, "two words"))
        await asyncio.sleep(0)
        result = await fast
        slow.cancel()  # an episode's deadline
        with pytest.raises(asyncio.CancelledError):
            await slow
        again = await _ask(policy, "three more words")
        return result, again

    result, again = asyncio.run(main())
    assert result.text == "ended at step 2" and again.text.startswith("ended at step")
    assert engine.aborted == ["1"] and engine.in_flight == 0


def test_a_refused_request_fails_its_callers_and_the_policy_goes_on():
    engine = SteppingEngine()
    policy = StreamingPolicy(engine)

    async def main():
        with pytest.raises(ConfigError, match="max_model_len"):
            await _ask(policy, "too long")
        return await _ask(policy, "fine now")

    assert asyncio.run(main()).text == "ended at step 2"


def test_a_new_rollout_aborts_what_the_last_one_left_in_flight():
    engine = SteppingEngine()
    policy = StreamingPolicy(engine)

    async def abandon():
        task = asyncio.ensure_future(_ask(policy, " ".join(["w"] * 20)))
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        return task

    asyncio.run(abandon())  # the loop ends with the request still in the engine
    assert engine.in_flight == 1
    assert asyncio.run(_ask(policy, "next rollout")).text.startswith("ended at step")
    assert engine.aborted == ["1"]
