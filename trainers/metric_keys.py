"""Every key a training run writes to ``metrics.jsonl``: its unit, who writes it, what it means.

One table (:data:`METRICS`) for the keys of ``agentgym train`` and ``agentgym sft`` rows.
A key with a part that varies is written as a pattern: ``{env}`` an env's short name
(``MemoryRecall-v0``; ``BalancedMath-v0#2`` for the second of envs sharing an id), ``{kind}`` a turn kind (``act``, ``summary``), ``{reason}`` a
failure reason, ``{n}`` a number, ``{phase}`` a timeline phase. :func:`describe` finds a
key's row; :func:`undeclared` lists the keys of a row that no entry covers (the tests
run it on the runs they make, and ``AGENTGYM_STRICT_METRICS=1`` makes the metrics log
refuse them); :func:`markdown` renders the table as ``docs/metrics.md`` (a test keeps
the page equal to it).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache


@dataclass(frozen=True)
class Metric:
    """One row of the table: a key (or pattern), its unit, the module writing it, and what
    it is."""

    key: str
    unit: str
    writer: str
    meaning: str


def _m(key: str, unit: str, writer: str, meaning: str) -> Metric:
    return Metric(key, unit, writer, meaning)


_STEPS, _EVAL, _UPDATE, _TIME = (
    "trainers/steps.py",
    "trainers/evaluation.py",
    "trainers/update.py",
    "trainers/timeline.py",
)
_TPPO, _CRITIC, _LOOP, _SFT = (
    "trainers/tppo/step.py",
    "trainers/critic.py",
    "trainers/loop.py",
    "trainers/sft/train.py",
)

#: the episode summaries :func:`~agentgym.trainers.evaluation.episode_summary` writes
#: under a prefix (``charts`` for the step's played episodes, ``eval``, ``eval/{env}``)
_SUMMARY = (
    ("reward", "reward", "mean env reward of the episodes"),
    ("accuracy", "share", "share solved (envs that grade correctness)"),
    ("response_tokens_mean", "tokens", "mean tokens the policy wrote per episode"),
    ("response_tokens_max", "tokens", "most tokens the policy wrote in one episode"),
    ("truncated_share", "share", "share of episodes with a reply cut at max_tokens"),
    ("overlong_share", "share", "share of episodes that ran out of conversations or turns"),
    ("episodes", "episodes", "episodes summarised"),
    ("working_context_mean", "tokens", "mean longest prompt + reply of an episode's turns"),
    ("conversations_mean", "conversations", "mean conversations per episode (memory envs)"),
    ("summary_tokens_mean", "tokens", "mean tokens written in memory summaries per episode"),
    ("failed", "episodes", "episodes that failed after their retries (left out above)"),
)

METRICS: tuple[Metric, ...] = (
    _m("step", "step", _LOOP, "the training step the row belongs to (0: before training)"),
    # --------------------------------------------------------------- the played episodes
    # (charts/reward is the shaped reward, below; the summary's env reward is env_reward)
    *(_m(f"charts/{k}", u, _STEPS, f"this step: {w}") for k, u, w in _SUMMARY if k != "reward"),
    _m("charts/env_reward", "reward", _STEPS, "mean env reward of every episode played this step"),
    _m(
        "charts/reward",
        "reward",
        _STEPS,
        "mean shaped reward (env reward + overlong and length terms) of the trained episodes",
    ),
    _m(
        "charts/advantage_abs_mean", "advantage", _STEPS, "mean |advantage| of the trained episodes"
    ),
    _m(
        "charts/groups_kept",
        "groups",
        _STEPS,
        "informative groups trained on (DAPO's dynamic sampling)",
    ),
    _m(
        "charts/groups_filtered",
        "groups",
        _STEPS,
        "groups dropped because their rewards were all equal",
    ),
    _m("charts/groups_generated", "groups", _STEPS, "groups played this step"),
    _m(
        "charts/groups_failed",
        "groups",
        _STEPS,
        "groups dropped because an episode of theirs failed",
    ),
    _m("charts/generation_rounds", "rounds", _STEPS, "generation rounds dynamic sampling ran"),
    _m(
        "charts/hit_round_cap",
        "flag",
        _STEPS,
        "1 when the rounds ran out before batch_tasks groups were kept",
    ),
    _m("charts/update_skipped", "flag", _STEPS, "1 when no update was made this step"),
    _m(
        "charts/masked_episodes",
        "episodes",
        _STEPS,
        "trained episodes whose tokens were masked (overlong)",
    ),
    _m(
        "charts/engine_batches",
        "calls",
        _STEPS,
        "engine batches (HF) or steps' arrivals (vLLM) this step",
    ),
    _m("charts/engine_batch_mean", "requests", _STEPS, "mean requests per engine batch / arrival"),
    _m(
        "kinds/{kind}_turns",
        "turns",
        "trainers/turn_kinds.py",
        "trained turns of this kind (act, summary)",
    ),
    _m("kinds/{kind}_tokens", "tokens", "trainers/turn_kinds.py", "trained tokens of this kind"),
    _m(
        "kinds/{kind}_logprob_gain",
        "nats per token",
        "trainers/turn_kinds.py",
        "mean change of the trained tokens' log-prob over the update, by kind (algorithm.kind_stats)",
    ),
    _m(
        "episodes/failed",
        "episodes",
        "trainers/failures.py",
        "episodes that failed after their retries this step",
    ),
    _m("episodes/failed/{reason}", "episodes", "trainers/failures.py", "of those, by reason"),
    _m("episodes/retried", "attempts", "trainers/failures.py", "attempts played again this step"),
    _m("episodes/retried/{reason}", "attempts", "trainers/failures.py", "of those, by reason"),
    # --------------------------------------------------------------- the update
    _m("losses/total", "loss", _UPDATE, "the loss optimised, per optimizer step"),
    _m(
        "losses/policy",
        "loss",
        _UPDATE,
        "the policy term (the registered loss: DAPO's clip-higher by default)",
    ),
    _m("losses/kl", "loss", _UPDATE, "the KL term (0 unless algorithm.kl_coef)"),
    _m(
        "losses/entropy",
        "nats per token",
        _UPDATE,
        "mean entropy of the policy over the trained tokens",
    ),
    _m("losses/clip_fraction", "share", _UPDATE, "share of tokens whose ratio was clipped"),
    _m("losses/clip_fraction_low", "share", _UPDATE, "of them below 1 - eps_low"),
    _m("losses/clip_fraction_high", "share", _UPDATE, "of them above 1 + eps_high"),
    _m("losses/dual_clip_fraction", "share", _UPDATE, "share of tokens under the dual clip"),
    _m(
        "losses/ratio_mean", "ratio", _UPDATE, "mean importance ratio (1 with one update per batch)"
    ),
    _m(
        "losses/approx_kl_ref",
        "nats per token",
        _UPDATE,
        "approximate KL to the reference policy (adapter off)",
    ),
    _m(
        "losses/grad_norm",
        "norm",
        _UPDATE,
        "the policy's gradient norm before clipping, mean over optimizer steps",
    ),
    _m(
        "losses/nll_positive",
        "nats per token",
        _UPDATE,
        "VAPO's NLL on solved episodes (algorithm.nll_coef)",
    ),
    _m("losses/value", "loss", _UPDATE, "the critic's value loss, per critic step"),
    _m("losses/critic_grad_norm", "norm", _UPDATE, "the critic's gradient norm before clipping"),
    _m("losses/sft", "nats per token", _SFT, "SFT: the cross-entropy of the reply tokens"),
    _m(
        "charts/lr",
        "learning rate",
        _UPDATE,
        "the policy's learning rate of the last optimizer step",
    ),
    _m("charts/optimizer_steps", "steps", _UPDATE, "optimizer steps taken this training step"),
    _m("charts/train_tokens", "tokens", _UPDATE, "policy tokens trained this step"),
    _m(
        "charts/logprob_mismatch",
        "nats per token",
        _UPDATE,
        "mean |learner log-prob - engine log-prob| of the sampled tokens",
    ),
    _m("charts/logprob_mismatch_max", "nats", _UPDATE, "the largest such difference of one token"),
    _m(
        "charts/logprob_mismatch_k3",
        "nats per token",
        _UPDATE,
        "the k3 estimate of KL(engine || learner) on the sampled tokens",
    ),
    _m(
        "charts/tis_truncated_share",
        "share",
        _UPDATE,
        "share of tokens whose truncated importance weight was cut (TIS)",
    ),
    _m("charts/tis_masked_share", "share", _UPDATE, "share of tokens masked by TIS"),
    _m(
        "charts/router_replayed",
        "tokens",
        _UPDATE,
        "MoE: token-layer choices replayed from the engine (router replay)",
    ),
    _m(
        "charts/router_changed_share",
        "share",
        _UPDATE,
        "of those, the share the learner's own router would have chosen otherwise",
    ),
    _m(
        "critic/explained_variance",
        "share",
        _CRITIC,
        "how much of the returns' variance the critic's values explain",
    ),
    _m("critic/value_mean", "return", _CRITIC, "mean value of the trained tokens' states"),
    _m("critic/target_mean", "return", _CRITIC, "mean value target"),
    _m("critic/advantage_mean", "advantage", _CRITIC, "mean GAE advantage"),
    _m("critic/advantage_std", "advantage", _CRITIC, "standard deviation of the GAE advantages"),
    # --------------------------------------------------------------- T-PPO
    _m("tppo/active", "responses", _TPPO, "responses in flight at the window's start"),
    _m("tppo/ended", "episodes", _TPPO, "episodes that ended in this window"),
    _m("tppo/window_tokens", "tokens", _TPPO, "tokens generated in this window"),
    _m("tppo/segments", "segments", _TPPO, "window segments trained on"),
    _m(
        "tppo/bootstrapped",
        "segments",
        _TPPO,
        "segments cut by the window (Extended GAE bootstraps them)",
    ),
    _m("tppo/retries", "attempts", _TPPO, "episodes played again after a failure"),
    _m(
        "tppo/lag_mean",
        "policy versions",
        _TPPO,
        "mean versions between a token's policy and the one trained",
    ),
    _m("tppo/lag_max", "policy versions", _TPPO, "the largest such lag"),
    _m("tppo/lag_share_{n}", "share", _TPPO, "share of trained tokens with lag n"),
    _m("tppo/lag_cuts", "episodes", _TPPO, "responses ended at rollout.max_policy_lag"),
    _m("tppo/critic_samples", "episodes", _TPPO, "ended episodes the critic trained on"),
    _m("tppo/critic_tokens", "tokens", _TPPO, "their tokens"),
    _m(
        "tppo/segment_advantage_mean", "advantage", _TPPO, "mean advantage of the window's segments"
    ),
    _m("tppo/segment_advantage_std", "advantage", _TPPO, "its standard deviation"),
    _m("charts/groups_completed", "groups", _TPPO, "T-PPO: groups whose every episode ended"),
    _m(
        "charts/groups_uninformative",
        "groups",
        _TPPO,
        "T-PPO: of those, groups with all-equal rewards",
    ),
    # --------------------------------------------------------------- time
    _m(
        "time/{phase}_s",
        "seconds",
        _TIME,
        "seconds in a phase of the step (rollout, reward, train, sync, eval, checkpoint, wake, sleep)",
    ),
    _m(
        "time/generate_s",
        "seconds",
        _TIME,
        "seconds the engine spent generating (inside the rollout)",
    ),
    _m(
        "time/step_s",
        "seconds",
        _TIME,
        "the step's seconds (its phases; SFT: the step's wall time)",
    ),
    _m(
        "time/bubble_s",
        "seconds",
        _TIME,
        "rollout seconds the engine sat idle, waiting for environments",
    ),
    _m(
        "time/tail_s",
        "seconds",
        _TIME,
        "decode seconds with fewer than half of a batch's rows still generating",
    ),
    _m("charts/idle_share", "share", _TIME, "bubble seconds / step seconds"),
    _m(
        "charts/decode_utilization",
        "share",
        _TIME,
        "tokens decoded / (decode steps x rows each batch started with)",
    ),
    _m("charts/tail_share", "share", _TIME, "tail seconds / rollout seconds"),
    # --------------------------------------------------------------- the adapter sync
    _m(
        "sync/held_bytes",
        "bytes",
        _LOOP,
        "adapter bytes rank 0 held at the sync (its learner's shards + what it received)",
    ),
    _m("sync/served_bytes", "bytes", _LOOP, "adapter bytes rank 0 handed its engine worker"),
    _m("sync/sent_bytes", "bytes", _LOOP, "adapter bytes rank 0 sent to other ranks' workers"),
    _m("sync/received_bytes", "bytes", _LOOP, "adapter bytes rank 0 received from other ranks"),
    # --------------------------------------------------------------- held-out evaluation
    *(_m(f"eval/{k}", u, _EVAL, f"held-out: {w}") for k, u, w in _SUMMARY),
    *(
        _m(f"eval/{{env}}/{k}", u, _EVAL, f"held-out, one env of several: {w}")
        for k, u, w in _SUMMARY
    ),
)

_HOLES = {
    "{env}": r"[A-Za-z0-9_.:-]+-v\d+(#\d+)?",
    "{kind}": r"[a-z]+",
    "{reason}": r"[A-Za-z0-9_.-]+",
    "{n}": r"\d+",
    "{phase}": r"[a-z]+",
}


@cache
def _compiled() -> list[tuple[re.Pattern[str], Metric]]:
    out = []
    for m in METRICS:
        pattern = re.escape(m.key)
        for hole, rx in _HOLES.items():
            pattern = pattern.replace(re.escape(hole), rx)
        out.append((re.compile(f"^{pattern}$"), m))
    return out


def describe(key: str) -> Metric | None:
    """The table's row for ``key`` (an exact key first, then a pattern), or None."""
    exact = [m for m in METRICS if m.key == key]
    if exact:
        return exact[0]
    return next((m for rx, m in _compiled() if rx.match(key)), None)


