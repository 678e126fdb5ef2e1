"""``agentgym train CONFIG.yaml [key=value ...]`` and ``agentgym sft CONFIG.yaml [key=value ...]``."""

from __future__ import annotations

import argparse

_OVERRIDES_HELP = (
    "config overrides as section.key=value (values parsed as YAML), e.g. "
    "rollout.group_size=16 run.max_steps=50 'envs=[{id: agentgym/MemoryRecall-v0}]'"
)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="all-sync DAPO with LoRA on one or more environments",
        description="Train a policy with all-sync DAPO (LoRA). See docs/trainer.md.",
    )
    p.add_argument("config", nargs="?", help="YAML config file (omit to use the defaults)")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help=_OVERRIDES_HELP)
    p.add_argument(
        "--resume", action="store_true", help="continue from the run's latest checkpoint"
    )
    p.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser(
        "sft",
        help="supervised warm start on worked solutions or oracle turns of the envs",
        description="Supervised fine-tuning on examples the environments provide. See docs/trainer.md.",
    )
    p.add_argument("config", nargs="?", help="YAML config file (omit to use the defaults)")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help=_OVERRIDES_HELP)
    p.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    p.set_defaults(func=cmd_sft)


def _split(args: argparse.Namespace) -> tuple[str | None, list[str]]:
    """A first positional containing '=' is an override, not a config file."""
    config, overrides = args.config, list(args.overrides)
    if config is not None and "=" in config and not config.endswith((".yaml", ".yml")):
        overrides.insert(0, config)
        config = None
    return config, overrides


def _print_config(cfg: object) -> None:
    import yaml

    from agentgym.trainers.config import to_dict

    print(yaml.safe_dump(to_dict(cfg), sort_keys=False), end="")


def cmd_train(args: argparse.Namespace) -> int:
    from agentgym.trainers.config import TrainConfig, load_config

    config, overrides = _split(args)
    cfg = load_config(TrainConfig, config, overrides)
    if args.print_config:
        _print_config(cfg)
        return 0
    from agentgym.trainers.loop import DAPOTrainer

    trainer = DAPOTrainer(cfg, resume=args.resume)
    if trainer.resumed_from is not None:
        print(f"[agentgym train] resumed from {trainer.resumed_from} (step {trainer.step})")
    trainer.train()
    print(f"[agentgym train] done: {cfg.run.output_dir} (metrics.jsonl, checkpoints/, plots/)")
    return 0


def cmd_sft(args: argparse.Namespace) -> int:
    from agentgym.trainers.config import SFTConfig, load_config

    config, overrides = _split(args)
    cfg = load_config(SFTConfig, config, overrides)
    if args.print_config:
        _print_config(cfg)
        return 0
    from agentgym.trainers.sft import run_sft

    run_sft(cfg)
    return 0
