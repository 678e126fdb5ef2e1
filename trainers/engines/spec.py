"""``hf:PATH[@ADAPTER]`` policies: a local Hugging Face model as an agentgym Policy.

Used by ``--policy hf:...`` in ``agentgym eval`` and ``agentgym bench`` (the scheme is
declared in pyproject.toml's entry-point group ``agentgym.policies``). The model is loaded from a local directory written
by ``save_pretrained`` (for example the output of ``agentgym sft``); an optional peft
adapter directory (a trainer checkpoint's adapter) is applied on top. Generation goes
through :class:`~agentgym.trainers.engines.hf.HFEngine`, which batches the concurrent
calls of a rollout.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentgym import ConfigError


def policy_from_spec(spec: str, *, seed: int = 0, **kwargs: Any) -> Any:
    """Build a batching policy from ``PATH`` or ``PATH@ADAPTER`` (the text after ``hf:``)."""
    from agentgym.trainers.engines.hf import HFEngine
    from agentgym.trainers.models import load_model

    path, _, adapter = spec.partition("@")
    if not path:
        raise ConfigError("hf: policy needs a model path: use 'hf:PATH' or 'hf:PATH@ADAPTER'.")
    model, tokenizer = load_model(path)
    if adapter:
        if not (Path(adapter) / "adapter_config.json").is_file():
            raise ConfigError(
                f"hf: adapter directory {adapter!r} has no adapter_config.json; point it at a "
                "peft adapter (for example a checkpoint's adapter/ folder)."
            )
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter)
    model.eval()
    engine = HFEngine(model, tokenizer, shares_weights=True, seed=seed)
    policy = engine.as_policy(**kwargs)
    policy.name = f"hf:{spec}"
    return policy
