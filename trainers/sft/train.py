"""The SFT loop: cross-entropy on the reply tokens as a loss function on the learner.

The loss (:class:`SFTLoss`) is cross-entropy on the reply tokens only (plus the
end-of-sequence token), summed and divided by the batch's reply token count; it runs on
the trainer's :class:`~agentgym.trainers.learner.Learner` (``output="tokens"``), whose
optimizer (AdamW), clipping and step every training loop shares, with the learning rate
of ``train.schedule`` (:mod:`agentgym.trainers.schedule`: warm-up, then cosine,
warm-up-stable-decay or constant) set at each step. The result is a full Hugging Face
model directory (``<output_dir>/model``, with the tokenizer) that ``agentgym train``
loads with ``model.path``. On the way, a checkpoint every ``train.save_every`` steps
and after the last (:mod:`.checkpoints`), from which ``--resume`` continues to the same
weights as a run that was never stopped; at the end ``plots/`` and a summary
(:mod:`.report`).

Padding is what a step wastes most: with random batches of line-dropped solutions a
third of a padded batch was padding. Two ways to spend less on it:

* ``train.group_by_length: k`` (:func:`epoch_batches`): batches are drawn from groups of
  ``k`` batches sorted by length, so a batch holds examples of similar length (this
  changes which examples share a batch, not what a batch's step computes);
* ``train.length_groups: m`` (:func:`~agentgym.trainers.token_rows.token_rows`): a batch
  is sorted by length and run as ``m`` micro-batches, each padded to its own longest
  example, their gradients
  accumulated (the same gradient as one padded batch, up to float rounding; more,
  smaller operations).

On the quickstart's batches (``python -m agentgym.benchmarks.perf.sft``, 2 threads, one
run): the step as it was 1.0, the lean step below alone 1.13x faster, with
``length_groups: 4`` 1.44x (padding 34% -> 10%), with ``group_by_length: 8`` 1.77x
(padding 8%), both 1.48x (micro-batches of batches that are already even cost more than
the padding they save).

And in every step (:func:`~agentgym.trainers.token_rows.token_rows`,
:func:`~agentgym.trainers.replies.labelled_logits`):
rows are padded on the right and run without an attention mask (under causal attention
no real token sees the padding after it, and attention takes its mask-free causal path),
and the output projection and the loss run only at the positions that have a label.
"""

from __future__ import annotations

import asyncio
import math
import os
import random
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from agentgym import Progress, SamplingParams, derive_seed, save_config
from agentgym.generation import HFEngine, encode_completion, encode_prompt, place_model, save_model
from agentgym.health import RunLock, RunStopped
from agentgym.trainers.batch import TokenRows
from agentgym.trainers.checkpointer import Checkpointer, checkpoint_step, find_checkpoint
from agentgym.trainers.config import AlgorithmConfig
from agentgym.trainers.device import autocast
from agentgym.trainers.evaluation import evaluate_async
from agentgym.trainers.learner import Learner
from agentgym.trainers.logging import JsonlWriter, read_jsonl, start_tracking
from agentgym.trainers.models import apply_lora, build_model_and_tokenizer
from agentgym.trainers.replies import labelled_logits
from agentgym.trainers.runtime import setup_torch
from agentgym.trainers.sft.checkpoints import DataOrder, checkpoints_dir
from agentgym.trainers.sft.config import SFTConfig, SFTTrain
from agentgym.trainers.sft.data import Example, collect_examples, example_corpus
from agentgym.trainers.sft.report import plot_sft, write_sft_summary
from agentgym.trainers.stopping import PoliteSignals
from agentgym.trainers.token_rows import Item, token_rows
from agentgym.trainers.tracking import close_tracking


