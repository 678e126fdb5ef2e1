"""``agentgym train CONFIG.yaml [key=value ...]`` and ``agentgym sft CONFIG.yaml [key=value ...]``.

With ``--nproc``/``--nnodes`` (a sharded strategy), this process becomes the launcher: it
holds the run folder's lock, starts torchrun, watches the ranks' heartbeats with the
fault detector, and relaunches with ``--resume`` after a failure while
``--max-restarts`` allow (docs/reliability.md).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

#: each command's override examples; tests/agentgym/test_help_examples.py loads them
TRAIN_OVERRIDE_EXAMPLES = (
    "rollout.group_size=16",
    "run.max_steps=50",
    "'envs=[{id: agentgym/MemoryRecall-v0}]'",
)
SFT_OVERRIDE_EXAMPLES = (
    "train.max_steps=200",
    "train.lr=1e-3",
    "'envs=[{id: agentgym/MemoryRecall-v0}]'",
)


#: torchrun, as agentgym launches it (:mod:`agentgym.cli.torchrun`): several nodes
QUIET_TORCHRUN = "agentgym.cli.torchrun"
#: one node's launcher (:mod:`agentgym.cli.local_ranks`)
LOCAL_RANKS = "agentgym.cli.local_ranks"


def _overrides_help(examples: tuple[str, ...]) -> str:
    return (
        "config overrides as section.key=value (values parsed as YAML), before or after "
        f"the flags, e.g. {' '.join(examples)}"
    )


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="RL with LoRA (DAPO, PPO, VAPO, T-PPO, ...) on one or more environments",
        description="Train a policy with LoRA by all-sync RL: DAPO (the default), PPO, "
        "VAPO or T-PPO (algorithm.name), or a registered loss and advantage "
        "(algorithm.loss: dapo, ppo, gspo, cispo, reinforce, apo; algorithm.advantage: "
        "grpo, drgrpo, rloo, reinforce++, apo, apo_group, gae). See docs/trainer.md.",
    )
    p.add_argument("config", nargs="?", help="YAML config file (omit to use the defaults)")
    p.add_argument(
        "overrides", nargs="*", metavar="KEY=VALUE", help=_overrides_help(TRAIN_OVERRIDE_EXAMPLES)
    )
    _run_folder_flags(p, resume=True)
    p.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="run one rank's set-up and first training step here, on CPU, at the model's "
        "real shapes (fake process group and tensors: nothing is allocated or read), and "
        "print its memory beside the planner's; exit 1 if it fails or does not fit",
    )
    p.add_argument(
        "--rank",
        default="0",
        metavar="R[,R...]",
        help="with --dry-run: the ranks to run, one after the other (default 0)",
    )
    g = p.add_argument_group(
        "multi-process (torchrun)",
        "with distributed.strategy deepspeed or fsdp2; the command re-launches itself "
        "through torchrun (see docs/distributed.md)",
    )
    g.add_argument("--nproc", type=int, default=None, help="processes per node (GPUs per node)")
    g.add_argument(
        "--nnodes", type=int, default=_env_int("NNODES", 1), help="number of nodes [$NNODES or 1]"
    )
    g.add_argument(
        "--node-rank",
        type=int,
        default=_env_int("NODE_RANK", 0),
        help="this node [$NODE_RANK or 0]",
    )
    g.add_argument(
        "--master-addr",
        default=os.environ.get("MASTER_ADDR"),
        help="node 0's address, multi-node only [$MASTER_ADDR]",
    )
    g.add_argument(
        "--master-port",
        type=int,
        default=_env_int("MASTER_PORT", 29500),
        help="node 0's port [$MASTER_PORT or 29500]",
    )
    g.add_argument(
        "--max-restarts",
        type=int,
        default=None,
        metavar="K",
        help="relaunch with --resume up to K times after a failure (a faulty or crashed "
        "rank); sets distributed.max_restarts",
    )
    p.set_defaults(func=cmd_train)

    p = sub.add_parser(
        "sft",
        help="supervised warm start on worked solutions or oracle turns of the envs",
        description="Supervised fine-tuning on examples the environments provide; writes "
        "RUN/model for `agentgym train model.path=RUN/model`, a checkpoint every "
        "train.save_every steps, plots/. A first Ctrl-C / SIGTERM stops after the step with "
        "a checkpoint; --resume continues. See docs/trainer.md.",
    )
    p.add_argument("config", nargs="?", help="YAML config file (omit to use the defaults)")
    p.add_argument(
        "overrides", nargs="*", metavar="KEY=VALUE", help=_overrides_help(SFT_OVERRIDE_EXAMPLES)
    )
    _run_folder_flags(p, resume=True)
    p.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    p.set_defaults(func=cmd_sft)


def _run_folder_flags(p: argparse.ArgumentParser, *, resume: bool) -> None:
    """--overwrite (and for train --resume, --resume-if-present): a run folder holds one
    run (trainers/run_folder.py)."""
    if resume:
        p.add_argument(
            "--resume",
            action="store_true",
            help="continue from the run folder's latest checkpoint (an error if it has none)",
        )
        p.add_argument(
            "--resume-if-present",
            action="store_true",
            help="resume when the run folder has a checkpoint, else start (for scripts)",
        )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="delete the run already in run.output_dir (only the files agentgym wrote: "
        "they are listed) and start over",
    )


def _split(args: argparse.Namespace) -> tuple[str | None, list[str]]:
    """A first positional containing '=' is an override, not a config file."""
    config, overrides = args.config, list(args.overrides)
    if config is not None and "=" in config and not config.endswith((".yaml", ".yml")):
        overrides.insert(0, config)
        config = None
    return config, overrides


def _print_config(cfg: object) -> None:

    from agentgym import config_to_yaml

    print(config_to_yaml(cfg), end="")


def cmd_train(args: argparse.Namespace) -> int:
    from agentgym import load_config
    from agentgym.plan import PlanConfig  # the trainer's config, its plan: section checked

    config, overrides = _split(args)
    if getattr(args, "max_restarts", None) is not None:
        overrides.append(f"distributed.max_restarts={args.max_restarts}")
    cfg = load_config(PlanConfig, config, overrides)
    if args.print_config:
        _print_config(cfg)
        _startup_checks(cfg, args)  # every check that needs no model, as a launch runs them
        return 0
    _startup_checks(cfg, args)  # before any process starts
    if getattr(args, "dry_run", False):
        return _dry_run(cfg, args.rank)
    from agentgym.trainers import shutdown, under_torchrun

    if under_torchrun():
        from agentgym.health import guard_parent

        guard_parent()  # a rank dies with torchrun, and exits if its launcher is gone

    sharded = cfg.distributed.strategy != "none"
    if not under_torchrun() and (sharded or (args.nproc or 1) > 1 or args.nnodes > 1):
        if not sharded:
            from agentgym import ConfigError

            raise ConfigError(
                "--nproc/--nnodes need a sharded strategy: add distributed.strategy=deepspeed "
                "or distributed.strategy=fsdp2."
            )
        from agentgym.trainers import Layout, clean_failed_start, folder_state

        layout = Layout.from_config(cfg.distributed)  # once, here: not once per rank
        if not layout.is_default:
            layout.check_world((args.nproc or 1) * args.nnodes)
        _preflight(cfg)
        existed = folder_state(cfg.run.output_dir)
        rc = _launch(args, config, overrides, cfg, _prepare(args, cfg, "train"))
        if rc == 2 and clean_failed_start(cfg.run.output_dir, existed):
            print(f"[agentgym train] removed {cfg.run.output_dir}: the run did not start")
        return rc

    from agentgym.health import RunStopped
    from agentgym.trainers import DAPOTrainer, clean_failed_start, folder_state

    existed = folder_state(cfg.run.output_dir)
    resume = _prepare(args, cfg, "train")
    try:
        trainer = DAPOTrainer(cfg, resume=resume)
    except BaseException:
        if not under_torchrun() and clean_failed_start(cfg.run.output_dir, existed):
            print(f"[agentgym train] removed {cfg.run.output_dir}: the run did not start")
        raise
    ok, info = False, trainer.dist
    try:
        if trainer.resumed_from is not None and info.is_main:
            print(f"[agentgym train] resumed from {trainer.resumed_from} (step {trainer.step})")
        trainer.train()
        ok = True
    except RunStopped as e:
        if info.is_main:
            print(f"[agentgym train] {e}", file=sys.stderr)
        return e.exit_code
    finally:
        del trainer  # its process groups must go with the process group (see shutdown)
        shutdown(info, wait_for_all=ok)
    if info.is_main:
        print(f"[agentgym train] done: {_written(cfg.run.output_dir)}")
    return 0


def _dry_run(cfg: Any, ranks: str) -> int:
    """``--dry-run``: each rank's set-up and first step here, beside the planner
    (:func:`agentgym.plan.dry_run_report`); 1 when one fails or does not fit."""
    from agentgym import ConfigError
    from agentgym.plan import dry_run_report, exit_status

    try:
        chosen = [int(r) for r in ranks.split(",") if r.strip()]
    except ValueError:
        raise ConfigError(
            f"--rank takes ranks separated by commas (0,7,47), got {ranks!r}."
        ) from None
    return exit_status(dry_run_report(cfg, chosen))


def _world_size(cfg: Any, args: argparse.Namespace) -> int:
    """The processes of the run: torchrun's world in a rank, ``--nproc x --nnodes`` when
    given, else the device mesh's size, else one."""
    from agentgym.trainers import Layout, under_torchrun

    if under_torchrun():
        return int(os.environ["WORLD_SIZE"])
    if args.nproc is not None or args.nnodes > 1:
        return (args.nproc or 1) * args.nnodes
    if cfg.distributed.strategy == "none":
        return 1
    return Layout.from_config(cfg.distributed).world_size


