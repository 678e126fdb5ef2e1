"""LoRA adapters as files for vLLM: peft configs and weights out, base weights once.

vLLM follows training through adapters only, loaded from peft-format directories
(``adapter_config.json`` + ``adapter_model.safetensors``):

* :func:`adapter_config_dict` turns a ``PeftModel`` or a ``LoraConfig`` into the
  ``adapter_config.json`` content (serialised by peft itself), and
  :func:`infer_adapter_config` reads a minimal one off the weights' shapes plus
  ``lora_alpha``; both are checked for what vLLM cannot serve (DoRA, trained biases,
  ``modules_to_save``) before a rollout, not inside vLLM;
* :func:`write_peft_adapter` writes an adapter's weights and config as such a directory
  (it loads with ``PeftModel.from_pretrained`` too);
* :func:`vllm_lora_rank` rounds a rank up to a LoRA slot rank vLLM accepts
  (:data:`VLLM_LORA_RANKS`);
* :func:`save_base_model` writes the trainer's *base* weights (LoRA layers stripped, the
  adapter not merged) as the Hugging Face directory vLLM starts from.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from agentgym import ConfigError

#: LoRA ranks vLLM accepts for ``max_lora_rank`` (its ``MaxLoRARanks``).
VLLM_LORA_RANKS: tuple[int, ...] = (1, 8, 16, 32, 64, 128, 256, 320, 512)

#: the two files of a peft adapter directory
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"


def adapter_config_dict(source: Any, adapter_name: str = "default") -> dict[str, Any]:
    """The peft ``adapter_config.json`` content for a ``PeftModel``, a peft ``LoraConfig``
    or an already-made mapping.

    The config is serialised by peft itself (``PeftConfig.save_pretrained``), so the file
    the engine writes is the one ``PeftModel.save_pretrained`` would write.
    """
    if isinstance(source, Mapping):
        config = dict(source)
    else:
        peft_config = getattr(source, "peft_config", None)
        if isinstance(peft_config, Mapping):
            if adapter_name not in peft_config:
                raise ConfigError(
                    f"the peft model has no adapter {adapter_name!r} "
                    f"(it has {sorted(peft_config)})."
                )
            peft_config = peft_config[adapter_name]
        elif peft_config is None:
            peft_config = source
        if not hasattr(peft_config, "save_pretrained"):
            raise ConfigError(
                "adapter_config must be a peft model, a peft LoraConfig or a mapping with "
                f"the adapter_config.json fields; got {type(source).__name__}."
            )
        with tempfile.TemporaryDirectory(prefix="agentgym-peft-config-") as tmp:
            peft_config.save_pretrained(tmp)
            config = json.loads((Path(tmp) / ADAPTER_CONFIG).read_text(encoding="utf-8"))
    _check_adapter_config(config)
    return config


def is_fused_expert_name(name: str) -> bool:
    """``name`` is a LoRA tensor of peft's fused routed experts (3-D layout:
    ``...experts.base_layer.lora_A.weight`` for ``gate_up_proj``, ``...experts.lora_A.weight``
    for ``down_proj``), not of a per-expert or shared-expert Linear."""
    head, sep, tail = name.partition(".experts.")
    return bool(sep) and (tail.startswith("lora_") or tail.startswith("base_layer.lora_"))


def is_3d_moe_adapter(config: Mapping[str, Any]) -> bool:
    """Whether an adapter config adapts fused 3-D expert parameters (peft
    ``target_parameters``): vLLM must then be told the adapter's layout is 3-D."""
    return bool(config.get("target_parameters"))


def _check_adapter_config(config: Mapping[str, Any]) -> None:
    peft_type = str(config.get("peft_type", "LORA")).upper()
    if peft_type != "LORA":
        raise ConfigError(f"the vLLM engine serves LoRA adapters only; got peft_type {peft_type}.")
    r = config.get("r")
    if not isinstance(r, int) or r < 1:
        raise ConfigError(f"adapter config needs an integer rank r >= 1; got {r!r}.")
    if config.get("lora_alpha") is None:
        raise ConfigError("adapter config needs lora_alpha (the LoRA scaling numerator).")
    if not config.get("target_modules") and not config.get("target_parameters"):
        raise ConfigError("adapter config names no target_modules or target_parameters.")
    # what vLLM's PEFTHelper rejects, caught before a rollout instead of inside vLLM
    if config.get("use_dora"):
        raise ConfigError("vLLM does not serve DoRA adapters; train with use_dora=False.")
    if config.get("bias", "none") != "none" or config.get("lora_bias"):
        raise ConfigError("vLLM does not serve adapters with trained biases; use bias='none'.")
    if config.get("modules_to_save"):
        raise ConfigError(
            "vLLM does not serve adapters with modules_to_save (fully trained modules); "
            f"got {config['modules_to_save']}."
        )


