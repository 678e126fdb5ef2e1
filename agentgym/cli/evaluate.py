"""``agentgym eval ENV --policy P --episodes N``: roll a policy out and summarise."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from agentgym.cli.envs import add_env_args, parse_env_args

#: the reply length without --max-tokens or a run's config
DEFAULT_MAX_TOKENS = 1024


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "eval",
        help="evaluate a policy on an environment",
        description=(
            "Play --episodes tasks with a policy and summarise. Seeds start at the held-out "
            "split (1,000,000, where training never draws) unless --seed says otherwise. "
            "--config RUN/config.yaml takes the run's envs and their arguments, its evaluation "
            "settings (reply length: eval.max_tokens or rollout.max_tokens; temperature: "
            "eval.temperature) and its model tokenizer's token counter, as training did, "
            "whatever the policy kind (hf:, openai:, ...); a flag given explicitly wins, and "
            "a difference from the run's setting is printed."
        ),
    )
    p.add_argument("env_id", nargs="?", help="the env (default with --config: each of the run's)")
    p.add_argument(
        "--config",
        default=None,
        help="a training config (e.g. RUN/config.yaml): its envs, their kwargs and eval seeds",
    )
    p.add_argument(
        "--policy",
        default="oracle",
        help="oracle | random | scripted:MODULE:FUNC | openai:MODEL[@URL] | hf:PATH[@ADAPTER] "
        "(default: oracle, the env's reference solution, not a model)",
    )
    p.add_argument(
        "--episodes", type=int, default=8, help="number of tasks (seeds) (default: %(default)s)"
    )
    p.add_argument(
        "--seed",
        type=int,
        default=None,
        help="first reset seed (default: the held-out split, eval.seed_start with --config)",
    )
    p.add_argument(
        "--group-size", type=int, default=1, help="samples per task (default: %(default)s)"
    )
    p.add_argument(
        "--concurrency",
        type=int,
        default=8,
        help="episodes in flight at once (default: %(default)s)",
    )
    p.add_argument(
        "--max-tokens",
        type=int,
        default=None,
        help=f"per policy call (default: the run's with --config, else {DEFAULT_MAX_TOKENS})",
    )
    p.add_argument(
        "--temperature",
        type=float,
        default=None,
        help="0 is greedy (default: the run's eval.temperature with --config, else 0)",
    )
    add_env_args(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--out",
        default=None,
        help="write the episodes to this JSONL file (its folder is made; NAME.meta.json "
        "beside it records the policy and settings)",
    )
    p.add_argument(
        "--retries",
        type=int,
        default=2,
        help="play an episode that failed for infrastructure reasons (sandbox, grader, "
        "endpoint) again up to this many times; still failing, it is reported and not "
        "scored, and the exit status is 1 (default: %(default)s)",
    )
    p.add_argument(
        "--episode-timeout",
        type=float,
        default=3600.0,
        help="seconds an attempt at an episode may take; one that runs longer (a frozen "
        "sandbox, a silent endpoint) fails with reason episode_timeout and is retried "
        "(default: %(default)s; 0: no deadline)",
    )
    p.set_defaults(func=cmd_eval)


def summarise(env_id: str, policy: str, played: list) -> dict:
    """Reward and length statistics over the scored episodes; failed ones are counted
    apart (by reason), never as zero rewards, and so are the attempts played again."""
    from agentgym import (
        episode_accuracy,
        episode_overlong,
        retried_reasons,
        summary_tokens,
        working_context,
    )

    episodes = [e for e in played if not e.failed]
    failed = [e for e in played if e.failed]
    reasons: dict[str, int] = {}
    for e in failed:
        reasons[e.failure.reason] = reasons.get(e.failure.reason, 0) + 1
    retried = retried_reasons(played)  # failed attempts played again, scored or not
    n = len(episodes)
    rewards = [e.reward for e in episodes]
    accs = [a for a in (episode_accuracy(e) for e in episodes) if a is not None]
    mean = sum(rewards) / n if n else float("nan")
    sd = math.sqrt(sum((r - mean) ** 2 for r in rewards) / (n - 1)) if n > 1 else 0.0
    convs = [e.num_conversations for e in episodes]
    return {
        "env_id": env_id,
        "policy": policy,
        "episodes": n,
        "mean_reward": mean,
        "reward_stderr": sd / math.sqrt(n) if n else float("nan"),
        # the env's own correctness (as the trainer's eval/accuracy); null where it has none
        "accuracy": sum(accs) / len(accs) if accs else None,
        "min_reward": min(rewards, default=float("nan")),
        "max_reward": max(rewards, default=float("nan")),
        "mean_conversations": sum(convs) / n if n else float("nan"),
        "min_conversations": min(convs, default=0),
        "mean_turns": sum(len(e.turns) for e in episodes) / n if n else float("nan"),
        "mean_policy_tokens": sum(e.num_policy_tokens for e in episodes) / n if n else float("nan"),
        "mean_working_context": mean_of([working_context(e) for e in episodes]),
        "mean_summary_tokens": mean_of([summary_tokens(e) for e in episodes]),
        "terminated": sum(e.terminated for e in episodes),
        "truncated": sum(e.truncated for e in episodes),
        "overlong": sum(episode_overlong(e) for e in episodes),
        "failed": len(failed),
        "failed_by_reason": reasons,
        "retried": sum(retried.values()),
        "retried_by_reason": retried,
    }


def mean_of(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def cmd_eval(args: argparse.Namespace) -> int:
    from agentgym import HELD_OUT_SEED_START, ConfigError, make_policy

    if args.episodes < 1:
        raise ConfigError("--episodes must be >= 1.")
    if args.retries < 0:
        raise ConfigError("--retries must be >= 0.")
    if args.episode_timeout < 0:
        raise ConfigError("--episode-timeout must be >= 0 (seconds; 0: no deadline).")
    if args.seed is not None and args.seed < 0:
        raise ConfigError(f"--seed must be >= 0 (a reset seed), got {args.seed}.")
    targets, run = _targets(args)
    first_seed = run.eval.seed_start if run is not None else None
    seed = args.seed if args.seed is not None else (first_seed or HELD_OUT_SEED_START)
    args.max_tokens, args.temperature = _sampling_settings(args, run)
    policy = make_policy(args.policy)
    counter = _run_counter(policy, run) if run is not None else None
    if args.out:
        _start_out(args, [env_id for env_id, _ in targets], seed)
    rc, summaries = 0, []
    for env_id, kwargs in targets:
        if counter is not None and "count_tokens" not in kwargs:
            kwargs = {**kwargs, "count_tokens": counter}
        summary, failed = _evaluate(args, env_id, kwargs, policy, seed)
        summaries.append(summary)
        rc = rc or (1 if failed else 0)
    if args.json:
        print(json.dumps(summaries[0] if len(summaries) == 1 else summaries))
    return rc


def _start_out(args: argparse.Namespace, env_ids: list[str], seed: int) -> None:
    """A fresh ``--out`` file (its folder made), and beside it ``NAME.meta.json``: the
    policy and settings that played it (``agentgym episodes export`` reads the policy)."""
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("")  # a fresh file per run
    meta = {
        "command": "agentgym eval",
        "policy": args.policy,
        "envs": env_ids,
        "first_seed": seed,
        "episodes": args.episodes,
        "group_size": args.group_size,
        "max_tokens": args.max_tokens,
        "temperature": args.temperature,
    }
    out.with_suffix(".meta.json").write_text(json.dumps(meta, indent=1) + "\n")


def _targets(args: argparse.Namespace) -> tuple[list[tuple[str, dict]], object | None]:
    """(env id, make kwargs) to evaluate, and the run's config (``--config``) or None."""
    from agentgym import ConfigError, resolve_env_id

    if not args.config:
        if not args.env_id:
            raise ConfigError(
                "name an env (agentgym eval ENV_ID ...) or pass --config RUN/config.yaml."
            )
        return [(resolve_env_id(args.env_id), parse_env_args(args.env_arg))], None
    from agentgym import load_config
    from agentgym.trainers import TrainConfig

    cfg = load_config(TrainConfig, args.config)
    # --env-arg over the run's kwargs: memory.max_conversations=N changes one field
    envs = [(resolve_env_id(e.id), parse_env_args(args.env_arg, e.kwargs)) for e in cfg.envs]
    if args.env_id:
        wanted = resolve_env_id(args.env_id)
        envs = [e for e in envs if e[0] == wanted]
        if not envs:
            raise ConfigError(
                f"{wanted} is not one of the envs of {args.config}: "
                f"{', '.join(e.id for e in cfg.envs)}."
            )
    return envs, cfg


