"""Memory-summary turns: splitting a long episode into several conversations.

Any :class:`~agentgym.env.ConversationEnv` can switch this on with a :class:`MemoryConfig`.
The rule, applied after every ordinary ("act") turn that does not end the episode:

1. The env builds the next prompt of the current conversation.
2. If that prompt plus ``reserve_tokens`` (room for the next reply) would exceed
   ``token_budget`` tokens, or the conversation already holds ``every_k_turns`` act turns,
   the env does not continue: it appends ``summary_prompt`` to the feedback (its
   ``{reason}`` says why the context ends: the budget or the turn count), and the next
   turn is a "summary" turn.
3. The reply to a summary turn, cut to ``summary_max_tokens`` tokens, becomes the
   *memory*. The next observation is a fresh conversation: the system prompt, then one
   user message made from the task, the memory and the env's state digest
   (:meth:`ConversationEnv.state_digest`, for example a file tree).
4. After ``max_conversations`` conversations the episode is truncated and scored.

Only the context is reset: whatever state the env keeps (files, progress through a
document) persists across conversations.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentgym.errors import ConfigError

DEFAULT_SUMMARY_PROMPT = (
    "{reason} Write a summary of everything you will need to finish the task: facts you learned, "
    "decisions made, progress so far and next steps. Only this summary, the task and the "
    "current state will be shown to you in the new context. Reply with the summary only."
)

#: what ``{reason}`` in a summary prompt becomes: why this context ends
BUDGET_REASON = "Your context is full and will be cleared."
TURNS_REASON = "This context has reached its limit of {k} and will be cleared."


def summary_reason(every_k_turns: int | None, by_turns: bool) -> str:
    """The sentence that tells the agent why its context ends: the token budget, or the
    every-K-turns rule (``by_turns``)."""
    if not by_turns:
        return BUDGET_REASON
    k = every_k_turns or 1
    return TURNS_REASON.format(k="1 turn" if k == 1 else f"{k} turns")


def render_summary_prompt(summary_prompt: str, reason: str) -> str:
    """``summary_prompt`` with ``{reason}`` replaced by ``reason``; a prompt without the
    placeholder is the env's own wording and is used as it is."""
    return summary_prompt.replace("{reason}", reason).strip()


DEFAULT_RESUME_TEMPLATE = (
    "{task}\n\n"
    "## Memory\nYou have been working on this task in an earlier context (part "
    "{conversation} of this episode). Your summary of that work:\n\n{memory}"
    "{digest}\n\nContinue the task."
)


@dataclass(frozen=True)
class MemoryConfig:
    """When and how an environment asks for memory summaries.

    Attributes:
        enabled: switch the mechanism on.
        token_budget: largest prompt, in tokens, of any turn in one conversation.
        reserve_tokens: room kept free for the reply when deciding whether the next
            prompt still fits (``None``: ``summary_max_tokens``).
        every_k_turns: also ask for a summary after this many act turns in a
            conversation (``None``: only on budget).
        summary_prompt: the instruction appended to the feedback of a summary turn;
            ``{reason}`` in it becomes the sentence that says why the context ends
            (:func:`summary_reason`: the budget, or the every-K-turns rule).
        summary_max_tokens: the memory is cut to this many tokens.
        max_conversations: the episode is truncated after this many conversations.
        resume_template: how the first user message of a new conversation is built; it
            may use ``{task}``, ``{memory}``, ``{digest}`` and ``{conversation}``.
    """

    enabled: bool = False
    token_budget: int = 4096
    reserve_tokens: int | None = None
    every_k_turns: int | None = None
    summary_prompt: str = DEFAULT_SUMMARY_PROMPT
    summary_max_tokens: int = 512
    max_conversations: int = 16
    resume_template: str = DEFAULT_RESUME_TEMPLATE

    def __post_init__(self) -> None:
        if self.token_budget < 16:
            raise ConfigError(f"memory.token_budget must be >= 16 tokens, got {self.token_budget}.")
        if self.summary_max_tokens < 1:
            raise ConfigError(
                f"memory.summary_max_tokens must be >= 1, got {self.summary_max_tokens}."
            )
        if self.summary_max_tokens >= self.token_budget:
            raise ConfigError(
                f"memory.summary_max_tokens ({self.summary_max_tokens}) must be smaller than "
                f"memory.token_budget ({self.token_budget}); otherwise a summary cannot fit in "
                "the next conversation. Lower summary_max_tokens or raise token_budget."
            )
        if self.every_k_turns is not None and self.every_k_turns < 1:
            raise ConfigError(
                f"memory.every_k_turns must be >= 1 or None, got {self.every_k_turns}."
            )
        if self.max_conversations < 1:
            raise ConfigError(
                f"memory.max_conversations must be >= 1, got {self.max_conversations}."
            )
        if self.reserve_tokens is not None and self.reserve_tokens < 0:
            raise ConfigError(f"memory.reserve_tokens must be >= 0, got {self.reserve_tokens}.")
        for key in ("{task}", "{memory}"):
            if key not in self.resume_template:
                raise ConfigError(
                    f"memory.resume_template must contain {key}; got {self.resume_template!r}."
                )

    @property
    def reserve(self) -> int:
        return self.summary_max_tokens if self.reserve_tokens is None else self.reserve_tokens

    @classmethod
    def coerce(cls, value: MemoryConfig | dict | bool | None, **defaults) -> MemoryConfig:
        """Accept a MemoryConfig, a dict of its fields, True/False or None (``make`` kwargs).

        ``defaults`` are the env's own defaults, overridden by what the user passed.
        """
        if isinstance(value, MemoryConfig):
            return value
        if value is None:
            return cls(**defaults)
        if isinstance(value, bool):
            return cls(**{**defaults, "enabled": value})
        if isinstance(value, dict):
            known = set(cls.__dataclass_fields__)
            bad = sorted(set(value) - known)
            if bad:
                from agentgym.errors import UnknownNameError

                raise UnknownNameError("memory option", bad[0], known)
            merged = {**defaults, "enabled": True, **value}  # a dict of options means "on"
            from agentgym.config import config_from_dict  # values checked against the types

            return config_from_dict(cls, merged, "memory")
        raise ConfigError(
            f"memory must be a MemoryConfig, a dict of its fields, or a bool; got "
            f"{type(value).__name__}."
        )
