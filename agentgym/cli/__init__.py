"""The ``agentgym`` command line.

Each subcommand lives in its own module ``agentgym.cli.<name>`` that defines
``add_parser(subparsers)`` (which sets ``func`` on its parser) and keeps heavy imports
inside its handler, so ``agentgym --help`` stays fast. Subcommands whose module is not
installed yet are simply not offered. Nothing imports this package.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

__all__ = ["build_parser", "console", "main"]

#: subcommand module names, in help order
SUBCOMMANDS: tuple[str, ...] = (
    "envs",  # list, info, check-env, play
    "evaluate",  # eval
    "new_env",  # new-env
    "sandbox",  # sandbox build-image / doctor / prune
    "train",  # train, sft
    "bench",  # bench, leaderboard
    "plan",  # plan
    "apo",  # apo-values
    "serve",  # serve (OpenAI-compatible server)
    "episodes",  # episodes export
    "appgen",  # appgen new-task / check-task
)


#: commands that play envs, possibly in Docker sandboxes made on other threads
PLAYS_ENVS = frozenset({"eval", "bench", "play", "train"})


def _sandboxes_go_with_signals() -> None:
    """SIGTERM / SIGINT remove this process's sandbox containers. The sandbox installs
    that itself when its first container starts, but only on the main thread (signal
    handlers can be installed nowhere else) and envs make their sandboxes on env threads:
    a SIGTERM to ``agentgym eval`` left its containers running."""
    from agentgym.sandbox import install_signal_handlers

    install_signal_handlers()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentgym",
        description="Agentic multi-conversation environments and an all-sync RL trainer "
        "(DAPO, PPO, VAPO, T-PPO) for LLM agents.",
    )
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        try:
            module = importlib.import_module(f"agentgym.cli.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"agentgym.cli.{name}":
                continue
            raise
        module.add_parser(sub)
    return parser


def _version() -> str:
    from agentgym import __version__

    return f"agentgym {__version__}"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    # key=value overrides may come after flags (`train CONFIG --resume run.max_steps=3`),
    # as Hydra and TRL users expect; anything else unknown gets argparse's own error
    overrides = getattr(args, "overrides", None)
    if extra and isinstance(overrides, list) and all("=" in e and e[0] != "-" for e in extra):
        overrides.extend(extra)
        extra = []
    # `serve --engine vllm` passes vLLM's own flags through (--tensor-parallel-size 2)
    engine_args = getattr(args, "engine_args", None)
    if extra and isinstance(engine_args, list) and extra[0].startswith("--"):
        engine_args.extend(extra)
        extra = []
    if extra:
        args = parser.parse_args(argv)  # exits with "unrecognized arguments"
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        from agentgym import AgentGymError
    except KeyboardInterrupt:
        return 130
    try:
        if args.command in PLAYS_ENVS:
            _sandboxes_go_with_signals()
        return int(args.func(args) or 0)
    except AgentGymError as e:
        print(f"agentgym {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (`agentgym plan ... | head`): stop quietly, as Unix tools do;
        # stdout goes to /dev/null so that the interpreter's final flush cannot fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def console() -> None:
    """The ``agentgym`` program (and ``python -m agentgym``): :func:`main`, then the
    process ends without the interpreter's teardown (:mod:`agentgym.cli.fast_exit`)."""
    status = main()
    from agentgym.cli.fast_exit import exit_now

    exit_now(status)


if __name__ == "__main__":
    console()
