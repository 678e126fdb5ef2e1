"""``ConversationEnv``: the base class of every agentgym environment.

A conversation environment is a Gymnasium environment whose observation is the message
list of the current conversation and whose action is the assistant's reply (a ``str``).
Subclasses describe the task and react to actions; the base class owns everything that
is the same for every env:

* the conversation transcript and its growth turn by turn,
* memory-summary turns (:mod:`agentgym.memory`): when to ask for a summary, capping it,
  starting the next conversation from task + memory + state digest,
* episode limits (act turns, total policy tokens, conversations),
* the reward contract: ``0.0`` on every step but the last, whose reward comes from
  :meth:`_score` together with ``info["reward_breakdown"]``,
* ``info`` keys: ``conversation`` and ``turn_kind`` describe the *observation returned*
  (the turn the policy is asked for next); ``turn`` counts act turns so far.

Subclass hooks::

    _begin(seed, options) -> Task      # pick the task (use self.np_random)
    _act(action) -> ActResult          # react to one act-turn reply
    _score(end_reason) -> (reward, breakdown)   # once, when the episode ends
    state_digest() -> str | None       # shown at the start of each new conversation
    resume_message() -> str | None     # still-pending text for a new conversation
    oracle_action(observation) -> str  # optional reference policy
    worked_solution(...)               # optional, env-specific (SFT data)

Timings and other non-deterministic numbers go to :attr:`ConversationEnv.episode_metrics`
(the rollout copies them into ``Episode.metrics``), never into ``info``, so that the same
seed and actions always give the same ``info``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, ClassVar

import gymnasium as gym

from agentgym.errors import ConfigError, EnvStateError
from agentgym.memory import MemoryConfig, render_summary_prompt, summary_reason
from agentgym.spaces import ChatObservation, UnicodeText
from agentgym.tokens import (
    TokenCounter,
    approx_tokens,
    clean_text,
    count_message_tokens,
    truncate_to_tokens,
)
from agentgym.types import Message

END_REASONS = ("done", "max_turns", "max_total_tokens", "max_conversations")


@dataclass(frozen=True)
class Task:
    """What a subclass's ``_begin`` returns.

    Attributes:
        task_id: a stable name for the task.
        prompt: the task statement; the first user message of every conversation starts
            with it.
        system: the system prompt (``None``: no system message).
        first_message: extra text appended to the first user message of the *first*
            conversation only (for example the first chunk of a document); later
            conversations start from the prompt and the memory.
    """

    task_id: str
    prompt: str
    system: str | None = None
    first_message: str | None = None


@dataclass(frozen=True)
class ActResult:
    """What a subclass's ``_act`` returns for one act-turn reply.

    Attributes:
        feedback: the next user message (the env's reply). Ignored when ``done``.
        done: the agent finished (answered, submitted): the episode terminates.
    """

    feedback: str = ""
    done: bool = False


@dataclass
class _Conversation:
    messages: list[Message] = field(default_factory=list)
    act_turns: int = 0


class ConversationEnv(gym.Env[list[Message], str]):
    """Base class of agentgym's text environments (see the module docstring).

    Args:
        memory: a :class:`MemoryConfig`, a dict of its fields, or a bool.
        count_tokens: ``text -> tokens``; default :func:`agentgym.tokens.approx_tokens`.
        max_turns: act turns before the episode is truncated (``None``: no limit).
        max_total_tokens: policy tokens (all turns, counted with ``count_tokens``) before
            the episode is truncated (``None``: no limit).
        render_mode: ``"ansi"`` (``render`` returns the transcript) or ``"human"`` (prints
            it) or ``None``.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi", "human"]}
    #: The env's own defaults for MemoryConfig fields (a subclass may turn memory on).
    memory_defaults: ClassVar[dict[str, Any]] = {}

    def __init__(
        self,
        *,
        memory: MemoryConfig | dict | bool | None = None,
        count_tokens: TokenCounter | None = None,
        max_turns: int | None = None,
        max_total_tokens: int | None = None,
        render_mode: str | None = None,
        max_action_chars: int | None = 200_000,
    ) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ConfigError(
                f"render_mode must be one of {self.metadata['render_modes']} or None, "
                f"got {render_mode!r}."
            )
        if max_turns is not None and max_turns < 1:
            raise ConfigError(f"max_turns must be >= 1 or None, got {max_turns}.")
        if max_total_tokens is not None and max_total_tokens < 1:
            raise ConfigError(f"max_total_tokens must be >= 1 or None, got {max_total_tokens}.")
        if count_tokens is not None and not callable(count_tokens):
            raise ConfigError("count_tokens must be a callable text -> int (or None).")
        self.memory = MemoryConfig.coerce(memory, **self.memory_defaults)
        self.count_tokens: TokenCounter = count_tokens or approx_tokens
        self.max_turns = max_turns
        self.max_total_tokens = max_total_tokens
        self.render_mode = render_mode
        self.observation_space = ChatObservation()
        self.action_space = UnicodeText(max_action_chars)
        self._task: Task | None = None
        self._conversations: list[_Conversation] = []
        self._next_kind = "act"
        self._turns = 0
        self._policy_tokens = 0
        self._memory: str | None = None
        self._finished = True
        self.episode_metrics: dict[str, Any] = {}

    # ----------------------------------------------------------------- subclass hooks
    def _begin(self, seed: int | None, options: dict[str, Any] | None) -> Task:
        raise NotImplementedError

    def _act(self, action: str) -> ActResult:
        raise NotImplementedError

    def _score(self, end_reason: str) -> tuple[float, dict[str, Any]]:
        raise NotImplementedError

    def state_digest(self) -> str | None:
        """Env state shown at the start of every new conversation (e.g. a file tree)."""
        return None

    def resume_message(self) -> str | None:
        """Text appended to the first message of a new conversation (after the memory).

        For what the agent must still see after a context reset, for example a question
        that was asked in the turn that triggered the summary. Default: nothing.
        """
        return None

    def oracle_action(self, observation: list[Message]) -> str:
        """The reference policy's reply to ``observation`` (the ``oracle`` policy uses it).

        Envs with a reference solution override this. It may read the env's state (it is
        an oracle), but should behave like an agent that follows the protocol, memory
        turns included, so that it proves the task is solvable through the interface.
        """
        raise NotImplementedError(
            f"{type(self).__name__} has no reference solution (oracle_action is not "
            "implemented); use another policy."
        )

    @classmethod
    def has_oracle(cls) -> bool:
        return cls.oracle_action is not ConversationEnv.oracle_action

    # ----------------------------------------------------------------- gymnasium API
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        super().reset(seed=seed)
        self._task = self._begin(seed, options)
        self._conversations = [_Conversation(messages=self._opening(memory=None))]
        self._next_kind = "act"
        self._turns = 0
        self._policy_tokens = 0
        self._memory = None
        self._finished = False
        self.episode_metrics = {}
        return self._observation(), self._info()

    def step(self, action: str) -> tuple[list[Message], float, bool, bool, dict[str, Any]]:
        if self._task is None:
            raise EnvStateError("Call reset() before step().")
        if self._finished:
            raise EnvStateError("The episode has ended; call reset() to start a new one.")
        if not isinstance(action, str):
            raise EnvStateError(
                f"An action is the assistant's reply as a str; got {type(action).__name__}. "
                "Pass completion.text, not the Completion."
            )
        action = clean_text(action)  # a lone surrogate would break every writer of it
        conv = self._conversations[-1]
        conv.messages.append(Message("assistant", action))
        self._policy_tokens += self.count_tokens(action)

        if self._next_kind == "summary":
            return self._after_summary(action)

        self._turns += 1
        conv.act_turns += 1
        result = self._act(action)
        if result.done:
            return self._end("done", terminated=True)
        if self.max_turns is not None and self._turns >= self.max_turns:
            return self._end("max_turns", terminated=False)
        if self.max_total_tokens is not None and self._policy_tokens >= self.max_total_tokens:
            return self._end("max_total_tokens", terminated=False)

        feedback = result.feedback
        reason = self._summary_reason(conv, feedback)
        if reason is not None:
            if len(self._conversations) >= self.memory.max_conversations:
                return self._end("max_conversations", terminated=False)
            sep = "\n\n" if feedback else ""
            ask = render_summary_prompt(self.memory.summary_prompt, reason)
            conv.messages.append(Message("user", feedback + sep + ask))
            self._next_kind = "summary"
        else:
            conv.messages.append(Message("user", feedback))
        return self._observation(), 0.0, False, False, self._info()

    def render(self) -> str | None:
        text = self.transcript_text()
        if self.render_mode == "human":
            print(text)
            return None
        return text

    def close(self) -> None:
        """Release resources. Safe to call more than once."""
        self._finished = True

    # ----------------------------------------------------------------- public helpers
    @property
    def task(self) -> Task:
        if self._task is None:
            raise EnvStateError("No task yet: call reset() first.")
        return self._task

    @property
    def conversation_index(self) -> int:
        return len(self._conversations) - 1

    @property
    def next_turn_kind(self) -> str:
        return self._next_kind

    @property
    def memory_text(self) -> str | None:
        """The current memory (the last summary, capped), or None before the first."""
        return self._memory

    def transcripts(self) -> list[list[Message]]:
        """Every conversation of the episode so far, as message lists (copies)."""
        return [list(c.messages) for c in self._conversations]

    def transcript_text(self) -> str:
        out = []
        for i, conv in enumerate(self._conversations):
            out.append(f"===== conversation {i} =====")
            out += [f"[{m.role}]\n{m.content}\n" for m in conv.messages]
        return "\n".join(out)

    # ----------------------------------------------------------------- internals
    def _opening(self, memory: str | None) -> list[Message]:
        task = self.task
        msgs = [Message("system", task.system)] if task.system else []
        if memory is None:
            extra = f"\n\n{task.first_message}" if task.first_message else ""
            msgs.append(Message("user", task.prompt + extra))
        else:
            digest = self.state_digest()
            digest_text = f"\n\n## Current state\n{digest}" if digest else ""
            pending = self.resume_message()
            if pending:
                digest_text += f"\n\n{pending}"
            msgs.append(
                Message(
                    "user",
                    self.memory.resume_template.format(
                        task=task.prompt,
                        memory=memory,
                        digest=digest_text,
                        conversation=len(self._conversations),
                    ),
                )
            )
        return msgs

    def _summary_reason(self, conv: _Conversation, feedback: str) -> str | None:
        """Why the conversation must end in a summary now (its first sentence), or None."""
        k = self.memory.every_k_turns
        if not self.memory.enabled:
            return None
        if k is not None and conv.act_turns >= k:
            return summary_reason(k, by_turns=True)
        prompt = [*conv.messages, Message("user", feedback)]
        used = count_message_tokens(prompt, self.count_tokens)
        if used + self.memory.reserve > self.memory.token_budget:
            return summary_reason(k, by_turns=False)
        return None

    def _after_summary(self, summary: str):
        capped = truncate_to_tokens(
            summary.strip(), self.memory.summary_max_tokens, self.count_tokens
        )
        self._memory = capped
        self._conversations.append(_Conversation(messages=self._opening(memory=capped)))
        self._next_kind = "act"
        return self._observation(), 0.0, False, False, self._info()

    def _end(self, reason: str, *, terminated: bool):
        reward, breakdown = self._score(reason)
        breakdown = _detached(dict(breakdown))
        breakdown.setdefault("end_reason", reason)
        breakdown.setdefault("turns", self._turns)
        breakdown.setdefault("conversations", len(self._conversations))
        breakdown.setdefault("policy_tokens", self._policy_tokens)
        self._finished = True
        info = self._info()
        info["reward_breakdown"] = breakdown
        return self._observation(), float(reward), terminated, not terminated, info

    def _observation(self) -> list[Message]:
        return list(self._conversations[-1].messages)

    def _info(self) -> dict[str, Any]:
        return {
            "conversation": len(self._conversations) - 1,
            "turn_kind": self._next_kind,
            "turn": self._turns,
            "task_id": self.task.task_id,
        }


def _detached(value: Any) -> Any:
    """A copy of ``value`` that shares no container with it (dicts, lists, tuples and
    sets are copied all the way down; other objects are kept, or deep-copied when they
    are not plain scalars). What ``copy.deepcopy`` gives for a reward breakdown, at a
    fraction of its cost on the usual dict of numbers and strings."""
    if value is None or isinstance(value, (str, int, float, bool, bytes)):
        return value
    if isinstance(value, dict):
        return {k: _detached(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_detached(v) for v in value]
    if isinstance(value, tuple) and type(value) is tuple:
        return tuple(_detached(v) for v in value)
    if isinstance(value, (set, frozenset)) and type(value) in (set, frozenset):
        return type(value)(_detached(v) for v in value)
    return copy.deepcopy(value)
