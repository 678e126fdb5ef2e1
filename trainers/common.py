"""Set-up shared by ``agentgym train`` and ``agentgym sft``: torch, model, envs, eval."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import torch

from agentgym import ConfigError, Episode, SamplingParams, counter_from_tokenizer, resolve_env_id
from agentgym.trainers.config import EnvSpec, ModelConfig


def keep_freed_memory() -> bool:
    """Ask glibc's malloc to keep freed memory for reuse instead of returning it to the OS.

    Generation grows its KV cache step by step and training allocates activations of new
    shapes, so a run frees and re-allocates large blocks constantly. By default glibc
    serves blocks above a (dynamic) threshold with ``mmap`` and gives them back on free,
    and trims the heap top; every re-allocation then page-faults its memory in again. On
    virtual machines whose guest memory is backed lazily (and reclaimed by free-page
    reporting) that costs seconds per step: measured here, the first ``generate`` calls
    of a tiny model took 30+ s instead of 0.6 s. This sets ``M_MMAP_THRESHOLD`` to 1 GiB,
    ``M_TRIM_THRESHOLD`` to 2 GiB and ``M_TOP_PAD`` to 64 MiB, so freed memory stays in
    the process. The process's resident memory no longer shrinks; nothing else changes.
    A no-op (returning False) where the C library is not glibc.
    """
    import ctypes
    import ctypes.util
    import platform

    if platform.system() != "Linux":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    m_trim_threshold, m_top_pad, m_mmap_threshold = -1, -2, -3
    ok = mallopt(m_mmap_threshold, 1 << 30) == 1
    ok &= mallopt(m_trim_threshold, (1 << 31) - 1) == 1
    ok &= mallopt(m_top_pad, 64 << 20) == 1
    return bool(ok)


def setup_torch(threads: int | None, seed: int) -> None:
    """Thread count, seeds of every RNG, and malloc settings (:func:`keep_freed_memory`)."""
    keep_freed_memory()
    if threads is not None:
        torch.set_num_threads(threads)
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


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


def build_model_and_tokenizer(
    cfg: ModelConfig, corpus: Callable[[], Iterable[str]] | None = None
) -> tuple[torch.nn.Module, Any]:
    """Load ``cfg.path`` or build ``cfg.preset`` (tokenizer from ``corpus`` if sized)."""
    from agentgym.trainers.models import build_preset, load_model
    from agentgym.trainers.tokenizer import build_tokenizer

    if cfg.path is not None:
        return load_model(cfg.path)
    if cfg.tokenizer_vocab_size is not None:
        if corpus is None:
            raise ConfigError("model.tokenizer_vocab_size needs a text corpus (the envs').")
        tokenizer = build_tokenizer(corpus(), cfg.tokenizer_vocab_size)
    else:
        tokenizer = build_tokenizer()
    assert cfg.preset is not None  # guaranteed by ModelConfig validation
    model = build_preset(cfg.preset, tokenizer, seed=cfg.init_seed, overrides=cfg.preset_overrides)
    return model, tokenizer


def episode_accuracy(ep: Episode) -> float | None:
    """The env's correctness for an episode, from ``reward_breakdown`` (None if absent).

    ``correct`` may be a bool or a count; with a count, ``asked`` or ``total`` gives the
    denominator.
    """
    b = ep.reward_breakdown
    if "correct" not in b:
        return None
    c = b["correct"]
    if isinstance(c, bool):
        return float(c)
    if isinstance(c, int | float):
        denom = b.get("asked", b.get("total"))
        if isinstance(denom, int | float) and not isinstance(denom, bool) and denom > 0:
            return float(c) / float(denom)
        return float(c)
    return None


def episode_summary(episodes: Sequence[Episode], prefix: str) -> dict[str, float]:
    """Mean reward, accuracy (where reported), policy tokens, truncation share."""
    if not episodes:
        return {}
    accs = [a for a in (episode_accuracy(e) for e in episodes) if a is not None]
    toks = [e.num_policy_tokens for e in episodes]
    out = {
        f"{prefix}/reward": float(np.mean([e.reward for e in episodes])),
        f"{prefix}/response_tokens_mean": float(np.mean(toks)),
        f"{prefix}/response_tokens_max": float(np.max(toks)),
        f"{prefix}/truncated_share": float(
            np.mean([any(t.completion.truncated for t in e.turns) for e in episodes])
        ),
        f"{prefix}/episodes": float(len(episodes)),
    }
    if accs:
        out[f"{prefix}/accuracy"] = float(np.mean(accs))
    return out


def eval_metrics(env_ids: Sequence[str], per_env: Sequence[Sequence[Episode]]) -> dict[str, float]:
    """Summary metrics under ``eval/`` (and ``eval/<EnvName>/`` with several envs)."""
    episodes = [ep for eps in per_env for ep in eps]
    metrics = episode_summary(episodes, "eval")
    if len(env_ids) > 1:
        for env_id, eps in zip(env_ids, per_env, strict=True):
            metrics.update(episode_summary(eps, f"eval/{env_id.split('/')[-1]}"))
    return metrics


async def evaluate_async(
    policy: Any,
    envs: Sequence[EnvSpec],
    tokenizer: Any,
    *,
    sampling: SamplingParams,
    num_tasks: int | None = None,
    seed_start: int = 0,
    seeds: Sequence[int] | None = None,
    concurrency: int = 256,
    workers: Any = None,
    executor: Any = None,
    env_cache: Any = None,
) -> tuple[dict[str, float], list[list[Episode]]]:
    """One episode per held-out seed and env.

    Args:
        seeds: the held-out seeds; default ``seed_start .. seed_start + num_tasks - 1``.
        workers: Ray env workers for the env work (``None``: in this process).
        executor / env_cache: the thread pool and :class:`~agentgym.rollouts.EnvCache`
            for env work in this process (``None``: a pool and new envs per call).

    Returns:
        summary metrics under ``eval/`` and the episodes, one list per env.
    """
    from agentgym import rollout_async

    if seeds is None:
        if num_tasks is None:
            raise ConfigError("evaluate_async needs seeds or num_tasks.")
        seeds = range(seed_start, seed_start + num_tasks)
    ids = resolve_envs(envs)
    results = await asyncio.gather(
        *(
            rollout_async(
                env_id,
                policy,
                seeds=list(seeds),
                group_size=1,
                sampling=sampling,
                concurrency=concurrency,
                env_kwargs=env_kwargs(spec, tokenizer),
                workers=workers,
                executor=executor,
                env_cache=env_cache,
            )
            if seeds
            else _no_episodes()
            for env_id, spec in zip(ids, envs, strict=True)
        )
    )
    per_env = [list(eps) for eps in results]
    return eval_metrics(ids, per_env), per_env


async def _no_episodes() -> list[Episode]:
    return []
