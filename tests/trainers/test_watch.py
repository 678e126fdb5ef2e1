"""Training you can watch (issue 22): a few sample episodes per step in samples.jsonl,
loss / KL / learning rate in the progress lines, plots of the losses beside the reward,
and a summary at the end even when eval is off. Through the CLI, as a user sees them."""

from __future__ import annotations

from pathlib import Path

from test_run_folder import _train_args, cli

from agentgym.trainers.logging import SampleLog, progress_stats, read_jsonl, train_summary


def test_a_run_shows_what_the_model_wrote_and_how_training_goes(tmp_path):
    out = tmp_path / "run"
    args = _train_args(out, "run.max_steps=2", "run.plots=true", "run.progress=true")
    args += ["run.sample_episodes=3", "eval.at_ends=false", "rollout.batch_tasks=3"]
    r = cli(*args)
    assert r.returncode == 0, r.stderr[-4000:]
    rows = read_jsonl(out / "samples.jsonl")
    assert [row["step"] for row in rows] == [1, 1, 1, 2, 2, 2]
    for row in rows:
        assert row["env_id"].endswith("EvenChars-v0") and isinstance(row["seed"], int)
        assert row["turns"] and isinstance(row["turns"][0]["reply"], str)
        assert row["turns"][0]["prompt"]  # the observation the policy answered
        assert "reward_breakdown" in row and "shaped_reward" in row
    # progress lines (not a terminal here) carry loss, KL and learning rate
    last = [line for line in r.stderr.splitlines() if line.startswith("[dapo] 2/2 steps")]
    assert last and all(f" {k}=" in last[0] for k in ("lr", "reward")), r.stderr
    # the surrogate loss and the KL show when they moved, and only then
    step2 = next(row for row in read_jsonl(out / "metrics.jsonl") if row.get("step") == 2)
    for key, short in (("losses/total", "loss"), ("losses/approx_kl_ref", "kl")):
        moved = key in step2 and abs(step2[key]) > (1e-6 if short == "loss" else 0.0)
        assert (f" {short}=" in last[0]) == moved, (key, step2.get(key), last[0])
    # with eval off the run still ends with a summary
    assert "trained steps 1-2" in r.stdout and "samples.jsonl" in r.stdout, r.stdout
    assert (out / "plots" / "training.png").stat().st_size > 1000
    assert not (out / "eval_table.md").exists()


class _Ep:
    def __init__(self, reward: float, seed: int) -> None:
        self.env_id, self.task_id, self.seed, self.sample = "e", "t", seed, 0
        self.reward, self.reward_breakdown, self.turns = reward, {"r": reward}, []


def test_samples_span_the_steps_rewards_and_name_the_shaped_reward(tmp_path):
    log = SampleLog(tmp_path / "s.jsonl", per_step=3)
    eps = [_Ep(r, i) for i, r in enumerate([0.5, 0.0, 1.0, 0.2, 0.9])]
    log.write_step(7, eps, trained=eps[:2], shaped=[0.25, -1.0])
    rows = read_jsonl(tmp_path / "s.jsonl")
    assert [row["reward"] for row in rows] == [0.0, 0.5, 1.0]  # worst, middle, best
    assert [row["shaped_reward"] for row in rows] == [-1.0, 0.25, None]
    off = SampleLog(tmp_path / "off.jsonl", per_step=0)
    off.write_step(1, eps, trained=[], shaped=[])
    assert not Path(tmp_path / "off.jsonl").exists()


def test_summary_compares_the_first_and_last_steps():
    rows = [
        {"step": s, "charts/reward": float(s), "charts/accuracy": s / 10, "time/step_s": 2.0}
        for s in range(1, 7)
    ]
    text = train_summary(rows, "runs/x")
    assert "trained steps 1-6 (2.0 s/step); first 3 vs last 3 steps:" in text
    assert "2.000 ->    5.000" in text  # reward: mean of steps 1-3 vs 4-6
    assert "runs/x/samples.jsonl" in text


def test_eval_shows_progress(tmp_path):
    out = tmp_path / "run"
    args = _train_args(out, "run.progress=true", "eval.at_ends=true", "eval.num_tasks=3")
    r = cli(*args)
    assert r.returncode == 0, r.stderr[-4000:]
    # before and after training, each saying which evaluation it is
    assert r.stderr.count("[eval (after step 0)] 3/3 episodes") == 1, r.stderr
    assert r.stderr.count("[eval (after step 1)] 3/3 episodes") == 1, r.stderr
    assert (out / "eval_table.md").is_file() and "trained steps 1-1" in r.stdout


def test_the_summary_says_when_updates_were_skipped():
    rows = [{"step": s, "charts/reward": 0.5, "charts/update_skipped": 1} for s in (1, 2, 3)]
    text = train_summary(rows, "runs/x")
    assert "without a single update" in text and "trained steps" not in text
    rows[1]["charts/update_skipped"] = 0
    assert "ran steps 1-3, 1 with an update (2 skipped)" in train_summary(rows, "runs/x")


def test_progress_lines_leave_out_figures_that_are_not_numbers():
    stats = progress_stats({"charts/reward": float("nan"), "losses/total": 0.5})
    assert stats == {"loss": 0.5}


def test_a_run_of_no_steps_does_not_list_checkpoints(tmp_path):
    out = tmp_path / "run"
    r = cli(*_train_args(out, "run.max_steps=0", "eval.at_ends=false"))
    assert r.returncode == 0, r.stderr[-4000:]
    done = [line for line in r.stdout.splitlines() if "[agentgym train] done:" in line]
    assert done and "checkpoints/" not in done[0], r.stdout
