"""Value-based pieces: GAE (plain, per-sequence lambda, decoupled), the clipped value loss,
VAPO's positive-example NLL, and the critic's metrics. Pure functions on ``[B, T]`` tensors.

Conventions (those of the PPO paper and verl's ``compute_gae_advantage_return``):

* the reward of a sequence sits on its last policy token (``token_rewards`` is zero
  elsewhere); ``gamma = 1`` by default;
* the recursion runs backward over the *policy* tokens only: a position with
  ``mask == 0`` inside a response (an observation the environment inserted, padding)
  neither adds a TD error nor breaks the chain: the value and the running advantage pass
  through it unchanged, so the token before it bootstraps from the next policy token;
* ``lam`` may be one number or one per sequence (``[B]``): VAPO's length-adaptive rule
  is :func:`length_adaptive_lambda`;
* decoupled GAE (VAPO): the critic's targets come from ``lam_critic = 1`` (Monte-Carlo
  returns), the policy's advantages from ``lam_policy`` (:func:`decoupled_gae`);
* a sequence that does not end with its episode (T-PPO's window cut a response that goes
  on next step) bootstraps after its last token from a value instead of ending there:
  ``last_value``, and T-PPO's Extended GAE (:func:`egae`), which takes that value to be
  the last token's own (``V(s_l) := V(s_{l-1})``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from agentgym import ConfigError


def gae(
    token_rewards: Tensor,
    values: Tensor,
    mask: Tensor,
    *,
    gamma: float = 1.0,
    lam: float | Tensor = 1.0,
    last_value: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation over the masked tokens of each sequence.

    Args:
        token_rewards: ``[B, T]``; usually the sequence's reward on its last policy token.
        values: ``[B, T]`` the critic's value of each position (no grad is needed).
        mask: ``[B, T]`` 1 on policy tokens.
        gamma: the discount.
        lam: GAE's lambda, a number or a ``[B]`` tensor (one per sequence).
        last_value: ``[B]`` the value of the state after each sequence's last policy
            token, which its TD error bootstraps from (``None``: 0 for every sequence,
            the episode ended there). A sequence cut before its episode's end (PPO's
            truncated GAE) passes the critic's value of the state where it was cut.

    Returns:
        ``(advantages, returns)``, both ``[B, T]`` float32 and zero off the mask;
        ``returns = advantages + values`` on the mask (the critic's targets).
    """
    if token_rewards.shape != values.shape or values.shape != mask.shape:
        raise ConfigError(
            f"gae needs token_rewards, values and mask of one shape; got "
            f"{tuple(token_rewards.shape)}, {tuple(values.shape)}, {tuple(mask.shape)}."
        )
    r = token_rewards.to(torch.float64)
    v = values.detach().to(torch.float64)
    m = mask.to(torch.float64)
    b, t_len = r.shape
    lam_b = torch.as_tensor(lam, dtype=torch.float64)
    lam_b = lam_b.expand(b) if lam_b.dim() == 0 else lam_b
    if lam_b.shape != (b,):
        raise ConfigError(
            f"lam must be a number or one per sequence ([{b}]), got {tuple(lam_b.shape)}."
        )
    adv = torch.zeros_like(r)
    if last_value is None:
        next_value = torch.zeros(b, dtype=torch.float64)
    else:
        next_value = last_value.detach().to(torch.float64).reshape(-1)
        if next_value.shape != (b,):
            raise ConfigError(
                f"last_value must hold one value per sequence ([{b}]), got "
                f"{tuple(last_value.shape)}."
            )
    running = torch.zeros(b, dtype=torch.float64)
    for t in reversed(range(t_len)):
        delta = r[:, t] + gamma * next_value - v[:, t]
        candidate = delta + gamma * lam_b * running
        on = m[:, t]
        running = on * candidate + (1 - on) * running
        next_value = on * v[:, t] + (1 - on) * next_value
        adv[:, t] = running
    adv = adv * m
    returns = (adv + v) * m
    return adv.to(torch.float32), returns.to(torch.float32)


def last_masked(values: Tensor, mask: Tensor) -> Tensor:
    """``[B]`` each sequence's value at its last masked position (0 where none is masked)."""
    on = mask > 0
    has = on.any(-1)
    last = torch.where(has, mask.shape[1] - 1 - on.flip(-1).to(torch.int64).argmax(-1), 0)
    picked = values.detach().gather(1, last[:, None]).squeeze(1)
    return torch.where(has, picked, torch.zeros_like(picked))