def build_model_and_examples(cfg: SFTConfig) -> tuple[torch.nn.Module, Any, list[Example]]:
    """The model, its tokenizer, and the SFT examples collected with that tokenizer.

    The examples are collected with the tokenizer's token counter (see
    :func:`collect_examples`). A preset whose tokenizer learns a BPE vocabulary
    (``model.tokenizer_vocab_size``) learns it from a first collection made with the envs'
    default counter, since the tokenizer does not exist yet; the examples are then
    collected again with the learned tokenizer, so where a token budget decides the turns
    (memory summaries) they can differ from those of the first collection.
    """
    model, tok = build_model_and_tokenizer(
        cfg.model, corpus=lambda: example_corpus(collect_examples(cfg))
    )
    return model, tok, collect_examples(cfg, tok)


def epoch_batches(
    lengths: list[int], batch_size: int, rng: random.Random, group_by_length: int = 0
) -> list[list[int]]:
    """One epoch's batches of example indices, in a random order.

    ``group_by_length=0``: a random permutation cut into batches. ``k > 0``: the
    permutation is cut into groups of ``k`` batches, each group sorted by length before
    it is cut into batches, and the batches of the epoch are shuffled (the grouping of
    Hugging Face's ``group_by_length``, with smaller groups): a batch holds examples of
    similar length, so little of it is padding, while which examples meet in a group
    is still random.
    """
    order = list(range(len(lengths)))
    rng.shuffle(order)
    if group_by_length <= 0:
        return [order[k : k + batch_size] for k in range(0, len(order), batch_size)]
    span = batch_size * group_by_length
    batches = []
    for g in range(0, len(order), span):
        group = sorted(order[g : g + span], key=lambda i: lengths[i])
        batches += [group[k : k + batch_size] for k in range(0, len(group), batch_size)]
    rng.shuffle(batches)
    return batches


def batch_stream(
    lengths: list[int],
    batch_size: int,
    seed: int,
    group_by_length: int = 0,
    *,
    start: int = 0,
) -> Iterator[list[int]]:
    """The run's batches, epoch after epoch (:func:`epoch_batches` drawing from one
    ``random.Random(seed)``), from the ``start``-th on: a run resumed at step ``start``
    replays the order up to there, so it sees the batches an uninterrupted run sees."""
    rng = random.Random(seed)
    skip = start
    while True:
        batches = epoch_batches(lengths, batch_size, rng, group_by_length)
        if skip >= len(batches):
            skip -= len(batches)
            continue
        yield from batches[skip:]
        skip = 0


@dataclass(frozen=True)
class SFTLoss:
    """Cross-entropy of one micro-batch's labelled tokens (the replies and their end
    token), summed and divided by the whole batch's count: a learner loss function on
    ``output="tokens"``. Its metric ``loss`` is a sum over micro-batches."""

    total_tokens: int

    def __call__(self, rows: TokenRows, logits: torch.Tensor) -> tuple[torch.Tensor, dict]:
        ce = torch.nn.functional.cross_entropy(logits, rows.targets, reduction="sum")
        loss = ce / self.total_tokens
        return loss, {"loss": float(loss.detach())}


def batch_loss(
    model: torch.nn.Module,
    items: list[Item],
    pad: int,
    groups: int = 1,
    *,
    backward: bool = True,
    precision: torch.dtype | None = None,
    pack_width: int = 0,
) -> float:
    """Mean cross-entropy over the reply tokens of ``items`` on a bare model (what the
    learner's SFT step computes, :func:`sft_step`; the benchmarks and tests call it);
    with ``backward`` its gradient is accumulated into the parameters. ``precision``
    (bf16) runs the forward under autocast."""
    loss_fn = SFTLoss(sum(len(r) for _, r in items))
    device = next(model.parameters()).device
    loss_sum = 0.0
    for rows in token_rows(items, pad, groups, pack_width):
        rows = rows.to(device)
        with autocast(device, precision):
            logits = labelled_logits(model, rows)
        loss, stats = loss_fn(rows, logits)
        if backward:
            loss.backward()
        loss_sum += stats["loss"]
    return loss_sum


def sft_step(learner: Learner, items: list[Item], pad: int, t: SFTTrain) -> float:
    """The forward and backward passes of one SFT step on the learner: ``items`` as
    :func:`~agentgym.trainers.token_rows.token_rows` micro-batches, :class:`SFTLoss`;
    returns the batch's mean loss."""
    loss = SFTLoss(sum(len(r) for _, r in items))
    rows = token_rows(items, pad, t.length_groups, t.pack_width)
    return learner.forward_backward(rows, loss, output="tokens").get("loss", 0.0)


