"""LoRA adapters handed to vLLM's workers from memory, each worker its own tensors.

Stock vLLM 0.32 loads an adapter from a folder: every worker of an engine reads the same
files, whole, and slices out what it serves. Under the trainer's ranks that is the wrong
way round -- the adapter is already in the workers' own processes, split the way the
trainer holds it -- so agentgym hands each worker its tensors in memory:

* :func:`register` puts a worker's tensors (peft names) and the adapter's config in this
  process's table under a LoRA id;
* a ``LoRARequest`` whose path is :data:`MEMORY_SCHEME` + id makes the worker's LoRA
  manager build the adapter from that table (:func:`install`: one hook on vLLM's
  ``WorkerLoRAManager._load_adapter``, the pattern verl uses; other paths still load from
  disk);
* every rank of a replica registers *its own* tensors under the same id before the
  request that uses it enters the engine, so each worker reads only what it serves: its
  stage's layers, and under expert parallelism its own experts, in vLLM's per-expert
  (2-D) naming, which carries the expert index (:func:`per_expert_tensors`).

The hook checks what the file loader checks: the adapter's config against the engine's
LoRA limits, modules the model cannot adapt (an error, not a silent skip), the MoE layout.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import torch

from agentgym import ConfigError

#: the ``LoRARequest.lora_path`` prefix of an adapter held in memory
MEMORY_SCHEME = "agentgym-memory://"

_TABLE: dict[int, tuple[dict[str, torch.Tensor], dict[str, Any]]] = {}
_LOCK = threading.Lock()


def register(lora_id: int, tensors: Mapping[str, torch.Tensor], config: Mapping[str, Any]) -> str:
    """Hold this worker's adapter tensors under ``lora_id`` (earlier ids are dropped: a
    worker serves one adapter at a time) and return the path its ``LoRARequest`` names."""
    with _LOCK:
        _TABLE.clear()
        _TABLE[int(lora_id)] = (dict(tensors), dict(config))
    return f"{MEMORY_SCHEME}{int(lora_id)}"


def relabel(old: int, new: int) -> str:
    """Hold the adapter of ``old`` under ``new`` (the same tensors, a fresh id: after a
    wake, so vLLM builds it again); returns the new path."""
    with _LOCK:
        if old in _TABLE:
            _TABLE[int(new)] = _TABLE.pop(old)
    return f"{MEMORY_SCHEME}{int(new)}"


def held() -> dict[str, torch.Tensor]:
    """The tensors this process holds for its worker (empty when none)."""
    with _LOCK:
        return {k: v for ts, _ in _TABLE.values() for k, v in ts.items()}


def held_bytes() -> int:
    """Bytes of adapter tensors this process holds for its worker."""
    with _LOCK:
        return sum(t.numel() * t.element_size() for ts, _ in _TABLE.values() for t in ts.values())


def forget() -> None:
    """Drop every adapter held for this process's worker."""
    with _LOCK:
        _TABLE.clear()


def install() -> None:
    """Hook vLLM's worker LoRA manager so that memory paths load from this table (once
    per process; a no-op after the first call)."""
    from vllm.lora.worker_manager import WorkerLoRAManager

    original = WorkerLoRAManager._load_adapter
    if getattr(original, "agentgym_memory", False):
        return

    def _load_adapter(self: Any, lora_request: Any) -> Any:
        if not str(lora_request.lora_path).startswith(MEMORY_SCHEME):
            return original(self, lora_request)
        return _from_memory(self, lora_request)

    _load_adapter.agentgym_memory = True  # type: ignore[attr-defined]
    WorkerLoRAManager._load_adapter = _load_adapter


def _expected_modules(manager: Any) -> set[str]:
    """The module names vLLM can adapt in this model (as its file loader computes them)."""
    packed = manager._adapter_manager.packed_modules_mapping
    expected: set[str] = set()
    for module in manager._adapter_manager.supported_lora_modules:
        expected.update(packed.get(module, [module]))
        if module == "experts":
            expected.add(module)
    return expected


