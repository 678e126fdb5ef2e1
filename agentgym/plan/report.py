"""The report: a plan pair as the text table and the JSON object ``agentgym plan`` prints."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from agentgym.plan.memory import LineItem
from agentgym.plan.plans import Plan


def format_plans(lora: Plan, full: Plan) -> str:
    """A side-by-side table: LoRA layout against full fine-tuning, GiB per GPU."""
    p = lora.params
    lines = [
        f"model: {p.total / 1e9:,.1f}B parameters, {p.activated / 1e9:,.1f}B activated per token; "
        f"LoRA adapter {lora.lora_params / 1e6:,.1f}M parameters",
        f"layout (LoRA): {_layout_text(lora.layout)}",
        f"GPUs: {lora.layout['gpus']} x {lora.gpu_mem_gib:g} GiB; worst pipeline stage: {lora.stage}",
        "",
        f"{'per GPU (GiB)':<28}{'phase':>8}{'LoRA':>10}{'full FT':>10}  note (LoRA)",
    ]
    names: list[str] = []
    for plan in (lora, full):
        for item in plan.items:
            if item.name not in names:
                names.append(item.name)
    for name in names:
        li = next((i for i in lora.items if i.name == name), None)
        fi = next((i for i in full.items if i.name == name), None)
        phase = (li or fi).phase  # type: ignore[union-attr]
        lines.append(
            f"{name:<28}{phase:>8}{_cell(li):>10}{_cell(fi):>10}  {li.note if li else fi.note}"  # type: ignore[union-attr]
        )
    lines += [
        "-" * 64,
        f"{'train phase':<28}{'':>8}{lora.train_gib:>10.1f}{full.train_gib:>10.1f}",
        f"{'rollout phase':<28}{'':>8}{lora.rollout_gib:>10.1f}{full.rollout_gib:>10.1f}",
        f"{'peak':<28}{'':>8}{lora.total_gib:>10.1f}{full.total_gib:>10.1f}",
        f"{'headroom':<28}{'':>8}{lora.headroom_gib:>10.1f}{full.headroom_gib:>10.1f}",
        f"{'fits':<28}{'':>8}{_yes(lora.fits):>10}{_yes(full.fits):>10}",
        "",
        f"LoRA: {'FITS' if lora.fits else 'DOES NOT FIT'} ({lora.total_gib:.1f} of "
        f"{lora.gpu_mem_gib:g} GiB). Full fine-tune: {'FITS' if full.fits else 'DOES NOT FIT'} "
        f"({full.total_gib:.1f} of {full.gpu_mem_gib:g} GiB).",
    ]
    if lora.engine is not None:
        lines += [f"LoRA: {line}" for line in lora.engine.lines()]
    for w in (*lora.warnings, *(f"full FT: {w}" for w in full.warnings)):
        lines.append(f"warning: {w}")
    lines += ["", "Assumptions:"]
    lines += [f"  - {a}" for a in (*lora.assumptions, *full.assumptions)]
    return "\n".join(lines)


def _layout_text(layout: Mapping[str, Any]) -> str:
    text = (
        f"base {layout['base_weights']}, tp={layout['tp']} ep={layout['ep']} "
        f"pp={layout['pp']} dp={layout['dp']} zero={layout['zero_stage']}"
    )
    r = layout.get("rollout")
    if r:
        text += (
            f"; rollout {r['engine']} tp={r['tp']} ep={r['ep']} pp={r['pp']} dp={r['dp']}, "
            f"{r['max_num_seqs']} seqs x {r['max_model_len']}, sleep level {r['sleep_level']}"
        )
    return text


def _cell(item: LineItem | None) -> str:
    if item is None:
        return "-"
    return f"{item.gib:.2f}" if item.gib < 10 else f"{item.gib:.1f}"


def _yes(flag: bool) -> str:
    return "yes" if flag else "NO"


def plans_to_json(lora: Plan, full: Plan) -> str:
    """Both plans as one JSON object, ``{"lora": ..., "full": ...}`` (``--json``)."""
    return json.dumps({"lora": lora.to_dict(), "full": full.to_dict()}, indent=2)
