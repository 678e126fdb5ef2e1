"""Pipeline parallelism: a causal LM cut into stages, run by ``torch.distributed.pipelining``.

:func:`cut_stage` keeps one stage's modules in the training model (the embedding on the
first stage, its decoder layers, the final norm and the LM head on the last) and
replaces the others by empty placeholders, so a rank holds only its stage's weights.
:class:`StageModule` is that stage as one module: ``forward(x, attention_mask,
position_ids)`` embeds (first stage) or takes the previous stage's hidden states, builds
the causal mask and the rotary embeddings the way the model's own ``forward`` does, runs
its layers and returns ``(hidden, attention_mask, position_ids)`` for the next stage (the
integer masks travel along and get no gradient) or the logits (last stage; under tensor
parallelism this rank's slice of the vocabulary, a plain tensor the learner wraps again
as the split DTensor the loss reduces). With
``values_out`` set, the last stage returns the critic's values instead (``[rows, cols,
1]``: the value head of PPO/VAPO on the final normed hidden states, which it holds as a
submodule so that a sharding wrapper of the stage covers it).

:class:`PipelineRunner` runs a list of micro-batches through the stages with
``Schedule1F1B`` (one forward and one backward alternate once the pipeline is full, so
stage ``s`` keeps at most ``pp - s`` micro-batches' activations), or forward only
(``Schedule.eval``) for log-probs. 1F1B needs at least ``pp`` micro-batches: a call with
fewer (a small mini-batch, many data-parallel ranks) is padded with copies of its last
micro-batch whose loss is zero (correct, at the cost of the padded passes; give each
data-parallel rank at least ``pp`` micro-batches to avoid them: a smaller
``algorithm.micro_batch_size``). The schedule's micro-batches must share one shape, so
the runner pads every micro-batch of a call to the largest one (extra rows are whole
sequences of padding, extra columns padding the attention mask hides; neither reaches
the loss). Its loss function hands each micro-batch's logits to the learner, which
computes the same loss as without pipelining (``scale_grads=False``: the learner's loss
is already normalised by the token count of the whole mini-batch). A new stage and
schedule are built per call: their buffers are sized by shape inference, and the shapes
change every step. The schedule's set-up clears the gradients of FSDP-wrapped modules, so
:meth:`PipelineRunner.run` keeps those an earlier run of the same step left (the
critic's passes, before the policy's) and adds them back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from agentgym.trainers.critic import HEAD
from agentgym.trainers.parallel.tensor_parallel import decoder_layers


class _Gone(nn.Module):
    """What replaces a module another pipeline stage holds (it must not be called)."""

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("this module lives on another pipeline stage")


def cut_stage(lm: nn.Module, layers: range) -> None:
    """Keep ``layers`` (and the embedding / final norm and head when this is the first /
    last stage) in ``lm``, a Hugging Face causal LM; drop the rest."""
    root, all_layers = decoder_layers(lm)
    first, last = layers.start == 0, layers.stop == len(all_layers)
    for i in range(len(all_layers)):
        if i not in layers:
            all_layers[i] = _Gone()
    if not first:
        root.embed_tokens = _Gone()
    if not last:
        root.norm = _Gone()
        lm.lm_head = _Gone()


class StageModule(nn.Module):
    """One stage of a (cut) Hugging Face causal LM (see the module docstring)."""

    def __init__(self, lm: nn.Module, layers: range) -> None:
        super().__init__()
        root, all_layers = decoder_layers(lm)
        self.first, self.last = layers.start == 0, layers.stop == len(all_layers)
        self.config = lm.config
        self.embed = root.embed_tokens if self.first else None
        self.blocks = nn.ModuleList([all_layers[i] for i in layers])
        self.rotary = root.rotary_emb
        self.norm = root.norm if self.last else None
        self.head = lm.lm_head if self.last else None
        #: the critic's value head (:data:`~agentgym.trainers.critic.HEAD`), last stage only
        self.value_head = getattr(lm, HEAD, None) if self.last else None
        #: the last stage returns values, not logits (the critic's passes)
        self.values_out = False

    def forward(
        self, x: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor
    ) -> Any:
        from transformers.masking_utils import create_causal_mask

        hidden = self.embed(x) if self.first else x
        mask = create_causal_mask(
            config=self.config,
            inputs_embeds=hidden,
            attention_mask=attention_mask,
            past_key_values=None,
            position_ids=position_ids,
        )
        rope = self.rotary(hidden, position_ids)
        for block in self.blocks:
            hidden = block(
                hidden,
                attention_mask=mask,
                position_ids=position_ids,
                past_key_values=None,
                use_cache=False,
                position_embeddings=rope,
            )
        if self.last and self.values_out:
            if self.value_head is None:
                raise RuntimeError("values_out on a model without the critic's value head")
            hidden = self.norm(hidden)
            return self.value_head(hidden.to(self.value_head.weight.dtype))
        if self.last:
            logits = self.head(self.norm(hidden))
            # split over the vocabulary (loss parallelism): this rank's slice travels as a
            # plain tensor; the learner wraps it again for the loss
            return logits.to_local() if hasattr(logits, "to_local") else logits
        return hidden, attention_mask, position_ids


def stack_padded(
    seqs: Sequence[tuple[torch.Tensor, torch.Tensor, torch.Tensor]], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """Micro-batches ``(input_ids, attention_mask, position_ids)`` padded to one shape
    ``[rows, cols]`` and stacked: ``[n * rows, cols]`` each; returns them and ``rows``."""
    rows = max(s[0].shape[0] for s in seqs)
    cols = max(s[0].shape[1] for s in seqs)
    ids, att, pos = [], [], []
    for input_ids, attention, positions in seqs:
        b, length = input_ids.shape
        dev = input_ids.device
        i = torch.full((rows, cols), pad_id, dtype=input_ids.dtype, device=dev)
        a = torch.zeros((rows, cols), dtype=attention.dtype, device=dev)
        p = torch.zeros((rows, cols), dtype=positions.dtype, device=dev)
        i[:b, :length], a[:b, :length], p[:b, :length] = input_ids, attention, positions
        p[:b, length:] = positions[:, -1:]
        a[b:] = 1  # whole rows of padding: attend to themselves (no empty softmax)
        p[b:] = torch.arange(cols, device=dev)
        ids.append(i)
        att.append(a)
        pos.append(p)
    return torch.cat(ids), torch.cat(att), torch.cat(pos), rows


class PipelineRunner:
    """Runs micro-batches through this rank's stage (see the module docstring).

    Args:
        module: this rank's :class:`StageModule` (possibly sharded further).
        stage: its index; stages: the pipeline's length.
        group: the pipeline's process group; device: this rank's device.
        vocab_width: the last stage's logits width on this rank (its slice of the
            vocabulary under loss parallelism); None: the whole vocabulary.
        window: the most micro-batches one run of the schedule takes (0: all of a
            call's); a longer call runs as consecutive windows, its gradients added up.
    """

    def __init__(
        self,
        module: nn.Module,
        stage: int,
        stages: int,
        group: Any,
        device: torch.device,
        vocab_width: int | None = None,
        window: int = 0,
    ) -> None:
        self.module, self.stage, self.stages = module, stage, stages
        self.group, self.device = group, device
        self.vocab_width = vocab_width
        self.window = window

    @property
    def is_last(self) -> bool:
        return self.stage == self.stages - 1

    def _static_shapes(self, rows: int, cols: int, values: bool = False) -> dict[str, Any]:
        """Example inputs and outputs of this stage for one micro-batch (meta tensors):
        the schedule sizes its buffers from them instead of running a forward and a
        backward on uninitialised buffers to infer them (which would also call the
        loss function on garbage)."""
        cfg = self.module.config
        dtype = next(p.dtype for p in self.module.parameters() if p.is_floating_point())

        def empty(*shape: int, dt: torch.dtype) -> torch.Tensor:
            return torch.empty(shape, dtype=dt, device="meta")

        masks = (empty(rows, cols, dt=torch.long), empty(rows, cols, dt=torch.long))
        # requires_grad marks what the backward pass sends between stages
        hidden = (empty(rows, cols, cfg.hidden_size, dt=dtype).requires_grad_(), *masks)
        inputs = (empty(rows, cols, dt=torch.long), *masks) if self.stage == 0 else hidden
        width = 1 if values else (self.vocab_width or cfg.vocab_size)
        outputs = (empty(rows, cols, width, dt=dtype),) if self.is_last else hidden
        # gradients flow through the hidden states only (the masks are integers)
        grads = (empty(rows, cols, cfg.hidden_size, dt=dtype), None, None)
        return {
            "input_args": inputs,
            "output_args": outputs,
            "input_grads": (None, None, None) if self.stage == 0 else grads,
            "output_grads": (None,) if self.is_last else grads,
        }

    def run(
        self,
        seqs: Sequence[tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
        on_logits: Callable[[int, torch.Tensor], torch.Tensor],
        *,
        pad_id: int,
        backward: bool,
        values: bool = False,
    ) -> None:
        """Run ``seqs`` (one entry per micro-batch) through the pipeline.

        On the last stage ``on_logits(i, logits)`` receives micro-batch ``i``'s logits
        (``[rows, cols, V]``, padded; with ``values`` the critic's values, ``[rows, cols,
        1]``) and returns its loss; with ``backward`` the schedule back-propagates that
        loss (1F1B), otherwise it only runs forward. With a ``window``, the micro-batches
        run ``window`` at a time (every stage cuts them alike), each window's gradients
        added to the earlier ones'.
        """
        size = self.window or len(seqs)
        for start in range(0, len(seqs), size):
            part = seqs[start : start + size]

            def shifted(i: int, out: torch.Tensor, start: int = start) -> torch.Tensor:
                return on_logits(start + i, out)

            self._run_window(part, shifted, pad_id=pad_id, backward=backward, values=values)

    def _run_window(
        self,
        seqs: Sequence[tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
        on_logits: Callable[[int, torch.Tensor], torch.Tensor],
        *,
        pad_id: int,
        backward: bool,
        values: bool,
    ) -> None:
        """One run of the 1F1B schedule over ``seqs`` (:meth:`run`)."""
        from torch._subclasses.fake_tensor import is_fake
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B

        real = len(seqs)
        # 1F1B needs at least one micro-batch per stage: pad with copies whose loss is 0
        seqs = [*seqs, *[seqs[-1]] * max(0, self.stages - real)]
        ids, att, pos, rows = stack_padded(seqs, pad_id)
        ids, att, pos = ids.to(self.device), att.to(self.device), pos.to(self.device)
        n = len(seqs)
        self.module.values_out = values
        stage = PipelineStage(
            self.module,
            self.stage,
            self.stages,
            self.device,
            group=self.group,
            **self._static_shapes(rows, ids.shape[1], values),
        )

        calls = iter(range(n))  # the schedule computes the losses in micro-batch order

        def loss_fn(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
            i = next(calls) if is_fake(target) else int(target[0])  # a dry run: no values
            return on_logits(i, output) if i < real else output.sum() * 0.0

        schedule = Schedule1F1B(stage, n_microbatches=n, loss_fn=loss_fn, scale_grads=False)
        target = (
            torch.arange(n, device=self.device).repeat_interleave(rows) if self.is_last else None
        )
        args = (ids, att, pos) if self.stage == 0 else ()
        run = schedule.step if backward else schedule.eval
        # the schedule's set-up clears the gradients of FSDP-wrapped modules (it assumes a
        # first call per step): keep those of an earlier run of this step (the critic's
        # passes before the policy's) aside and add them back
        kept = {p: p.grad for p in self.module.parameters() if p.grad is not None}
        for p in kept:
            p.grad = None
        try:
            run(*args, target=target, losses=[] if self.is_last else None, return_outputs=False)
        finally:
            self.module.values_out = False
            for p, g in kept.items():
                p.grad = g if p.grad is None else p.grad + g
