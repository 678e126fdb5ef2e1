"""``hf:PATH[@ADAPTER]`` policies: a local Hugging Face model as an agentgym Policy.

Used by ``--policy hf:...`` in ``agentgym eval`` and ``agentgym bench`` (the scheme is
declared in pyproject.toml's entry-point group ``agentgym.policies``). The model is loaded from a local directory written
by ``save_pretrained`` (for example the output of ``agentgym sft``); an optional peft
adapter directory (a trainer checkpoint's adapter) is applied on top. Generation goes
through :class:`~agentgym.generation.hf.HFEngine`, which batches the concurrent
calls of a rollout, on the trainer's default placement (``model.device`` and
``model.dtype`` ``auto``: the GPU in bf16 where there is one, else the CPU in float32).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentgym import ConfigError


def policy_from_spec(spec: str, *, seed: int = 0, **kwargs: Any) -> Any:
    """Build a batching policy from ``PATH`` or ``PATH@ADAPTER`` (the text after ``hf:``)."""
    from agentgym.generation.hf import HFEngine
    from agentgym.generation.models import load_model
    from agentgym.generation.placement import place_model

    path, _, adapter = spec.partition("@")
    if not path:
        raise ConfigError("hf: policy needs a model path: use 'hf:PATH' or 'hf:PATH@ADAPTER'.")
    try:
        adapter_dir = resolve_adapter(adapter) if adapter else None
    except ConfigError as e:
        raise ConfigError(f"hf: {e}") from e
    model, tokenizer = load_model(path)
    model = place_model(model)  # before the adapter: peft puts it on the base's device
    if adapter_dir is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter_dir))
    model.eval()
    engine = HFEngine(model, tokenizer, shares_weights=True, seed=seed)
    policy = engine.as_policy(**kwargs)
    policy.name = f"hf:{spec}"
    return policy


def resolve_adapter(where: str) -> Path:
    """The peft adapter folder ``where`` names: the folder itself, a checkpoint
    (``.../step_000003``: its ``adapter/``), ``RUN/checkpoints/latest``, or a run folder
    (its latest checkpoint's adapter). ``hf:MODEL@ADAPTER`` and ``agentgym serve --lora
    NAME=PATH`` both name adapters this way."""
    p = Path(where)
    candidates = [p, p / "adapter"]
    if p.name == "latest":
        ckpt = latest_checkpoint(p.parent)
        candidates.append(ckpt / "adapter" if ckpt else p)
    for root in (p, p / "checkpoints"):
        if root.is_dir() and not (root / "adapter_config.json").is_file():
            ckpt = latest_checkpoint(root)
            if ckpt is not None:
                candidates.append(ckpt / "adapter")
    for c in candidates:
        if (c / "adapter_config.json").is_file():
            return c
    raise ConfigError(
        f"no peft adapter at {where!r}: give an adapter folder (one with "
        "adapter_config.json), a checkpoint folder, RUN/checkpoints/latest, or a run folder."
    )


def latest_checkpoint(ckpt_dir: str | Path) -> Path | None:
    """The checkpoint a run's ``checkpoints/`` folder calls ``latest`` (a file naming it),
    or its newest complete one (``step_*`` with ``trainer_state.json``), or None."""
    root = Path(ckpt_dir)
    pointer = root / "latest"
    if pointer.is_file():
        cand = root / pointer.read_text().strip()
        if (cand / "trainer_state.json").is_file():
            return cand
    done = sorted(p for p in root.glob("step_*") if (p / "trainer_state.json").is_file())
    return done[-1] if done else None
