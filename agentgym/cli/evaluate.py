"""``agentgym eval ENV --policy P --episodes N``: roll a policy out and summarise."""

from __future__ import annotations

import argparse
import json
import math
import sys

from agentgym.cli.envs import add_env_args, parse_env_args


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="evaluate a policy on an environment")
    p.add_argument("env_id")
    p.add_argument(
        "--policy",
        default="oracle",
        help="oracle | random | scripted:MODULE:FUNC | openai:MODEL[@URL] | hf:PATH[@ADAPTER]",
    )
    p.add_argument("--episodes", type=int, default=8, help="number of tasks (seeds)")
    p.add_argument("--seed", type=int, default=0, help="first reset seed")
    p.add_argument("--group-size", type=int, default=1, help="samples per task")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=1024, help="per policy call")
    p.add_argument("--temperature", type=float, default=0.0)
    add_env_args(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--out", default=None, help="write the episodes to this JSONL file")
    p.add_argument(
        "--retries",
        type=int,
        default=2,
        help="play an episode that failed for infrastructure reasons (sandbox, grader, "
        "endpoint) again up to this many times; still failing, it is reported and not "
        "scored, and the exit status is 1",
    )
    p.set_defaults(func=cmd_eval)


def summarise(env_id: str, policy: str, played: list) -> dict:
    """Reward and length statistics over the scored episodes; failed ones are counted
    apart (by reason), never as zero rewards."""
    episodes = [e for e in played if not e.failed]
    failed = [e for e in played if e.failed]
    reasons: dict[str, int] = {}
    for e in failed:
        reasons[e.failure.reason] = reasons.get(e.failure.reason, 0) + 1
    n = len(episodes)
    rewards = [e.reward for e in episodes]
    mean = sum(rewards) / n if n else float("nan")
    sd = math.sqrt(sum((r - mean) ** 2 for r in rewards) / (n - 1)) if n > 1 else 0.0
    convs = [e.num_conversations for e in episodes]
    return {
        "env_id": env_id,
        "policy": policy,
        "episodes": n,
        "mean_reward": mean,
        "reward_stderr": sd / math.sqrt(n) if n else float("nan"),
        "min_reward": min(rewards, default=float("nan")),
        "max_reward": max(rewards, default=float("nan")),
        "mean_conversations": sum(convs) / n if n else float("nan"),
        "min_conversations": min(convs, default=0),
        "mean_turns": sum(len(e.turns) for e in episodes) / n if n else float("nan"),
        "mean_policy_tokens": sum(e.num_policy_tokens for e in episodes) / n if n else float("nan"),
        "terminated": sum(e.terminated for e in episodes),
        "truncated": sum(e.truncated for e in episodes),
        "failed": len(failed),
        "failed_by_reason": reasons,
    }


def cmd_eval(args: argparse.Namespace) -> int:
    from agentgym import ConfigError, SamplingParams, make_policy, resolve_env_id, rollout

    if args.episodes < 1:
        raise ConfigError("--episodes must be >= 1.")
    if args.retries < 0:
        raise ConfigError("--retries must be >= 0.")
    env_id = resolve_env_id(args.env_id)
    policy = make_policy(args.policy)
    if args.out:
        open(args.out, "w").close()  # a fresh file per run
    episodes = rollout(
        env_id,
        policy,
        seeds=range(args.seed, args.seed + args.episodes),
        group_size=args.group_size,
        sampling=SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature),
        concurrency=args.concurrency,
        env_kwargs=parse_env_args(args.env_arg),
        out=args.out,
        progress=not args.json,
        retries=args.retries,
    )
    summary = summarise(env_id, args.policy, episodes)
    if args.json:
        print(json.dumps(summary))
    else:
        for k, v in summary.items():
            print(f"{k:>20}: {v:.4f}" if isinstance(v, float) else f"{k:>20}: {v}")
    sys.stdout.flush()
    if summary["failed"]:
        first = next(e for e in episodes if e.failed)
        print(
            f"agentgym eval: {summary['failed']} of {len(episodes)} episodes failed for "
            f"infrastructure reasons after {args.retries} retries ({summary['failed_by_reason']}); "
            f"they are not scored{' and are in ' + args.out + ' with their failure record' if args.out else ''}. "
            f"First: seed {first.seed}: {first.failure.message}",
            file=sys.stderr,
        )
        return 1
    return 0
