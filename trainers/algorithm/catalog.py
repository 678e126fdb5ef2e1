"""The algorithm's names and what each one needs, without torch.

A config is checked against these before any process imports torch: the launcher of
``agentgym train --nproc N``, ``--print-config`` and ``agentgym plan`` start in a fraction
of a second (torch is ~1 s of import). The functions themselves register under these names
in :mod:`.advantages` and :mod:`.losses`, taking what they need from here (one home for it);
a test checks that every name here has exactly one function there.
"""

from __future__ import annotations

from dataclasses import dataclass

#: the losses' aggregations (see :mod:`.losses`)
TOKEN_MEAN = "token-mean"
SEQ_MEAN_TOKEN_MEAN = "seq-mean-token-mean"
SEQ_MEAN = "seq-mean"
#: truncated importance sampling against the rollout engine (see :mod:`.correction`)
TIS_MODES = ("off", "token", "sequence", "mask")


@dataclass(frozen=True)
class EstimatorNeeds:
    """What an advantage estimator needs.

    Attributes:
        needs_groups: it compares samples of a task (``rollout.group_size >= 2``).
        needs_values: it needs ``values`` (``V*`` per sample, from the ``apo`` value stage).
        needs_critic: its advantages are per token, from a critic's values (``gae``): the
            learner computes them, not :func:`~.advantages.group_advantages`.
    """

    needs_groups: bool = True
    needs_values: bool = False
    needs_critic: bool = False


@dataclass(frozen=True)
class LossNeeds:
    """How a policy loss aggregates and whether it needs the reference policy."""

    aggregation: str = TOKEN_MEAN
    needs_reference: bool = False


#: advantage estimators by name (``algorithm.advantage``)
ESTIMATORS: dict[str, EstimatorNeeds] = {
    "grpo": EstimatorNeeds(),
    "drgrpo": EstimatorNeeds(),
    "rloo": EstimatorNeeds(),
    "reinforce++": EstimatorNeeds(needs_groups=False),
    "apo": EstimatorNeeds(needs_groups=False, needs_values=True),
    "apo_group": EstimatorNeeds(),
    "gae": EstimatorNeeds(needs_groups=False, needs_critic=True),
}
#: policy losses by name (``algorithm.loss``)
LOSSES: dict[str, LossNeeds] = {
    "dapo": LossNeeds(),
    "grpo": LossNeeds(aggregation=SEQ_MEAN_TOKEN_MEAN),
    "ppo": LossNeeds(),
    "gspo": LossNeeds(aggregation=SEQ_MEAN_TOKEN_MEAN),
    "cispo": LossNeeds(),
    "reinforce": LossNeeds(),
    "apo": LossNeeds(aggregation=SEQ_MEAN, needs_reference=True),
}
