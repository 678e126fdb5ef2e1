"""``agentgym plan CONFIG [key=value ...] [--gpus N --gpu-mem GiB] [--json]``: will this layout fit?"""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plan",
        help="per-GPU memory plan of a LoRA run (and of a full fine-tune, for comparison)",
        description=(
            "Estimate per-GPU memory for the config's LoRA layout (base weights, adapter, "
            "gradients, optimizer state, activations, rollout KV cache, overheads) and for "
            "full fine-tuning of the same model. The config is a trainer config (the one "
            "agentgym train reads) with a plan: section. Exits 0 whether or not it fits. "
            "See docs/plan.md."
        ),
    )
    p.add_argument("config", help="a trainer config (YAML) with model.architecture and plan:")
    p.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="config overrides as section.key=value, as in agentgym train, e.g. "
        "plan.gpu_mem_gib=141 rollout.engine_options.max_num_seqs=512",
    )
    p.add_argument(
        "--gpus",
        type=int,
        default=None,
        help="GPU count (default: plan.gpus); the data-parallel sizes are rescaled",
    )
    p.add_argument(
        "--gpu-mem", type=float, default=None, help="GiB per GPU (default: plan.gpu_mem_gib)"
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_plan)


def cmd_plan(args: argparse.Namespace) -> int:
    from agentgym import ConfigError, load_config
    from agentgym.trainers import TrainConfig
    from agentgym.trainers.plan import format_plans, plan_both, plan_inputs, plans_to_json

    if args.gpus is not None and args.gpus < 1:
        raise ConfigError("--gpus must be >= 1.")
    if args.gpu_mem is not None and args.gpu_mem <= 0:
        raise ConfigError("--gpu-mem must be a positive number of GiB.")
    cfg = load_config(TrainConfig, args.config, args.overrides)
    lora, full = plan_both(plan_inputs(cfg, gpus=args.gpus, gpu_mem_gib=args.gpu_mem))
    print(plans_to_json(lora, full) if args.json else format_plans(lora, full))
    return 0
