"""From episodes to training tensors.

Every policy turn of an episode -- in every conversation, memory-summary turns
included -- becomes one training sequence: the turn's prompt (the chat-templated
observation, exactly as the engine encoded it) followed by the tokens the policy
sampled. Only the sampled tokens are trained on (``loss_mask``); the prompt, which holds
the environment's text and earlier replies of the same conversation, never is. Each
sequence carries its episode's advantage, so one episode-level advantage reaches every
token the policy produced in that episode.

A turn's earlier replies appear again inside later prompts of the same conversation but
only as context; each reply is trained exactly once, in the sequence of its own turn,
with the token ids it was sampled as (no re-tokenisation of generated text).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from agentgym.errors import DataError
from agentgym.trainers.tokenizer import encode_prompt
from agentgym.types import Episode


@dataclass(frozen=True)
class Sample:
    """One training sequence (one policy turn).

    Attributes:
        prompt_ids: the chat-templated prompt.
        response_ids: the sampled tokens.
        advantage: the episode's advantage.
        episode: index of the episode in the batch.
        sampler_logprobs: the engine's log-probs of ``response_ids`` (diagnostics).
    """

    prompt_ids: tuple[int, ...]
    response_ids: tuple[int, ...]
    advantage: float
    episode: int
    sampler_logprobs: tuple[float, ...] = ()

    @property
    def length(self) -> int:
        return len(self.prompt_ids) + len(self.response_ids)


def episodes_to_samples(
    episodes: Sequence[Episode],
    advantages: Sequence[float],
    tokenizer: Any,
    *,
    trainable: Sequence[bool] | None = None,
) -> list[Sample]:
    """One :class:`Sample` per policy turn, carrying its episode's advantage.

    Args:
        episodes: the batch.
        advantages: one per episode.
        tokenizer: the tokenizer the engine used (for the prompt).
        trainable: per episode; ``False`` leaves the episode out (overlong masking).
    """
    if len(advantages) != len(episodes):
        raise DataError(f"{len(episodes)} episodes but {len(advantages)} advantages.")
    out = []
    for i, (ep, adv) in enumerate(zip(episodes, advantages, strict=True)):
        if trainable is not None and not trainable[i]:
            continue
        for t in ep.turns:
            ids = t.completion.token_ids
            if not ids:
                if t.completion.text:
                    raise DataError(
                        f"episode {ep.task_id} (sample {ep.sample}) has a turn without token ids; "
                        "the trainer needs completions from a local engine."
                    )
                continue
            out.append(
                Sample(
                    prompt_ids=tuple(encode_prompt(tokenizer, t.messages)),
                    response_ids=tuple(ids),
                    advantage=float(adv),
                    episode=i,
                    sampler_logprobs=tuple(t.completion.logprobs),
                )
            )
    return out


@dataclass
class MicroBatch:
    """Right-padded tensors for one forward/backward pass.

    ``targets[b, t]`` is the token predicted at position ``t`` (``input_ids[b, t + 1]``);
    ``loss_mask[b, t]`` is 1 where that target is a sampled response token.
    """

    input_ids: torch.Tensor  # [B, T]
    attention_mask: torch.Tensor  # [B, T]
    targets: torch.Tensor  # [B, T-1]
    loss_mask: torch.Tensor  # [B, T-1]
    advantages: torch.Tensor  # [B]
    sampler_logprobs: torch.Tensor  # [B, T-1] (0 where unknown)
    has_sampler_logprobs: torch.Tensor  # [B, T-1] bool
    indices: list[int]  # positions of these samples in the input list

    @property
    def num_tokens(self) -> int:
        return int(self.loss_mask.sum().item())


def collate(samples: Sequence[Sample], indices: Sequence[int], pad_id: int) -> MicroBatch:
    """Pad ``samples`` (right padding) into a :class:`MicroBatch`."""
    width = max(s.length for s in samples)
    b = len(samples)
    input_ids = torch.full((b, width), pad_id, dtype=torch.long)
    attention = torch.zeros((b, width), dtype=torch.long)
    loss_mask = torch.zeros((b, width - 1), dtype=torch.float32)
    sampler = torch.zeros((b, width - 1), dtype=torch.float32)
    has_sampler = torch.zeros((b, width - 1), dtype=torch.bool)
    for row, s in enumerate(samples):
        seq = [*s.prompt_ids, *s.response_ids]
        input_ids[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
        attention[row, : len(seq)] = 1
        start = len(s.prompt_ids) - 1  # target index of the first response token
        loss_mask[row, start : start + len(s.response_ids)] = 1.0
        if len(s.sampler_logprobs) == len(s.response_ids):
            sampler[row, start : start + len(s.response_ids)] = torch.tensor(s.sampler_logprobs)
            has_sampler[row, start : start + len(s.response_ids)] = True
    return MicroBatch(
        input_ids=input_ids,
        attention_mask=attention,
        targets=input_ids[:, 1:].clone(),
        loss_mask=loss_mask,
        advantages=torch.tensor([s.advantage for s in samples], dtype=torch.float32),
        sampler_logprobs=sampler,
        has_sampler_logprobs=has_sampler,
        indices=list(indices),
    )


def make_microbatches(
    samples: Sequence[Sample], micro_batch_size: int, pad_id: int
) -> list[MicroBatch]:
    """Split samples into micro-batches of similar length (less padding), deterministically."""
    order = sorted(range(len(samples)), key=lambda i: (samples[i].length, i))
    out = []
    for k in range(0, len(order), micro_batch_size):
        idx = order[k : k + micro_batch_size]
        out.append(collate([samples[i] for i in idx], idx, pad_id))
    return out