def infer_adapter_config(weights: Mapping[str, torch.Tensor], *, alpha: float) -> dict[str, Any]:
    """A minimal peft LoRA config read off adapter weights (``lora_A``: ``[r, in]``).

    The rank and the adapted Linear modules are visible in the weights; ``alpha`` is not
    (only ``alpha / r`` scales the update), so it must be given. Fused expert parameters
    (peft ``target_parameters``) cannot be told apart from Linear modules by their names
    and shapes: pass their config explicitly.
    """
    modules: set[str] = set()
    ranks: set[int] = set()
    for name, tensor in weights.items():
        parts = name.split(".")
        if "lora_A" not in parts:
            continue
        i = parts.index("lora_A")
        owner = ".".join(parts[:i])
        if owner.startswith("base_model.model."):
            owner = owner[len("base_model.model.") :]
        modules.add(owner)
        ranks.add(int(tensor.shape[0]))
    if not modules:
        raise ConfigError(
            "no lora_A weights found: load_adapter expects peft state-dict names as produced "
            "by agentgym.trainers.models.adapter_state_dict."
        )
    if len(ranks) != 1:
        raise ConfigError(
            f"adapter weights have several ranks {sorted(ranks)}; pass adapter_config "
            "(the peft model's config) instead of inferring it."
        )
    config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "r": ranks.pop(),
        "lora_alpha": float(alpha),
        "lora_dropout": 0.0,
        "bias": "none",
        "target_modules": sorted(modules),
        "fan_in_fan_out": False,
        "use_rslora": False,
        "use_dora": False,
        "modules_to_save": None,
    }
    return config


def write_peft_adapter(
    directory: str | Path,
    weights: Mapping[str, torch.Tensor],
    config: Mapping[str, Any],
    *,
    dtype: torch.dtype | None = None,
) -> Path:
    """Write ``weights`` and ``config`` as a peft adapter directory.

    The result (``adapter_config.json`` + ``adapter_model.safetensors``) loads with
    ``PeftModel.from_pretrained`` and with vLLM's ``LoRARequest``. Tensors are copied to
    CPU, contiguous, in their own dtype, or in ``dtype`` (the engine's: the file is half
    the size of the trainer's fp32 master weights, and the engine casts to it anyway).
    """
    from safetensors.torch import save_file

    if not weights:
        raise ConfigError("no adapter weights to write (the state dict is empty).")
    bad = [k for k in weights if "lora_" not in k]
    if bad:
        raise ConfigError(
            f"not LoRA adapter weights: {bad[:3]}; the vLLM engine takes adapters only, never "
            "full model weights."
        )
    _check_adapter_config(config)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tensors = {
        k: v.detach().to("cpu", dtype=dtype if v.is_floating_point() else None).contiguous()
        for k, v in weights.items()
    }
    save_file(tensors, str(directory / ADAPTER_WEIGHTS), metadata={"format": "pt"})
    (directory / ADAPTER_CONFIG).write_text(
        json.dumps(dict(config), indent=2, sort_keys=True), encoding="utf-8"
    )
    return directory


def vllm_lora_rank(r: int) -> int:
    """The smallest ``max_lora_rank`` vLLM accepts that fits an adapter of rank ``r``."""
    for slot in VLLM_LORA_RANKS:
        if slot >= r:
            return slot
    raise ConfigError(f"LoRA rank {r} is above vLLM's largest max_lora_rank {VLLM_LORA_RANKS[-1]}.")


#: config keys vLLM reads that transformers' config class does not keep, per model type:
#: DeepSeek-V3's routing as transformers computes it (sigmoid scores with the
#: ``e_score_correction_bias`` of "noaux_tc"), as DeepSeek's own config.json states it.
#: Without them vLLM does not create the bias (its weight fails to load) and would route
#: with softmax.
VLLM_CONFIG_KEYS: dict[str, dict[str, Any]] = {
    "deepseek_v3": {"topk_method": "noaux_tc", "scoring_func": "sigmoid"},
}


