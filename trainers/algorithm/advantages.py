"""Advantage estimators, registered by name: one advantage per sample (episode).

Choose one with ``algorithm.advantage`` (typos get "did you mean"). Each takes the
episodes' rewards ``[N]`` and their group ids ``[N]`` (equal ids: samples of the same
task) and returns ``[N]`` float32 advantages; a trainer broadcasts an episode's advantage
to every token the policy produced in it.

| name | advantage of sample ``i`` in group ``g`` | source |
|---|---|---|
| ``grpo`` | ``(r_i - mean_g) / (std_g + eps)``, ``std`` unbiased (DAPO's default) | GRPO, DAPO |
| ``drgrpo`` | ``r_i - mean_g`` (no std: no difficulty bias) | Dr. GRPO, arXiv 2503.20783 |
| ``rloo`` | ``r_i - mean_{j != i} r_j`` | RLOO, arXiv 2402.14740 |
| ``reinforce++`` | ``(r_i - mean_batch) / (std_batch + eps)`` over the whole batch | REINFORCE++, arXiv 2501.03262 |
| ``apo`` | ``r_i - V*(x)``, ``V*`` estimated offline from the reference policy | A*PO, arXiv 2505.20686 |
| ``apo_group`` | ``r_i - max_g r_j`` (the best of the group stands in for ``V*``) | A*PO's beta -> 0 limit, on-policy |
| ``gae`` | per token, GAE over the critic's values (:mod:`.values`) | PPO; VAPO, arXiv 2504.05118 |

Group estimators give a group of one sample (nothing to compare with) advantage 0;
``reinforce++`` and ``apo`` need no group.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from agentgym import ConfigError, UnknownNameError
from agentgym.trainers.algorithm.catalog import ESTIMATORS
from agentgym.trainers.algorithm.groups import group_max, group_stats

Estimator = Callable[..., Tensor]


@dataclass(frozen=True)
class EstimatorSpec:
    """A registered estimator: the function and what it needs.

    Attributes:
        fn: ``fn(rewards, group_ids, *, normalize_std, eps, values) -> advantages``.
        needs_groups: it compares samples of a task (``rollout.group_size >= 2``).
        needs_values: it needs ``values`` (``V*`` per sample, from the ``apo`` value stage).
        needs_critic: its advantages are per token, from a critic's values (``gae``): the
            learner computes them, not :func:`group_advantages`.
    """

    fn: Estimator
    needs_groups: bool = True
    needs_values: bool = False
    needs_critic: bool = False


#: name -> :class:`EstimatorSpec`, filled by :func:`advantage_estimator`
ADVANTAGE_ESTIMATORS: dict[str, EstimatorSpec] = {}


def advantage_estimator(name: str) -> Callable[[Estimator], Estimator]:
    """Register ``fn`` as the estimator ``name`` of :data:`.catalog.ESTIMATORS` (a
    decorator): what it needs comes from there."""

    def register(fn: Estimator) -> Estimator:
        if name in ADVANTAGE_ESTIMATORS:
            raise ConfigError(f"advantage estimator {name!r} is registered twice.")
        if name not in ESTIMATORS:
            raise ConfigError(f"advantage estimator {name!r}: add it to catalog.ESTIMATORS first.")
        needs = ESTIMATORS[name]
        ADVANTAGE_ESTIMATORS[name] = EstimatorSpec(
            fn, needs.needs_groups, needs.needs_values, needs.needs_critic
        )
        return fn

    return register


def estimator_spec(name: str) -> EstimatorSpec:
    """The registered estimator ``name``, or an error that suggests the closest names."""
    if name not in ADVANTAGE_ESTIMATORS:
        raise UnknownNameError("advantage estimator", name, ADVANTAGE_ESTIMATORS)
    return ADVANTAGE_ESTIMATORS[name]


def group_advantages(
    rewards: Tensor,
    group_ids: Tensor,
    estimator: str = "grpo",
    *,
    normalize_std: bool = True,
    eps: float = 1e-6,
    values: Tensor | None = None,
) -> Tensor:
    """One advantage per sample with the estimator ``estimator`` (see the module table).

    Args:
        rewards: shape ``[N]``.
        group_ids: shape ``[N]``, integer group labels.
        estimator: a name in :data:`ADVANTAGE_ESTIMATORS`.
        normalize_std: ``grpo`` only: divide by the group std (``False`` is ``drgrpo``).
        eps: added to a std before dividing.
        values: ``[N]`` per-sample values, for the estimators that need them (``apo``).

    Returns:
        ``[N]`` float32 advantages.
    """
    spec = estimator_spec(estimator)
    if rewards.shape != group_ids.shape or rewards.dim() != 1:
        raise ConfigError(
            f"rewards and group_ids must both be 1-D of the same length; got "
            f"{tuple(rewards.shape)} and {tuple(group_ids.shape)}."
        )
    if spec.needs_values and (values is None or values.shape != rewards.shape):
        raise ConfigError(
            f"advantage estimator {estimator!r} needs one value per sample (V*, from "
            "`agentgym apo-values`); got "
            f"{None if values is None else tuple(values.shape)} for {tuple(rewards.shape)} rewards."
        )
    if rewards.numel() == 0:
        return torch.zeros(0, dtype=torch.float32)
    adv = spec.fn(
        rewards.to(torch.float64), group_ids, normalize_std=normalize_std, eps=eps, values=values
    )
    return adv.to(torch.float32)


def _only_groups(adv: Tensor, size: Tensor) -> Tensor:
    """Zero for samples alone in their group."""
    return torch.where(size > 1, adv, torch.zeros_like(adv))


@advantage_estimator("grpo")
def grpo(r: Tensor, group_ids: Tensor, *, normalize_std: bool, eps: float, **_: object) -> Tensor:
    """Group-normalised: ``(r - mean_g) / (std_g + eps)``; DAPO's default."""
    mean, std, size = group_stats(r, group_ids)
    adv = r - mean
    if normalize_std:
        adv = adv / (std + eps)
    return _only_groups(adv, size)


