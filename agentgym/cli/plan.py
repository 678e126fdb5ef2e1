"""``agentgym plan CONFIG [--gpus N --gpu-mem GiB] [--json]``: will this layout fit?"""

from __future__ import annotations

import argparse
import json


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plan",
        help="per-GPU memory plan of a LoRA run (and of a full fine-tune, for comparison)",
        description=(
            "Estimate per-GPU memory for the config's LoRA layout (base weights, adapter, "
            "gradients, optimizer state, activations, rollout KV cache, overheads) and for "
            "full fine-tuning of the same model. Exits 0 whether or not it fits."
        ),
    )
    p.add_argument("config", help="a YAML config with model.architecture, lora, parallel, ...")
    p.add_argument(
        "--gpus",
        type=int,
        default=None,
        help="GPU count (default: hardware.gpus); the data-parallel sizes are rescaled",
    )
    p.add_argument(
        "--gpu-mem", type=float, default=None, help="GiB per GPU (default: hardware.gpu_mem_gib)"
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_plan)


def cmd_plan(args: argparse.Namespace) -> int:
    from pathlib import Path

    import yaml

    from agentgym import ConfigError
    from agentgym.trainers.plan import format_plans, plan_both, plan_config_from_dict

    path = Path(args.config)
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} not found; pass the path to a YAML config.")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML ({e}).") from e
    if args.gpus is not None and args.gpus < 1:
        raise ConfigError("--gpus must be >= 1.")
    if args.gpu_mem is not None and args.gpu_mem <= 0:
        raise ConfigError("--gpu-mem must be a positive number of GiB.")
    config = plan_config_from_dict(raw).with_hardware(args.gpus, args.gpu_mem)
    lora, full = plan_both(config)
    if args.json:
        print(json.dumps({"lora": lora.to_dict(), "full": full.to_dict()}, indent=2))
    else:
        print(format_plans(lora, full))
    return 0
