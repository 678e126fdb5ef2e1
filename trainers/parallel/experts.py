"""Expert parallelism: routed experts split over ranks, tokens sent to them by all-to-all.

Transformers 5 keeps a MoE layer's routed experts as two fused 3-D parameters
(``gate_up_proj: [E, 2I, H]``, ``down_proj: [E, H, I]``) on one ``experts`` module, and
peft adapts them through ``target_parameters`` (a ``ParamWrapper`` per parameter holding
one rank-``r`` LoRA per expert: ``lora_A: [r E, in]`` with expert ``e`` in rows
``e r .. (e + 1) r``, ``lora_B: [out, r E]`` with expert ``e`` in columns ``e, E + e, ...``).

:func:`shard_experts` gives each rank of the expert group (the ``ep * tp`` ranks of a
pipeline stage, :class:`ExpertGroup`) its ``E / (ep * tp)`` experts: the base slices and,
living with them, their LoRA factors (peft's own layout for ``E_local`` experts, so
peft's wrappers, their adapter switches and the saved names stay as they are), and
replaces the ``forward`` of the outermost module (the outermost peft wrapper, or the
experts module itself) by :func:`expert_parallel_forward`:

1. with ``tp > 1`` the tokens (replicated over the tensor-parallel ranks) are split
   between those ranks (a DTensor ``Replicate -> Shard(0)`` redistribution), so each
   token is dispatched once;
2. each rank sorts its (token, expert) pairs by expert and sends each expert's tokens to
   the rank that holds it (``all_to_all_single``, with autograd: the backward pass sends
   the gradients the other way);
3. the owner runs each local expert on its tokens, the adapter unmerged:
   ``x W_e^T + s (x A_e^T) B_e^T`` (:func:`expert_linear`; the base dequantized when it is
   a torchao tensor, :mod:`.quant`), so that autograd keeps the expert's input and the
   rank-``r`` intermediate, never a merged ``W_e + s B_e A_e`` per expert (at 671B about
   2.8 GB per layer and micro-batch); the results go back the same way;
4. the results are weighted by the router and summed per token in expert order, as the
   unsplit layer does, and (``tp > 1``) gathered back over the tensor-parallel ranks.

In a dry run (fake tensors, :mod:`agentgym.trainers.dry_run`) the router's choices have no
values: the counts of step 2 are then the planner's balanced routing
(:func:`_balanced_counts`), and everything else runs as it is.

The maths is the unsplit layer's; only the order of float additions inside a matmul can
differ (tested: the multi-process run equals the one-process run to float tolerance).
:func:`gather_expert_tensor` and :func:`shard_expert_tensor` convert a parameter between
its full (peft) layout and a rank's share, for checkpoints, generation and resume.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

#: names of the fused expert parameters (transformers 5 MoE layout)
EXPERT_PARAMS = ("gate_up_proj", "down_proj")


@dataclass(frozen=True)
class ExpertGroup:
    """The ranks one stage's routed experts are split over.

    Attributes:
        group: the process group (``ep * tp`` ranks).
        size: its size; index: this rank's place in it.
        tp_mesh: the tensor-parallel mesh (tokens are split over it first), or None.
    """

    group: Any
    size: int
    index: int
    tp_mesh: Any = None


@dataclass(frozen=True)
class ExpertShard:
    """How one experts module is split: ``local`` of ``total`` experts from ``offset``."""

    total: int
    local: int
    offset: int


def find_experts(model: nn.Module) -> list[tuple[str, nn.Module, list[Any]]]:
    """Each fused-experts module with the peft ``ParamWrapper``s adapting it (outermost
    first): ``(name of the outermost module, experts module, wrappers)``."""
    try:
        from peft.tuners.lora.layer import ParamWrapper
    except ImportError:  # pragma: no cover - peft is a dependency
        ParamWrapper = ()
    found = []
    for name, module in model.named_modules():
        if isinstance(module, ParamWrapper) or not all(
            isinstance(getattr(module, p, None), nn.Parameter) and getattr(module, p).dim() == 3
            for p in EXPERT_PARAMS
        ):
            continue
        wrappers = [
            m
            for m in model.modules()
            if isinstance(m, ParamWrapper) and m.get_base_layer() is module
        ]
        wrappers.sort(key=lambda w: -_depth(w, module))
        outer = name
        if wrappers:
            outer = next(n for n, m in model.named_modules() if m is wrappers[0])
        found.append((outer, module, wrappers))
    return found


def _depth(wrapper: nn.Module, base: nn.Module) -> int:
    depth, m = 0, wrapper
    while m is not base:
        m = m.base_layer
        depth += 1
    return depth


def _b_view(b: torch.Tensor, experts: int) -> torch.Tensor:
    """peft's ``lora_B`` of fused experts, ``[out, r E]``, as ``[out, r, E]``."""
    return b.reshape(b.shape[0], -1, experts)