@advantage_estimator("drgrpo")
def drgrpo(r: Tensor, group_ids: Tensor, **_: object) -> Tensor:
    """Mean-centred within the group, no std division (Dr. GRPO)."""
    mean, _std, size = group_stats(r, group_ids)
    return _only_groups(r - mean, size)


@advantage_estimator("rloo")
def rloo(r: Tensor, group_ids: Tensor, **_: object) -> Tensor:
    """Leave-one-out baseline: ``r_i - mean_{j != i} r_j = G/(G-1) (r_i - mean_g)``."""
    mean, _std, size = group_stats(r, group_ids)
    return _only_groups((r - mean) * size / (size - 1).clamp(min=1), size)


@advantage_estimator("reinforce++")
def reinforce_pp(r: Tensor, group_ids: Tensor, *, eps: float, **_: object) -> Tensor:
    """Batch-normalised REINFORCE: ``(r - mean_batch) / (std_batch + eps)``.

    The baseline and scale come from the whole batch, not the group, so tasks with one
    sample train too. The std is the population std of the batch; a batch of one, or
    of equal rewards, gives 0.
    """
    if r.numel() < 2:
        return torch.zeros_like(r)
    centred = r - r.mean()
    return centred / (centred.pow(2).mean().sqrt() + eps)


@advantage_estimator("apo")
def apo(r: Tensor, group_ids: Tensor, *, values: Tensor | None = None, **_: object) -> Tensor:
    """A*PO: ``r - V*(x)``, with ``V*`` estimated offline (:func:`optimal_value`)."""
    assert values is not None  # checked by group_advantages
    return r - values.to(r.dtype)


@advantage_estimator("apo_group")
def apo_group(r: Tensor, group_ids: Tensor, **_: object) -> Tensor:
    """``r - max_g r``: the best sample of a task gets 0, the others fall short of it."""
    _mean, _std, size = group_stats(r, group_ids)
    return _only_groups(r - group_max(r, group_ids), size)


@advantage_estimator("gae")
def gae_from_critic(r: Tensor, group_ids: Tensor, **_: object) -> Tensor:
    """GAE: per token, from the critic's values (:func:`~.values.gae`); the learner
    computes it once the critic has valued the batch, so there is no per-episode value."""
    raise ConfigError(
        "the gae advantages are per token and come from the critic: the learner computes "
        "them (algorithm.advantage=gae needs the critic section); group_advantages cannot."
    )


def optimal_value(rewards: Tensor, beta: float) -> float:
    """A*PO's estimate of the optimal value of a prompt from ``k`` reference samples.

    ``V* = beta * log mean_k exp(r_k / beta)``: between the mean reward (beta -> inf)
    and the best one (beta -> 0, also used for ``beta == 0``). Computed stably in log
    space.
    """
    r = rewards.to(torch.float64).flatten()
    if r.numel() == 0:
        raise ConfigError("optimal_value needs at least one reward.")
    if beta < 0:
        raise ConfigError(f"beta must be >= 0, got {beta}.")
    if beta == 0:
        return float(r.max())
    return float(beta * (torch.logsumexp(r / beta, dim=0) - math.log(r.numel())))
