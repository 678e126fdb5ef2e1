"""LongTail-v0: heavy-tailed target lengths, the reward, the oracle, bad arguments."""

from __future__ import annotations

import pytest

import agentgym
from agentgym import ConfigError


def _targets(env, n: int) -> list[int]:
    out = []
    for seed in range(n):
        env.reset(seed=seed)
        out.append(env.unwrapped.task.task_id.split("/")[1])
    return [int(k) for k in out]


def test_target_lengths_are_heavy_tailed_and_capped():
    env = agentgym.make("agentgym/LongTail-v0")
    ks = sorted(_targets(env, 1000))
    assert min(ks) >= 4 and max(ks) == 256  # the cut of the law is reached
    assert ks[500] <= 10  # most tasks are short...
    assert sum(k >= 100 for k in ks) >= 10  # ...and a few are long
    # the inverse CDF: u = 1 gives the scale, small u the cap
    lt = env.unwrapped
    assert lt.target_length(1.0) == 4 and lt.target_length(1e-9) == 256
    assert lt.target_length(0.5) == 7  # 4 * 2 ** (1 / 1.1) = 7.5


def test_the_reward_is_length_score_times_letter_share():
    env = agentgym.make("agentgym/LongTail-v0", min_length=8, max_length=8)
    obs, _ = env.reset(seed=0)
    assert obs[-1].content.endswith("." * 8)
    _, r, terminated, _, info = env.step("aaaaaaaa")
    assert terminated and r == 1.0 and info["reward_breakdown"]["correct"] is True
    env.reset(seed=1)
    _, r, _, _, info = env.step("  aaaa11  ")  # 6 characters, 4 letters
    b = info["reward_breakdown"]
    assert (b["length"], b["length_score"], b["letter_share"]) == (6, 0.75, pytest.approx(4 / 6))
    assert r == pytest.approx(0.5) and b["correct"] is False
    env.reset(seed=2)
    assert env.step("")[1] == 0.0
    env.reset(seed=3)
    assert env.step("a" * 20)[1] == 0.0  # more than twice too long


def test_digits_instead_of_a_ruler_and_the_oracle():
    env = agentgym.make("agentgym/LongTail-v0", ruler=False, min_length=12, max_length=12)
    obs, _ = env.reset(seed=5)
    assert "exactly 12 lowercase letters" in obs[-1].content
    assert env.unwrapped.oracle_action(obs) == "a" * 12


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"min_length": 0}, "min_length"),
        ({"min_length": 9, "max_length": 8}, "min_length"),
        ({"alpha": 0}, "alpha"),
    ],
)
def test_bad_arguments_say_what_is_wrong(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        agentgym.make("agentgym/LongTail-v0", **kwargs)
