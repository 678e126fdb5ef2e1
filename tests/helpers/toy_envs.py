"""Small ConversationEnv subclasses used by the core tests (toy envs, not mocks)."""

from __future__ import annotations

from typing import Any

from agentgym.env import ActResult, ConversationEnv, Task
from agentgym.errors import InfraError


class CounterEnv(ConversationEnv):
    """Say "next" to advance a counter; say "done" to finish. Reward = counter / target.

    The counter lives in the env, so it persists across conversations; the state digest
    shows it. Feedback lines are padded so that token budgets fill up quickly.
    """

    def __init__(self, target: int = 5, pad: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.target = target
        self.pad = pad
        self.counter = 0

    def _begin(self, seed, options) -> Task:
        self.counter = int(self.np_random.integers(0, 3))
        return Task(
            task_id=f"counter/{self.counter}",
            prompt=f"Count to {self.target}.",
            system="You count.",
        )

    def _act(self, action: str) -> ActResult:
        if action.strip() == "done":
            return ActResult(done=True)
        if action.strip() == "next":
            self.counter += 1
            return ActResult(feedback=f"counter={self.counter} " + "x " * self.pad)
        return ActResult(feedback="unknown action; say 'next' or 'done'")

    def _score(self, end_reason: str) -> tuple[float, dict[str, Any]]:
        return min(1.0, self.counter / self.target), {"counter": self.counter}

    def state_digest(self) -> str | None:
        return f"counter={self.counter}"

    def oracle_action(self, observation) -> str:
        if self.next_turn_kind == "summary":
            return f"I counted to {self.counter}."
        return "done" if self.counter >= self.target else "next"


class DiesOnceEnv(CounterEnv):
    """A counter env whose process dies (SIGKILL) at its first step while ``marker`` does not
    exist yet; it creates the marker first, so a replay of the episode runs normally. For
    killing a Ray env worker mid-rollout."""

    def __init__(self, marker: str = "", die_on_seed: int = 1, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.marker, self.die_on_seed = marker, die_on_seed
        self.seed_played: int | None = None

    def _begin(self, seed, options) -> Task:
        self.seed_played = seed
        return super()._begin(seed, options)

    def _act(self, action: str) -> ActResult:
        import os
        import signal
        from pathlib import Path

        if self.marker and self.seed_played == self.die_on_seed and _claim(Path(self.marker)):
            os.kill(os.getpid(), signal.SIGKILL)
        return super()._act(action)


def _claim(marker) -> bool:
    """Create ``marker`` unless it exists; True for the one caller that created it. Atomic
    (O_EXCL): the group's episodes of one seed run side by side on different workers, and a
    check-then-write let two of them die."""
    import os

    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        f.write("died once\n")
    return True


class FailsOnSeedsEnv(CounterEnv):
    """A counter env whose episodes on ``fail_seeds`` always fail at their first step with
    an infrastructure error (a sandbox that dies every time); the other seeds play
    normally. Registered by the tests that use it as ``agentgym-test/FailsOnSeeds-v0``."""

    def __init__(self, fail_seeds: tuple[int, ...] = (), **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.fail_seeds = frozenset(fail_seeds)
        self.failing = False

    def _begin(self, seed, options) -> Task:
        self.failing = seed in self.fail_seeds
        return super()._begin(seed, options)

    def _act(self, action: str) -> ActResult:
        if self.failing:
            raise InfraError("the sandbox container died", reason="sandbox_died")
        return super()._act(action)
