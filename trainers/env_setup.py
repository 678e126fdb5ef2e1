"""The configured training envs as the trainer makes them: ids, ``gym.make`` keyword
arguments (with the tokenizer's exact token counter), and their texts for a tokenizer."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentgym import ConfigError, counter_from_tokenizer, resolve_env_id
from agentgym.trainers.config import EnvSpec


def resolve_envs(envs: Sequence[EnvSpec]) -> list[str]:
    """Registered ids for the configured envs (``Name-vN`` shorthand accepted)."""
    import agentgym  # noqa: F401  (registers built-in envs and plugins)

    return [resolve_env_id(e.id) for e in envs]


def env_kwargs(spec: EnvSpec, tokenizer: Any) -> dict[str, Any]:
    """``gym.make`` kwargs: the spec's own, plus the tokenizer's exact token counter."""
    kw = dict(spec.kwargs)
    if "count_tokens" in kw:
        raise ConfigError(
            f"envs[{spec.id}].kwargs.count_tokens is set by the trainer (its tokenizer); remove it."
        )
    kw["count_tokens"] = counter_from_tokenizer(tokenizer)
    return kw


def env_corpus(envs: Sequence[EnvSpec], num_tasks: int = 200, seed_start: int = 0) -> list[str]:
    """Texts of the envs (first observations and worked solutions where offered).

    Used to learn a BPE vocabulary for a preset model's tokenizer.
    """
    import gymnasium as gym

    texts: list[str] = []
    for env_id, spec in zip(resolve_envs(envs), envs, strict=True):
        env = gym.make(env_id, **spec.kwargs)
        try:
            for seed in range(seed_start, seed_start + num_tasks):
                obs, _ = env.reset(seed=seed)
                texts.extend(m.content for m in obs)
                solution = getattr(env.unwrapped, "worked_solution", None)
                if callable(solution):
                    for style in ("verbose", "concise"):
                        try:
                            texts.append(str(solution(style=style)))
                        except (TypeError, ValueError, NotImplementedError):
                            break
        finally:
            env.close()
    return texts
