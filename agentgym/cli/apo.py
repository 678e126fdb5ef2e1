"""``agentgym apo-values CONFIG [key=value ...]``: A*PO's offline value stage."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "apo-values",
        help="A*PO's first stage: V* of every training prompt from reference samples",
        description=(
            "Sample algorithm.apo_value_samples replies per training prompt from the "
            "configured model (the reference policy) and cache V* = beta log mean exp(r / "
            "beta) per prompt (algorithm.apo_value_beta) for `agentgym train` with "
            "algorithm.advantage=apo. Resumable: cached prompts are not redone. See "
            "docs/trainer.md."
        ),
    )
    p.add_argument("config", nargs="?", help="the training run's YAML config")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="as for agentgym train")
    p.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    p.set_defaults(func=cmd_apo_values)


def cmd_apo_values(args: argparse.Namespace) -> int:
    from agentgym import config_to_yaml, load_config
    from agentgym.trainers import TrainConfig, compute_apo_values

    config, overrides = args.config, list(args.overrides)
    if config is not None and "=" in config and not config.endswith((".yaml", ".yml")):
        overrides.insert(0, config)
        config = None
    cfg = load_config(TrainConfig, config, overrides)
    if args.print_config:
        print(config_to_yaml(cfg), end="")
        return 0
    cache = compute_apo_values(cfg, progress=cfg.run.progress)
    print(f"[agentgym apo-values] {len(cache)} values in {cache.path}")
    return 0