def _startup_checks(cfg: Any, args: argparse.Namespace) -> None:
    """What a launch checks before any process loads the model: the collective timeout
    against the planner's rollout estimate, the rollout engine's place on the ranks
    against the trainer's (its lines on stderr; a mismatch raises), and whether this
    machine's vLLM serves the model (``--print-config``, which validates a config for
    another machine, only says so)."""
    from agentgym import ConfigError
    from agentgym.plan import check_collective_timeout, check_detector
    from agentgym.trainers import check_launch, engine_placement, refuse_unservable, under_torchrun

    check_collective_timeout(cfg)
    world = _world_size(cfg, args)
    warnings = check_detector(cfg) + check_launch(cfg, world_size=world, nnodes=args.nnodes)
    lines = engine_placement(cfg, world) + [f"warning: {w}" for w in warnings]
    try:
        refuse_unservable(cfg)
    except ConfigError as e:
        if not (args.print_config or getattr(args, "dry_run", False)):  # for another machine
            raise
        lines.append(f"not on this machine: {e}")
    if lines and not under_torchrun():
        for line in lines:
            print(f"[agentgym train] {line}", file=sys.stderr)


def _preflight(cfg: Any) -> None:
    """What every rank would find first, found once here before any process starts (a
    missing model, an unknown env or env argument): one message, no folder."""
    from agentgym import UnknownNameError, env_arguments, resolve_env_id
    from agentgym.generation import check_model_folder

    if cfg.model.path:
        check_model_folder(cfg.model.path, what="model.path", made_by=cfg.model.made_by or "")
    for spec in cfg.envs:
        env_id = resolve_env_id(spec.id)
        known = env_arguments(env_id)
        for name in spec.kwargs:
            if name not in known:
                raise UnknownNameError(
                    f"argument for {env_id}",
                    name,
                    known,
                    hint=f"See `agentgym info {env_id}` for what each argument does.",
                )