def shard_expert_tensor(full: torch.Tensor, kind: str, shard: ExpertShard) -> torch.Tensor:
    """This rank's share of a full expert tensor: ``kind`` is ``base`` (``[E, ...]``),
    ``lora_A`` (``[r E, in]``) or ``lora_B`` (``[out, r E]``)."""
    lo, hi = shard.offset, shard.offset + shard.local
    if kind == "base":
        return full[lo:hi].clone()
    if kind == "lora_A":
        r = full.shape[0] // shard.total
        return full[lo * r : hi * r].clone()
    view = _b_view(full, shard.total)
    return view[:, :, lo:hi].reshape(full.shape[0], -1).clone()


def gather_expert_tensor(
    local: torch.Tensor, kind: str, shard: ExpertShard, group: ExpertGroup
) -> torch.Tensor:
    """The full tensor from every rank's share (a collective over the expert group)."""
    local = local.detach().contiguous()
    parts = [torch.empty_like(local) for _ in range(group.size)]
    dist.all_gather(parts, local, group=group.group)
    return _join_expert_parts(parts, kind, shard)


def gather_expert_tensor_to(
    local: torch.Tensor, kind: str, shard: ExpertShard, group: ExpertGroup, dst: int
) -> torch.Tensor | None:
    """The full tensor on global rank ``dst`` of the expert group alone (None on the
    others, which only send their share)."""
    local = local.detach().contiguous()
    mine = dist.get_rank() == dst
    parts = [torch.empty_like(local) for _ in range(group.size)] if mine else None
    dist.gather(local, parts, dst=dst, group=group.group)
    return _join_expert_parts(parts, kind, shard) if parts is not None else None


def _join_expert_parts(parts: list[torch.Tensor], kind: str, shard: ExpertShard) -> torch.Tensor:
    """Every rank's share of an expert tensor, in group order, as the full tensor."""
    if kind in ("base", "lora_A"):
        return torch.cat(parts, dim=0)
    rows = parts[0].shape[0]
    return torch.cat([_b_view(p, shard.local) for p in parts], dim=2).reshape(rows, -1)


def shard_experts(model: nn.Module, group: ExpertGroup) -> dict[str, tuple[str, ExpertShard]]:
    """Keep this rank's experts (and their LoRA) and route tokens to the others.

    Returns:
        parameter name (in ``model``) -> (``base`` / ``lora_A`` / ``lora_B``, its shard),
        for every parameter that now holds a share of the experts.
    """
    kinds: dict[str, tuple[str, ExpertShard]] = {}
    names = {id(p): n for n, p in model.named_parameters()}
    for outer_name, experts, wrappers in find_experts(model):
        total = int(experts.gate_up_proj.shape[0])
        local = total // group.size
        shard = ExpertShard(total=total, local=local, offset=group.index * local)
        for pname in EXPERT_PARAMS:
            p = getattr(experts, pname)
            key = names[id(p)]
            setattr(
                experts,
                pname,
                nn.Parameter(
                    shard_expert_tensor(p.data, "base", shard), requires_grad=p.requires_grad
                ),
            )
            kinds[key] = ("base", shard)
        experts.num_experts = local
        for w in wrappers:
            for adapter in list(w.lora_A):
                for kind, lin in (("lora_A", w.lora_A[adapter]), ("lora_B", w.lora_B[adapter])):
                    key = names[id(lin.weight)]
                    part = shard_expert_tensor(lin.weight.data, kind, shard)
                    lin.weight = nn.Parameter(part, requires_grad=lin.weight.requires_grad)
                    if kind == "lora_A":
                        lin.out_features = part.shape[0]
                    else:
                        lin.in_features = part.shape[1]
                    kinds[key] = (kind, shard)
            w.num_experts = local
        experts._agentgym_experts = (group, shard)
        outer = model.get_submodule(outer_name) if wrappers else experts
        outer.forward = types.MethodType(expert_parallel_forward, outer)
    return kinds


