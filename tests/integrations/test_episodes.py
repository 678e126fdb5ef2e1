"""Episodes to Parquet / Hugging Face datasets and back, conversations kept; the CLI."""

from __future__ import annotations

import json

import pytest

from agentgym import Completion, Episode, EpisodeFailure, read_episodes, rollout
from agentgym.cli import main
from agentgym.trainers.integrations import (
    episodes_from_dataset,
    episodes_to_dataset,
    read_episodes_parquet,
    write_episodes_parquet,
)


def _same(a: list[Episode], b: list[Episode]) -> None:
    assert [json.loads(e.to_json()) for e in a] == [json.loads(e.to_json()) for e in b]


def _episodes() -> list[Episode]:
    import trainer_toy_envs

    trainer_toy_envs.register()

    async def policy(messages, sampling):
        return Completion(text="aaa", token_ids=(7, 7, 7, 2), logprobs=(-0.25, -0.5, -1.0, -0.125))

    eps = rollout("agentgym-test/TwoPart-v0", policy, seeds=[0, 1], group_size=2)
    failed = Episode(
        env_id="agentgym-test/TwoPart-v0",
        task_id="two-9",
        seed=9,
        failure=EpisodeFailure("sandbox_died", "InfraError: gone", "step", "tb"),
    )
    return [*eps, failed]


def test_parquet_and_datasets_round_trip_with_conversations(tmp_path):
    datasets = pytest.importorskip("datasets", reason="pip install 'agentgym[trl]'")
    eps = _episodes()
    path = write_episodes_parquet(eps, tmp_path / "eps.parquet")
    _same(read_episodes_parquet(path), eps)

    ds = episodes_to_dataset(eps)
    assert ds.num_rows == 5
    row = ds[0]
    assert row["num_conversations"] == 2 and row["num_turns"] == 3
    assert [len(c["turns"]) for c in row["conversations"]] == [2, 1]
    assert [t["kind"] for c in row["conversations"] for t in c["turns"]] == [
        "act",
        "summary",
        "act",
    ]
    assert row["conversations"][0]["turns"][0]["messages"][-1]["role"] == "user"
    assert row["conversations"][1]["turns"][0]["completion"]["logprobs"] == [
        -0.25,
        -0.5,
        -1.0,
        -0.125,
    ]
    assert ds[4]["failed"] and json.loads(ds[4]["failure"])["reason"] == "sandbox_died"
    _same(episodes_from_dataset(ds), eps)
    # and as any datasets user would load the file
    loaded = datasets.load_dataset("parquet", data_files=str(path), split="train")
    _same(episodes_from_dataset(loaded), eps)
    assert loaded.filter(lambda r: r["reward"] > 0.5 and not r["failed"]).num_rows == 4


def test_cli_exports_a_run_folder(tmp_path, capsys):
    import trainer_toy_envs

    trainer_toy_envs.register()
    run = tmp_path / "run"
    run.mkdir()
    out = run / "eval" / "episodes.jsonl"
    out.parent.mkdir()
    assert (
        main(
            [
                "eval",
                "agentgym-test/TwoPart-v0",
                "--policy",
                "oracle",
                "--episodes",
                "3",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    (run / "metrics.jsonl").write_text('{"step": 1}\n')  # not episodes: skipped
    assert main(["episodes", "export", str(run), "--format", "parquet"]) == 0
    assert "3 episodes (9 turns) from 1 file(s)" in capsys.readouterr().err
    _same(read_episodes_parquet(run / "episodes.parquet"), read_episodes(out))
    pytest.importorskip("datasets")
    from datasets import load_from_disk

    assert (
        main(["episodes", "export", str(out), "--format", "dataset", "--out", str(tmp_path / "ds")])
        == 0
    )
    _same(episodes_from_dataset(load_from_disk(str(tmp_path / "ds"))), read_episodes(out))
    assert main(["episodes", "export", str(tmp_path / "nothing_here")]) == 2


def test_a_folder_export_takes_every_episode_file_and_a_runs_samples_with_their_policy(
    tmp_path, capsys
):
    """Any JSONL of episodes counts (not only *episodes*.jsonl), a training run's
    samples.jsonl too, and each row says which policy played it and from which file."""
    import pyarrow.parquet as pq
    import trainer_toy_envs

    from agentgym.trainers.logging import SampleLog

    trainer_toy_envs.register()
    root = tmp_path / "results"
    # `eval --out` into a folder that does not exist yet, under a name of the user's
    out = root / "evals" / "oracle_run.jsonl"
    argv = ["eval", "agentgym-test/TwoPart-v0", "--episodes", "2", "--out", str(out)]
    assert main([*argv, "--policy", "oracle"]) == 0
    assert len(read_episodes(out)) == 2
    # a training run's samples.jsonl, as the trainer writes it
    run = root / "train_run"
    played = _episodes()[:4]
    log = SampleLog(run / "samples.jsonl", per_step=2)
    log.write_step(3, played, played, [0.5] * 4)
    (run / "metrics.jsonl").write_text('{"step": 3, "charts/reward": 1.0}\n')  # skipped
    (run / "config.yaml").write_text("run: {}\n")

    assert main(["episodes", "export", str(root)]) == 0
    err = capsys.readouterr().err
    assert "4 episodes (12 turns) from 2 file(s)" in err and "oracle" in err
    table = pq.read_table(root / "episodes.parquet").to_pylist()
    by_source = {}
    for row in table:
        by_source.setdefault(row["source"], []).append(row)
    assert set(by_source) == {"evals/oracle_run.jsonl", "train_run/samples.jsonl"}
    assert {r["policy"] for r in by_source["evals/oracle_run.jsonl"]} == {"oracle"}
    samples = by_source["train_run/samples.jsonl"]
    assert {r["policy"] for r in samples} == {f"train:{run}"}
    assert [json.loads(r["metrics"])["step"] for r in samples] == [3, 3]
    first = samples[0]["conversations"][0]["turns"][0]
    assert first["completion"]["text"] == "aaa" and first["messages"][0]["content"]


def test_export_errors_say_what_is_wrong(tmp_path):
    from agentgym import ConfigError
    from agentgym.trainers.integrations import find_episode_files

    with pytest.raises(ConfigError, match="does not exist"):
        find_episode_files(tmp_path / "no_such_folder")
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n')
    with pytest.raises(ConfigError, match="not a file of episodes"):
        find_episode_files(tmp_path / "metrics.jsonl")
    assert find_episode_files(tmp_path) == []
    assert main(["episodes", "export", str(tmp_path)]) == 2
