"""A frozen base quantized weight-only (int8 or fp8, torchao) under a full-precision LoRA.

``model.quantize: int8`` (or ``fp8``) stores every frozen Linear weight of the decoder
layers -- attention projections (the adapted ones' base layers too), dense MLPs, shared
experts -- and the routed experts' fused 3-D parameters in one byte per value with a
float scale per output row, through torchao's ``Int8WeightOnlyConfig`` /
``Float8WeightOnlyConfig`` (``quantize_``). The LoRA factors, the embedding, the LM head,
the norms and the routers stay in the model's dtype. Why torchao: it is PyTorch's own
quantization library, installs from the package index next to the CPU torch, quantizes
on CPU, and its tensors are subclasses that ``F.linear`` and indexing accept, so the
model code runs unchanged; bitsandbytes needs CUDA for its 8-bit layers.

On top, LoRA computes exactly what it computes on a full-precision base whose weights
are the dequantized ones:

* an adapted Linear is peft's ``lora.Linear`` around the quantized base layer:
  ``base(x) + s B A x`` (peft calls the base layer, torchao dequantizes inside
  ``F.linear``);
* the routed experts: peft folds an expert adapter into the parameter (``W + s B A`` on
  the whole 3-D stack, through ``torch.nn.utils.parametrize``), which a quantized tensor
  does not support, so the outermost peft wrapper of each experts module runs
  :func:`quantized_experts_forward` instead: per expert, the dequantized weight plus that
  expert's ``s B_e A_e``, one expert at a time (no full-precision copy of the stack;
  under ``torch.inference_mode``, where torchao cannot index its tensors, generation
  dequantizes one layer's stack per forward).

The reference policy is still the adapter switched off (``disable_adapter()``: the
wrappers' ``disable_adapters`` flag, read here too). The HF engine generates with the
same quantized model, so the rollouts are the trained policy's.

Runs on one process, or on a device mesh without tensor parallelism: the expert split
slices the quantized stacks (:func:`~.experts.shard_experts`; :func:`~.experts.expert_weight`
dequantizes one expert at a time there too), pipeline stages keep their quantized layers,
and FSDP2 leaves the quantized weights whole (``ignored_params``) while it shards the
rest. DTensor tensor parallelism does not split torchao tensors: under ``tp > 1`` only the
routed experts, which tp never splits, are quantized (``quantize_base(..., dense=False)``)
and the dense weights stay in the model's dtype (docs/distributed.md). A DeepSeek block-fp8
checkpoint's experts come quantized from the loader (:mod:`agentgym.trainers.loading`).
"""

from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from agentgym import ConfigError
from agentgym.trainers.parallel.experts import (
    EXPERT_PARAMS,
    dequantized_stacks,
    expert_weight,
    experts_and_wrappers,
    find_experts,
)
from agentgym.trainers.parallel.layout import QUANT_KINDS


@dataclass(frozen=True)
class QuantReport:
    """What :func:`quantize_base` did.

    Attributes:
        kind: ``int8`` or ``fp8``.
        tensors: weights quantized (Linear weights and expert stacks).
        bytes_before / bytes_after: their storage before and after (scales included).
    """

    kind: str
    tensors: int
    bytes_before: int
    bytes_after: int

    @property
    def saved_share(self) -> float:
        """Share of the quantized weights' bytes saved."""
        return 1.0 - self.bytes_after / max(self.bytes_before, 1)

    def describe(self) -> str:
        """One line for the run's log."""
        mib = 1024**2
        return (
            f"model.quantize={self.kind}: {self.tensors} frozen weights, "
            f"{self.bytes_before / mib:.2f} -> {self.bytes_after / mib:.2f} MiB "
            f"({self.saved_share:.0%} saved)"
        )


def torchao_config(kind: str) -> Any:
    """torchao's weight-only config for ``kind`` (``int8`` / ``fp8``)."""
    if kind not in QUANT_KINDS[1:]:
        raise ConfigError(f"model.quantize must be one of {', '.join(QUANT_KINDS)}, got {kind!r}.")
    try:
        from torchao import quantization as q
    except ImportError as e:
        raise ConfigError(
            f"model.quantize={kind} needs torchao: pip install -e '.[quant]' (scripts/setup.sh "
            "installs it with the dev extras), or set model.quantize=none."
        ) from e
    return q.Int8WeightOnlyConfig() if kind == "int8" else q.Float8WeightOnlyConfig()


def storage_bytes(t: torch.Tensor) -> int:
    """Bytes a (possibly torchao-quantized) tensor holds: its data and scales."""
    names = getattr(t, "tensor_data_names", None)
    if names and type(t) is not torch.Tensor and not isinstance(t, nn.Parameter):
        return sum(storage_bytes(getattr(t, n)) for n in names)
    if names and type(t.data) is not torch.Tensor:
        return storage_bytes(t.data)
    return t.numel() * t.element_size()


def is_quantized(t: torch.Tensor) -> bool:
    """A torchao tensor (or a parameter holding one)."""
    data = t.data if isinstance(t, nn.Parameter) else t
    return type(data) is not torch.Tensor and hasattr(data, "tensor_data_names")


