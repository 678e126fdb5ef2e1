"""Per-request seeded sampling for the HF engine: Gumbel-max draws, top-p, exact log-probs.

Sampling is done by agentgym rather than by transformers' own sampler, so that it is

* **per-request reproducible**: each request has its own seed (the rollout derives one
  from the run seed, the task, the sample and the turn); row ``i`` of a batch draws its
  noise from its own generator, so a completion does not depend on which other requests
  happened to share its batch, nor on the global RNG;
* **exact about log-probabilities**: the log-probability recorded for each token is that
  of the distribution it was drawn from (temperature and top-p applied), computed from
  the same scores the sampler used.

Gumbel-max: ``argmax(log p + Gumbel)`` is an exact sample of ``p``; temperature 0 is
``argmax(log p)`` (greedy). The noise is drawn on the device of the scores (one
generator per request on that device): on a GPU no ``rows x vocab`` numbers are drawn on
the host and copied at every step. A seed gives the same tokens on the same kind of
device (CPU and CUDA generators are different algorithms). Both decode paths of the HF engine draw the same numbers
for the same seeds: :class:`SeededSampler` (a logits processor for transformers'
``generate``) one step at a time, :class:`RowNoise` (the lean loop, :mod:`.lean`) a
chunk of steps at a time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

#: Most Gumbel-noise numbers drawn ahead of time per call (rows x steps x vocab).
NOISE_BUDGET = 1 << 22
#: Most decode steps whose noise is drawn at once.
NOISE_CHUNK_STEPS = 32


def gumbel(uniform: torch.Tensor) -> torch.Tensor:
    """Gumbel(0, 1) noise from uniform [0, 1) numbers (clamped away from 0 and 1)."""
    return -torch.log(-torch.log(uniform.clamp(1e-20, 1.0 - 1e-7)))


def top_p_filter(logits: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Keep, per row, the smallest set of tokens whose probability mass reaches top_p."""
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    probs = sorted_logits.softmax(-1)
    mass_before = probs.cumsum(-1) - probs
    drop_sorted = mass_before >= top_p[:, None]
    drop = torch.zeros_like(drop_sorted).scatter(1, order, drop_sorted)
    return logits.masked_fill(drop, -math.inf)


class SeededSampler:
    """A transformers logits processor that samples each row with its own seed and
    records the log-probs of the chosen tokens (the ``generate`` decode path).

    Top-p filters every row of a batch in which any row asks for it (the lean loop
    filters only the rows that ask, which can keep a top-p 1 row's negligible tail
    tokens that this path drops depending on its batch).
    """

    def __init__(
        self,
        seeds: list[int],
        temperatures: list[float],
        top_ps: list[float],
        device: torch.device | str = "cpu",
    ) -> None:
        self.generators = [torch.Generator(device=device).manual_seed(int(s)) for s in seeds]
        self.device = torch.device(device)
        self.temperatures = temperatures
        self.top_ps = top_ps
        self.logprobs: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        scores = scores.float()
        b, v = scores.shape
        temps = torch.tensor(self.temperatures, dtype=scores.dtype, device=scores.device)
        greedy = temps == 0
        scaled = scores / torch.where(greedy, torch.ones_like(temps), temps)[:, None]
        if any(p < 1.0 for p in self.top_ps):
            scaled = top_p_filter(scaled, torch.tensor(self.top_ps, device=scores.device))
        logp = torch.log_softmax(scaled, dim=-1)
        noise = torch.stack(
            [torch.rand(v, generator=g, device=self.device) for g in self.generators]
        ).to(scores.device)
        perturbed = torch.where(greedy[:, None], logp, logp + gumbel(noise))
        choice = perturbed.argmax(dim=-1)
        self.logprobs.append(logp.gather(1, choice[:, None]).squeeze(1).cpu())
        out = torch.full_like(scores, -math.inf)
        out.scatter_(1, choice[:, None], 0.0)
        return out


class RowNoise:
    """Gumbel noise for the rows of a lean decode, each row from its own generator.

    Row ``r``'s noise at step ``t`` is its generator's ``t``-th draw of ``vocab`` uniform
    numbers -- the same numbers :class:`SeededSampler` draws one step at a time -- but
    the draws are made ``chunk`` steps at once and turned into Gumbel noise in one
    vectorised call. Greedy rows draw nothing.
    """

    def __init__(
        self, seeds: Sequence[int], sampled: Sequence[bool], vocab: int, device: torch.device
    ) -> None:
        self.generators = [
            torch.Generator(device=device).manual_seed(int(s)) if on else None
            for s, on in zip(seeds, sampled, strict=True)
        ]
        self.vocab = vocab
        self.device = device
        n_sampled = max(1, sum(1 for on in sampled if on))
        self.chunk = max(1, min(NOISE_CHUNK_STEPS, NOISE_BUDGET // (n_sampled * vocab)))
        self._noise: torch.Tensor | None = None  # [batch rows, chunk, vocab]
        self._start = 0  # the step the current chunk starts at

    def step(self, t: int, rows: Sequence[int]) -> torch.Tensor | None:
        """Gumbel noise ``[len(rows), vocab]`` for step ``t`` (rows: request indices);
        ``None`` when every row is greedy."""
        if all(self.generators[r] is None for r in rows):
            return None
        if self._noise is None or t - self._start >= self.chunk:
            uniform = torch.zeros(len(rows), self.chunk, self.vocab, device=self.device)
            for j, r in enumerate(rows):
                g = self.generators[r]
                if g is not None:
                    torch.rand(self.chunk, self.vocab, generator=g, out=uniform[j])
            self._noise = gumbel(uniform)
            self._start = t
        return self._noise[:, t - self._start]

    def keep(self, index: torch.Tensor) -> None:
        """Keep only these batch positions (rows that left the batch are dropped)."""
        if self._noise is not None:
            self._noise = self._noise.index_select(0, index.to(self._noise.device))