def vllm_config_additions(config: Mapping[str, Any]) -> dict[str, Any]:
    """The keys of :data:`VLLM_CONFIG_KEYS` that the ``config.json`` mapping ``config``
    lacks (empty when vLLM reads it as transformers does)."""
    want = VLLM_CONFIG_KEYS.get(str(config.get("model_type")), {})
    return {k: v for k, v in want.items() if k not in config}


#: the MLA head sizes (latent ``kv_lora_rank`` + ``qk_rope_head_dim``) vLLM 0.32's MLA
#: attention takes, on every platform (DeepSeek-V3's own: 512 + 64 = 576)
VLLM_MLA_HEAD_SIZES = (320, 512, 576)


def vllm_refusal(config: Mapping[str, Any], *, cpu: bool, lora: bool) -> str | None:
    """Why vLLM 0.32 cannot serve the model of this ``config.json`` mapping here, or
    ``None``. Known from running it: MLA takes only the head sizes of
    :data:`VLLM_MLA_HEAD_SIZES`; on the CPU build a mixture-of-experts model with LoRA
    serving on goes through the fused-MoE Triton kernels, which that build lacks."""
    rank, rope = config.get("kv_lora_rank"), config.get("qk_rope_head_dim")
    if isinstance(rank, int) and isinstance(rope, int) and rank + rope not in VLLM_MLA_HEAD_SIZES:
        return (
            f"vLLM's MLA attention takes kv_lora_rank + qk_rope_head_dim in "
            f"{VLLM_MLA_HEAD_SIZES}; this model has {rank} + {rope}. For a small DeepSeek-V3 "
            "use model.preset_overrides {kv_lora_rank: 512, qk_rope_head_dim: 64}, or "
            "rollout.engine: hf."
        )
    experts = config.get("n_routed_experts") or config.get("num_local_experts")
    if cpu and lora and experts:
        return (
            "vLLM's CPU build cannot serve LoRA on a mixture-of-experts model (its fused-MoE "
            "LoRA path is Triton only, even for an adapter on attention alone): use "
            "rollout.engine: hf on CPU, or vLLM on a GPU."
        )
    return None


def save_base_model(model: nn.Module, tokenizer: Any, path: str | Path) -> Path:
    """Save the base weights of ``model`` (a plain or a peft model) for vLLM to load.

    peft wraps each adapted Linear (``q_proj.base_layer.weight``) and adds ``lora_*``
    tensors; those are stripped, so the directory holds the original architecture's
    weights under their original names, with the model's config and ``tokenizer``. The
    adapter is *not* merged: the base weights are written exactly as they are. The
    config gets the keys vLLM needs to compute as transformers does
    (:func:`vllm_config_additions`).
    """
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    state: dict[str, torch.Tensor] = {}
    for name, tensor in base.state_dict().items():
        parts = name.split(".")
        if any(p.startswith("lora_") or p == "modules_to_save" for p in parts):
            continue
        clean = ".".join(p for p in parts if p not in ("base_layer", "original_module"))
        state[clean] = tensor
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    base.save_pretrained(str(path), state_dict=state, safe_serialization=True)
    tokenizer.save_pretrained(str(path))
    config_file = path / "config.json"
    config = json.loads(config_file.read_text(encoding="utf-8"))
    added = vllm_config_additions(config)
    if added:
        config_file.write_text(json.dumps({**config, **added}, indent=2), encoding="utf-8")
    return path


def linked_base_copy(model_path: str | Path, dest: str | Path) -> Path:
    """A folder that is ``model_path`` for vLLM, with the ``config.json`` keys it lacks
    (:func:`vllm_config_additions`) added: the config is written anew, every other file is
    a symbolic link to the original (the weights are never copied: 671B of them would not
    fit). Returns ``dest``."""
    src, dest = Path(model_path).resolve(), Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    config = json.loads((src / "config.json").read_text(encoding="utf-8"))
    for item in src.iterdir():
        if item.name == "config.json":
            continue
        link = dest / item.name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(item)
    (dest / "config.json").write_text(
        json.dumps({**config, **vllm_config_additions(config)}, indent=2), encoding="utf-8"
    )
    return dest