def experts_and_wrappers(outer: nn.Module) -> tuple[nn.Module, dict[str, Any]]:
    """The fused-experts module at the bottom of ``outer`` (itself, or the base of a chain
    of peft ``ParamWrapper``s) and those wrappers by the parameter each adapts."""
    wrappers: dict[str, Any] = {}
    m = outer
    while hasattr(m, "parameter_name") and hasattr(m, "base_layer"):
        wrappers[m.parameter_name] = m
        m = m.base_layer
    return m, wrappers


def expert_weight(
    experts: nn.Module,
    wrappers: dict[str, Any],
    name: str,
    e: int,
    whole: dict[str, torch.Tensor] | None = None,
) -> torch.Tensor:
    """Expert ``e``'s weight ``name`` (``[out, in]``), dequantized when the stack is a
    torchao tensor (:mod:`.quant`), plus its adapter's ``s B_e A_e`` when the adapter is
    on: what peft's fold ``W + s B A`` gives for that expert, computed for one expert
    instead of the whole stack (peft's layout of the factors: ``lora_A: [r E, in]``,
    expert ``e`` in rows ``e r .. (e + 1) r``; ``lora_B: [out, r E]``, expert ``e`` in
    columns ``e, E + e, ...``). ``whole``: the stacks already dequantized."""
    w = _expert_base(experts, name, e, whole)
    for a_e, b_e, scale in _expert_factors(wrappers.get(name), e):
        w = w + (b_e @ a_e).to(w.dtype) * scale
    return w


def _expert_base(
    experts: nn.Module, name: str, e: int, whole: dict[str, torch.Tensor] | None
) -> torch.Tensor:
    """Expert ``e``'s frozen weight ``name`` (a view of its stack), dequantized."""
    if whole is not None:
        return whole[name][e]
    w = getattr(experts, name)[e]
    return w if type(w) is torch.Tensor else w.dequantize()


def _expert_factors(wrapper: Any, e: int) -> Iterator[tuple[torch.Tensor, torch.Tensor, float]]:
    """Expert ``e``'s slices ``(A_e, B_e, scaling)`` of each active adapter of ``wrapper``
    (views of the adapter's columns ``e, E + e, ...``); none when it adds nothing."""
    if wrapper is None or wrapper.disable_adapters or wrapper.merged:
        return
    for adapter in wrapper.active_adapters:
        if adapter not in wrapper.lora_A:
            continue
        n = wrapper.num_experts
        a = wrapper.lora_A[adapter].weight
        b = wrapper.lora_B[adapter].weight
        yield (
            a.reshape(n, -1, a.shape[-1])[e],
            b.reshape(b.shape[0], -1, n)[:, :, e],
            wrapper.scaling[adapter],
        )