def _prepare_model(cfg: SFTConfig) -> tuple[torch.nn.Module, Any, list[Example]]:
    """The placed model (with its adapter when asked), tokenizer and examples (the
    learner makes a bf16 base's trainable weights float32 masters and autocasts)."""
    model, tok, examples = build_model_and_examples(cfg)
    model = place_model(model, cfg.model)  # model.device / model.dtype, as the trainer
    if cfg.lora.enabled:
        model = apply_lora(model, cfg.lora, seed=derive_seed("lora", cfg.run.seed))
    return model, tok, examples


def _learner(cfg: SFTConfig, model: torch.nn.Module, pad: int, total_steps: int) -> Learner:
    """The one-process learner of an SFT run: AdamW (betas 0.9, 0.95) on the trainable
    weights, clipped to ``train.max_grad_norm``, at ``train.schedule``'s learning rate
    over ``total_steps`` (:attr:`SFTTrain.optim`)."""
    return Learner(
        model,
        AlgorithmConfig(),
        cfg.train.optim,
        pad_id=pad,
        lora=cfg.lora.enabled,
        total_updates=total_steps,
    )


def _report_examples(
    encoded: list[Item], tok: Any, model: torch.nn.Module, max_tokens: int
) -> None:
    """Print the examples' sizes, and a warning when replies exceed ``max_tokens``."""
    too_long = sum(len(r) > max_tokens for _, r in encoded)
    reply_lens = [len(r) for _, r in encoded]
    print(
        f"[agentgym sft] {len(encoded)} examples, reply tokens mean {sum(reply_lens) / len(reply_lens):.1f} "
        f"max {max(reply_lens)}; vocab {len(tok)}; {sum(p.numel() for p in model.parameters()):,} parameters",
        file=sys.stderr,
    )
    if too_long:
        print(
            f"[agentgym sft] warning: {too_long} replies are longer than max_tokens={max_tokens}; "
            "at evaluation they will be cut.",
            file=sys.stderr,
        )


def _evaluator(cfg: SFTConfig, policy: Any, tok: Any) -> Callable[[], dict[str, float]]:
    """A function that evaluates ``policy`` on ``cfg.envs`` and returns the metrics."""
    eval_sampling = SamplingParams(
        max_tokens=cfg.max_tokens,
        temperature=cfg.eval.temperature,
        seed=derive_seed("eval", cfg.run.seed),
    )

    def evaluate() -> dict[str, float]:
        m, _ = asyncio.run(
            evaluate_async(
                policy,
                cfg.envs,
                tok,
                num_tasks=cfg.eval.num_tasks,
                seed_start=cfg.eval.seed_start,
                sampling=eval_sampling,
                progress=cfg.run.progress,
            )
        )
        return m

    return evaluate


