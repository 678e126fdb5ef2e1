"""The RL algorithm's pieces as pure functions on tensors.

Nothing here knows about models, environments or the loop: each function takes tensors
(or plain sequences) and returns tensors, and each has a test computed by hand in
``tests/trainers/test_algorithm*.py``. Notation follows the DAPO paper (arXiv 2503.14476):
``G`` samples per task form a *group* (``group_ids[i]`` says which); ``logp`` /
``old_logp`` / ``ref_logp`` are per-token log-probabilities of the sampled tokens under the
current, the sampling and the reference policy; ``mask`` is 1 on tokens the policy produced
(the ones trained on), 0 on prompt, environment text and padding.

* :mod:`.config`: the ``algorithm`` section of a trainer config (:class:`AlgorithmConfig`);
* :mod:`.advantages`: estimators by name (:data:`ADVANTAGE_ESTIMATORS`: ``grpo``,
  ``drgrpo``, ``rloo``, ``reinforce++``, ``apo``, ``apo_group``) and A*PO's
  :func:`optimal_value`;
* :mod:`.losses`: policy losses by name (:data:`POLICY_LOSSES`: ``dapo``, ``grpo``,
  ``ppo``, ``gspo``, ``cispo``, ``reinforce``, ``apo``), all returning :class:`LossTerms`;
* :mod:`.correction`: the rollout/learner log-prob mismatch and truncated importance
  sampling;
* :mod:`.shaping`: dynamic sampling's filter, DAPO's overlong punishment, Kimi's length
  reward;
* :mod:`.values`: GAE (per-sequence and length-adaptive lambda, decoupled, bootstrapped
  after a cut), T-PPO's Extended GAE, the clipped value loss, VAPO's positive-example
  NLL, explained variance;
* :mod:`.tokens`: log-probs of sampled tokens, entropy, masked means.

Which loss and estimator to use when: docs/trainer.md ("Losses and estimators").
"""

from __future__ import annotations

from agentgym.trainers.algorithm.advantages import (
    ADVANTAGE_ESTIMATORS,
    EstimatorSpec,
    advantage_estimator,
    estimator_spec,
    group_advantages,
    optimal_value,
)
from agentgym.trainers.algorithm.config import AlgorithmConfig
from agentgym.trainers.algorithm.correction import (
    TIS_MODES,
    importance_weights,
    mismatch_stats,
)
from agentgym.trainers.algorithm.groups import group_stats
from agentgym.trainers.algorithm.losses import (
    POLICY_LOSSES,
    SEQ_MEAN,
    SEQ_MEAN_TOKEN_MEAN,
    TOKEN_MEAN,
    LossSpec,
    LossTerms,
    aggregate,
    apo_policy_loss,
    cispo_policy_loss,
    dapo_policy_loss,
    grpo_policy_loss,
    gspo_policy_loss,
    loss_spec,
    policy_loss,
    ppo_policy_loss,
    reinforce_policy_loss,
)
from agentgym.trainers.algorithm.shaping import informative_groups, length_reward, overlong_penalty
from agentgym.trainers.algorithm.tokens import (
    logprobs_and_entropy,
    masked_mean,
    selected_logprobs,
    token_entropy,
)
from agentgym.trainers.algorithm.values import (
    decoupled_gae,
    egae,
    explained_variance,
    gae,
    last_masked,
    length_adaptive_lambda,
    positive_nll,
    terminal_rewards,
    value_loss,
)

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "POLICY_LOSSES",
    "SEQ_MEAN",
    "SEQ_MEAN_TOKEN_MEAN",
    "TIS_MODES",
    "TOKEN_MEAN",
    "AlgorithmConfig",
    "EstimatorSpec",
    "LossSpec",
    "LossTerms",
    "advantage_estimator",
    "aggregate",
    "apo_policy_loss",
    "cispo_policy_loss",
    "dapo_policy_loss",
    "decoupled_gae",
    "egae",
    "estimator_spec",
    "explained_variance",
    "gae",
    "group_advantages",
    "group_stats",
    "grpo_policy_loss",
    "gspo_policy_loss",
    "importance_weights",
    "informative_groups",
    "last_masked",
    "length_adaptive_lambda",
    "length_reward",
    "logprobs_and_entropy",
    "loss_spec",
    "masked_mean",
    "mismatch_stats",
    "optimal_value",
    "overlong_penalty",
    "policy_loss",
    "positive_nll",
    "ppo_policy_loss",
    "reinforce_policy_loss",
    "selected_logprobs",
    "terminal_rewards",
    "token_entropy",
    "value_loss",
]
