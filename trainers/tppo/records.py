"""The records of T-PPO's pool: what a step produced (exchanged between ranks) and what a
checkpoint keeps of the episodes in flight (JSON)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentgym import Completion, Episode, Message, to_openai


@dataclass(frozen=True)
class SlotTask:
    """What a slot of the pool plays: sample ``sample`` of the task ``(env, seed)``,
    one of the ``G`` of group ``group``."""

    group: int
    env: int
    seed: int
    sample: int


@dataclass
class Group:
    """A task's ``G`` episodes; complete when all of them ended (failed ones included)."""

    env: int
    seed: int
    size: int
    episodes: dict[int, Episode] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        return len(self.episodes) == self.size

    def ordered(self) -> list[Episode]:
        return [self.episodes[s] for s in sorted(self.episodes)]


@dataclass(frozen=True)
class Segment:
    """The tokens one response got in one step: what the policy trains on in that step.

    Attributes:
        slot: the pool slot of the episode.
        turn: the turn's index in its episode.
        prompt_ids: the turn's encoded prompt followed by its reply before this step
            (context, not trained).
        ids / logprobs: the tokens sampled this step (by this step's policy) and their
            log-probs at sampling.
    """

    slot: int
    turn: int
    prompt_ids: tuple[int, ...]
    ids: tuple[int, ...]
    logprobs: tuple[float, ...]


@dataclass
class RankStep:
    """What one rank's share of the pool did in one step (ranks exchange these).

    Attributes:
        segments: every response's tokens of this step (of episodes still playing, or
            that ended well; an episode that failed leaves none).
        ended: ``(slot, episode)`` of the episodes that ended (failed ones after their
            retries), the episode's ``sample`` set to the slot's.
        lags: for every response (turn) that ended, the policy updates between its first
            and last token.
        lag_cuts: responses ended by ``rollout.max_policy_lag`` rather than on their own.
        retries: episodes played again after an infrastructure failure.
        active: episodes in flight when the step's generation began.
        tokens: tokens generated.
    """

    segments: list[Segment] = field(default_factory=list)
    ended: list[tuple[int, Episode]] = field(default_factory=list)
    lags: list[int] = field(default_factory=list)
    lag_cuts: int = 0
    retries: int = 0
    active: int = 0
    tokens: int = 0


def messages_digest(messages: Sequence[Message]) -> str:
    """A short digest of a prompt (a resumed episode must be shown the same prompts)."""
    text = json.dumps(to_openai(messages), ensure_ascii=False, sort_keys=True)
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


@dataclass
class TurnRecord:
    """A turn of an episode in flight, as a checkpoint keeps it: the digest of its
    prompt, and either its completion (a turn that ended) or the reply so far with the
    log-probs and policy versions of its tokens (the turn in flight)."""

    digest: str
    versions: list[int]
    completion: Completion | None = None
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"digest": self.digest, "versions": list(self.versions)}
        if self.completion is not None:
            d["completion"] = self.completion.to_dict()
        else:
            d["ids"], d["logprobs"] = list(self.ids), list(self.logprobs)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TurnRecord:
        c = d.get("completion")
        return cls(
            digest=str(d["digest"]),
            versions=[int(v) for v in d["versions"]],
            completion=Completion.from_dict(c) if c is not None else None,
            ids=[int(t) for t in d.get("ids", [])],
            logprobs=[float(x) for x in d.get("logprobs", [])],
        )