class _SFTRun:
    """The training part of one SFT run: the learner, the steps from where the run
    stands, a checkpoint every ``train.save_every`` steps and after the last, and a
    polite stop (:class:`~agentgym.trainers.stopping.PoliteSignals`): a first SIGTERM or
    Ctrl-C finishes the step in progress, saves a checkpoint and raises
    :class:`~agentgym.health.RunStopped`."""

    def __init__(
        self,
        cfg: SFTConfig,
        model: torch.nn.Module,
        tok: Any,
        encoded: list[Item],
        log: JsonlWriter,
    ) -> None:
        self.cfg, self.model, self.tok, self.encoded, self.log = cfg, model, tok, encoded, log
        t = cfg.train
        steps_per_epoch = math.ceil(len(encoded) / t.batch_size)
        self.total_steps = t.max_steps or max(1, int(t.epochs * steps_per_epoch))
        pad = tok.pad_token_id
        self.pad = pad if pad is not None else tok.eos_token_id
        self.learner = _learner(cfg, model, self.pad, self.total_steps)
        #: the learner, the RNGs, the step and the examples' order (:mod:`.checkpoints`)
        self.checkpoints = Checkpointer(
            checkpoints_dir(cfg.run.output_dir),
            self.learner,
            model,
            keep=cfg.run.keep_checkpoints,
            say=_sft_say,
        )
        self.checkpoints.register(
            "data_order", DataOrder(cfg, len(encoded), self.total_steps, _sft_say)
        )
        self.step = 0
        self.evaluate: Callable[[], dict[str, float]] = dict
        self.signals = PoliteSignals(self._on_signal, lambda: self.step)

    def resume(self, ckpt: Path) -> None:
        """Continue from ``ckpt``: weights, AdamW, RNG states and the step."""
        self.step = self.checkpoints.restore(ckpt)
        _say(f"[agentgym sft] resumed from {ckpt} (step {self.step} of {self.total_steps})")

    def train(self) -> None:
        """Take the steps from :attr:`step` to the last (the examples in the order of an
        uninterrupted run), each row written, checkpointed when due."""
        cfg, t = self.cfg, self.cfg.train
        lengths = [len(p) + len(r) for p, r in self.encoded]
        stream = batch_stream(
            lengths, t.batch_size, cfg.run.seed, t.group_by_length, start=self.step
        )
        progress = Progress(self.total_steps, desc="sft", start=self.step, enabled=cfg.run.progress)
        self.model.train()
        try:
            while self.step < self.total_steps:
                row = self._step(next(stream))
                if cfg.eval.every and self.step % cfg.eval.every == 0:
                    row.update(self.evaluate())
                    self.model.train()
                # the row before the checkpoint that marks the step done: a kill in
                # between redoes the step on --resume (its row is replaced)
                self.log.write(row)
                progress.update(1, {"loss": row["losses/sft"]})
                due = t.save_every and self.step % t.save_every == 0
                if due or self.signals.signum or self.step == self.total_steps:
                    self.save()
                if self.signals.signum:
                    raise self.stopped()
        finally:
            progress.close()

    def _step(self, idx: list[int]) -> dict[str, Any]:
        """One optimizer step on the examples ``idx``; returns its metrics row."""
        t = self.cfg.train
        t0 = time.monotonic()
        loss = sft_step(self.learner, [self.encoded[i] for i in idx], self.pad, t)
        stepped = self.learner.step()
        self.step += 1
        return {
            "step": self.step,
            "losses/sft": loss,
            "losses/grad_norm": stepped["grad_norm"],
            "charts/lr": stepped["lr"],
            "time/step_s": time.monotonic() - t0,
        }

    def save(self) -> Path:
        """The checkpoint of this step (atomically; the oldest beyond
        ``run.keep_checkpoints`` are pruned)."""
        return self.checkpoints.save(self.step)

    def stopped(self) -> RunStopped:
        """What a stop on a signal says (the exit status: 128 + the signal's number)."""
        name = signal.Signals(self.signals.signum).name
        where = checkpoints_dir(self.cfg.run.output_dir)
        when = (
            f"after step {self.step} of {self.total_steps}"
            if self.step < self.total_steps
            else "after the final evaluation"
        )
        stopped = RunStopped(
            f"stopped {when} on {name}; the checkpoint of step {self.step} is in {where}. "
            "Continue with the same command and --resume."
        )
        stopped.exit_code = self.signals.exit_code
        return stopped

    def _on_signal(self, _text: str) -> None:
        name = signal.Signals(self.signals.signum).name
        doing = (
            f"finishing step {self.step + 1}, then saving a checkpoint and stopping"
            if self.step < self.total_steps
            else "finishing the final evaluation, then stopping (the last step is saved)"
        )
        _say(f"[agentgym sft] {name}: {doing} (again to stop now).")


def _say(text: str) -> None:
    print(text, file=sys.stderr)


def _sft_say(text: str) -> None:
    _say(f"[agentgym sft] {text}")


