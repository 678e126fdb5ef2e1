"""Core record types: messages, completions, turns and episodes.

All of them round-trip through JSON (``to_dict`` / ``from_dict``), so episodes can be
streamed to JSONL and read back by the trainer, the benchmark runner or a person with
``jq``. A :class:`Message` is itself the OpenAI-style dict (observations serialise as they
are); the others are plain dataclasses.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal

from agentgym.errors import ConfigError, DataError

Role = Literal["system", "user", "assistant"]
TurnKind = Literal["act", "summary"]
ROLES: tuple[str, ...] = ("system", "user", "assistant")
TURN_KINDS: tuple[str, ...] = ("act", "summary")


class Message(dict):
    """One chat message. Observations are lists of these (OpenAI chat format).

    A message *is* the dict ``{"role": ..., "content": ...}`` that OpenAI's API and chat
    templates take, so an observation goes to any client, ``json.dumps`` or
    ``tokenizer.apply_chat_template`` as it is; it also reads as a record
    (``m.role``, ``m.content``). Like the frozen record it was, it cannot be changed and
    it hashes by value.
    """

    __slots__ = ()

    def __init__(self, role: Role | Mapping[str, Any], content: str | None = None) -> None:
        if not isinstance(role, str):  # Message({"role": ..., "content": ...}), as dict() does
            given = dict(role)
            role, content = given.get("role"), given.get("content")
        if role not in ROLES:
            raise ConfigError(f"Message role must be one of {ROLES}, got {role!r}.")
        if not isinstance(content, str):
            raise ConfigError(f"Message content must be a str, got {type(content).__name__}.")
        super().__init__(role=role, content=content)

    @property
    def role(self) -> Role:
        return self["role"]

    @property
    def content(self) -> str:
        return self["content"]

    def __hash__(self) -> int:  # type: ignore[override]
        return hash((self["role"], self["content"]))

    def __repr__(self) -> str:
        return f"Message(role={self.role!r}, content={self.content!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Message, (self.role, self.content))

    def __copy__(self) -> Message:
        return self

    def __deepcopy__(self, memo: Any) -> Message:
        return self

    def _immutable(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("a Message cannot be changed; build a new one: Message(role, content)")

    __setitem__ = __delitem__ = __ior__ = _immutable  # type: ignore[assignment]
    clear = pop = popitem = setdefault = update = _immutable  # type: ignore[assignment]

    def to_dict(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Message:
        return cls(role=d["role"], content=d["content"])


def to_openai(messages: Iterable[Message]) -> list[dict[str, str]]:
    """Messages as the list of ``{"role", "content"}`` dicts chat APIs and templates take."""
    return [m.to_dict() for m in messages]


def from_openai(messages: Iterable[Mapping[str, Any]]) -> list[Message]:
    """The inverse of :func:`to_openai`."""
    return [Message.from_dict(m) for m in messages]


@dataclass(frozen=True)
class SamplingParams:
    """How a policy should sample one completion.

    Attributes:
        max_tokens: upper bound on generated tokens.
        temperature: 0 means greedy.
        top_p: nucleus sampling mass.
        seed: per-request seed; engines that support it make sampling reproducible.
        stop: strings that end the completion (not included in the text).
        logprobs: ask the engine to return the log-probability of each sampled token.
    """

    max_tokens: int = 512
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    logprobs: bool = False

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ConfigError(f"max_tokens must be >= 1, got {self.max_tokens}.")
        if self.temperature < 0:
            raise ConfigError(f"temperature must be >= 0, got {self.temperature}.")
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"top_p must be in (0, 1], got {self.top_p}.")
        if isinstance(self.stop, (str, list)):
            object.__setattr__(
                self, "stop", tuple([self.stop] if isinstance(self.stop, str) else self.stop)
            )

    def with_seed(self, seed: int | None) -> SamplingParams:
        return replace(self, seed=seed)


@dataclass(frozen=True)
class Completion:
    """What a policy returns for one request.

    Attributes:
        text: the generated text (the action).
        token_ids: generated token ids, when the engine knows them (local engines do).
        logprobs: log-probability of each generated token under the sampling policy.
        finish_reason: "stop" (natural end or stop string), "length" (hit max_tokens),
            or an engine-specific reason.
        num_tokens: number of generated tokens; from ``token_ids`` when present, else
            from the endpoint's usage report, else None.
        prompt_tokens: prompt length in tokens when known.
        routing: for MoE models, the experts the engine's router chose at every position
            it ran (the prompt, then each fed reply token), ``[layers, positions, k]``;
            set only when an engine records it (router replay). In memory only: it is
            not part of the JSON record and does not take part in equality.
    """

    text: str
    token_ids: tuple[int, ...] = ()
    logprobs: tuple[float, ...] = ()
    finish_reason: str = "stop"
    num_tokens: int | None = None
    prompt_tokens: int | None = None
    routing: Any = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "token_ids", tuple(self.token_ids))
        object.__setattr__(self, "logprobs", tuple(self.logprobs))
        if self.num_tokens is None and self.token_ids:
            object.__setattr__(self, "num_tokens", len(self.token_ids))
        if self.logprobs and self.token_ids and len(self.logprobs) != len(self.token_ids):
            raise ConfigError(
                f"Completion has {len(self.token_ids)} token ids but {len(self.logprobs)} "
                "logprobs; they must align one to one."
            )

    @property
    def truncated(self) -> bool:
        """True when generation stopped at the token limit rather than on its own."""
        return self.finish_reason == "length"

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "routing"}
        d["token_ids"] = list(self.token_ids)
        d["logprobs"] = [_finite(x) for x in self.logprobs]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Completion:
        return cls(
            **{f.name: d[f.name] for f in fields(cls) if f.name in d and f.name != "routing"}
        )


@dataclass(frozen=True)
class Turn:
    """One policy call inside an episode.

    Attributes:
        messages: the prompt the policy saw (the observation).
        completion: what it produced (the action and its tokens).
        kind: "act" for an ordinary turn, "summary" for a memory-summary turn.
        conversation: index of the conversation (0 for the first) the turn belongs to.
    """

    messages: tuple[Message, ...]
    completion: Completion
    kind: TurnKind = "act"
    conversation: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "messages", tuple(self.messages))
        if self.kind not in TURN_KINDS:
            raise ConfigError(f"Turn kind must be one of {TURN_KINDS}, got {self.kind!r}.")

    def to_dict(self) -> dict[str, Any]:
        return {
            "messages": to_openai(self.messages),
            "completion": self.completion.to_dict(),
            "kind": self.kind,
            "conversation": self.conversation,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Turn:
        return cls(
            messages=tuple(from_openai(d["messages"])),
            completion=Completion.from_dict(d["completion"]),
            kind=d.get("kind", "act"),
            conversation=int(d.get("conversation", 0)),
        )


@dataclass(frozen=True)
class EpisodeFailure:
    """Why an episode could not be scored: an infrastructure failure, never the agent's.

    Attributes:
        reason: a short code to count failures by: an :class:`~agentgym.InfraError`'s
            ``reason`` (``sandbox_died``, ``grader_timeout``, ...), ``env_error`` (the env
            raised anything else), ``policy_error`` (the policy raised), ``worker_lost``
            (a Ray env worker died).
        message: the error's type and message, one line.
        where: the call that failed: ``make``, ``reset``, ``step`` or ``policy``.
        detail: the last lines of the traceback (for the run's failure log).
    """

    reason: str
    message: str
    where: str = "step"
    detail: str = ""

    def to_dict(self) -> dict[str, str]:
        return {
            "reason": self.reason,
            "message": self.message,
            "where": self.where,
            "detail": self.detail,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> EpisodeFailure:
        return cls(
            reason=str(d["reason"]),
            message=str(d.get("message", "")),
            where=str(d.get("where", "step")),
            detail=str(d.get("detail", "")),
        )


@dataclass
class Episode:
    """A whole episode: every turn of every conversation, and the one terminal reward.

    Attributes:
        env_id: registered id, for example ``agentgym/MemoryRecall-v0``.
        task_id: the env's name for the task (stable across seeds where the env has a
            fixed task list, derived from the seed for generated tasks).
        seed: the ``reset`` seed; the same seed gives the same task.
        turns: every policy call, in order, across all conversations.
        reward: the terminal reward of the episode.
        reward_breakdown: the env's explanation of the reward (terms, counts, reasons).
        terminated / truncated: Gymnasium's end flags of the last step.
        metrics: numbers that are not part of the reward (timings, token counts, ...).
        sample: index of this episode within its group (the G samples of one task).
        failure: set when the episode could not be scored (an infrastructure failure:
            see :class:`EpisodeFailure`); its ``reward`` then means nothing and no
            trainer or benchmark counts it.
    """

    env_id: str
    task_id: str
    seed: int | None
    turns: list[Turn] = field(default_factory=list)
    reward: float = 0.0
    reward_breakdown: dict[str, Any] = field(default_factory=dict)
    terminated: bool = False
    truncated: bool = False
    metrics: dict[str, Any] = field(default_factory=dict)
    sample: int = 0
    failure: EpisodeFailure | None = None

    @property
    def failed(self) -> bool:
        """The episode could not be scored (see :attr:`failure`)."""
        return self.failure is not None

    @property
    def group_key(self) -> tuple[str, str, int | None]:
        """Episodes sharing this key were sampled from the same task (one DAPO group)."""
        return (self.env_id, self.task_id, self.seed)

    @property
    def num_conversations(self) -> int:
        return 1 + max((t.conversation for t in self.turns), default=0)

    @property
    def num_policy_tokens(self) -> int:
        return sum(t.completion.num_tokens or 0 for t in self.turns)

    def conversations(self) -> list[list[Turn]]:
        """Turns split by conversation."""
        out: list[list[Turn]] = [[] for _ in range(self.num_conversations)]
        for t in self.turns:
            out[t.conversation].append(t)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "env_id": self.env_id,
            "task_id": self.task_id,
            "seed": self.seed,
            "sample": self.sample,
            "reward": _finite(self.reward),
            "reward_breakdown": _jsonable(self.reward_breakdown),
            "terminated": self.terminated,
            "truncated": self.truncated,
            "metrics": _jsonable(self.metrics),
            "turns": [t.to_dict() for t in self.turns],
            **({"failure": self.failure.to_dict()} if self.failure is not None else {}),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Episode:
        return cls(
            env_id=d["env_id"],
            task_id=d["task_id"],
            seed=d.get("seed"),
            turns=[Turn.from_dict(t) for t in d.get("turns", [])],
            reward=float(d.get("reward", 0.0)),
            reward_breakdown=dict(d.get("reward_breakdown", {})),
            terminated=bool(d.get("terminated", False)),
            truncated=bool(d.get("truncated", False)),
            metrics=dict(d.get("metrics", {})),
            sample=int(d.get("sample", 0)),
            failure=EpisodeFailure.from_dict(d["failure"]) if d.get("failure") else None,
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False)

    @classmethod
    def from_json(cls, line: str) -> Episode:
        return cls.from_dict(json.loads(line))


def _finite(x: float) -> float | None:
    """JSON has no NaN/inf: store them as None rather than writing invalid JSON."""
    x = float(x)
    return x if math.isfinite(x) else None


def _jsonable(obj: Any) -> Any:
    """Best-effort conversion of breakdown/metric values to JSON-native types."""
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set | frozenset):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, bool) or obj is None or isinstance(obj, str | int):
        return obj
    if isinstance(obj, float):
        return _finite(obj)
    if hasattr(obj, "item"):  # numpy / torch scalars
        return _jsonable(obj.item())
    if hasattr(obj, "to_dict"):
        return _jsonable(obj.to_dict())
    return str(obj)


def write_episodes(path: str | Path, episodes: Iterable[Episode], *, append: bool = False) -> int:
    """Write episodes to a JSONL file, one per line. Returns how many were written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with path.open("a" if append else "w", encoding="utf-8") as f:
        for ep in episodes:
            f.write(ep.to_json() + "\n")
            n += 1
    return n


def iter_episodes(path: str | Path) -> Iterator[Episode]:
    """Stream episodes from a JSONL file. A bad line raises DataError naming file and line.

    A final line without a newline (a writer killed mid-write) is skipped, so a crashed
    run's file stays readable.
    """
    path = Path(path)
    with path.open(encoding="utf-8") as f:
        lines = f.readlines()
    for i, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            yield Episode.from_json(line)
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            if i == len(lines) and not line.endswith("\n"):
                return  # torn last line of an interrupted write
            raise DataError(f"{path}:{i}: not a valid episode record ({e}).") from e


def read_episodes(path: str | Path) -> list[Episode]:
    """All episodes of a JSONL file (see :func:`iter_episodes`)."""
    return list(iter_episodes(path))


def messages_equal(a: Sequence[Message], b: Sequence[Message]) -> bool:
    return len(a) == len(b) and all(x == y for x, y in zip(a, b, strict=True))
