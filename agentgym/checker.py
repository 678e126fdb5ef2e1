"""``check_env``: Gymnasium's environment checker plus the text-environment contract.

On top of :func:`gymnasium.utils.env_checker.check_env` it plays whole episodes (with
the env's oracle where it has one, else random text) and checks:

* every observation is in the observation space and ``info`` names the conversation and
  the turn kind;
* the reward is 0.0 on every step but the last; the last step carries a JSON-serialisable
  ``info["reward_breakdown"]`` and a finite reward;
* the same seed and the same actions give the same episode;
* memory turns are well formed: a summary turn's prompt ends with the summary request,
  the next observation is a new conversation (index + 1) that starts from the task and
  carries the memory, and the memory is capped at ``summary_max_tokens``;
* ``render()`` works in ``"ansi"`` mode and ``close()`` may be called twice.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from agentgym.errors import AgentGymError
from agentgym.types import Message


class EnvCheckError(AgentGymError, AssertionError):
    """An environment broke the agentgym environment contract."""


@dataclass
class CheckReport:
    """What :func:`check_env` verified: the names of passed checks and any warnings."""

    env_id: str
    passed: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    episodes: list[dict[str, Any]] = field(default_factory=list)

    def ok(self, name: str) -> None:
        self.passed.append(name)


Actor = Callable[[gym.Env, list[Message], dict[str, Any]], str]


def _oracle_or_random(env: gym.Env, obs: list[Message], info: dict[str, Any]) -> str:
    base = env.unwrapped
    if getattr(base, "has_oracle", lambda: False)():
        return base.oracle_action(obs)
    return env.action_space.sample()


#: memory options that only matter when memory turns are on
MEMORY_TRIGGERS = ("token_budget", "every_k_turns", "reserve_tokens", "max_conversations")


def check_env(
    env: gym.Env,
    *,
    seed: int = 0,
    max_steps: int = 2_000,
    skip_gymnasium: bool = False,
) -> CheckReport:
    """Check ``env`` against Gymnasium's API and agentgym's text-env contract.

    Args:
        env: the environment (made with ``gym.make`` or constructed directly).
        seed: the reset seed of the played episodes.
        max_steps: an episode that runs longer fails the check (it needs a turn limit).
        skip_gymnasium: skip Gymnasium's own checker (it is run by default).

    Returns:
        A :class:`CheckReport`. Raises :class:`EnvCheckError` on the first failure, with
        a message that names the check.
    """
    env_id = env.spec.id if env.spec is not None else type(env.unwrapped).__name__
    report = CheckReport(env_id=env_id)

    if not skip_gymnasium:
        _check_gymnasium(env, report)

    first = _play(env, seed, _oracle_or_random, max_steps, report, record=True)
    report.ok("episode contract (spaces, info keys, zero reward until the end, breakdown)")
    _check_replay(env, seed, max_steps, report, first)
    _check_memory(env, seed, max_steps, report, first)
    _check_render_and_close(env, report)
    report.episodes = [
        {
            "seed": seed,
            "reward": first["reward"],
            "steps": len(first["steps"]),
            "conversations": first["conversations"],
            "summaries": first["summaries"],
        }
    ]
    return report


def _check_gymnasium(env: gym.Env, report: CheckReport) -> None:
    """Run Gymnasium's own checker, keeping its warnings in the report."""
    from gymnasium.utils.env_checker import check_env as gym_check_env

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            gym_check_env(env.unwrapped, skip_render_check=True, skip_close_check=True)
        except AssertionError as e:
            raise EnvCheckError(f"{report.env_id}: Gymnasium's checker failed: {e}") from e
    report.warnings += [str(w.message) for w in caught]
    report.ok("gymnasium.check_env")