def _from_memory(manager: Any, lora_request: Any) -> Any:
    from vllm.lora.peft_helper import PEFTHelper
    from vllm.lora.utils import parse_fine_tuned_lora_name

    lora_id = int(lora_request.lora_int_id)
    with _LOCK:
        if lora_id not in _TABLE:
            raise ConfigError(
                f"vLLM asked for in-memory LoRA adapter {lora_id}, which this worker does not "
                "hold: the engine's ranks must load every adapter before it is used."
            )
        tensors, config = _TABLE[lora_id]
    helper = PEFTHelper.from_dict(
        {**config, "vllm_max_position_embeddings": manager.max_position_embeddings}
    )
    helper.validate_legal(manager.lora_config)
    model = manager._adapter_manager.model
    mapper = getattr(model, "hf_to_vllm_mapper", None)
    mapper = mapper.get_rename_mapper() if mapper is not None else None
    expected = _expected_modules(manager)
    for name in tensors:
        if "base_layer" in name:
            continue
        module, _ = parse_fine_tuned_lora_name(name, mapper)
        tail = module[module.find(".experts") + 1 :] if ".experts" in module else None
        if (tail or module.rsplit(".", 1)[-1]) not in expected:
            raise ConfigError(
                f"the adapter adapts {module!r}, which vLLM does not adapt in this model "
                f"(it adapts {sorted(expected)}): the rollouts would not be the trained policy."
            )
    lora = manager._lora_model_cls.from_lora_tensors(
        lora_model_id=lora_id,
        tensors=dict(tensors),
        peft_helper=helper,
        device="cpu",
        dtype=manager.lora_config.lora_dtype,
        model_vocab_size=manager.vocab_size,
        weights_mapper=mapper,
        skip_prefixes=getattr(model, "lora_skip_prefixes", None),
    )
    lora.is_3d_lora_weight = lora_request.is_3d_lora_weight
    manager._adapter_manager._validate_moe_lora_format(lora)
    manager._adapter_manager._validate_modules_to_save(lora)
    manager._adapter_manager._validate_token_classification_lora(lora)
    return lora


def per_expert_tensors(name: str, tensor: torch.Tensor, experts: range) -> dict[str, torch.Tensor]:
    """peft's fused-expert LoRA tensor, holding the rows of ``experts`` only, as vLLM's
    per-expert (2-D) tensors with the expert index in their names.

    peft adapts the fused stacks (``experts.gate_up_proj`` ``[E, 2I, H]``, its LoRA named
    ``experts.base_layer``; ``experts.down_proj`` ``[E, H, I]``, named ``experts``) with
    ``lora_A`` ``[r E, in]`` (expert-major rows) and ``lora_B`` ``[out, r E]`` (the expert
    index fastest). ``tensor`` holds the rows/columns of ``experts`` only. vLLM's per-expert
    form is ``experts.{e}.{gate,up,down}_proj.lora_{A,B}.weight``: gate and up share the
    fused ``lora_A`` and split ``lora_B``'s rows.
    """
    n = len(experts)
    head, _, leaf = name.partition(".experts.")
    kind = "lora_A" if ".lora_A." in name else "lora_B"
    gate_up = leaf.startswith("base_layer.")
    out: dict[str, torch.Tensor] = {}
    if kind == "lora_A":
        r = tensor.shape[0] // n
        rows = tensor.reshape(n, r, tensor.shape[1])
    else:
        r = tensor.shape[1] // n
        rows = tensor.reshape(tensor.shape[0], r, n).permute(2, 0, 1)  # [n, out, r]
    for i, e in enumerate(experts):
        part = rows[i].contiguous()
        prefix = f"{head}.experts.{e}"
        if not gate_up:
            out[f"{prefix}.down_proj.{kind}.weight"] = part
        elif kind == "lora_A":
            out[f"{prefix}.gate_proj.lora_A.weight"] = part
            out[f"{prefix}.up_proj.lora_A.weight"] = part.clone()
        else:
            half = part.shape[0] // 2
            out[f"{prefix}.gate_proj.lora_B.weight"] = part[:half].contiguous()
            out[f"{prefix}.up_proj.lora_B.weight"] = part[half:].contiguous()
    return out