def _sampling_settings(args: argparse.Namespace, run: object | None) -> tuple[int, float]:
    """The reply length and temperature: the flags, else the run's evaluation settings
    (``--config``), else the defaults; a flag that differs from the run's is said."""
    if run is None:
        max_tokens = args.max_tokens if args.max_tokens is not None else DEFAULT_MAX_TOKENS
        return max_tokens, args.temperature if args.temperature is not None else 0.0
    theirs = {
        "max_tokens": run.eval.max_tokens or run.rollout.max_tokens,
        "temperature": run.eval.temperature,
    }
    flags = {"max_tokens": args.max_tokens, "temperature": args.temperature}
    for key, value in flags.items():
        if value is not None and value != theirs[key]:
            print(
                f"agentgym eval: --{key.replace('_', '-')} {value} differs from the run's "
                f"{theirs[key]} ({args.config}): the scores will not be comparable with its "
                "evaluations.",
                file=sys.stderr,
            )
    return (
        flags["max_tokens"] if flags["max_tokens"] is not None else theirs["max_tokens"],
        flags["temperature"] if flags["temperature"] is not None else theirs["temperature"],
    )


def _run_counter(policy: object, run: object):
    """The token counter the run's envs used: its model tokenizer's (an hf: policy's
    own, or the one saved with the run's ``model.path`` for any other policy), else
    None (the envs' documented approximation, said on stderr)."""
    from agentgym import counter_from_tokenizer

    tokenizer = getattr(getattr(policy, "engine", None), "tokenizer", None)
    path = getattr(run.model, "path", None)
    if tokenizer is None and path and (Path(path) / "tokenizer_config.json").is_file():
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer is None:
        print(
            "agentgym eval: the run's tokenizer is not on disk (model.path); token counts "
            "use the approximation, which may score differently from training.",
            file=sys.stderr,
        )
        return None
    return counter_from_tokenizer(tokenizer)


def _evaluate(
    args: argparse.Namespace, env_id: str, kwargs: dict, policy: object, seed: int
) -> tuple[dict, int]:
    """Roll one env out, print (unless --json) and return its summary and failure count."""
    from agentgym import SamplingParams, rollout

    episodes = rollout(
        env_id,
        policy,
        seeds=range(seed, seed + args.episodes),
        group_size=args.group_size,
        sampling=SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature),
        concurrency=args.concurrency,
        env_kwargs=kwargs,
        out=args.out,
        progress=True,  # on stderr: --json's stdout stays one JSON object
        retries=args.retries,
        episode_timeout_s=args.episode_timeout or None,
    )
    summary = summarise(env_id, args.policy, episodes)
    summary["first_seed"] = seed
    if not args.json:
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
    return summary, summary["failed"]
