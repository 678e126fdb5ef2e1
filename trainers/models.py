"""The trainer's model: the ``model:`` section's model, and LoRA through peft.

Presets, loading a local folder and adapter state are the generation layer's
(``agentgym.generation``); here, what training adds:

* :func:`build_model_and_tokenizer`: ``model.path`` (block-fp8 checkpoints dequantized by
  :mod:`.loading`) or ``model.preset`` (its tokenizer learned from the envs' corpus when
  sized), and :func:`build_on_meta`, the same on the meta device for rank-by-rank loading;
* :func:`apply_lora` wraps a model with a LoRA adapter on the attention projections
  and, for MoE models, on the routed experts. In transformers 5 the experts are fused
  3-D parameters (``experts.gate_up_proj``: ``[E, 2I, H]``) rather than modules, so
  they are targeted with peft's ``target_parameters``. The resolved targets are checked
  after injection: a target that was asked for but not adapted, or adapted but not
  asked for (peft rewrites some MLP names into expert parameters on its own), or
  adapted at an unexpected rank, is a :class:`~agentgym.errors.ConfigError`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from agentgym import ConfigError, UnknownNameError
from agentgym.generation import (
    FLOAT8,
    build_preset,
    build_tokenizer,
    check_model_folder,
    load_model,
)

if TYPE_CHECKING:
    from agentgym.trainers.config import LoraSettings, ModelConfig


# ---------------------------------------------------------------------------- LoRA

ATTENTION_HINTS = ("attn", "attention")
#: attention Linears the default targets leave out: vLLM folds MLA's ``kv_b_proj`` into
#: its decode matrices (``W_UK_T``, ``W_UV``) when it loads the model, so an adapter there
#: would act in vLLM's prefill only and the rollouts would not be the trained policy's
NOT_BY_DEFAULT = ("kv_b_proj",)


@dataclass(frozen=True)
class LoraTargets:
    """What the LoRA adapter is placed on, by full name.

    Attributes:
        modules: Linear modules adapted with ordinary LoRA.
        parameters: fused expert parameters (``[E, out, in]``) adapted through peft's
            ``target_parameters`` (one rank-``r`` adapter per expert).
        num_experts: experts per fused parameter (for the rank check).
    """

    modules: tuple[str, ...]
    parameters: tuple[str, ...]
    num_experts: dict[str, int]


def fused_expert_parameters(model: nn.Module) -> dict[str, int]:
    """Full names of 3-D expert weights (transformers 5 MoE layout) -> expert count.

    Quantization scales (``*_scale_inv``, ``*scale*``: fp8 experts keep one per block,
    3-D as well) and float8 values are never LoRA targets."""
    out = {}
    for mname, module in model.named_modules():
        if not mname.split(".")[-1].startswith("experts"):
            continue
        for pname, p in module.named_parameters(recurse=False):
            if p.dim() != 3 or "scale" in pname or p.dtype in FLOAT8:
                continue
            out[f"{mname}.{pname}"] = int(p.shape[0])
    return out


def resolve_lora_targets(
    model: nn.Module, target_modules: Iterable[str] | None, target_experts: bool
) -> LoraTargets:
    """The full names LoRA should adapt.

    Args:
        model: the base model.
        target_modules: leaf names of Linear modules (``q_proj``, ``o_proj``); ``None``
            means every Linear inside an attention block but those of
            :data:`NOT_BY_DEFAULT` (MLA's ``kv_b_proj``).
        target_experts: also adapt fused expert parameters (MoE models; ignored for
            dense ones).
    """
    linears = {n: m for n, m in model.named_modules() if isinstance(m, nn.Linear)}
    if target_modules is None:
        chosen = [
            n
            for n in linears
            if any(h in part.lower() for part in n.split(".")[:-1] for h in ATTENTION_HINTS)
            and n.split(".")[-1] not in NOT_BY_DEFAULT
        ]
    else:
        wanted = list(target_modules)
        leaves = {n.split(".")[-1] for n in linears}
        for w in wanted:
            if w not in leaves:
                raise UnknownNameError(
                    "LoRA target module", w, leaves, hint="Names are Linear module leaf names."
                )
        chosen = [n for n in linears if n.split(".")[-1] in wanted]
    experts = fused_expert_parameters(model) if target_experts else {}
    if not chosen and not experts:
        raise ConfigError(
            "LoRA resolved to no targets; name some Linear modules in lora.target_modules."
        )
    return LoraTargets(tuple(sorted(chosen)), tuple(sorted(experts)), experts)


def apply_lora(model: nn.Module, lora: LoraSettings, *, seed: int = 0) -> Any:
    """Wrap ``model`` in a peft LoRA adapter as the ``lora`` section says, and check what
    was adapted.

    Base weights are frozen; only the adapter trains. ``seed`` seeds the adapter's
    initialisation (``lora_A``) without touching the global RNG.

    Returns:
        The ``PeftModel``; ``model.agentgym_lora_targets`` holds the :class:`LoraTargets`.
    """
    from peft import LoraConfig, get_peft_model

    targets = resolve_lora_targets(model, lora.target_modules, lora.target_experts)
    config = LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=list(targets.modules) or None,
        target_parameters=list(targets.parameters) or None,
        bias="none",
        task_type="CAUSAL_LM",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        peft_model = get_peft_model(model, config)
    check_lora_targets(peft_model, targets, lora.r)
    peft_model.agentgym_lora_targets = targets
    return peft_model


def apply_lora_on_meta(model: nn.Module, lora: LoraSettings, *, seed: int) -> Any:
    """:func:`apply_lora` on a meta-built base (:mod:`.loading`), the adapter on the meta
    device too: nothing is drawn or allocated here. The model carries how peft drew its
    adapter (:class:`~.lora_draws.AdapterDraws`, under ``DRAWS_ATTR``), so that each rank
    draws the values of the share it keeps when its share is allocated: the values a
    loaded base gets with the same seed."""
    from agentgym.trainers.lora_draws import DRAWS_ATTR, record_draws

    peft_model, draws = record_draws(model, lambda m: apply_lora(m, lora, seed=seed), seed=seed)
    setattr(peft_model, DRAWS_ATTR, draws)
    return peft_model


def check_lora_targets(peft_model: Any, targets: LoraTargets, r: int) -> None:
    """Raise ConfigError unless exactly the resolved targets carry an adapter of rank r."""
    got_modules = set(getattr(peft_model, "targeted_module_names", []) or [])
    got_params = set(getattr(peft_model, "targeted_parameter_names", []) or [])
    problems = []
    for label, want, got in (
        ("modules", set(targets.modules), got_modules),
        ("expert parameters", set(targets.parameters), got_params),
    ):
        if want - got:
            problems.append(f"asked for but not adapted ({label}): {sorted(want - got)}")
        if got - want:
            problems.append(f"adapted but not asked for ({label}): {sorted(got - want)}")
    ranks = lora_ranks(peft_model)
    for name in targets.modules:
        if name in ranks and ranks[name] != r:
            problems.append(f"{name}: rank {ranks[name]}, expected {r}")
    for name, n_exp in targets.num_experts.items():
        got_r = ranks.get(name)
        if got_r is not None and got_r != r * n_exp:
            problems.append(f"{name}: adapter rank {got_r}, expected {r} per expert x {n_exp}")
    if problems:
        raise ConfigError(
            "LoRA targets differ from what was resolved: "
            + "; ".join(problems)
            + ". Name attention Linear leaves in lora.target_modules and use "
            "lora.target_experts for MoE experts (do not name gate/up/down on MoE models)."
        )


def lora_ranks(peft_model: Any) -> dict[str, int]:
    """Adapted name -> rows of its ``lora_A`` (r for Linear, r * experts for fused params).

    Fused expert parameters are reported by their full parameter name (peft nests one
    ``ParamWrapper`` per parameter of the same experts module).
    """
    from peft.tuners.lora import LoraLayer

    out: dict[str, int] = {}
    prefix = "base_model.model."
    for name, module in peft_model.named_modules():
        if not isinstance(module, LoraLayer) or not module.lora_A:
            continue
        owner = name[len(prefix) :] if name.startswith(prefix) else name
        owner = owner.replace(".base_layer", "")
        pname = getattr(module, "parameter_name", None)
        if pname:
            owner = f"{owner}.{pname}"
        first = next(iter(module.lora_A.values()))
        out[owner] = int(first.weight.shape[0])
    return out


def build_model_and_tokenizer(
    cfg: ModelConfig, corpus: Callable[[], Iterable[str]] | None = None
) -> tuple[torch.nn.Module, Any]:
    """Load ``cfg.path`` or build ``cfg.preset`` (tokenizer from ``corpus`` if sized)."""
    if cfg.path is not None:
        check_model_folder(cfg.path, what="model.path", made_by=cfg.made_by or "")
        from agentgym.trainers.loading import is_block_fp8, load_dequantized

        if (Path(cfg.path) / "config.json").is_file() and is_block_fp8(cfg.path):
            return load_dequantized(cfg.path)  # DeepSeek's fp8: its block scales applied
        return load_model(cfg.path)
    if cfg.tokenizer_vocab_size is not None:
        if corpus is None:
            raise ConfigError("model.tokenizer_vocab_size needs a text corpus (the envs').")
        tokenizer = build_tokenizer(corpus(), cfg.tokenizer_vocab_size)
    else:
        tokenizer = build_tokenizer()
    if cfg.preset is None:  # model.architecture alone: planning and dry runs only
        raise ConfigError(
            "training needs model.path or model.preset; model.architecture alone describes a "
            "model for `agentgym plan` and `agentgym train --dry-run` but holds no weights."
        )
    model = build_preset(cfg.preset, tokenizer, seed=cfg.init_seed, overrides=cfg.preset_overrides)
    return model, tokenizer


def loads_on_meta(cfg: ModelConfig, *, mesh: bool) -> bool:
    """Whether ``model.path`` loads through :mod:`.loading` (built on meta, each rank
    reading its share): under a device mesh, or with ``model.quantize: fp8`` on a
    block-fp8 checkpoint (its experts stay in the checkpoint's fp8)."""
    if cfg.path is None or not (Path(cfg.path) / "config.json").is_file():
        return False
    from agentgym.trainers.loading import is_block_fp8

    return mesh or (cfg.quantize == "fp8" and is_block_fp8(cfg.path))


def build_on_meta(
    cfg: ModelConfig,
    lora: LoraSettings | None,
    *,
    lora_seed: int,
    backend: str,
    mesh: bool,
) -> tuple[nn.Module, Any]:
    """The model of ``model.path`` built on the meta device, in ``model.dtype``, with its
    LoRA adapter (``lora``; drawn as on a loaded base). Under a mesh the model carries
    its :class:`~.loading.CheckpointSource` and the mesh learner reads each rank's share
    after splitting it; one process reads it whole here (with ``model.quantize: fp8``
    the experts of a block-fp8 checkpoint stay in fp8).

    Raises:
        ConfigError: ``model.quantize`` other than fp8 on a block-fp8 checkpoint, or any
            under a mesh on an unquantized one (not wired: the rank's share would have to
            be quantized after reading).
    """
    from agentgym.generation import place_model, resolve_device, resolve_dtype
    from agentgym.trainers.loading import (
        SOURCE_ATTR,
        CheckpointSource,
        is_block_fp8,
        load_whole_model,
        meta_model_and_tokenizer,
    )

    assert cfg.path is not None
    fp8 = is_block_fp8(cfg.path)
    if cfg.quantize != "none" and not (fp8 and cfg.quantize == "fp8"):
        raise ConfigError(
            f"model.quantize={cfg.quantize} with model.path {cfg.path!r} under a device mesh: "
            "a mesh reads each rank's share of the checkpoint and keeps only a block-fp8 "
            "checkpoint's own fp8 experts (model.quantize=fp8 on DeepSeek's fp8 format). "
            "Use model.quantize=none, or such a checkpoint."
        )
    model, tokenizer = meta_model_and_tokenizer(cfg.path)
    model = place_model(model, cfg, backend=backend)  # the dtype on meta; buffers moved
    device = resolve_device(cfg.device, backend)
    dtype = resolve_dtype(cfg.dtype, device)
    source = CheckpointSource(str(cfg.path), dtype, device, keep_fp8_experts=cfg.quantize == "fp8")
    if lora is not None:  # on meta: each rank draws its share's values when it allocates it
        model = apply_lora_on_meta(model, lora, seed=lora_seed)
    if mesh:
        setattr(model, SOURCE_ATTR, source)
        return model, tokenizer
    load_whole_model(model, source)  # then quantize_base(dense=False) wraps fp8 experts
    return model, tokenizer
