"""The memory model: bytes of each kind of tensor on one GPU, stage by stage.

Building blocks of :mod:`.plans`: the base weights one GPU of a stage holds
(:func:`stage_weight_bytes`; layers split into stages as the trainer splits them,
:func:`agentgym.trainers.stage_ranges`), the activations of one recomputed layer per token
(:func:`layer_activation_elems`), the rollout engine's weights, adapter and KV cache
(:func:`rollout_items`), full fine-tuning's sharded states and the per-GPU constants. Results are :class:`LineItem` records in GiB (2**30 bytes),
each tagged with the phase of the all-sync loop it is live in.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from agentgym.generation import stage_ranges
from agentgym.plan.architecture import (
    Architecture,
    Linear,
    LoraSpec,
    layer_linears,
    layer_small_params,
    lora_linears,
    lora_params,
)
from agentgym.plan.specs import DTYPE_BYTES, RolloutSpec

GIB = float(2**30)

#: explicit per-GPU constants (GiB) for what is not a tensor the planner can size
CUDA_CONTEXT_GIB = 0.75  # CUDA context, kernels, cuBLAS workspaces (one process per GPU)
COMM_BUFFERS_GIB = 1.0  # NCCL communicator buffers for TP/EP/PP/DP groups
ROLLOUT_WORKSPACE_GIB = 2.0  # vLLM forward activations, sampler, CUDA graphs
FRAGMENTATION = 0.10  # caching-allocator reserve, as a fraction of the tensor bytes


@dataclass(frozen=True)
class LineItem:
    """One kind of memory on one GPU. ``phase``: both, train or rollout."""

    name: str
    gib: float
    phase: Literal["both", "train", "rollout"]
    note: str = ""


def weight_elems(lin: Linear, tp: int, ep: int) -> float:
    """Elements of one weight held by one GPU."""
    if lin.group == "experts":
        return lin.params / ep
    if lin.split == "rep":
        return lin.params
    return lin.params / tp


def kv_heads_per_rank(arch: Architecture, tp: int) -> float:
    """GQA KV heads one TP rank caches (at least one whole head)."""
    return max(1.0, arch.num_key_value_heads / tp)


def stage_weight_bytes(
    arch: Architecture,
    layers: Iterable[int],
    *,
    first: bool,
    last: bool,
    tp: int,
    ep: int,
    linear_bytes: float,
    other_bytes: float,
    dense_linear_bytes: float | None = None,
) -> float:
    """Bytes of base weights one GPU of a stage holds (``dense_linear_bytes``: of the
    Linears other than the routed experts, where they differ)."""
    total = 0.0
    for index in layers:
        for lin in layer_linears(arch, index):
            lin_bytes = linear_bytes
            if dense_linear_bytes is not None and lin.group != "experts":
                lin_bytes = dense_linear_bytes
            elems = weight_elems(lin, tp, ep)
            if (
                arch.attention == "gqa"
                and lin.name in ("k_proj", "v_proj")
                and tp > arch.num_key_value_heads
            ):
                elems = lin.params / arch.num_key_value_heads  # one whole KV head per rank
            total += elems * lin_bytes
        total += layer_small_params(arch, index) * other_bytes
    emb = arch.vocab_size * arch.hidden_size / tp
    if first:
        total += emb * other_bytes
    if last:
        total += (
            arch.hidden_size + (0 if arch.tie_word_embeddings and first else emb)
        ) * other_bytes
    return total


def _layer_terms(
    arch: Architecture,
    index: int,
    lora: LoraSpec | None,
    *,
    seq_len: int,
    flash_attention: bool,
    act_bytes: float = 4.0,
    tp: int = 1,
) -> tuple[float, float, float, float]:
    """Values per token of layer ``index`` on one GPU of ``tp`` tensor-parallel ranks: what
    autograd saves in its attention block and in its MLP block, and the gradients live
    while each block runs its backward.

    Counted from what autograd saves in a PyTorch layer (checked against
    ``saved_tensors_hooks`` on the tiny DeepSeek-V3, tests/trainers/test_parallel_plan.py).
    A frozen Linear saves nothing (its weight needs no gradient, its output is not needed);
    an adapted one saves its input and the rank-r intermediate; with ``lora=None`` (full
    fine-tuning) every Linear saves its input. A norm with a frozen weight saves its input
    and 1/rms (MLA's key/value norm: the whole down-projection output its input is a slice
    of); with activations narrower than fp32 (``act_bytes`` < 4) it saves the fp32 copies
    of both instead, not its input (Hugging Face's RMSNorm computes in fp32; measured on
    an H200 in bf16, tests/trainers/test_parallel_activations.py). Attention saves q, k,
    v, the output and the log-sum-exp (plus the probabilities without a fused kernel);
    SwiGLU saves gate, up and act. A MoE layer saves its router
    scores and, per routed copy of a token, the dispatched input, gate/up/act/product, the
    expert output as it comes back and once weighted, and the routing weight (the
    unmerged adapter: ``x W + (x A) B``, no merged weight). The layer's input tensor is a
    pipeline boundary and is counted there, not here.

    Under tensor parallelism only what the heads, the MLP's intermediate and the routed
    experts' tokens carry is split (``/ tp``: the trainer splits a MoE layer's tokens over
    the tp ranks before the dispatch); the hidden-width values (norms, the inputs of the
    column-parallel and replicated Linears, MLA's latents, the router's scores, the
    rank-r intermediates) are whole on every rank: the trainer runs no sequence
    parallelism inside a layer (measured by the 671B dry run, docs/plan.md).
    """
    h, nh = arch.hidden_size, arch.num_attention_heads
    adapted = {lin.name for lin in lora_linears(arch, index, lora)} if lora else None
    n_lora = len(adapted) if adapted is not None else 0

    def saves_input(*names: str) -> bool:
        return adapted is None or any(n in adapted for n in names)

    up = 4.0 / act_bytes  # an fp32 value in activation units

    def norm(width: int) -> float:
        """An RMSNorm: its input and 1/rms; narrower activations: their fp32 copies
        instead (the norm computes in fp32 and keeps only those; measured on an H200)."""
        return width + 1.0 if act_bytes >= 4.0 else up * (width + 1.0)

    # attention block (the layer's input itself is counted as the boundary)
    att = norm(h) - h
    if arch.attention == "gqa":
        q, kv = nh * arch.head_dim, arch.num_key_value_heads * arch.head_dim
        att += h * saves_input("q_proj", "k_proj", "v_proj")
        att += (2 * q + 2 * kv + nh) / tp  # rotated q, k; v; output; log-sum-exp
        att_grad = (2 * q + 2 * kv) / tp
    else:
        qk, v = nh * arch.qk_head_dim, nh * arch.v_head_dim
        att += h * saves_input("q_a_proj", "q_proj", "kv_a_proj_with_mqa")
        if arch.q_lora_rank:
            att += norm(arch.q_lora_rank) + arch.q_lora_rank * saves_input("q_b_proj")
        att += norm(arch.kv_lora_rank) + arch.qk_rope_head_dim
        att += arch.kv_lora_rank * saves_input("kv_b_proj")
        att += (2 * qk + 2 * v + nh) / tp  # q, k (rope included), v, output, log-sum-exp
        att_grad = (2 * qk + 2 * v) / tp
    if not flash_attention:
        att += nh * seq_len / tp  # softmax probabilities
        att_grad += 2 * nh * seq_len / tp  # their gradient and the softmax backward temporary
    # MLP block
    mlp = norm(h)  # the norm of the attention's residual sum
    mlp += h * saves_input("gate_proj", "up_proj")
    if arch.is_moe_layer(index):
        k, i, e = arch.num_experts_per_tok, arch.moe_intermediate_size, arch.n_routed_experts
        mlp += 2 * e + 4 * k  # router scores, top-k weights and indices
        mlp += k * (h + 4 * i + 2 * h + 1) / tp
        mlp_grad = k * (4 * i + h) / tp
        if arch.n_shared_experts:
            s = arch.n_shared_experts * i
            mlp += (3 * s + s * saves_input("down_proj")) / tp
            mlp_grad = max(mlp_grad, 4 * s / tp + h)
    else:
        i = arch.intermediate_size
        mlp += (3 * i + i * saves_input("down_proj")) / tp
        mlp_grad = 4 * i / tp + h
    if lora is not None:
        per_token = sum(lin.per_token for lin in lora_linears(arch, index, lora))
        mlp += lora.r * (per_token - n_lora)  # assign all rank-r values to the blocks
        att += lora.r * n_lora
    return att, mlp, att_grad, mlp_grad


def layer_activation_elems(
    arch: Architecture,
    index: int,
    lora: LoraSpec | None,
    *,
    seq_len: int,
    flash_attention: bool = True,
    act_bytes: float = 4.0,
    tp: int = 1,
) -> float:
    """Peak values per token on one of ``tp`` GPUs while one recomputed layer runs its
    backward (:func:`_layer_terms`): backward runs MLP first, then attention; the peak is
    the larger of (attention saved + MLP saved + MLP gradients) and (attention saved +
    attention gradients)."""
    att, mlp, att_grad, mlp_grad = _layer_terms(
        arch, index, lora, seq_len=seq_len, flash_attention=flash_attention,
        act_bytes=act_bytes, tp=tp,
    )  # fmt: skip
    return max(att + mlp + mlp_grad, att + att_grad)


def layer_saved_elems(
    arch: Architecture,
    index: int,
    lora: LoraSpec | None,
    *,
    seq_len: int,
    flash_attention: bool = True,
    act_bytes: float = 4.0,
    tp: int = 1,
) -> float:
    """Values per token that layer ``index`` keeps for the backward pass on one of ``tp``
    GPUs when it is not recomputed (:func:`_layer_terms`, its input not included)."""
    att, mlp, _, _ = _layer_terms(
        arch, index, lora, seq_len=seq_len, flash_attention=flash_attention,
        act_bytes=act_bytes, tp=tp,
    )  # fmt: skip
    return att + mlp


def pipeline_bytes(
    *, stage: int, stages: int, micro_batches: int, tokens: int, hidden: int, act_bytes: float
) -> tuple[float, float]:
    """(receive buffers, stage outputs kept) in bytes on one GPU of pipeline stage
    ``stage`` while the 1F1B schedule runs ``micro_batches`` micro-batches of ``tokens``
    tokens in one call (the trainer's :class:`~agentgym.trainers.parallel.pipeline.PipelineRunner`).

    PyTorch's ``PipelineStage`` allocates, when the schedule starts, one buffer per
    micro-batch of the call for what it receives: the previous stage's hidden states
    (every stage but the first) and the next stage's gradient of them (every stage but
    the last), ``[tokens, hidden]`` each, whole (not split over TP), held until the call
    ends; and each stage but the last keeps its output for every micro-batch in flight
    until that micro-batch's backward (measured by the 671B dry run, docs/plan.md).
    """
    if stages <= 1:
        return 0.0, 0.0
    one = tokens * hidden * act_bytes
    kinds = int(stage > 0) + int(stage < stages - 1)
    in_flight = min(stages - stage, micro_batches)
    outputs = in_flight * one if stage < stages - 1 else 0.0
    return kinds * micro_batches * one, outputs


def loss_head_bytes(*, tokens: int, vocab: int, tp: int, act_bytes: float) -> float:
    """Bytes of the last stage's loss on one GPU, for its ``1 / tp`` slice of the
    vocabulary: the head's logits in the activation dtype and five fp32 copies of them
    (the loss's fp32 cast, the log-sum-exp's exponentials kept for the backward pass, and
    the entropy's log-probabilities, their exponentials and product); measured by the
    671B dry run (docs/plan.md), where the fp32 copies cover the reply's tokens only:
    counted here for all ``tokens``."""
    logits = tokens * vocab / tp
    return logits * act_bytes + 5 * logits * 4.0


def mask_bytes(*, in_flight: int, rows: int, seq_len: int, act_bytes: float) -> float:
    """Bytes of the causal masks Hugging Face's SDPA attention builds for padded
    micro-batches: a ``[rows, 1, T, T]`` boolean mask per micro-batch in flight (each
    checkpointed layer's recompute holds its micro-batch's), and the additive
    ``act_bytes`` mask SDPA converts it to in the layer being recomputed (the fused
    kernels take no boolean mask). A batch without padding needs none on a GPU; the
    trainer pads each call's micro-batches to the longest, so nearly every one has some.
    """
    square = rows * seq_len * seq_len
    return in_flight * square + square * act_bytes


def full_ft_state_items(total_params: int, gpus: int) -> list[LineItem]:
    """Full fine-tuning's weights, gradients and optimizer states, ZeRO-3 over ``gpus``."""
    per = total_params / gpus
    return [
        LineItem("base weights", per * 2 / GIB, "both", "bf16, ZeRO-3 over all GPUs"),
        LineItem("gradients", per * 2 / GIB, "train", "bf16, ZeRO-3 over all GPUs"),
        LineItem(
            "optimizer states", per * 12 / GIB, "both", "fp32 master + 2 Adam moments, ZeRO-3"
        ),
    ]


def phase_total(items: list[LineItem], phase: str) -> float:
    """GiB live during ``phase`` (its own items and those of both phases)."""
    return sum(i.gib for i in items if i.phase in ("both", phase))


def overhead_items(tensor_gib: float) -> list[LineItem]:
    """The per-GPU constants and the fragmentation reserve on ``tensor_gib`` of tensors."""
    return [
        LineItem("CUDA context", CUDA_CONTEXT_GIB, "both", "constant"),
        LineItem("NCCL buffers", COMM_BUFFERS_GIB, "both", "constant"),
        LineItem(
            "fragmentation reserve",
            FRAGMENTATION * tensor_gib,
            "both",
            f"{FRAGMENTATION:.0%} of the tensor bytes",
        ),
    ]


def rollout_items(
    arch: Architecture, lora: LoraSpec | None, rollout: RolloutSpec | None, base_dtype: str
) -> list[LineItem]:
    """The rollout engine's memory on its worst GPU (largest stage, embedding and head)."""
    if rollout is None or rollout.engine != "vllm":
        return []
    dtype = rollout.weight_dtype or base_dtype
    lin_b, other_b = DTYPE_BYTES[dtype], DTYPE_BYTES["fp32" if dtype == "fp32" else "bf16"]
    if arch.attention == "mla":
        per_token_layer = arch.kv_lora_rank + arch.qk_rope_head_dim  # replicated over TP
    else:
        per_token_layer = 2 * arch.head_dim * kv_heads_per_rank(arch, rollout.tp)
    kv_per_layer = (
        rollout.max_num_seqs
        * rollout.max_model_len
        * per_token_layer
        * DTYPE_BYTES[rollout.kv_cache_dtype]
    )
    candidates = []
    stages = stage_ranges(arch.num_layers, rollout.pp, key="pp")
    for s, layers in enumerate(stages):
        weights = stage_weight_bytes(
            arch,
            layers,
            first=s == 0,
            last=s == len(stages) - 1,
            tp=rollout.tp,
            ep=rollout.ep,
            linear_bytes=lin_b,
            other_bytes=other_b,
        )
        if lora is not None:  # the hot-swapped adapter, bf16
            weights += 2.0 * sum(
                lora_params(lin, lora.r) / rollout.ep
                if lin.group == "experts"
                else lora_params(lin, lora.r, rollout.tp)
                for i in layers
                for lin in lora_linears(arch, i, lora)
            )
        candidates.append((weights + kv_per_layer * len(layers), weights, len(layers)))
    _, weights, n_layers = max(candidates)
    kv = kv_per_layer * n_layers
    phase_w = "both" if rollout.sleep_level == 0 else "rollout"
    phase_kv = "both" if rollout.sleep_level == 0 else "rollout"
    return [
        LineItem(
            "rollout weights",
            weights / GIB,
            phase_w,
            f"{dtype}, tp={rollout.tp} ep={rollout.ep} pp={rollout.pp} (+ adapter)",
        ),
        LineItem(
            "rollout KV cache",
            kv / GIB,
            phase_kv,
            f"{rollout.max_num_seqs} seqs x {rollout.max_model_len} tokens x {n_layers} layers",
        ),
        LineItem("rollout workspace", ROLLOUT_WORKSPACE_GIB, phase_w, "constant"),
    ]


def gib(n_bytes: float) -> float:
    """Bytes to GiB."""
    return n_bytes / GIB
