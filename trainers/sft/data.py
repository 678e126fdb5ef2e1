"""SFT examples from the envs themselves: worked solutions, or every turn of the oracle.

Examples come from the environments, reached by id: for each training seed the env is
reset and asked for a worked solution of that task
(``env.unwrapped.worked_solution(**data.solution_kwargs)``), which becomes the reply to
the first observation; or the env's oracle policy is played and every one of its turns
(memory summaries included) becomes an example. The envs are made with the model
tokenizer's exact token counter (``count_tokens``), as ``agentgym train`` and evaluation
make them, so token-driven behaviour (budget-triggered memory summaries, memories cut to
``summary_max_tokens``) is the same in the SFT data as at training and evaluation time.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import gymnasium as gym

from agentgym import ConfigError, Message, derive_seed
from agentgym.trainers.env_setup import env_kwargs, resolve_envs
from agentgym.trainers.sft.config import SFTConfig

Example = tuple[tuple[Message, ...], str]


def collect_examples(cfg: SFTConfig, tokenizer: Any | None = None) -> list[Example]:
    """(prompt messages, reply) pairs from the configured envs' seeds.

    Args:
        cfg: the SFT config (``envs`` and ``data``).
        tokenizer: the model's tokenizer. Every env is then made with
            :func:`~agentgym.trainers.env_setup.env_kwargs` (the tokenizer's exact
            ``count_tokens``), as DAPO training and evaluation make it. ``None``: the
            envs' own default counter (bytes/4); only for the text a preset's tokenizer
            learns its vocabulary from, before that tokenizer exists.
    """
    ids = resolve_envs(cfg.envs)
    weights = [e.weight for e in cfg.envs]
    counts = [max(1, round(cfg.data.num_tasks * w / sum(weights))) for w in weights]
    examples: list[Example] = []
    seed = cfg.data.seed_start
    for env_id, spec, n in zip(ids, cfg.envs, counts, strict=True):
        seeds = list(range(seed, seed + n))
        seed += n
        kwargs = dict(spec.kwargs) if tokenizer is None else env_kwargs(spec, tokenizer)
        if cfg.data.source == "worked_solution":
            examples.extend(
                _worked_solutions(
                    env_id, kwargs, seeds, cfg.data.solution_kwargs, cfg.data.line_dropout
                )
            )
        else:
            examples.extend(_oracle_turns(env_id, kwargs, seeds))
    return examples


def example_corpus(examples: Sequence[Example]) -> list[str]:
    """Every text of ``examples``: the prompt messages' contents, then the replies."""
    return [m.content for msgs, _ in examples for m in msgs] + [r for _, r in examples]


def drop_lines(text: str, p: float, rng: random.Random) -> str:
    """``text`` with each line but the last removed with probability ``p``."""
    lines = text.split("\n")
    if p <= 0 or len(lines) < 2:
        return text
    kept = [line for line in lines[:-1] if rng.random() >= p]
    return "\n".join([*kept, lines[-1]])


def _worked_solutions(
    env_id: str,
    kwargs: dict[str, Any],
    seeds: Sequence[int],
    sol_kwargs: dict[str, Any],
    line_dropout: float = 0.0,
) -> list[Example]:
    """One (first observation, worked solution) pair per seed; ``kwargs`` go to ``gym.make``."""
    env = gym.make(env_id, **kwargs)
    try:
        fn = getattr(env.unwrapped, "worked_solution", None)
        if not callable(fn):
            raise ConfigError(
                f"{env_id} offers no worked solutions (env.unwrapped.worked_solution); use "
                "data.source=oracle if it has an oracle."
            )
        out = []
        for s in seeds:
            obs, _ = env.reset(seed=s)
            try:
                text = fn(**sol_kwargs)
            except TypeError as e:
                raise ConfigError(f"{env_id}.worked_solution(**{sol_kwargs}): {e}") from e
            text = drop_lines(
                str(text), line_dropout, random.Random(derive_seed("line_dropout", s))
            )
            out.append((tuple(obs), text))
        return out
    finally:
        env.close()


def _oracle_turns(env_id: str, kwargs: dict[str, Any], seeds: Sequence[int]) -> list[Example]:
    """Every turn (memory summaries included) of the oracle's episodes, one per seed."""
    from agentgym import OraclePolicy, rollout

    episodes = rollout(
        env_id, OraclePolicy(), seeds=seeds, env_kwargs=kwargs, concurrency=8, on_failure="raise"
    )
    return [(t.messages, t.completion.text) for ep in episodes for t in ep.turns]
