"""What one step of the all-sync loop generates and trains on: sequences and their lengths.

A step samples ``batch_tasks x group_size`` episodes (times the mean number of
generation rounds dynamic sampling needs). An episode is one or more conversations
(memory-summary turns start a new one); each conversation is a prompt (task, memory,
observations) and a response whose length follows a distribution, not one number: the
all-sync loop waits for the longest episode, so the tail sets the decode time.

:func:`length_quantiles` turns (mean, cap, shape) into equally weighted quantile points;
:func:`episode_lengths` gives the distribution of an episode's total response tokens
(the sum over its conversations). Pure arithmetic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from agentgym import ConfigError

#: response-length shapes the workload accepts
DISTRIBUTIONS = ("exponential", "uniform", "fixed")


@dataclass(frozen=True)
class Workload:
    """One step's generation and training work, in tokens.

    Attributes:
        episodes: episodes sampled per step (tasks x group size x generation rounds).
        group_size: samples per task (a shared prompt is trained once per group).
        prompt_tokens: mean prompt tokens of one conversation.
        response_tokens: mean response tokens of one conversation.
        max_response_tokens: the cap on one conversation's response.
        distribution: shape of the response lengths (:data:`DISTRIBUTIONS`).
        conversations: conversations per episode.
        env_seconds: env and reward seconds on the critical path of a step (tool calls,
            sandbox runs and grading of the last episode), with every GPU idle.
        share_prompts: the trainer runs a prompt the group shares once.
        logprob_passes: forward passes without gradient before the update (old-policy
            log-probs when a batch takes several optimizer steps; reference log-probs
            when a KL term needs them).
        updates: optimizer steps per batch.
        critic_passes: training passes of a critic over each mini-batch (PPO/VAPO's
            ``critic.updates_per_batch``; 0 without a critic, whose valuation pass is
            counted in ``logprob_passes``).
    """

    episodes: int
    group_size: int = 8
    prompt_tokens: float = 256
    response_tokens: float = 1024
    max_response_tokens: int = 4096
    distribution: str = "exponential"
    conversations: int = 1
    env_seconds: float = 0.0
    share_prompts: bool = True
    logprob_passes: int = 0
    updates: int = 1
    critic_passes: int = 0

    def __post_init__(self) -> None:
        if self.distribution not in DISTRIBUTIONS:
            raise ConfigError(
                f"plan.workload.length_distribution must be one of {DISTRIBUTIONS}, got "
                f"{self.distribution!r}."
            )
        if self.episodes < 1 or self.conversations < 1 or self.group_size < 1:
            raise ConfigError("a step needs at least one episode of one conversation.")
        if not 0 < self.response_tokens <= self.max_response_tokens:
            raise ConfigError(
                f"plan.workload.response_tokens ({self.response_tokens}) must be in (0, "
                f"max_response_tokens = {self.max_response_tokens}]."
            )
        if self.prompt_tokens < 0 or self.env_seconds < 0:
            raise ConfigError("plan.workload prompt_tokens and env_seconds must be >= 0.")

    @property
    def sequences(self) -> int:
        """Conversations trained per step (each is one training sequence)."""
        return self.episodes * self.conversations

    @property
    def seq_tokens(self) -> float:
        """Mean tokens of one training sequence (prompt + response)."""
        return self.prompt_tokens + self.response_tokens

    @property
    def response_total(self) -> float:
        """Response tokens generated per step."""
        return self.sequences * self.response_tokens

    @property
    def train_tokens(self) -> float:
        """Tokens the trainer runs per pass: a group's shared first prompt counts once."""
        prompts = self.sequences * self.prompt_tokens
        if self.share_prompts and self.group_size > 1:
            shared = self.episodes * self.prompt_tokens * (1 - 1 / self.group_size)
            prompts -= shared
        return prompts + self.response_total

    @property
    def batch_tokens(self) -> float:
        """All tokens of the step's sequences (prompt + response each), the usual
        numerator of "tokens per second per GPU"."""
        return self.sequences * self.seq_tokens


def length_quantiles(
    mean: float, cap: float, distribution: str, *, points: int = 32, longest_of: int = 0
) -> list[float]:
    """Equally weighted response lengths with the given mean, none above ``cap``.

    ``exponential`` is a capped exponential whose scale is solved so that the capped mean
    is ``mean`` (long tails and a pile at the cap, as RL responses have); ``uniform``
    spreads evenly around the mean; ``fixed`` is one length. With ``longest_of = N`` the
    last point is the expected longest of N samples (quantile N/(N+1)), so the tail the
    all-sync loop waits for is not averaged away.
    """
    if distribution == "fixed" or mean >= cap:
        return [min(mean, cap)] * points
    qs = [(i + 0.5) / points for i in range(points)]
    if longest_of > 0:
        qs[-1] = max(qs[-1], longest_of / (longest_of + 1))
    if distribution == "uniform":
        low, high = (0.0, 2 * mean) if 2 * mean <= cap else (2 * mean - cap, cap)
        return [low + q * (high - low) for q in qs]

    def capped(scale: float) -> list[float]:
        return [min(cap, -scale * math.log1p(-q)) for q in qs]

    lo, hi = mean * 0.5, mean * 64.0
    for _ in range(60):  # the capped mean grows with the scale: bisect
        mid = (lo + hi) / 2
        if sum(capped(mid)) / points < mean:
            lo = mid
        else:
            hi = mid
    return capped((lo + hi) / 2)


@lru_cache(maxsize=1024)
def episode_lengths(workload: Workload, *, points: int = 32) -> tuple[float, ...]:
    """Total response tokens of an episode, as equally weighted sorted quantile points.

    One conversation: :func:`length_quantiles`. Several: the sum of independent
    conversations, by convolution on a grid; the last point is again the expected
    longest of the step's episodes.
    """
    n = workload.episodes
    single = length_quantiles(
        workload.response_tokens,
        workload.max_response_tokens,
        workload.distribution,
        points=points,
        longest_of=n if workload.conversations == 1 else 0,
    )
    if workload.conversations == 1:
        return tuple(sorted(single))
    cap = workload.max_response_tokens
    bins = 128
    width = cap / bins
    base = [0.0] * (bins + 1)
    for x in single:
        base[min(bins, round(x / width))] += 1 / len(single)
    dist = [1.0]
    for _ in range(workload.conversations):
        out = [0.0] * (len(dist) + bins)
        for i, p in enumerate(dist):
            if p:
                for j, q in enumerate(base):
                    if q:
                        out[i + j] += p * q
        dist = out
    qs = [(i + 0.5) / points for i in range(points)]
    qs[-1] = max(qs[-1], n / (n + 1))
    result, acc, k = [], 0.0, 0
    for q in qs:
        while k < len(dist) - 1 and acc + dist[k] < q:
            acc += dist[k]
            k += 1
        result.append(k * width)
    return tuple(sorted(result))