def _quiet_deepspeed() -> None:
    """Name DeepSpeed's accelerator before anything imports it (``save_pretrained``
    does, through accelerate): on a machine without a GPU it otherwise warns that it
    was "unable to detect" one. The trainer's DeepSpeed learner does the same."""
    if not torch.cuda.is_available():
        os.environ.setdefault("DS_ACCELERATOR", "cpu")


def _after_logged(rows: list[dict[str, Any]], step: int) -> bool:
    """Whether the final evaluation of ``step`` is in the log already (a resumed run
    that was stopped after it)."""
    return any(r.get("step") == step and "eval/reward" in r and "losses/sft" not in r for r in rows)


def _train_and_evaluate(run: _SFTRun) -> None:
    """The evaluation before the first step, the steps, the evaluation after the last;
    a first SIGTERM / Ctrl-C stops after the step or evaluation in progress."""
    cfg = run.cfg
    with run.signals:
        if cfg.eval.at_ends and run.step == 0:
            run.log.write({"step": 0, **run.evaluate()})
        run.train()
        if cfg.eval.at_ends and not _after_logged(read_jsonl(run.log.path), run.step):
            run.log.write({"step": run.step, **run.evaluate()})
        if run.signals.signum:
            raise run.stopped()


def run_sft(cfg: SFTConfig, *, resume: bool = False) -> dict[str, Any]:
    """Run supervised fine-tuning into ``run.output_dir`` (holding its lock); returns
    the first and last held-out evaluations (``before`` / ``after``, when the run
    evaluated), ``model_dir`` and ``seconds``.

    Args:
        cfg: the run's config.
        resume: continue from the run folder's newest intact checkpoint (``--resume``;
            the run folder's rules are :func:`~agentgym.trainers.prepare_run_folder`'s).
            Without one, the run starts from step 0.

    Raises:
        RunStopped: a SIGTERM or SIGINT stopped the run after a step, with a checkpoint
            (``exit_code``: 128 + the signal's number).
    """
    _quiet_deepspeed()
    setup_torch(cfg.run.threads, cfg.run.seed)
    out = Path(cfg.run.output_dir)
    with RunLock(out).acquire(role="agentgym sft"):
        try:
            return _run_sft(cfg, out, resume)
        finally:
            close_tracking(out)  # however the run ends: what it logged is flushed


def _run_sft(cfg: SFTConfig, out: Path, resume: bool) -> dict[str, Any]:
    """:func:`run_sft` with the run folder held."""
    found = find_checkpoint(checkpoints_dir(out), _sft_say) if resume else None
    save_config(cfg, out / "config.yaml")
    # resumed: the rows after the checkpoint's step are dropped (they are redone)
    log = JsonlWriter(
        out / "metrics.jsonl", truncate_after_step=checkpoint_step(found) if found else -1
    )
    start_tracking(cfg, out, log)
    t_start = time.monotonic()

    model, tok, examples = _prepare_model(cfg)
    encoded = [
        (encode_prompt(tok, msgs), encode_completion(tok, reply)) for msgs, reply in examples
    ]
    _report_examples(encoded, tok, model, cfg.max_tokens)
    run = _SFTRun(cfg, model, tok, encoded, log)
    policy = HFEngine(model, tok, seed=cfg.run.seed).as_policy()
    try:
        run.evaluate = _evaluator(cfg, policy, tok)
        if found is not None:
            run.resume(found)  # last: it puts the RNG states back
        _train_and_evaluate(run)
    finally:
        policy.close()
    model_dir = out / "model"
    to_save = model.merge_and_unload() if cfg.lora.enabled else model
    save_model(to_save, tok, model_dir)
    if cfg.run.plots:
        plot_sft(out)  # the trackers get the plots
    results: dict[str, Any] = write_sft_summary(out)
    results["model_dir"] = str(model_dir)
    results["seconds"] = time.monotonic() - t_start
    kept = [f"{n}/" for n in ("checkpoints", "plots") if (out / n).is_dir()]
    _say(
        f"[agentgym sft] done ({results['seconds']:.0f}s): model saved to {model_dir} "
        f"(agentgym train model.path={model_dir}); also in {out}: metrics.jsonl, "
        f"{', '.join(kept)}"
    )
    return results