def _check_replay(
    env: gym.Env, seed: int, max_steps: int, report: CheckReport, first: dict[str, Any]
) -> None:
    """Play ``first``'s actions again on the same seed: the episode must be the same."""
    env_id = report.env_id
    actions = [a for a, _ in first["steps"]]
    replay = iter(actions)
    second = _play(env, seed, lambda e, o, i: next(replay), max_steps, report, record=True)
    if first["observations"] != second["observations"] or first["reward"] != second["reward"]:
        raise EnvCheckError(
            f"{env_id}: the same seed ({seed}) and the same actions gave a different episode. "
            "Draw all randomness from self.np_random (seeded by reset) and keep timings out "
            "of observations and info."
        )
    if first["breakdown"] != second["breakdown"]:
        raise EnvCheckError(
            f"{env_id}: same seed and actions gave different reward breakdowns "
            f"({first['breakdown']} vs {second['breakdown']}). Keep timings out of the "
            "breakdown (use env.episode_metrics)."
        )
    report.ok("same seed + same actions -> same episode")


def _check_memory(
    env: gym.Env, seed: int, max_steps: int, report: CheckReport, first: dict[str, Any]
) -> None:
    """Check memory turns when they are on; warn when the defaults can never fire them."""
    memory = getattr(env.unwrapped, "memory", None)
    if memory is not None and memory.enabled:
        if first["summaries"] == 0:
            report.warnings.append(
                "memory is enabled but the played episode had no summary turn; the memory "
                "checks ran on a forced long-summary episode only."
            )
        else:
            report.ok(f"memory turns exercised ({first['summaries']} summary turn(s) played)")
        _check_long_summary(env, seed, max_steps, report)
        report.ok("memory turns well formed (new conversation, memory carried and capped)")
    elif memory is not None:
        defaults = dict(getattr(type(env.unwrapped), "memory_defaults", {}) or {})
        options = sorted(k for k in defaults if k in MEMORY_TRIGGERS)
        if options and "enabled" not in defaults:
            report.warnings.append(
                f"memory turns never fire: memory_defaults sets {', '.join(options)} but not "
                "'enabled': True. Add it to memory_defaults (or pass memory={...} at make "
                "time, which switches memory on)."
            )
        else:
            report.ok("memory turns: off (pass memory={...} at make time to switch them on)")


def _check_render_and_close(env: gym.Env, report: CheckReport) -> None:
    """``render('ansi')`` gives text (where the env has a transcript); ``close()`` twice works."""
    env_id = report.env_id
    base = env.unwrapped
    if base.render_mode in (None, "ansi") and hasattr(base, "transcript_text"):
        text = base.transcript_text()
        if not isinstance(text, str) or not text:
            raise EnvCheckError(f"{env_id}: transcript_text()/render('ansi') must return text.")
        report.ok("render ansi")

    try:
        env.close()
        env.close()
    except Exception as e:
        raise EnvCheckError(
            f"{env_id}: calling close() twice raised {type(e).__name__}: {e}"
        ) from e
    report.ok("close() twice")


