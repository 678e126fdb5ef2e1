"""``agentgym list | info ENV | check-env ENV | play ENV``."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "list",
        help="list the registered agentgym environments",
        description="List every registered agentgym environment (built in, or from an "
        "installed plugin package) with where it comes from and its entry point.",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser(
        "info",
        help="show an environment's spec sheet and arguments",
        description="Print an environment's spec sheet (its docstring: description, "
        "action, observation, rewards, episode end, arguments, version history) and the "
        "keyword arguments it is registered with.",
    )
    p.add_argument("env_id", help=_ENV_ID_HELP)
    p.set_defaults(func=cmd_info)

    p = sub.add_parser(
        "check-env",
        help="run the environment checker on an environment",
        description="Make the environment and run Gymnasium's checker and agentgym's "
        "text-env contract on it (spaces, reset/step, same seed + same actions gives the "
        "same episode, memory turns, render and close); exit status 1 on a failure.",
    )
    p.add_argument("env_id", help=_ENV_ID_HELP)
    p.add_argument(
        "--seed", type=int, default=0, help="reset seed of the checked episodes (default: 0)"
    )
    add_env_args(p)
    p.set_defaults(func=cmd_check_env)

    p = sub.add_parser(
        "play",
        help="play an environment yourself: type the actions",
        description="Play an episode yourself in the terminal: each observation is "
        "printed and you type the reply (end it with a line holding only '.'; Ctrl-D "
        "quits); the reward and its breakdown are shown at the end.",
    )
    p.add_argument("env_id", help=_ENV_ID_HELP)
    p.add_argument("--seed", type=int, default=None, help="reset seed (default: a random task)")
    add_env_args(p)
    p.set_defaults(func=cmd_play)


#: the env id argument's help
_ENV_ID_HELP = "a registered env id, e.g. agentgym/MemoryRecall-v0 (see `agentgym list`)"


def add_env_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--env-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="keyword argument for gym.make (VALUE parsed as JSON where it parses); repeatable",
    )


def parse_env_args(items: list[str], base: dict[str, Any] | None = None) -> dict[str, Any]:
    """``["k=v", ...]`` -> kwargs (over ``base``, which is not changed); values are JSON
    where they parse, else strings. A dotted key sets one field of a dict argument:
    ``memory.max_conversations=8`` keeps the rest of ``base["memory"]``."""
    from agentgym import ConfigError

    out: dict[str, Any] = dict(base or {})
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key or key.startswith(".") or key.endswith("."):
            raise ConfigError(f"--env-arg {item!r}: use KEY=VALUE, e.g. --env-arg max_turns=5.")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        head, dot, field = key.partition(".")
        if not dot:
            out[key] = value
            continue
        inner = out.get(head)
        if inner is None or inner is True:
            inner = {}
        if not isinstance(inner, dict):
            raise ConfigError(
                f"--env-arg {item!r}: {head} is {inner!r}, not a dict of options; pass the "
                f"whole value instead, e.g. --env-arg '{head}={{\"{field}\": {raw}}}'."
            )
        out[head] = parse_env_args([f"{field}={raw}"], inner)
    return out


def cmd_list(args: argparse.Namespace) -> int:
    import gymnasium as gym

    from agentgym import agentgym_env_ids, plugin_of

    ids = agentgym_env_ids()
    rows = []
    for env_id in ids:
        spec = gym.registry[env_id]
        rows.append(
            {
                "id": env_id,
                "entry_point": spec.entry_point
                if isinstance(spec.entry_point, str)
                else repr(spec.entry_point),
                "plugin": plugin_of(env_id),
            }
        )
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    width = max((len(r["id"]) for r in rows), default=0)
    width = max(width, len("ENV ID"))
    print(f"{'ENV ID':<{width}}  {'FROM':<20}  ENTRY POINT")
    for r in rows:
        src = f"plugin {r['plugin']}" if r["plugin"] else "built-in"
        print(f"{r['id']:<{width}}  {src:<20}  {r['entry_point']}")
    return 0


def _env_class(env_id: str):
    import importlib

    import gymnasium as gym

    from agentgym import resolve_env_id

    env_id = resolve_env_id(env_id)
    spec = gym.registry[env_id]
    ep = spec.entry_point
    if isinstance(ep, str):
        module, _, name = ep.partition(":")
        return env_id, spec, getattr(importlib.import_module(module), name)
    return env_id, spec, ep


def cmd_info(args: argparse.Namespace) -> int:
    import inspect

    env_id, spec, cls = _env_class(args.env_id)
    print(f"{env_id}  ({spec.entry_point})\n")
    print(inspect.cleandoc(cls.__doc__ or "(no docstring)"))
    if spec.kwargs:
        print(f"\nRegistered kwargs: {spec.kwargs}")
    return 0


def cmd_check_env(args: argparse.Namespace) -> int:
    from agentgym import EnvCheckError, check_env, make

    env = make(args.env_id, **parse_env_args(args.env_arg))
    try:
        report = check_env(env, seed=args.seed)
    except EnvCheckError as e:
        print(f"FAIL {e}", file=sys.stderr)
        return 1
    for name in report.passed:
        print(f"ok   {name}")
    for w in report.warnings:
        print(f"warn {w}")
    ep = report.episodes[0] if report.episodes else {}
    print(
        f"{report.env_id}: passed {len(report.passed)} checks"
        + (
            f" (episode: reward {ep['reward']:.3f}, {ep['steps']} steps, "
            f"{ep['conversations']} conversation(s))"
            if ep
            else ""
        )
    )
    return 0


def cmd_play(args: argparse.Namespace) -> int:
    """A person plays: the observation is printed, the reply is typed (end with a line '.')."""
    from agentgym import ConfigError, ConversationEnv, make

    if args.seed is not None and args.seed < 0:
        raise ConfigError(f"--seed must be >= 0 (a reset seed), got {args.seed}.")
    env = make(args.env_id, **parse_env_args(args.env_arg))
    if not isinstance(env.unwrapped, ConversationEnv):
        env.close()
        raise ConfigError(
            f"{args.env_id} is not a text environment: `agentgym play` plays agentgym envs "
            "(chat observations, text actions). `agentgym list` shows them."
        )
    obs, info = env.reset(seed=args.seed)
    shown = 0
    conversation = -1
    try:
        while True:
            if info["conversation"] != conversation:
                conversation = info["conversation"]
                shown = 0
                print(f"\n===== conversation {conversation} =====")
            for m in obs[shown:]:
                print(f"\n[{m.role}]\n{m.content}")
            kind = info["turn_kind"]
            print(
                f"\n--- your {'SUMMARY' if kind == 'summary' else 'reply'} "
                "(finish with a line containing only '.'; Ctrl-D to quit) ---"
            )
            lines: list[str] = []
            for line in sys.stdin:
                if line.rstrip("\n") == ".":
                    break
                lines.append(line)
            else:
                if not lines:
                    print("\nbye")
                    return 0
            action = "".join(lines).rstrip("\n")
            shown = len(obs) + 1  # the reply we just typed is echoed in the next obs
            obs, reward, terminated, truncated, info = env.step(action)
            if terminated or truncated:
                print(
                    f"\n===== episode over: reward {reward:.3f} "
                    f"({'terminated' if terminated else 'truncated'}) ====="
                )
                print(json.dumps(info.get("reward_breakdown", {}), indent=2, ensure_ascii=False))
                return 0
    finally:
        env.close()