def egae(
    token_rewards: Tensor,
    values: Tensor,
    mask: Tensor,
    truncated: Tensor,
    *,
    gamma: float = 1.0,
    lam: float | Tensor = 1.0,
) -> tuple[Tensor, Tensor]:
    """T-PPO's Extended GAE (arXiv 2506.15050): GAE over the tokens of a window.

    A sequence with ``truncated`` set was cut by the window and goes on next step: the
    state after its last token ``s_l`` has no value of its own yet, so EGAE sets
    ``V(s_l) := V(s_{l-1})``, the critic's value of the last token's state. With
    ``gamma = 1`` and no reward inside the window the last TD error is then 0, and
    ``A_t = sum_{k=0}^{l-2-t} (gamma lam)^k delta_{t+k}``: PPO's truncated GAE over the
    first ``l - 1`` tokens bootstrapped from ``V(s_{l-1})``. A sequence that ended (its
    episode's reward on its last token) gets ordinary GAE.

    Args:
        token_rewards / values / mask / gamma / lam: as :func:`gae`.
        truncated: ``[B]`` bool, the sequence was cut by the window.

    Returns:
        ``(advantages, returns)`` as :func:`gae`.
    """
    cut = truncated.to(torch.bool).reshape(-1)
    boot = torch.where(cut, last_masked(values, mask).to(torch.float64), 0.0)
    return gae(token_rewards, values, mask, gamma=gamma, lam=lam, last_value=boot)


def length_adaptive_lambda(lengths: Tensor, alpha: float = 0.05) -> Tensor:
    """VAPO's per-sequence lambda: ``1 - 1 / (alpha * length)`` (clamped to ``[0, 1]``).

    Long sequences get a lambda close to 1 (little bias from the critic over a long
    horizon), short ones a smaller one (less variance).
    """
    if alpha <= 0:
        raise ConfigError(f"alpha must be > 0, got {alpha}.")
    n = lengths.to(torch.float64).clamp(min=1e-9)
    return (1.0 - 1.0 / (alpha * n)).clamp(0.0, 1.0)


def decoupled_gae(
    token_rewards: Tensor,
    values: Tensor,
    mask: Tensor,
    *,
    gamma: float = 1.0,
    lam_policy: float | Tensor = 0.95,
    lam_critic: float = 1.0,
    last_value: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """VAPO's decoupled GAE: policy advantages with ``lam_policy``, critic targets with
    ``lam_critic`` (1: Monte-Carlo returns). Returns ``(advantages, value_targets)``.
    ``last_value``: as :func:`gae` (a sequence cut before its episode's end)."""
    adv, _ = gae(token_rewards, values, mask, gamma=gamma, lam=lam_policy, last_value=last_value)
    _, targets = gae(
        token_rewards, values, mask, gamma=gamma, lam=lam_critic, last_value=last_value
    )
    return adv, targets


def terminal_rewards(rewards: Tensor, mask: Tensor) -> Tensor:
    """``[B, T]`` token rewards with each sequence's reward on its last masked token."""
    out = torch.zeros(mask.shape, dtype=torch.float32)
    on = mask > 0
    has = on.any(-1)
    last = torch.where(has, mask.shape[1] - 1 - on.flip(-1).to(torch.int64).argmax(-1), 0)
    rows = torch.arange(mask.shape[0])
    out[rows[has], last[has]] = rewards.to(torch.float32)[has]
    return out


def value_loss(
    values: Tensor,
    old_values: Tensor,
    targets: Tensor,
    mask: Tensor,
    *,
    total_tokens: float,
    clip: float | None = 0.2,
) -> Tensor:
    """PPO's clipped value loss, ``0.5 * max((v - R)^2, (v_clip - R)^2)``, token mean over
    the whole batch (``total_tokens``, as the policy loss). ``clip=None`` turns the clip
    off; ``v_clip = old + clamp(v - old, -clip, clip)``."""
    if total_tokens <= 0:
        raise ConfigError(f"total_tokens must be > 0, got {total_tokens}.")
    m = mask.to(values.dtype)
    err = (values - targets.detach()).pow(2)
    if clip is not None:
        clipped = old_values.detach() + (values - old_values.detach()).clamp(-clip, clip)
        err = torch.maximum(err, (clipped - targets.detach()).pow(2))
    return 0.5 * (err * m).sum() / total_tokens


def positive_nll(logp: Tensor, mask: Tensor, positive: Tensor, *, total_tokens: float) -> Tensor:
    """VAPO's positive-example LM loss: ``-logp`` on the tokens of correct samples
    (``positive`` ``[B]`` bool), token mean over the whole batch's tokens of those samples
    (``total_tokens``)."""
    if total_tokens <= 0:
        return logp.sum() * 0.0
    m = mask.to(logp.dtype) * positive.to(logp.dtype)[:, None]
    return -(logp * m).sum() / total_tokens


def explained_variance(values: Tensor, targets: Tensor, mask: Tensor) -> float:
    """``1 - Var(targets - values) / Var(targets)`` over the masked tokens (1 is perfect,
    0 no better than a constant, negative worse); ``nan`` when the targets do not vary."""
    on = mask > 0
    y = targets[on].to(torch.float64)
    if y.numel() < 2:
        return float("nan")
    var_y = y.var(unbiased=False)
    if var_y <= 0:
        return float("nan")
    return float(1.0 - (y - values[on].to(torch.float64)).var(unbiased=False) / var_y)