def _play(
    env: gym.Env,
    seed: int,
    actor: Actor,
    max_steps: int,
    report: CheckReport,
    record: bool,
) -> dict[str, Any]:
    env_id = report.env_id
    obs, info = env.reset(seed=seed)
    _check_obs(env, obs, info, env_id, "reset")
    observations = [[m.to_dict() for m in obs]]
    steps: list[tuple[str, float]] = []
    conversation = info["conversation"]
    summaries = 0
    for _ in range(max_steps):
        kind = info["turn_kind"]
        action = actor(env, obs, info)
        if kind == "summary":
            last = obs[-1]
            summary_prompt = env.unwrapped.memory.summary_prompt.split("{reason}")[-1].strip()
            if last.role != "user" or summary_prompt not in last.content:
                raise EnvCheckError(
                    f"{env_id}: a summary turn's observation must end with a user message "
                    "that contains the summary prompt."
                )
        obs, reward, terminated, truncated, info = env.step(action)
        steps.append((action, float(reward)))
        observations.append([m.to_dict() for m in obs])
        _check_obs(env, obs, info, env_id, "step")
        if kind == "summary":
            summaries += 1
            _check_after_summary(env, obs, info, conversation, env_id)
        elif info["conversation"] != conversation and not (terminated or truncated):
            raise EnvCheckError(
                f"{env_id}: the conversation index changed after an act turn; only a "
                "summary turn may start a new conversation."
            )
        conversation = info["conversation"]
        if terminated or truncated:
            breakdown = info.get("reward_breakdown")
            if not isinstance(breakdown, dict):
                raise EnvCheckError(
                    f"{env_id}: the terminal step must put a dict in info['reward_breakdown']."
                )
            try:
                json.dumps(breakdown)
            except (TypeError, ValueError) as e:
                raise EnvCheckError(
                    f"{env_id}: info['reward_breakdown'] must be JSON-serialisable ({e})."
                ) from e
            if not math.isfinite(float(reward)):
                raise EnvCheckError(f"{env_id}: the terminal reward is not finite ({reward}).")
            return {
                "observations": observations,
                "steps": steps,
                "reward": float(reward),
                "breakdown": breakdown,
                "conversations": conversation + 1,
                "summaries": summaries,
            }
        if reward != 0.0:
            raise EnvCheckError(
                f"{env_id}: a non-terminal step returned reward {reward}; agentgym envs give "
                "0.0 until the episode ends and the whole reward at the terminal step."
            )
    raise EnvCheckError(
        f"{env_id}: the episode did not end within {max_steps} steps; give the env a turn "
        "limit (max_turns)."
    )


def _check_obs(env: gym.Env, obs: Any, info: dict[str, Any], env_id: str, where: str) -> None:
    if obs not in env.observation_space:
        raise EnvCheckError(
            f"{env_id}: the observation returned by {where} is not in the observation space."
        )
    for key in ("conversation", "turn_kind"):
        if key not in info:
            raise EnvCheckError(f"{env_id}: info from {where} lacks {key!r}.")
    if info["turn_kind"] not in ("act", "summary"):
        raise EnvCheckError(
            f"{env_id}: info['turn_kind'] must be 'act' or 'summary', got {info['turn_kind']!r}."
        )


def _check_after_summary(
    env: gym.Env, obs: list[Message], info: dict[str, Any], prev: int, env_id: str
) -> None:
    base = env.unwrapped
    if info["conversation"] != prev + 1:
        raise EnvCheckError(
            f"{env_id}: after a summary turn the next observation must open conversation "
            f"{prev + 1}, got {info['conversation']}."
        )
    if len(obs) > 2 or obs[-1].role != "user":
        raise EnvCheckError(
            f"{env_id}: a new conversation must start with the system prompt (optional) and "
            "one user message holding the task and the memory."
        )
    task_prompt = base.task.prompt
    if task_prompt not in obs[-1].content:
        raise EnvCheckError(f"{env_id}: a new conversation must restate the task.")
    mem = base.memory_text or ""
    if mem and mem not in obs[-1].content:
        raise EnvCheckError(f"{env_id}: a new conversation must carry the memory summary.")
    if base.count_tokens(mem) > base.memory.summary_max_tokens:
        raise EnvCheckError(
            f"{env_id}: the memory has {base.count_tokens(mem)} tokens, more than "
            f"summary_max_tokens={base.memory.summary_max_tokens}."
        )


def _check_long_summary(env: gym.Env, seed: int, max_steps: int, report: CheckReport) -> None:
    """Answer every summary turn with far too much text; the memory must be capped."""
    base = env.unwrapped
    cap = base.memory.summary_max_tokens
    filler = "memory " * (cap * 8)

    def actor(e: gym.Env, obs: list[Message], info: dict[str, Any]) -> str:
        if info["turn_kind"] == "summary":
            return filler
        return _oracle_or_random(e, obs, info)

    result = _play(env, seed, actor, max_steps, report, record=False)
    if result["summaries"] and not base.memory_text:
        raise EnvCheckError(f"{report.env_id}: a summary turn left no memory.")