def expert_linear(
    x: torch.Tensor,
    experts: nn.Module,
    wrappers: dict[str, Any],
    name: str,
    e: int,
    whole: dict[str, torch.Tensor] | None = None,
) -> torch.Tensor:
    """``x`` through expert ``e``'s weight ``name`` with its adapter unmerged:
    ``x W_e^T + s (x A_e^T) B_e^T``, the same maths as :func:`expert_weight`'s fold but
    without a merged ``[out, in]`` weight that autograd would keep for the backward pass
    (the base slice is a view of the frozen stack; the factors' slices are views of the
    adapter). ``whole``: the stacks already dequantized (:func:`dequantized_stacks`)."""
    stack = getattr(experts, name) if whole is None else None
    if stack is not None and type(stack.data) is not torch.Tensor and torch.is_grad_enabled():
        y = _QuantizedLinear.apply(x, stack[e])  # keeps the fp8 view, not a bf16 copy
    else:
        y = F.linear(x, _expert_base(experts, name, e, whole))
    for a_e, b_e, scale in _expert_factors(wrappers.get(name), e):
        cast = x.dtype != a_e.dtype and not torch.is_autocast_enabled(x.device.type)
        delta = F.linear(F.linear(x.to(a_e.dtype) if cast else x, a_e), b_e)
        y = y + (delta * scale).to(y.dtype)
    return y


