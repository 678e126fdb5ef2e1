"""``agentgym plan CONFIG [key=value ...] [--gpus N --gpu-mem GiB] [--search] [--json]``: will
this layout fit, how long will a step take, and which layout is fastest?"""

from __future__ import annotations

import argparse

#: what every plan says about itself: the figures are models, not runs
NOT_RUN = (
    "These figures are an estimate from the planner's memory and time models (docs/plan.md), "
    "not a measurement: training at this scale has not run on GPUs yet (vLLM on the "
    "trainer's ranks has run on CPU only; `agentgym train CONFIG --dry-run --rank R` runs one "
    "rank's set-up and step at the real shapes on one CPU)."
)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plan",
        help="per-GPU memory and step time of a LoRA run; --search ranks every layout",
        description=(
            "Estimate per-GPU memory for the config's LoRA layout (base weights, adapter, "
            "gradients, optimizer state, activations, rollout KV cache, overheads) and for "
            "full fine-tuning of the same model, and the seconds per step of the all-sync "
            "loop by phase. --search enumerates the layouts, drops those that do not fit, "
            "and ranks the rest by modelled step time. The config is a trainer config (the "
            "one agentgym train reads) with a plan: section. Exits 0 whether or not it "
            "fits. See docs/plan.md."
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
    p.add_argument(
        "--search",
        action="store_true",
        help="enumerate layouts (plan.search), keep those that fit, rank by step time",
    )
    p.add_argument(
        "--full-finetune",
        action="store_true",
        help="with --search: search full fine-tuning layouts instead of LoRA",
    )
    p.add_argument("--top", type=int, default=None, help="with --search: layouts to list")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_plan)


def cmd_plan(args: argparse.Namespace) -> int:
    import json

    from agentgym import ConfigError, load_config
    from agentgym.plan import (
        PlanConfig,
        format_plans,
        format_step,
        plan_both,
        plan_inputs,
        plans_to_json,
        step_spec,
        step_time,
    )

    if args.gpus is not None and args.gpus < 1:
        raise ConfigError("--gpus must be >= 1.")
    if args.gpu_mem is not None and args.gpu_mem <= 0:
        raise ConfigError("--gpu-mem must be a positive number of GiB.")
    if args.top is not None and args.top < 1:
        raise ConfigError("--top must be >= 1.")
    if args.full_finetune and not args.search:
        raise ConfigError("--full-finetune goes with --search.")
    cfg = load_config(PlanConfig, args.config, args.overrides)
    inputs = plan_inputs(cfg, gpus=args.gpus, gpu_mem_gib=args.gpu_mem, for_search=args.search)
    if args.search:
        return _search(args, inputs)
    lora, full = plan_both(inputs)
    step = step_time(step_spec(inputs))
    if args.json:
        data = json.loads(plans_to_json(lora, full))
        data["time"] = step.to_dict()
        data["note"] = NOT_RUN
        print(json.dumps(data, indent=2))
    else:
        print(format_plans(lora, full))
        print()
        print(format_step(step, "Step time (time model; docs/plan.md lists its assumptions)"))
        print()
        print(NOT_RUN)
    return 0


def _search(args: argparse.Namespace, inputs) -> int:
    import json

    from agentgym.plan import (
        disaggregated_option,
        format_plans,
        format_search,
        plan_both,
        search_layouts,
        search_to_dict,
    )

    mode = "full" if args.full_finetune else "lora"
    result = search_layouts(inputs, mode=mode, top=args.top)
    disagg = disaggregated_option(inputs, result)
    if args.json:
        print(json.dumps({**search_to_dict(result, disagg), "note": NOT_RUN}, indent=2))
        return 0
    print(format_search(result, disagg))
    if mode == "lora":
        win = result.ranked[0].layout
        lora, full = plan_both(_with_layout(inputs, win))
        print()
        print("the winner's memory, item by item:")
        print(format_plans(lora, full).split("\nAssumptions:")[0])
    print()
    print(NOT_RUN)
    return 0


def _with_layout(inputs, layout):
    from dataclasses import replace

    return replace(
        inputs,
        lora=layout.lora,
        parallel=layout.parallel,
        base_dtype=layout.base_dtype,
        train=replace(
            inputs.train,
            micro_batch_size=layout.micro_batch_size,
            activation_checkpointing=layout.activation_checkpointing,
        ),
        rollout=layout.rollout,
    )
