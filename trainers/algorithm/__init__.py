"""The RL algorithm's pieces as pure functions on tensors.

Nothing here knows about models, environments or the loop: each function takes tensors
(or plain sequences) and returns tensors, and each has a test computed by hand in
``tests/trainers/test_algorithm*.py``. Notation follows the DAPO paper (arXiv 2503.14476):
``G`` samples per task form a *group* (``group_ids[i]`` says which); ``logp`` /
``old_logp`` / ``ref_logp`` are per-token log-probabilities of the sampled tokens under the
current, the sampling and the reference policy; ``mask`` is 1 on tokens the policy produced
(the ones trained on), 0 on prompt, environment text and padding.

* :mod:`.config`: the ``algorithm`` section of a trainer config (:class:`AlgorithmConfig`);
* :mod:`.catalog`: the estimators' and losses' names and what each needs, without torch
  (what a config is checked against before any process imports torch);
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

from agentgym import lazy_exports

#: public name -> the module that defines it (imported on first use: the config and the
#: catalog need no torch)
_LAZY = {
    "ADVANTAGE_ESTIMATORS": "agentgym.trainers.algorithm.advantages",
    "EstimatorSpec": "agentgym.trainers.algorithm.advantages",
    "advantage_estimator": "agentgym.trainers.algorithm.advantages",
    "estimator_spec": "agentgym.trainers.algorithm.advantages",
    "group_advantages": "agentgym.trainers.algorithm.advantages",
    "optimal_value": "agentgym.trainers.algorithm.advantages",
    "ESTIMATORS": "agentgym.trainers.algorithm.catalog",
    "EstimatorNeeds": "agentgym.trainers.algorithm.catalog",
    "LOSSES": "agentgym.trainers.algorithm.catalog",
    "LossNeeds": "agentgym.trainers.algorithm.catalog",
    "SEQ_MEAN": "agentgym.trainers.algorithm.catalog",
    "SEQ_MEAN_TOKEN_MEAN": "agentgym.trainers.algorithm.catalog",
    "TIS_MODES": "agentgym.trainers.algorithm.catalog",
    "TOKEN_MEAN": "agentgym.trainers.algorithm.catalog",
    "AlgorithmConfig": "agentgym.trainers.algorithm.config",
    "importance_weights": "agentgym.trainers.algorithm.correction",
    "mismatch_stats": "agentgym.trainers.algorithm.correction",
    "group_stats": "agentgym.trainers.algorithm.groups",
    "LossSpec": "agentgym.trainers.algorithm.losses",
    "LossTerms": "agentgym.trainers.algorithm.losses",
    "POLICY_LOSSES": "agentgym.trainers.algorithm.losses",
    "aggregate": "agentgym.trainers.algorithm.losses",
    "apo_policy_loss": "agentgym.trainers.algorithm.losses",
    "cispo_policy_loss": "agentgym.trainers.algorithm.losses",
    "dapo_policy_loss": "agentgym.trainers.algorithm.losses",
    "grpo_policy_loss": "agentgym.trainers.algorithm.losses",
    "gspo_policy_loss": "agentgym.trainers.algorithm.losses",
    "loss_spec": "agentgym.trainers.algorithm.losses",
    "policy_loss": "agentgym.trainers.algorithm.losses",
    "ppo_policy_loss": "agentgym.trainers.algorithm.losses",
    "reinforce_policy_loss": "agentgym.trainers.algorithm.losses",
    "informative_groups": "agentgym.trainers.algorithm.shaping",
    "length_reward": "agentgym.trainers.algorithm.shaping",
    "overlong_penalty": "agentgym.trainers.algorithm.shaping",
    "logprobs_and_entropy": "agentgym.trainers.algorithm.tokens",
    "masked_mean": "agentgym.trainers.algorithm.tokens",
    "selected_logprobs": "agentgym.trainers.algorithm.tokens",
    "token_entropy": "agentgym.trainers.algorithm.tokens",
    "decoupled_gae": "agentgym.trainers.algorithm.values",
    "egae": "agentgym.trainers.algorithm.values",
    "explained_variance": "agentgym.trainers.algorithm.values",
    "gae": "agentgym.trainers.algorithm.values",
    "last_masked": "agentgym.trainers.algorithm.values",
    "length_adaptive_lambda": "agentgym.trainers.algorithm.values",
    "positive_nll": "agentgym.trainers.algorithm.values",
    "terminal_rewards": "agentgym.trainers.algorithm.values",
    "value_loss": "agentgym.trainers.algorithm.values",
}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

__all__ = sorted(_LAZY)
