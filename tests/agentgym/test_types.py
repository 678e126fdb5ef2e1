from __future__ import annotations

import json

import pytest

from agentgym.errors import ConfigError, DataError
from agentgym.types import (
    Completion,
    Episode,
    Message,
    SamplingParams,
    Turn,
    read_episodes,
    to_openai,
    write_episodes,
)


def make_episode(reward: float = 0.5) -> Episode:
    c0 = Completion(text="hé 🙂", token_ids=(1, 2, 3), logprobs=(-0.1, -0.2, -0.3))
    c1 = Completion(text="summary", num_tokens=7, finish_reason="length")
    return Episode(
        env_id="agentgym/X-v0",
        task_id="t/1",
        seed=3,
        turns=[
            Turn(messages=(Message("system", "s"), Message("user", "u")), completion=c0),
            Turn(messages=(Message("user", "u2"),), completion=c1, kind="summary", conversation=1),
        ],
        reward=reward,
        reward_breakdown={"correct": True, "terms": {"cost": -0.25}},
        terminated=True,
        metrics={"grading_time_s": 0.01},
        sample=2,
    )


def test_episode_json_round_trip_keeps_every_field():
    ep = make_episode()
    back = Episode.from_json(ep.to_json())
    assert back == ep
    assert back.num_conversations == 2
    assert back.num_policy_tokens == 3 + 7
    assert back.group_key == ("agentgym/X-v0", "t/1", 3)
    assert [len(c) for c in back.conversations()] == [1, 1]


def test_completion_counts_tokens_and_checks_alignment():
    assert Completion(text="a", token_ids=(5, 6)).num_tokens == 2
    assert Completion(text="a", finish_reason="length").truncated
    with pytest.raises(ConfigError, match="align"):
        Completion(text="a", token_ids=(1, 2), logprobs=(-1.0,))


def test_non_finite_numbers_become_null_in_json():
    ep = make_episode(reward=float("nan"))
    ep.metrics["x"] = float("inf")
    d = json.loads(ep.to_json())
    assert d["reward"] is None and d["metrics"]["x"] is None


def test_message_validation_and_openai_format():
    with pytest.raises(ConfigError, match="role"):
        Message("robot", "hi")
    assert to_openai([Message("user", "hi")]) == [{"role": "user", "content": "hi"}]


def test_sampling_params_validate_and_normalise_stop():
    assert SamplingParams(stop="\n").stop == ("\n",)
    with pytest.raises(ConfigError):
        SamplingParams(max_tokens=0)
    with pytest.raises(ConfigError):
        SamplingParams(top_p=0)


def test_jsonl_round_trip_append_and_torn_last_line(tmp_path):
    path = tmp_path / "eps.jsonl"
    assert write_episodes(path, [make_episode(0.1), make_episode(0.2)]) == 2
    write_episodes(path, [make_episode(0.3)], append=True)
    with path.open("a") as f:  # a writer killed mid-line
        f.write(make_episode(0.4).to_json()[:40])
    assert [e.reward for e in read_episodes(path)] == [0.1, 0.2, 0.3]


def test_bad_jsonl_line_names_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(make_episode().to_json() + "\n{not json}\n" + make_episode().to_json() + "\n")
    with pytest.raises(DataError, match=r"bad\.jsonl:2"):
        read_episodes(path)


def test_every_public_name_of_the_package_resolves():
    import agentgym

    missing = [name for name in agentgym.__all__ if getattr(agentgym, name, None) is None]
    assert not missing
    assert agentgym.LocalEnvs.__module__ == "agentgym.local_envs"
