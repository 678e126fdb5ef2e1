"""Models as generation opens them: tiny built-in presets, local Hugging Face folders, adapters.

* :func:`build_preset` builds a randomly initialised model from a config, in process
  (no download): ``tiny-qwen2`` (dense, Qwen2-style: grouped-query attention, SwiGLU)
  and ``tiny-deepseek-v3`` (DeepSeek-V3-style MoE: multi-head latent attention, a dense
  first layer, then routed experts plus a shared expert). The init is seeded inside a fork
  of the RNG, so the same preset and seed give the same weights whatever happened before.
* :func:`load_model` loads any causal LM saved in Hugging Face format from a local
  directory (``save_pretrained`` output), tokenizer included; :func:`save_model` writes one.
* :func:`adapter_state_dict` / :func:`load_adapter_state_dict`: a peft adapter's weights
  by peft's names (what checkpoints and engines exchange); :func:`tensors_digest` hashes
  named tensors.

Putting a LoRA adapter on a model for training, and loading a checkpoint rank by rank,
are the trainer's (``agentgym.trainers``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from agentgym import ConfigError, UnknownNameError
from agentgym.generation.model_specs import PRESETS, check_model_folder


def build_preset(
    name: str,
    tokenizer: Any,
    *,
    seed: int = 0,
    overrides: Mapping[str, Any] | None = None,
) -> nn.Module:
    """A randomly initialised tiny model sized for ``tokenizer``'s vocabulary.

    Args:
        name: one of :data:`PRESETS`.
        tokenizer: gives the vocabulary size and the special token ids.
        seed: weight initialisation seed (the global RNG is left untouched).
        overrides: config fields replacing the preset's (for example ``hidden_size``).
    """
    if name not in PRESETS:
        raise UnknownNameError("model preset", name, PRESETS)
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM, Qwen2Config, Qwen2ForCausalLM

    kwargs = {**PRESETS[name], **dict(overrides or {})}
    kwargs.update(
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    config_cls, model_cls = (
        (Qwen2Config, Qwen2ForCausalLM)
        if name == "tiny-qwen2"
        else (DeepseekV3Config, DeepseekV3ForCausalLM)
    )
    try:
        config = config_cls(**kwargs)
    except (TypeError, ValueError) as e:
        raise ConfigError(
            f"model preset {name!r} with overrides {dict(overrides or {})}: {e}"
        ) from e
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_cls(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model.float()


@contextlib.contextmanager
def quiet_hf_loading() -> Iterator[None]:
    """Hide transformers' weight-loading bar (a local load takes a moment; the bar is
    noise in the run's console), restoring the user's setting after."""
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            hf_logging.enable_progress_bar()


def load_model(path: str | Path, *, dtype: torch.dtype = torch.float32) -> tuple[nn.Module, Any]:
    """Load a causal LM and its tokenizer from a local Hugging Face directory."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    check_model_folder(path)
    path = Path(path)
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    with quiet_hf_loading():
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return model, tokenizer


def save_model(model: nn.Module, tokenizer: Any, path: str | Path) -> Path:
    """Save a full model and its tokenizer (safetensors) so :func:`load_model` reads it."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    with quiet_hf_loading():
        model.save_pretrained(str(path), safe_serialization=True)
    tokenizer.save_pretrained(str(path))
    return path


def count_parameters(model: nn.Module, trainable_only: bool = False) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)


def adapter_state_dict(model: Any) -> dict[str, torch.Tensor]:
    """The adapter weights (peft naming), detached copies."""
    from peft import get_peft_model_state_dict

    return {k: v.detach().clone() for k, v in get_peft_model_state_dict(model).items()}


def load_adapter_state_dict(model: Any, state: Mapping[str, torch.Tensor]) -> None:
    """Load adapter weights produced by :func:`adapter_state_dict` (strict)."""
    from peft import set_peft_model_state_dict

    result = set_peft_model_state_dict(model, dict(state))
    unexpected = [k for k in getattr(result, "unexpected_keys", []) if "lora_" in k]
    if unexpected:
        raise ConfigError(
            f"adapter weights do not fit this model: unexpected keys {unexpected[:5]}"
        )


def tensors_digest(tensors: dict[str, torch.Tensor]) -> str:
    """SHA-256 of named tensors (names and float32 values, in name order): equal for
    equal weights on any device or rank."""
    import hashlib

    h = hashlib.sha256()
    for k, v in sorted(tensors.items()):
        h.update(k.encode())
        h.update(v.detach().to(torch.float32).cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def routed_experts(model: nn.Module) -> int:
    """The routed experts of a mixture-of-experts model (its config's
    ``n_routed_experts`` / ``num_local_experts``), 0 for a dense one."""
    config = getattr(model, "config", None)
    for key in ("n_routed_experts", "num_local_experts", "num_experts"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return 0
