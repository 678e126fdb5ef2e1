"""The memory plan in closed form, fast enough to size thousands of layouts.

:func:`~agentgym.plan.plans.plan_lora` walks every layer and weight matrix of
every stage for one layout: right for one answer, too slow for a search. Here the same
arithmetic is regrouped: per-stage parameter sums (:func:`~.flops.layer_sums`) and
per-layer activation counts are computed once, and a layout's memory is a few
multiplications on them. The numbers equal ``plan_lora``'s (a test checks them on
random layouts), so a layout the search picks shows the same table ``agentgym plan``
prints.

The split that makes a search cheap: for one GPU, the peak of a LoRA layout is
``(1 + fragmentation) * max(train + kept, both + rollout) + constants``, where ``train``
and ``both`` (what is live in the training phase, and in both phases) depend only on the
training layout, and ``rollout`` (``kept`` when the engine never sleeps) only on the
engine's. :class:`TrainMemory` and :class:`RolloutMemory` hold those halves.

Full fine-tuning is sized here too, with a Megatron-style layout (bf16 weights split by
TP/EP/PP, fp32 main gradients, fp32 master weights and Adam moments sharded by the
distributed optimizer over the replicas of each weight), which ``plan_full_finetune``
(ZeRO-3 only) does not cover.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from agentgym.generation import stage_ranges
from agentgym.plan.architecture import (
    Architecture,
    LoraSpec,
    trained_adapter_elems,
)
from agentgym.plan.flops import layer_sums
from agentgym.plan.memory import (
    COMM_BUFFERS_GIB,
    CUDA_CONTEXT_GIB,
    FRAGMENTATION,
    GIB,
    ROLLOUT_WORKSPACE_GIB,
    layer_activation_elems,
    layer_saved_elems,
    loss_head_bytes,
    mask_bytes,
    pipeline_bytes,
)
from agentgym.plan.specs import DTYPE_BYTES, ParallelSpec, RolloutSpec, TrainSpec


@dataclass(frozen=True)
class TrainMemory:
    """GiB on the fullest GPU, training side: live in training, and live in both phases."""

    train: float
    both: float


@dataclass(frozen=True)
class RolloutMemory:
    """GiB of the engine on its fullest GPU, and whether it stays during training."""

    gib: float
    kept: bool


def peak_gib(train: TrainMemory, rollout: RolloutMemory | None) -> float:
    """The per-GPU peak of a layout: both halves, constants and the fragmentation reserve."""
    r = rollout.gib if rollout is not None else 0.0
    kept = r if rollout is not None and rollout.kept else 0.0
    tensor = max(train.train + kept, train.both + r)
    return tensor * (1 + FRAGMENTATION) + CUDA_CONTEXT_GIB + COMM_BUFFERS_GIB


@lru_cache(maxsize=65536)
def _stage_acts(
    arch: Architecture,
    start: int,
    stop: int,
    lora: LoraSpec | None,
    seq: int,
    flash: bool,
    act_b: float = 4.0,
    tp: int = 1,
) -> tuple[float, float]:
    """(largest peak of a recomputed layer, sum of what the layers save) per token on one
    of ``tp`` GPUs."""
    shape = {"seq_len": seq, "flash_attention": flash, "act_bytes": act_b, "tp": tp}
    elems = [layer_activation_elems(arch, i, lora, **shape) for i in range(start, stop)]
    saved = [layer_saved_elems(arch, i, lora, **shape) for i in range(start, stop)]
    return max(elems), sum(saved)


_stage_lora = lru_cache(maxsize=8192)(trained_adapter_elems)


def _weights(
    arch: Architecture,
    start: int,
    stop: int,
    *,
    first: bool,
    last: bool,
    tp: int,
    ep: int,
    lin_b: float,
    other_b: float,
) -> tuple[float, float]:
    """(dense, expert) bytes of base weights on one GPU of a stage (as stage_weight_bytes)."""
    s = layer_sums(arch, start, stop)
    nkv = arch.num_key_value_heads
    kv_split = min(tp, nkv) if nkv else tp
    dense = (s.split / tp + s.replicated + s.kv / kv_split) * lin_b + s.small * other_b
    emb = arch.vocab_size * arch.hidden_size / tp
    if first:
        dense += emb * other_b
    if last:
        dense += (arch.hidden_size + (0 if arch.tie_word_embeddings and first else emb)) * other_b
    return dense, s.experts / ep * lin_b


def train_memory(
    arch: Architecture,
    *,
    lora: LoraSpec | None,
    parallel: ParallelSpec,
    train: TrainSpec,
    base_dtype: str,
) -> TrainMemory:
    """The training half of a layout's memory (``lora=None``: a full fine-tune)."""
    tp, ep, pp, dp = parallel.tp, parallel.ep, parallel.pp, parallel.dp
    full = lora is None
    dtype = "bf16" if full else base_dtype
    lin_b = DTYPE_BYTES[dtype]
    other_b = DTYPE_BYTES["fp32" if dtype == "fp32" else "bf16"]
    act_b = DTYPE_BYTES[train.activation_dtype]
    lora_b, grad_b = DTYPE_BYTES[train.lora_dtype], DTYPE_BYTES[train.grad_dtype]
    master_b = 0.0 if train.lora_dtype == "fp32" else 4.0
    tokens = train.micro_batch_size * train.seq_len
    sp = tp if parallel.sequence_parallel else 1
    expert_replicas = tp * dp // ep
    micro_batches = train.micro_batches(pp, dp)
    best_train = best_both = 0.0
    for s, layers in enumerate(stage_ranges(arch.num_layers, pp, key="pp")):
        first, last = s == 0, s == pp - 1
        dense_w, expert_w = _weights(
            arch,
            layers.start,
            layers.stop,
            first=first,
            last=last,
            tp=tp,
            ep=ep,
            lin_b=lin_b,
            other_b=other_b,
        )
        if full:  # every weight trains: fp32 main grads, fp32 master + 2 Adam moments
            d, e = dense_w / lin_b, expert_w / lin_b
            grads_per, opt_per, param_per = 4.0, 12.0, lin_b
            base = 0.0
        else:
            d, e = _stage_lora(arch, lora, layers.start, layers.stop, tp, ep)
            grads_per, opt_per, param_per = grad_b, master_b + 8.0, lora_b
            base = dense_w + expert_w

        def zero(stage_min: int, d: float = d, e: float = e) -> float:
            if parallel.zero_stage >= stage_min:
                return d / dp + e / expert_replicas
            return d + e

        params = zero(3) * param_per
        grads = zero(2) * grads_per
        opt = zero(1) * opt_per
        in_flight = min(pp - s, micro_batches)
        largest, total = _stage_acts(
            arch, layers.start, layers.stop, lora, train.seq_len, train.flash_attention, act_b,
            tp,
        )  # fmt: skip
        kept = len(layers) * arch.hidden_size / sp
        if not train.activation_checkpointing:
            kept += total
        boundary = in_flight * kept * tokens * act_b
        work = largest * tokens * act_b
        buffers, outputs = pipeline_bytes(
            stage=s, stages=pp, micro_batches=micro_batches, tokens=tokens,
            hidden=arch.hidden_size, act_bytes=act_b,
        )  # fmt: skip
        boundary += buffers + outputs + mask_bytes(
            in_flight=in_flight, rows=train.micro_batch_size, seq_len=train.seq_len,
            act_bytes=act_b,
        )  # fmt: skip
        if base_dtype == "int4" and not full:  # one layer dequantized to bf16
            work += 2.0 * max(_int4_layer(arch, i, tp, ep) for i in layers)
        loss = loss_head_bytes(tokens=tokens, vocab=arch.vocab_size, tp=tp, act_bytes=act_b)
        loss = loss if last else 0.0
        both = base + params + opt
        best_both = max(best_both, both)
        best_train = max(best_train, both + grads + boundary + max(work, loss))
    return TrainMemory(train=best_train / GIB, both=best_both / GIB)


