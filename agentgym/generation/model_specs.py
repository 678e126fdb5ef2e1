"""What a model is before torch loads it: the built-in presets' configs and the check of a
local model folder. Config checks and the launcher of a multi-process run use these
without importing torch (:mod:`.models` builds and loads the models themselves)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from agentgym import ConfigError

#: the built-in tiny models' configs (:func:`~agentgym.generation.models.build_preset`)
PRESETS: dict[str, dict[str, Any]] = {
    "tiny-qwen2": {
        "hidden_size": 128,
        "intermediate_size": 352,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 2048,
        "tie_word_embeddings": True,
        "rope_theta": 10000.0,
    },
    "tiny-deepseek-v3": {
        "hidden_size": 64,
        "intermediate_size": 128,
        "moe_intermediate_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "n_shared_experts": 1,
        "n_routed_experts": 4,
        "num_experts_per_tok": 2,
        "n_group": 1,
        "topk_group": 1,
        "first_k_dense_replace": 1,
        "q_lora_rank": 32,
        "kv_lora_rank": 16,
        "qk_rope_head_dim": 8,
        "qk_nope_head_dim": 8,
        "v_head_dim": 8,
        "max_position_embeddings": 2048,
        "tie_word_embeddings": False,
    },
}


#: files one of which a saved tokenizer has
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def check_model_folder(path: str | Path, *, what: str = "model folder", made_by: str = "") -> None:
    """Raise a :class:`ConfigError` that says what to do unless ``path`` is a local model
    folder with its config and tokenizer. ``what`` names the setting (``model.path``,
    ``--model``, ``hf:``); ``made_by`` is the command that writes the model, if any."""
    p = Path(path)
    if not p.exists():
        text = str(path)
        if re.fullmatch(r"[\w.-]+/[\w.-]+", text) and not text.startswith("."):
            name = text.split("/")[1]
            raise ConfigError(
                f"{what} {text!r} is not a folder here, and agentgym never downloads models. "
                f"If it is a Hugging Face Hub id, download it once yourself, e.g. `hf download "
                f"{text} --local-dir models/{name}` (huggingface_hub's CLI), then point "
                f"{what} at models/{name}."
            )
        made = f" It is written by `{made_by}`: run that first." if made_by else ""
        raise ConfigError(
            f"{what} {text!r} does not exist.{made or ' Point it at a local Hugging Face model folder.'}"
        )
    if not (p / "config.json").is_file():
        raise ConfigError(
            f"{what} {str(path)!r} has no config.json; point it at a directory written by "
            "save_pretrained (for example the output of `agentgym sft`)."
        )
    if not any((p / name).is_file() for name in TOKENIZER_FILES):
        raise ConfigError(
            f"{what} {str(path)!r} has no tokenizer (none of {', '.join(TOKENIZER_FILES)}); "
            "save it beside the weights (tokenizer.save_pretrained(folder)) or copy the "
            "tokenizer files of the model it came from into that folder."
        )
