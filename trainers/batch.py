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

A micro-batch stores each distinct prompt once: the ``G`` samples of a task's first turn
share theirs, and the learner computes it once for all of them
(:meth:`~agentgym.trainers.learner.Learner._logits`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from agentgym import DataError, Episode
from agentgym.generation import encode_prompt
from agentgym.trainers.router_replay import pad_routing


@dataclass(frozen=True)
class Sample:
    """One training sequence (one policy turn).

    Attributes:
        prompt_ids: the chat-templated prompt.
        response_ids: the sampled tokens.
        advantage: the episode's advantage.
        episode: index of the episode in the batch.
        sampler_logprobs: the engine's log-probs of ``response_ids`` (diagnostics).
        routing: MoE models with router replay: the engine's expert choices at every
            position it ran, ``[layers, len(prompt) + len(response) - 1, k]``.
        reward: the episode's (shaped) reward: GAE puts it on the episode's last token.
        positive: the episode was correct (VAPO's positive-example NLL trains on it).
        bootstrap: the episode goes on after this sample's last token (T-PPO trains a
            response cut by its window): GAE credits no reward there and bootstraps from
            the value of the last token's state (Extended GAE).
        kind: the turn's kind, ``act`` or ``summary`` (the ``kinds/`` metrics).
    """

    prompt_ids: tuple[int, ...]
    response_ids: tuple[int, ...]
    advantage: float
    episode: int
    sampler_logprobs: tuple[float, ...] = ()
    routing: Any = field(default=None, compare=False, repr=False)
    reward: float = 0.0
    positive: bool = False
    bootstrap: bool = False
    kind: str = "act"

    @property
    def length(self) -> int:
        return len(self.prompt_ids) + len(self.response_ids)


def episodes_to_samples(
    episodes: Sequence[Episode],
    advantages: Sequence[float],
    tokenizer: Any,
    *,
    trainable: Sequence[bool] | None = None,
    rewards: Sequence[float] | None = None,
    positive: Sequence[bool] | None = None,
) -> list[Sample]:
    """One :class:`Sample` per policy turn, carrying its episode's advantage.

    Args:
        episodes: the batch.
        advantages: one per episode.
        tokenizer: the tokenizer the engine used (for the prompt).
        trainable: per episode; ``False`` leaves the episode out (overlong masking).
        rewards / positive: per episode, the shaped reward and correctness (value-based
            RL: GAE and the positive-example NLL).
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
                    routing=t.completion.routing,
                    reward=float(rewards[i]) if rewards is not None else 0.0,
                    positive=bool(positive[i]) if positive is not None else False,
                    kind=t.kind,
                )
            )
    return out


@dataclass
class MicroBatch:
    """The tensors of one forward/backward pass, laid out around shared prompts.

    Samples with the same prompt (the ``G`` samples of a task's first turn) share one
    row of ``prompt_ids``: a learner can run each distinct prompt through the model once
    and only the replies per sample (:meth:`sequences` gives the plain one-row-per-sample
    layout instead). Prompts are left-padded and replies right-padded, so every reply
    starts right after the last token of its prompt.

    ``targets[b, t]`` is the ``t``-th sampled token of sample ``b`` (the token predicted
    after its prompt and the ``t`` tokens before it); ``loss_mask[b, t]`` is 1 where that
    token is trained on.
    """

    prompt_ids: torch.Tensor  # [U, P] left-padded distinct prompts
    prompt_mask: torch.Tensor  # [U, P]
    prompt_of: torch.Tensor  # [B] row of prompt_ids each sample continues
    targets: torch.Tensor  # [B, R] right-padded sampled tokens
    response_mask: torch.Tensor  # [B, R] 1 on real (not padding) reply tokens
    loss_mask: torch.Tensor  # [B, R] float, 1 on trained tokens
    advantages: torch.Tensor  # [B]
    sampler_logprobs: torch.Tensor  # [B, R] (0 where unknown)
    has_sampler_logprobs: torch.Tensor  # [B, R] bool
    indices: list[int]  # positions of these samples in the input list
    # router replay: the engine's expert choices, -1 where unknown (None: not recorded)
    prompt_routing: torch.Tensor | None = None  # [layers, U, P, k], left-padded
    reply_routing: torch.Tensor | None = None  # [layers, B, R, k]: the choice at each fed token
    # value-based RL: per-token advantages, the critic's values then and its targets
    token_advantages: torch.Tensor | None = None  # [B, R]
    old_values: torch.Tensor | None = None  # [B, R]
    value_targets: torch.Tensor | None = None  # [B, R]
    positive: torch.Tensor | None = None  # [B] bool: the sample's episode was correct
    # log-probs of the targets under the policy before this batch's first step (several
    # mini-batches) and under the reference policy (a KL term): None when not needed
    old_logprobs: torch.Tensor | None = None  # [B, R]
    ref_logprobs: torch.Tensor | None = None  # [B, R]

    @property
    def num_tokens(self) -> int:
        return int(self.loss_mask.sum().item())

    @property
    def num_trained_samples(self) -> int:
        """Samples with at least one trained token (what sequence-level losses count)."""
        return int((self.loss_mask.sum(-1) > 0).sum().item())

    @property
    def num_prompts(self) -> int:
        return int(self.prompt_ids.shape[0])

    @property
    def num_samples(self) -> int:
        return int(self.targets.shape[0])

    def to(self, device: torch.device) -> MicroBatch:
        """The same micro-batch with its tensors on ``device``."""
        if self.targets.device == device:
            return self
        moved = {
            f.name: getattr(self, f.name).to(device)
            for f in dataclasses.fields(self)
            if isinstance(getattr(self, f.name), torch.Tensor)
        }
        return dataclasses.replace(self, **moved)

    def sequences(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One row per sample, prompt then reply: ``input_ids, attention_mask, position_ids``.

        Row ``b``'s logits at positions ``P - 1 .. P + R - 2`` predict ``targets[b]``.
        """
        input_ids = torch.cat([self.prompt_ids[self.prompt_of], self.targets], dim=1)
        attention = torch.cat([self.prompt_mask[self.prompt_of], self.response_mask], dim=1)
        return input_ids, attention, positions(attention)

    def reply_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """From the logits of a forward pass over :meth:`sequences` (``[B, P + R, V]``),
        the ``[B, R, V]`` that predict ``targets``."""
        start = self.prompt_ids.shape[1] - 1
        return logits[:, start : start + self.targets.shape[1]]


@dataclass
class TokenRows:
    """A micro-batch of token rows trained at their labelled positions (SFT's): the
    learner's ``output="tokens"`` computes the logits there
    (:func:`~agentgym.trainers.replies.labelled_logits`).

    Attributes:
        input_ids: ``[B, T]`` right-padded rows, run without an attention mask (under
            causal attention no real token sees the padding after it).
        labels: ``[B, T]`` the token each position's row holds where it is trained,
            -100 elsewhere (the logits at position ``t`` predict ``labels[:, t + 1]``).
        position_ids: packed rows' positions (each example starting at 0), or None.
    """

    input_ids: torch.Tensor
    labels: torch.Tensor
    position_ids: torch.Tensor | None = None

    def to(self, device: torch.device | str) -> TokenRows:
        pos = None if self.position_ids is None else self.position_ids.to(device)
        return TokenRows(self.input_ids.to(device), self.labels.to(device), pos)

    @property
    def targets(self) -> torch.Tensor:
        """The labelled tokens, in the order :func:`labelled_logits` gives their logits."""
        shifted = self.labels[:, 1:]
        return shifted[shifted != -100]


def positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids that count only the attended tokens (0 on left padding)."""
    return (attention_mask.cumsum(-1) - 1).clamp(min=0)


def _right_padded(
    rows: Sequence[Sequence[Any]], width: int, fill: Any, dtype: torch.dtype
) -> torch.Tensor:
    """``rows`` written left-aligned into a ``[len(rows), width]`` tensor of ``fill``: one
    tensor made from all the values at once, not one per row."""
    out = torch.full((len(rows), width), fill, dtype=dtype)
    out[_filled([len(r) for r in rows], width)] = torch.tensor(
        [v for r in rows for v in r], dtype=dtype
    )
    return out


def _filled(lengths: Sequence[int], width: int) -> torch.Tensor:
    """``[len(lengths), width]`` booleans, true on the first ``lengths[i]`` of row ``i``."""
    return torch.arange(width) < torch.tensor(list(lengths), dtype=torch.long).unsqueeze(1)


def collate(samples: Sequence[Sample], indices: Sequence[int], pad_id: int) -> MicroBatch:
    """Pad ``samples`` into a :class:`MicroBatch`, one prompt row per distinct prompt."""
    distinct: dict[tuple[int, ...], int] = {}
    prompt_of = [distinct.setdefault(s.prompt_ids, len(distinct)) for s in samples]
    p_width = max(len(p) for p in distinct)
    # left-padded prompts: right-padded reversed rows, flipped
    prompt_ids = _right_padded([p[::-1] for p in distinct], p_width, pad_id, torch.long).flip(1)
    prompt_mask = _right_padded([[1] * len(p) for p in distinct], p_width, 0, torch.long).flip(1)
    r_width = max(len(s.response_ids) for s in samples)
    replies = [s.response_ids for s in samples]
    targets = _right_padded(replies, r_width, pad_id, torch.long)
    response_mask = _right_padded([[1] * len(r) for r in replies], r_width, 0, torch.long)
    known = [
        s.sampler_logprobs if len(s.sampler_logprobs) == len(s.response_ids) else ()
        for s in samples
    ]
    sampler = _right_padded(known, r_width, 0.0, torch.float32)
    has_sampler = _right_padded([[True] * len(k) for k in known], r_width, False, torch.bool)
    return MicroBatch(
        prompt_ids=prompt_ids,
        prompt_mask=prompt_mask,
        prompt_of=torch.tensor(prompt_of, dtype=torch.long),
        targets=targets,
        response_mask=response_mask,
        loss_mask=response_mask.float(),
        advantages=torch.tensor([s.advantage for s in samples], dtype=torch.float32),
        sampler_logprobs=sampler,
        has_sampler_logprobs=has_sampler,
        indices=list(indices),
        positive=torch.tensor([s.positive for s in samples], dtype=torch.bool),
        **_routing(samples, list(distinct), prompt_of, p_width, r_width),
    )


def _routing(
    samples: Sequence[Sample],
    prompts: list[tuple[int, ...]],
    prompt_of: list[int],
    p_width: int,
    r_width: int,
) -> dict[str, torch.Tensor]:
    """The micro-batch's recorded expert choices, split into its prompt and reply layout
    (empty when the samples carry none)."""
    if any(s.routing is None for s in samples):
        return {}
    layers, _, k = samples[0].routing.shape
    first_of = {u: i for i, u in reversed(list(enumerate(prompt_of)))}
    prompt = pad_routing(
        [samples[first_of[u]].routing[:, : len(p)] for u, p in enumerate(prompts)],
        p_width,
        left=True,
        layers=layers,
        k=k,
    )
    reply = pad_routing(
        [s.routing[:, len(s.prompt_ids) :] for s in samples],
        r_width,
        left=False,
        layers=layers,
        k=k,
    )
    return {"prompt_routing": prompt, "reply_routing": reply}


def make_microbatches(
    samples: Sequence[Sample], micro_batch_size: int, pad_id: int
) -> list[MicroBatch]:
    """Split samples into micro-batches of at most ``micro_batch_size``, deterministically.

    Samples are ordered by prompt (length, then ids) and reply length before they are
    cut, so that samples sharing a prompt land together (their prompt is computed once)
    and lengths within a micro-batch are close (less padding).
    """
    order = sorted(
        range(len(samples)),
        key=lambda i: (
            len(samples[i].prompt_ids),
            samples[i].prompt_ids,
            len(samples[i].response_ids),
            i,
        ),
    )
    out = []
    for k in range(0, len(order), micro_batch_size):
        idx = order[k : k + micro_batch_size]
        out.append(collate([samples[i] for i in idx], idx, pad_id))
    return out