def _frozen_linears(model: nn.Module) -> list[nn.Linear]:
    """Every frozen ``nn.Linear`` inside the decoder layers, LoRA factors excluded."""
    from agentgym.trainers.parallel.tensor_parallel import decoder_layers

    _, layers = decoder_layers(model)
    lora = {id(m) for layer in layers for n, m in layer.named_modules() if ".lora_" in f".{n}"}
    out = []
    for layer in layers:
        for m in layer.modules():
            if type(m) is nn.Linear and id(m) not in lora and not m.weight.requires_grad:
                out.append(m)
    return out


def quantize_base(model: nn.Module, kind: str, *, dense: bool = True) -> QuantReport:
    """Quantize the frozen base of ``model`` (a peft model, LoRA already applied) in
    place; see the module docstring. ``dense=False``: the routed experts only (under
    tensor parallelism, which splits the dense weights). Expert stacks already quantized
    (a block-fp8 checkpoint's, :mod:`agentgym.trainers.loading`) are kept as they are."""
    config = torchao_config(kind)
    from torchao.quantization import FqnToConfig, quantize_

    before = after = count = 0
    for lin in _frozen_linears(model) if dense else []:
        before += storage_bytes(lin.weight)
        quantize_(lin, config, filter_fn=lambda m, _fqn, _lin=lin: m is _lin)
        after += storage_bytes(lin.weight)
        count += 1
    for outer_name, experts, wrappers in find_experts(model):
        if any(getattr(experts, p).requires_grad for p in EXPERT_PARAMS):
            continue  # trained experts (full fine-tuning) stay in full precision
        before += sum(storage_bytes(getattr(experts, p)) for p in EXPERT_PARAMS)
        if not all(is_quantized(getattr(experts, p)) for p in EXPERT_PARAMS):
            quantize_(experts, FqnToConfig(dict.fromkeys(EXPERT_PARAMS, config)), filter_fn=None)
        after += sum(storage_bytes(getattr(experts, p)) for p in EXPERT_PARAMS)
        count += len(EXPERT_PARAMS)
        outer = model.get_submodule(outer_name) if wrappers else experts
        outer.forward = types.MethodType(quantized_experts_forward, outer)
    return QuantReport(kind=kind, tensors=count, bytes_before=before, bytes_after=after)


def quantized_experts_forward(
    self: nn.Module,
    hidden_states: torch.Tensor,
    top_k_index: torch.Tensor,
    top_k_weights: torch.Tensor,
) -> torch.Tensor:
    """The fused experts' forward (transformers' ``[E, 2I, H]`` / ``[E, H, I]`` layout) on
    a quantized stack, each expert's adapter applied to its own weight; ``self`` is the
    outermost module of the experts (a peft wrapper, or the experts module)."""
    experts, wrappers = experts_and_wrappers(self)
    whole = dequantized_stacks(experts)
    out = torch.zeros_like(hidden_states)
    n = int(getattr(experts, EXPERT_PARAMS[0]).shape[0])
    with torch.no_grad():
        hit = torch.unique(top_k_index[(top_k_index >= 0) & (top_k_index < n)]).tolist()
    for e in hit:
        token, slot = torch.where(top_k_index == e)
        x = hidden_states[token]
        gate_up = expert_weight(experts, wrappers, "gate_up_proj", e, whole)
        gate, up = F.linear(x, gate_up).chunk(2, -1)
        down = expert_weight(experts, wrappers, "down_proj", e, whole)
        y = F.linear(experts.act_fn(gate) * up, down) * top_k_weights[token, slot, None]
        out = out.index_add(0, token, y.to(out.dtype))
    return out


@torch.no_grad()
def quantization_error(model: nn.Module, kind: str, input_ids: torch.Tensor) -> dict[str, float]:
    """How far a quantized copy of ``model`` (a peft model) is from it on ``input_ids``:
    the frozen weights' MiB before and after, and the per-token log-prob difference
    (mean and max absolute, next-token log-probs of ``input_ids``) with the adapter off
    (the reference policy: the base alone) and on. ``model`` is left as it was."""
    import copy

    quantized = copy.deepcopy(model)
    report = quantize_base(quantized, kind)
    targets = input_ids[:, 1:]

    def logp(m: nn.Module) -> torch.Tensor:
        logits = m(input_ids=input_ids).logits[:, :-1].float()
        return torch.log_softmax(logits, -1).gather(-1, targets[..., None])[..., 0]

    out: dict[str, float] = {
        "base_mib": report.bytes_before / 1024**2,
        "quantized_mib": report.bytes_after / 1024**2,
        "saved_share": report.saved_share,
    }
    for m in (model, quantized):
        m.eval()
    for name, ctx in (("adapter_off", "disable"), ("adapter_on", None)):
        if ctx:
            with model.disable_adapter(), quantized.disable_adapter():
                gap = (logp(model) - logp(quantized)).abs()
        else:
            gap = (logp(model) - logp(quantized)).abs()
        out[f"logprob_diff_mean_{name}"] = float(gap.mean())
        out[f"logprob_diff_max_{name}"] = float(gap.max())
    return out