@lru_cache(maxsize=65536)
def _int4_layer(arch: Architecture, index: int, tp: int, ep: int) -> float:
    s = layer_sums(arch, index, index + 1)
    return (s.split + s.kv) / tp + s.replicated + s.experts / ep


def rollout_memory(
    arch: Architecture, lora: LoraSpec | None, rollout: RolloutSpec, weight_dtype: str
) -> RolloutMemory:
    """The engine half of a layout's memory, as ``rollout_items`` counts it."""
    lin_b = DTYPE_BYTES[weight_dtype]
    other_b = DTYPE_BYTES["fp32" if weight_dtype == "fp32" else "bf16"]
    if arch.attention == "mla":
        per_token_layer = arch.kv_lora_rank + arch.qk_rope_head_dim
    else:
        per_token_layer = 2 * arch.head_dim * max(1.0, arch.num_key_value_heads / rollout.tp)
    kv_layer = (
        rollout.max_num_seqs
        * rollout.max_model_len
        * per_token_layer
        * DTYPE_BYTES[rollout.kv_cache_dtype]
    )
    stages = stage_ranges(arch.num_layers, rollout.pp, key="pp")
    best = (-1.0, 0.0, 0.0)
    for s, layers in enumerate(stages):
        dense, expert = _weights(
            arch,
            layers.start,
            layers.stop,
            first=s == 0,
            last=s == len(stages) - 1,
            tp=rollout.tp,
            ep=rollout.ep,
            lin_b=lin_b,
            other_b=other_b,
        )
        weights = dense + expert
        if lora is not None:
            served = replace(lora, critic_r=0)  # the engine holds the policy's adapter only
            d, e = _stage_lora(arch, served, layers.start, layers.stop, rollout.tp, rollout.ep)
            weights += 2.0 * (d + e)
        kv = kv_layer * len(layers)
        if weights + kv > best[0]:
            best = (weights + kv, weights, kv)
    gib = best[0] / GIB + ROLLOUT_WORKSPACE_GIB
    return RolloutMemory(gib=gib, kept=rollout.sleep_level == 0)