class _QuantizedLinear(torch.autograd.Function):
    """``x W^T`` with a frozen quantized expert weight ``W`` (a torchao view of its stack):
    autograd would keep the dequantized ``W`` that ``F.linear`` was given for the input's
    gradient, one bf16 copy per expert (at 671B 2.6 GiB per recomputed layer, found by the
    dry run); this keeps the quantized view, which costs nothing, and dequantizes it again
    in the backward pass. The values and gradients are ``F.linear``'s."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        y = F.linear(x, w.dequantize())
        # the product's dtype (autocast's, when on) is the backward product's too
        ctx.w, ctx.x_dtype, ctx.mm_dtype = w, x.dtype, y.dtype
        return y

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        w = ctx.w.dequantize().to(ctx.mm_dtype)
        return (grad.to(ctx.mm_dtype) @ w).to(ctx.x_dtype), None


def dequantized_stacks(experts: nn.Module) -> dict[str, torch.Tensor] | None:
    """Under ``torch.inference_mode`` torchao cannot index its tensors: the quantized
    stacks dequantized whole (one layer's, for one forward); None otherwise."""
    stacks = {p: getattr(experts, p) for p in EXPERT_PARAMS}
    if not torch.is_inference_mode_enabled():
        return None
    if all(type(t.data) is torch.Tensor for t in stacks.values()):
        return None
    return {p: t.dequantize() if type(t.data) is not torch.Tensor else t for p, t in stacks.items()}


# ----------------------------------------------------------------------------- forward


def _split_tokens(x: torch.Tensor, tp_mesh: Any) -> torch.Tensor:
    """This tensor-parallel rank's rows of a replicated tensor (backward: all-gather)."""
    from torch.distributed.tensor import DTensor, Replicate, Shard

    d = DTensor.from_local(x, tp_mesh, [Replicate()], run_check=False)
    return d.redistribute(tp_mesh, [Shard(0)]).to_local()


def _join_tokens(y: torch.Tensor, tp_mesh: Any, rows: int) -> torch.Tensor:
    """Every tensor-parallel rank's rows, in order (backward: this rank's rows)."""
    from torch.distributed.tensor import DTensor, Replicate, Shard

    shape = torch.Size([rows, *y.shape[1:]])
    stride = torch.empty(shape, device="meta").stride()
    d = DTensor.from_local(y, tp_mesh, [Shard(0)], run_check=False, shape=shape, stride=stride)
    return d.redistribute(tp_mesh, [Replicate()]).to_local()


def _all_to_all(
    x: torch.Tensor, out_splits: list[int], in_splits: list[int], group: Any
) -> torch.Tensor:
    """``all_to_all_single`` with autograd (the gradients go back the other way)."""
    from torch.distributed._functional_collectives import all_to_all_single_autograd

    out = all_to_all_single_autograd(x.contiguous(), out_splits, in_splits, group)
    return out.wait() if hasattr(out, "wait") else out


def _token_counts(
    flat: torch.Tensor, shard: ExpertShard, group: ExpertGroup
) -> tuple[torch.Tensor, list[int], list[int], list[int]]:
    """The (token, expert) pairs this rank receives, ``[ranks, local experts]``, and as
    numbers: the rows it sends to each rank, receives from each, and holds per local
    expert."""
    from torch._subclasses.fake_tensor import is_fake, unset_fake_temporarily

    fake = is_fake(flat)
    with unset_fake_temporarily() if fake else contextlib.nullcontext():
        if fake:
            send, recv = _balanced_counts(flat.numel(), shard, group)
        else:
            counts = torch.bincount(flat, minlength=shard.total)
            send = counts.view(group.size, shard.local)
            recv = torch.empty_like(send)
            dist.all_to_all_single(recv, send.contiguous(), group=group.group)
        return recv, send.sum(1).tolist(), recv.sum(1).tolist(), recv.sum(0).tolist()


def _balanced_counts(
    pairs: int, shard: ExpertShard, group: ExpertGroup
) -> tuple[torch.Tensor, torch.Tensor]:
    """A dry run's routing (fake tensors carry no router choices): ``pairs`` spread evenly
    over the experts on every rank alike, the planner's balanced routing (made outside
    the fake mode, so that the split sizes are numbers)."""
    per, extra = divmod(pairs, shard.total)
    counts = torch.full((shard.total,), per, dtype=torch.long)
    counts[:extra] += 1
    send = counts.view(group.size, shard.local)
    return send, send[group.index].expand(group.size, -1).clone()


def expert_parallel_forward(
    self: nn.Module,
    hidden_states: torch.Tensor,
    top_k_index: torch.Tensor,
    top_k_weights: torch.Tensor,
) -> torch.Tensor:
    """The experts' forward under expert parallelism (see the module docstring).

    Args:
        self: the outermost module of one experts module (a peft wrapper or itself).
        hidden_states: ``[N, H]`` tokens (the same on every tensor-parallel rank).
        top_k_index / top_k_weights: ``[N, k]`` the router's choices (global expert ids)
            and weights.
    """
    experts, wrappers = experts_and_wrappers(self)
    group, shard = experts._agentgym_experts
    rows = hidden_states.shape[0]
    if group.tp_mesh is not None and group.tp_mesh.size() > 1:
        hidden_states = _split_tokens(hidden_states, group.tp_mesh)
        top_k_index = _split_tokens(top_k_index, group.tp_mesh)
        top_k_weights = _split_tokens(top_k_weights, group.tp_mesh)
    n, k = top_k_index.shape
    flat = top_k_index.reshape(-1)
    order = torch.argsort(flat, stable=True)
    token = order // k
    recv, send_rows, recv_rows, per_expert = _token_counts(flat, shard, group)
    x = _all_to_all(hidden_states[token], recv_rows, send_rows, group.group)
    # the received rows come per source rank, each sorted by expert: regroup by expert
    expert_of_row = torch.repeat_interleave(
        torch.arange(shard.local, device=x.device).repeat(group.size),
        recv.flatten().to(x.device),
        output_size=sum(recv_rows),
    )
    perm = torch.argsort(expert_of_row, stable=True)
    xs = x[perm]
    whole = dequantized_stacks(experts)
    outs, start = [], 0
    for j, m in enumerate(per_expert):  # every local expert, so every LoRA gets a gradient
        rows_j = xs[start : start + m]
        start += m
        gate_up = expert_linear(rows_j, experts, wrappers, "gate_up_proj", j, whole)
        gate, up = gate_up.chunk(2, dim=-1)
        act = experts.act_fn(gate) * up
        outs.append(expert_linear(act, experts, wrappers, "down_proj", j, whole))
    y = torch.cat(outs, dim=0) if outs else xs.new_zeros((0, hidden_states.shape[-1]))
    y = y[torch.argsort(perm)]
    y = _all_to_all(y, send_rows, recv_rows, group.group)
    weights = top_k_weights.reshape(-1)[order]
    out = hidden_states.new_zeros((n, y.shape[-1]))
    out = out.index_add(0, token, (y * weights[:, None]).to(out.dtype))
    if group.tp_mesh is not None and group.tp_mesh.size() > 1:
        out = _join_tokens(out, group.tp_mesh, rows)
    return out
