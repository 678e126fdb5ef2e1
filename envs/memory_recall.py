"""MemoryRecall: remember facts across conversations through memory summaries."""

from __future__ import annotations

import random
import re
from typing import Any, ClassVar

from agentgym import ActResult, ConfigError, ConversationEnv, Message, Task, derive_seed

SYSTEM_PROMPT = (
    "You are a careful assistant with a small context window. Long documents arrive in "
    "parts; your context may be cleared between parts, keeping only your own summary."
)

_FACT_RE = re.compile(r"The code of locker (\d+) is (\d{4})\.")
PROMPT_STYLES = ("full", "brief")
_NOTE_RE = re.compile(r"locker (\d+)\s*(?:=|:|is)\s*(\d{4})", re.IGNORECASE)


class MemoryRecallEnv(ConversationEnv):
    """Recall a few facts from a long document that never fits in one context.

    ## Description
    A document of ``num_facts + num_distractors`` facts of the form "The code of locker
    17 is 4821." arrives in parts of ``chunk_size`` facts, one part per turn. The task
    names, up front, the ``num_facts`` lockers whose codes will be asked for at the end;
    the other facts are distractors. Memory-summary turns are on by default with a
    per-conversation token budget too small for the whole document, so the agent must
    carry the codes it needs through its summaries. It is agentgym's showcase for
    multi-conversation training: an agent that summarises well scores 1, one that
    forgets scores about 0.

    ## Action
    Any text. On a part turn the reply is free (notes are a good idea); on the question
    turn it must give every asked code as ``locker N: CODE`` (one per line). On a summary
    turn the reply becomes the memory.

    ## Observation
    The message list of the current conversation: system prompt, the task (with the
    first part, or the memory on later conversations), then alternating replies and
    parts.

    ## Rewards
    Terminal only: the share of asked lockers whose code is answered correctly. Each
    locker counts once, by the first code given for it; a locker answered with two
    different codes counts as wrong. ``reward_breakdown``: ``correct``, ``asked``,
    ``answers`` (locker -> given or None), ``expected``, ``parts`` (locker -> the part,
    from 1, that showed it), ``format_ok``.

    ## Episode end
    Terminated after the answer to the question. Truncated at ``max_turns`` (default:
    parts + 2) or when the conversation limit of the memory config is hit.

    ## Arguments
    * ``num_facts`` (3): lockers asked about.
    * ``num_distractors`` (9): other facts.
    * ``chunk_size`` (2): facts per part.
    * ``early_fraction`` (0.5): asked facts appear in the first this-share of the parts.
    * ``prompt_style`` (``"full"``): ``"brief"`` drops the system prompt and states the
      task, the parts and the question in a few words, with facts written as
      ``locker 17: 4821`` (the answer's own form), so a conversation is ~3x shorter: for
      tiny models trained on a CPU. The document, the memory and the reward are the same.
    * ``oracle_forget`` (0.0): a lossy teacher: each of the oracle's memory summaries
      leaves the codes out with this probability (drawn per task seed and summary, apart
      from the task's own draws, so the tasks do not change). The env and its reward do
      not change; a warm start trained on such an oracle carries the codes through a
      summary only some of the time, which leaves RL a summary skill to learn.
    * ``memory``: a MemoryConfig or dict; default ``{"enabled": True, "token_budget":
      320, "summary_max_tokens": 64}`` (with the default ``count_tokens``). The env
      checks at ``make`` time that the whole document cannot fit in one conversation.
      ``memory: false`` is the single-long-context form: one conversation holds every
      part, every reply and the question (the same facts, question and reward).
    * ``context_window`` (``None``): with ``memory: false`` only, the largest prompt in
      tokens (``count_tokens``, message overhead included): a long context cut to a
      working-context budget. The observation keeps the task line and the most recent
      replies and parts that fit: part 1 falls out first, then each reply together with
      the part that followed it, so the roles still alternate (when not even the last
      reply fits, the latest part or the question joins the task line, as part 1 did).
      What a reply noted stays visible as long as the reply does. ``None``: the whole
      conversation (no truncation).
    * ``count_tokens``, ``max_turns``, ``max_total_tokens``, ``render_mode``: see
      :class:`~agentgym.env.ConversationEnv`.

    ## Version history
    * v0: first version; ``oracle_forget``, ``prompt_style`` and ``context_window`` added
      later (defaults: the env and the oracle as before); the oracle lists codes in the
      order it first saw them (it sorted them by locker number: the rewards are the same).
    """

    memory_defaults: ClassVar[dict[str, Any]] = {
        "enabled": True,
        "token_budget": 320,
        "summary_max_tokens": 64,
        "max_conversations": 32,
    }

    def __init__(
        self,
        num_facts: int = 3,
        num_distractors: int = 9,
        chunk_size: int = 2,
        early_fraction: float = 0.5,
        oracle_forget: float = 0.0,
        prompt_style: str = "full",
        context_window: int | None = None,
        **kwargs: Any,
    ) -> None:
        if num_facts < 1 or num_distractors < 0 or chunk_size < 1:
            raise ConfigError(
                "MemoryRecall needs num_facts >= 1, num_distractors >= 0 and chunk_size >= 1; "
                f"got {num_facts}, {num_distractors}, {chunk_size}."
            )
        if not 0 < early_fraction <= 1:
            raise ConfigError(f"early_fraction must be in (0, 1], got {early_fraction}.")
        if not 0 <= oracle_forget <= 1:
            raise ConfigError(f"oracle_forget must be in [0, 1], got {oracle_forget}.")
        if prompt_style not in PROMPT_STYLES:
            raise ConfigError(f"prompt_style must be one of {PROMPT_STYLES}, got {prompt_style!r}.")
        if num_facts + num_distractors > 900:
            raise ConfigError(
                "num_facts + num_distractors must be <= 900 (locker numbers are 3 digits)."
            )
        self.num_facts = num_facts
        self.num_distractors = num_distractors
        self.chunk_size = chunk_size
        self.early_fraction = early_fraction
        self.oracle_forget = oracle_forget
        self.brief = prompt_style == "brief"
        self.context_window = context_window
        self.num_parts = -(-(num_facts + num_distractors) // chunk_size)
        kwargs.setdefault("max_turns", self.num_parts + 2)
        super().__init__(**kwargs)
        self._check_needs_memory()
        self._check_window()
        self._parts: list[list[tuple[int, str]]] = []
        self._asked: list[int] = []
        self._codes: dict[int, str] = {}
        self._shown = 0
        self._seed: int | None = None

    # ------------------------------------------------------------------ task
    def _begin(self, seed: int | None, options: dict[str, Any] | None) -> Task:
        rng = self.np_random
        n = self.num_facts + self.num_distractors
        lockers = [int(x) for x in rng.choice(np_range(100, 1000), size=n, replace=False)]
        codes = [f"{int(c):04d}" for c in rng.integers(0, 10_000, size=n)]
        self._codes = dict(zip(lockers, codes, strict=True))
        # asked facts go into the early parts; distractors fill the rest
        early_slots = max(self.num_facts, int(self.early_fraction * n))
        slots = [int(s) for s in rng.permutation(early_slots)[: self.num_facts]]
        asked = lockers[: self.num_facts]
        others = lockers[self.num_facts :]
        order: list[int | None] = [None] * n
        for s, locker in zip(slots, asked, strict=True):
            order[s] = locker
        fill = iter(int(x) for x in rng.permutation(others)) if others else iter(())
        order = [x if x is not None else next(fill) for x in order]
        self._parts = [
            [(lk, self._codes[lk]) for lk in order[i : i + self.chunk_size]]
            for i in range(0, n, self.chunk_size)
        ]
        self._asked = sorted(asked)
        self._shown = 1
        self._seed = seed
        asked_text = ", ".join(f"locker {k}" for k in self._asked)
        task_id = f"memory-recall/{self.num_facts}-{self.num_distractors}-{self.chunk_size}/{seed}"
        if self.brief:
            prompt = f"Keep the code of {asked_text} for the question at the end."
            return Task(task_id=task_id, prompt=prompt, first_message=self._part_text(0))
        prompt = (
            f"You will read a document in {self.num_parts} parts, one per turn. At the end "
            f"you will be asked for the codes of {asked_text}. Reply to each part with short "
            "notes (any other reply is fine too); the next part follows. When asked, give "
            "each code on its own line as `locker N: CODE`."
        )
        return Task(
            task_id=task_id,
            prompt=prompt,
            system=SYSTEM_PROMPT,
            first_message=self._part_text(0),
        )

    def _part_text(self, i: int) -> str:
        if self.brief:
            facts = "; ".join(f"locker {lk}: {code}" for lk, code in self._parts[i])
            return f"Part {i + 1}/{self.num_parts}: {facts}"
        facts = " ".join(f"The code of locker {lk} is {code}." for lk, code in self._parts[i])
        return f"Part {i + 1}/{self.num_parts}: {facts}"

    def _question(self) -> str:
        if self.brief:  # the task line names the lockers
            return "Question: give the codes now."
        asked = ", ".join(str(k) for k in self._asked)
        return (
            f"That was the whole document. Question: what are the codes of lockers {asked}? "
            "Answer with one line per locker, `locker N: CODE`."
        )

    def resume_message(self) -> str | None:
        return self._question() if self._shown > self.num_parts else None

    def _act(self, action: str) -> ActResult:
        if self._shown < self.num_parts:
            self._shown += 1
            return ActResult(feedback=self._part_text(self._shown - 1))
        if self._shown == self.num_parts:
            self._shown += 1
            return ActResult(feedback=self._question())
        self._answer = action
        return ActResult(done=True)

    def _score(self, end_reason: str) -> tuple[float, dict[str, Any]]:
        answer = getattr(self, "_answer", "") if end_reason == "done" else ""
        given = parse_answers(answer, self._asked)
        correct = sum(given[k] == self._codes[k] for k in self._asked)
        reward = correct / len(self._asked)
        return reward, {
            "correct": correct,
            "asked": len(self._asked),
            "answers": {str(k): given[k] for k in self._asked},
            "expected": {str(k): self._codes[k] for k in self._asked},
            "parts": {
                str(lk): i + 1
                for i, part in enumerate(self._parts)
                for lk, _ in part
                if lk in given
            },
            "format_ok": any(v is not None for v in given.values()),
        }

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        self._answer = ""
        obs, info = super().reset(seed=seed, options=options)
        return self._windowed(obs), info

    def step(self, action: str):
        obs, reward, terminated, truncated, info = super().step(action)
        return self._windowed(obs), reward, terminated, truncated, info

    # ------------------------------------------------------------------ window
    def _windowed(self, messages: list[Message]) -> list[Message]:
        """``messages`` cut to ``context_window`` tokens (see the class docstring)."""
        from agentgym import count_message_tokens

        window = self.context_window
        if window is None or count_message_tokens(messages, self.count_tokens) <= window:
            return messages
        pinned = [m for m in messages if m.role == "system"]
        pinned.append(Message("user", self.task.prompt))
        rest = messages[len(pinned) :]  # assistant, user, assistant, user, ...
        while len(rest) > 2 and count_message_tokens(pinned + rest, self.count_tokens) > window:
            rest = rest[2:]
        if count_message_tokens(pinned + rest, self.count_tokens) > window:
            # not even the last reply fits: the latest message joins the task line
            return [*pinned[:-1], Message("user", f"{self.task.prompt}\n\n{rest[-1].content}")]
        return pinned + rest

    # ------------------------------------------------------------------ oracle
    def oracle_action(self, observation: list[Message]) -> str:
        """Note the asked codes seen in this context; summarise them; answer from them.

        It reads codes only from the messages it is shown (the document parts and its
        own earlier notes and memory), never from the env's state, so it succeeds only
        if the memory mechanism really carries the facts across conversations.
        """
        known: dict[int, str] = {}
        for m in observation:
            for lk, code in _FACT_RE.findall(m.content):
                known[int(lk)] = code
            for lk, code in _NOTE_RE.findall(m.content):
                known[int(lk)] = code
        # in the order first seen: a summary is the memory it had, then what is new
        keep = {k: v for k, v in known.items() if k in self._asked}
        lines = "\n".join(f"locker {k}: {code}" for k, code in keep.items())
        if self.next_turn_kind == "summary":
            if self._oracle_forgets():
                lines = ""
            return f"Codes so far:\n{lines}" if lines else "No asked codes seen yet."
        if self._shown > self.num_parts:
            return lines
        return f"Noted.\n{lines}" if lines else "Noted."

    def _oracle_forgets(self) -> bool:
        """Whether the (lossy) oracle leaves the codes out of this conversation's summary:
        a draw fixed by the task seed and the conversation, whatever else was drawn."""
        if not self.oracle_forget:
            return False
        key = derive_seed("MemoryRecall.oracle_forget", self._seed, self.conversation_index)
        return random.Random(key).random() < self.oracle_forget

    # ------------------------------------------------------------------ checks
    def _check_needs_memory(self) -> None:
        """Refuse configs where memory is on but the whole episode fits in one context.

        Measured on a representative episode with empty replies: the opening, every part
        and the question. If that fits the budget, memory turns would never trigger.
        """
        if not self.memory.enabled:
            return
        from agentgym import count_message_tokens

        saved = (self._np_random, getattr(self, "_task", None))
        self.reset(seed=0)
        msgs = list(self._conversations[-1].messages)
        for i in range(1, self.num_parts):
            msgs += [Message("assistant", ""), Message("user", self._part_text(i))]
        msgs += [Message("assistant", ""), Message("user", self._question())]
        total = count_message_tokens(msgs, self.count_tokens)
        opening = count_message_tokens(self._conversations[-1].messages, self.count_tokens)
        self._np_random, self._task = saved
        self._finished = True
        if total + self.memory.reserve <= self.memory.token_budget:
            raise ConfigError(
                f"MemoryRecall: a whole episode (~{total} tokens) fits in the per-conversation "
                f"budget ({self.memory.token_budget}), so memory turns would never be needed. "
                "Lower memory.token_budget or add facts."
            )
        if (
            opening + self.memory.summary_max_tokens + self.memory.reserve
            > self.memory.token_budget
        ):
            raise ConfigError(
                f"MemoryRecall: a new conversation (task ~{opening} tokens + memory "
                f"{self.memory.summary_max_tokens} + reply room {self.memory.reserve}) does not "
                f"fit in memory.token_budget={self.memory.token_budget}; raise the budget."
            )

    def _check_window(self) -> None:
        """Refuse a ``context_window`` with memory on (the memory config has its own
        budget), or one too small for the task line and the longest message it must
        show with it (a part, or the question)."""
        if self.context_window is None:
            return
        if self.memory.enabled:
            raise ConfigError(
                "MemoryRecall: context_window cuts the single long context; it needs "
                "memory: false (with memory on, memory.token_budget bounds each conversation)."
            )
        from agentgym import count_message_tokens

        saved = (self._np_random, getattr(self, "_task", None))
        super().reset(seed=0)
        texts = [self._part_text(i) for i in range(self.num_parts)] + [self._question()]
        longest = max(texts, key=self.count_tokens)
        shortest = [Message("user", f"{self.task.prompt}\n\n{longest}")]
        if self.task.system:
            shortest.insert(0, Message("system", self.task.system))
        need = count_message_tokens(shortest, self.count_tokens)
        self._np_random, self._task = saved
        self._finished = True
        if self.context_window < need:
            raise ConfigError(
                f"MemoryRecall: context_window={self.context_window} cannot hold the task "
                f"line and the longest part (~{need} tokens); raise it to at least "
                f"{need}, or set it to null for the whole conversation."
            )


def np_range(lo: int, hi: int) -> list[int]:
    return list(range(lo, hi))


def parse_answers(text: str, asked: list[int]) -> dict[int, str | None]:
    """Locker -> the code given for it (first mention), None if missing or contradictory."""
    found: dict[int, set[str]] = {}
    first: dict[int, str] = {}
    for lk, code in _NOTE_RE.findall(text or ""):
        k = int(lk)
        found.setdefault(k, set()).add(code)
        first.setdefault(k, code)
    return {k: (first[k] if k in first and len(found[k]) == 1 else None) for k in asked}