def undeclared(keys: Iterable[str]) -> list[str]:
    """The keys that no row of the table covers, sorted."""
    return sorted({k for k in keys if describe(k) is None})


def check_row(row: Mapping[str, object]) -> None:
    """Raise when a metrics row has a key the table does not declare (what
    ``AGENTGYM_STRICT_METRICS=1`` runs on every row the metrics log writes)."""
    missing = undeclared(row)
    if missing:
        raise KeyError(
            f"metrics keys {missing} are not in trainers/metric_keys.py's table: add a row "
            "(key, unit, writer, meaning) there, and regenerate docs/metrics.md."
        )


def markdown() -> str:
    """The table as the page ``docs/metrics.md``."""
    lines = [
        "# Metrics: every key of `metrics.jsonl`",
        "",
        "Generated from `trainers/metric_keys.py` (`python -m agentgym.trainers.metric_keys`",
        "writes this page; a test keeps the two equal). `{env}` is an env's short name",
        "(`BalancedMath-v0#2`: the second of the envs that share an id, by place in `envs`),",
        "`{kind}` a turn kind (`act`, `summary`), `{reason}` a failure reason, `{n}` a number,",
        "`{phase}` a phase of the step's timeline. Rank 0 writes the rows; a row's figures are",
        "the whole job's unless the meaning says rank 0.",
        "",
        "| key | unit | written by | meaning |",
        "|---|---|---|---|",
    ]
    lines += [f"| `{m.key}` | {m.unit} | `{m.writer}` | {m.meaning} |" for m in METRICS]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # python -m agentgym.trainers.metric_keys > docs/metrics.md
    print(markdown(), end="")