def _written(folder: str) -> str:
    """The run folder and what the run left in it (of metrics.jsonl, checkpoints/,
    plots/): only what is there."""
    parts = ["metrics.jsonl", "checkpoints", "plots"]
    there = [
        p + ("/" if p != "metrics.jsonl" else "") for p in parts if (Path(folder) / p).exists()
    ]
    return f"{folder} ({', '.join(there)})" if there else f"{folder} (no steps were run)"


def _prepare(args: argparse.Namespace, cfg: Any, command: str) -> bool:
    """The run folder's rule (trainers/run_folder.py) in the process the user started;
    ranks under torchrun and the launchers of nodes other than 0 skip it (node 0's
    launcher applies it to the shared folder). Returns whether to resume."""
    from agentgym.trainers import has_checkpoint, under_torchrun

    if under_torchrun() or getattr(args, "node_rank", 0) != 0:
        if getattr(args, "resume_if_present", False):
            return has_checkpoint(cfg.run.output_dir)
        return bool(getattr(args, "resume", False))
    from agentgym import config_to_dict
    from agentgym.trainers import prepare_run_folder

    return prepare_run_folder(
        cfg.run.output_dir,
        command=command,
        resume=getattr(args, "resume", False),
        resume_if_present=getattr(args, "resume_if_present", False),
        overwrite=args.overwrite,
        reads=[getattr(cfg.model, "path", None)],
        settings=config_to_dict(cfg),
        max_steps=("run.max_steps", cfg.run.max_steps)
        if command == "train"
        else ("train.max_steps", cfg.train.max_steps),
    )


