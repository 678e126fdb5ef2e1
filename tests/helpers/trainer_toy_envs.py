"""Toy environments for the trainer tests (registered under ``agentgym-test/``).

They subclass the core :class:`~agentgym.env.ConversationEnv` (no env package needed) and
give an untrained tiny model rewards that differ within a group, so DAPO has a signal.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym

from agentgym import ActResult, ConversationEnv, InfraError, Task


class EvenCharsEnv(ConversationEnv):
    """One turn; reward = share of the reply's characters with an even code point.

    An untrained model's random replies score all over [0, 1], so groups differ.

    With ``constant_reward`` set, every reply gets that reward (no signal at all), which
    exercises dynamic sampling's round cap; with ``constant_for_even_seeds`` only tasks
    with an even seed do, so exactly the odd-seed groups are informative.

    ``fail_on_seeds`` injects an infrastructure failure: the step of a task with one of
    those seeds raises :class:`~agentgym.InfraError` (reason ``injected``), every time;
    with ``fail_once_dir`` only the first attempt on each such seed fails (a marker file
    per seed in that folder remembers it), so a retry scores it. ``hang_s`` makes every
    step block that many seconds first (a frozen sandbox, for the episode deadline).
    """

    def __init__(
        self,
        constant_reward: float | None = None,
        constant_for_even_seeds: bool = False,
        fail_on_seeds: list[int] | tuple[int, ...] = (),
        fail_once_dir: str = "",
        hang_s: float = 0.0,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("max_turns", 1)
        super().__init__(**kwargs)
        self.constant_reward = constant_reward
        self.constant_for_even_seeds = constant_for_even_seeds
        self.fail_on_seeds = frozenset(int(s) for s in fail_on_seeds)
        self.fail_once_dir = fail_once_dir
        self.hang_s = hang_s
        self._reply = ""
        self._seed = 0

    def _begin(self, seed, options):
        self._seed = seed
        return Task(task_id=f"even-{seed}", prompt=f"Task {seed}: write even characters.")

    def _act(self, action: str) -> ActResult:
        time.sleep(self.hang_s)
        if self._seed in self.fail_on_seeds and self._fails_now():
            raise InfraError(f"injected failure on seed {self._seed}", reason="injected")
        self._reply = action
        return ActResult(done=True)

    def _fails_now(self) -> bool:
        """Every time, or with ``fail_once_dir`` the first time for this seed."""
        if not self.fail_once_dir:
            return True
        marker = Path(self.fail_once_dir) / f"seed{self._seed}"
        try:
            marker.touch(exist_ok=False)
        except FileExistsError:
            return False
        return True

    def _score(self, end_reason):
        if self.constant_reward is not None:
            return self.constant_reward, {"correct": False}
        if self.constant_for_even_seeds and self._seed % 2 == 0:
            return 0.0, {"correct": False}
        text = self._reply
        share = sum(ord(c) % 2 == 0 for c in text) / max(len(text), 1)
        return share, {"correct": share > 0.5, "response_tokens": len(text)}

    def oracle_action(self, observation):
        return "bdfhjlnprtvxz"

    def worked_solution(self, style: str = "verbose") -> str:
        return "bdfhjlnp rtvxz bdfh" if style == "verbose" else "bd"


class TwoPartEnv(ConversationEnv):
    """Two act turns with a memory summary between them (two conversations).

    Reward = share of 'a' in the final reply. Used to check that one advantage reaches
    every policy turn of every conversation.
    """

    memory_defaults: ClassVar[dict[str, Any]] = {
        "enabled": True,
        "every_k_turns": 1,
        "token_budget": 4096,
        "summary_max_tokens": 32,
    }

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("max_turns", 2)
        super().__init__(**kwargs)
        self._last = ""

    def _begin(self, seed, options):
        return Task(task_id=f"two-{seed}", prompt=f"Part task {seed}.")

    def _act(self, action: str) -> ActResult:
        self._last = action
        return ActResult(feedback="next", done=self._turns >= 2)

    def _score(self, end_reason):
        share = sum(c == "a" for c in self._last) / max(len(self._last), 1)
        return share, {"correct": share > 0.5}

    def oracle_action(self, observation):
        return "aaaa"


class TwoPartEvenEnv(TwoPartEnv):
    """TwoPart-v0 scored by the share of even code points in the last reply (or the
    first, when the conversation limit ends the episode at its summary), so that an
    untrained model's samples get different rewards."""

    def _score(self, end_reason):
        share = sum(ord(c) % 2 == 0 for c in self._last) / max(len(self._last), 1)
        return share, {"correct": share > 0.5}


def register() -> None:
    for name, cls in (
        ("EvenChars-v0", EvenCharsEnv),
        ("TwoPart-v0", TwoPartEnv),
        ("TwoPartEven-v0", TwoPartEvenEnv),
    ):
        env_id = f"agentgym-test/{name}"
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=cls, disable_env_checker=True)


register()