def launch_command(argv: list[str], args: argparse.Namespace) -> list[str]:
    """The command that starts the ranks of ``agentgym ARGV``: on one node without GPUs
    they fork from :mod:`agentgym.cli.local_ranks` (torch imported once;
    ``AGENTGYM_LAUNCHER=torchrun`` uses torchrun instead), elsewhere torchrun starts them."""
    from agentgym.cli.local_ranks import forks_here
    from agentgym.trainers import torchrun_command

    nproc = args.nproc or 1
    if (args.nnodes or 1) == 1 and forks_here():
        return [sys.executable, "-m", LOCAL_RANKS, str(nproc), *argv]
    cmd = torchrun_command(
        argv,
        nproc=nproc,
        nnodes=args.nnodes,
        node_rank=args.node_rank,
        master_addr=args.master_addr,
        master_port=args.master_port,
    )
    # torchrun itself, without its traceback when a rank stopped on purpose
    return [QUIET_TORCHRUN if part == "torch.distributed.run" else part for part in cmd]


def _launch(
    args: argparse.Namespace, config: str | None, overrides: list[str], cfg: Any, resume: bool
) -> int:
    """Run this same command on ``--nproc`` ranks (:func:`launch_command`), supervised
    (the fault detector, restarts); returns 0, the status of a stop on a fault, or the
    ranks' launcher's status."""
    from pathlib import Path

    from agentgym.health import LaunchPlan, RunLock, supervise

    argv = ["train", *([config] if config else []), *overrides]
    # what torchrun sets anyway when it is unset, without its banner on every run (each
    # rank sets torch's own threads from run.threads)
    os.environ.setdefault("OMP_NUM_THREADS", "1")

    def command(resume: bool) -> list[str]:
        return launch_command([*argv, *(["--resume"] if resume else [])], args)

    run_dir = Path(cfg.run.output_dir)
    health = cfg.health
    plan = LaunchPlan(
        command=command(resume),
        resume_command=command(True),
        run_dir=run_dir,
        settings=health.detector_settings(),
        heartbeat_s=health.heartbeat_s,
        on_fault=cfg.distributed.on_fault,
        max_restarts=cfg.distributed.max_restarts,
        stop_grace_s=health.stop_grace_s,
        detect=health.enabled,
    )
    if args.node_rank != 0:  # node 0's launcher holds the (shared) run folder's lock
        return supervise(plan)
    with RunLock(run_dir).acquire(role=f"agentgym train --nproc {args.nproc or 1} (launcher)"):
        return supervise(plan)


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    try:
        return int(value) if value else default
    except ValueError:
        return default


def cmd_sft(args: argparse.Namespace) -> int:
    from agentgym import load_config
    from agentgym.trainers import SFTConfig

    config, overrides = _split(args)
    cfg = load_config(SFTConfig, config, overrides)
    if args.print_config:
        _print_config(cfg)
        return 0
    from agentgym.health import RunStopped
    from agentgym.trainers import clean_failed_start, folder_state, run_sft

    existed = folder_state(cfg.run.output_dir)
    resume = _prepare(args, cfg, "sft")
    try:
        run_sft(cfg, resume=resume)
    except RunStopped as e:  # a SIGTERM / Ctrl-C: stopped after a step, with a checkpoint
        print(f"[agentgym sft] {e}", file=sys.stderr)
        return e.exit_code
    except BaseException:
        if clean_failed_start(cfg.run.output_dir, existed):
            print(f"[agentgym sft] removed {cfg.run.output_dir}: the run did not start")
        raise
    return 0
