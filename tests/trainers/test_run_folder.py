"""A run folder holds one run (issue 22): train and sft refuse to mix two runs, --resume
needs something to resume, a failed start-up leaves nothing behind, a missing model says
which command writes it, and key=value overrides may follow flags. Through the CLI, as a
user meets them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TINY_QWEN

from agentgym import ConfigError
from agentgym.trainers.logging import read_jsonl
from agentgym.trainers.run_folder import clean_failed_start, describe_run, prepare_run_folder

HELPERS = Path(__file__).resolve().parents[1] / "helpers"
REPO = Path(__file__).resolve().parents[2]


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HELPERS), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "agentgym", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=cwd,
    )


def _train_args(out: Path, *extra: str) -> list[str]:
    return [
        "train",
        f"run.output_dir={out}",
        "run.max_steps=1",
        "run.save_every=1",
        "run.threads=1",
        "run.progress=false",
        "run.plots=false",
        "envs=[{id: 'trainer_toy_envs:agentgym-test/EvenChars-v0'}]",
        f"model.preset_overrides={json.dumps(TINY_QWEN)}",
        "rollout.group_size=2",
        "rollout.batch_tasks=2",
        "rollout.max_tokens=4",
        *extra,
    ]


def _error(r: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert r.returncode == 2, (r.stdout[-2000:], r.stderr[-4000:])
    assert "Traceback" not in r.stderr, r.stderr[-4000:]
    for n in needles:
        assert n in r.stderr, r.stderr[-4000:]


def test_a_second_run_into_a_folder_is_refused_until_resume_or_overwrite(tmp_path):
    out = tmp_path / "run"
    first = cli(*_train_args(out))
    assert first.returncode == 0, first.stderr[-4000:]
    rows = read_jsonl(out / "metrics.jsonl")
    assert rows
    again = cli(*_train_args(out))
    _error(again, "already holds a run", "metrics.jsonl", "step_000001", "--resume", "--overwrite")
    assert read_jsonl(out / "metrics.jsonl") == rows  # nothing of the first run was touched
    # overrides after a flag are accepted (run.max_steps=2 continues one step further)
    resumed = cli(*_train_args(out), "--resume", "run.max_steps=2")
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    assert [r["step"] for r in read_jsonl(out / "metrics.jsonl") if "losses/total" in r] == [1, 2]
    over = cli(*_train_args(out), "--overwrite")
    assert over.returncode == 0, over.stderr[-4000:]
    assert [r["step"] for r in read_jsonl(out / "metrics.jsonl") if "losses/total" in r] == [1]
    assert not (out / "checkpoints" / "step_000002").exists()  # the old run is gone


def test_resume_needs_a_checkpoint_unless_asked_to_resume_if_present(tmp_path):
    out = tmp_path / "empty"
    _error(cli(*_train_args(out), "--resume"), "nothing to resume", "--resume-if-present")
    assert not out.exists()
    started = cli(*_train_args(out), "--resume-if-present")
    assert started.returncode == 0, started.stderr[-4000:]
    assert (out / "checkpoints" / "step_000001").is_dir()
    # and an unknown flag is still argparse's error, not an override
    bad = cli(*_train_args(out), "--no-such-flag")
    assert bad.returncode == 2 and "unrecognized arguments: --no-such-flag" in bad.stderr


def test_a_failed_start_leaves_no_folder_and_a_missing_model_names_its_command(tmp_path):
    out = tmp_path / "never"
    r = cli(
        *_train_args(out),
        f"model.path={tmp_path / 'sft' / 'model'}",
        "model.made_by=agentgym sft configs/quickstart_sft.yaml",
    )
    _error(r, "does not exist", "agentgym sft configs/quickstart_sft.yaml")
    assert not out.exists()
    # the shipped configs say which command writes their model; run from a scratch folder,
    # so that the config's relative model.path never finds a model the quickstart wrote
    # in the checkout (the README's two commands pass in either order)
    config = REPO / "configs" / "quickstart_dapo.yaml"
    r = cli("train", str(config), f"run.output_dir={out}", cwd=tmp_path)
    _error(r, "It is written by `agentgym sft configs/quickstart_sft.yaml`")
    assert not out.exists()


def test_sft_refuses_a_folder_that_holds_a_model(tmp_path):
    out = tmp_path / "sft"
    (out / "model").mkdir(parents=True)
    (out / "model" / "config.json").write_text("{}")
    r = cli("sft", "configs/quickstart_sft.yaml", f"run.output_dir={out}", "train.max_steps=1")
    _error(r, "already holds a run", "a saved model")


def test_the_rules_as_functions(tmp_path):
    out = tmp_path / "r"
    assert describe_run(out) is None and not prepare_run_folder(out, command="train")
    out.mkdir()
    (out / "config.yaml").write_text("run: {}\n")
    (out / "apo_values.jsonl").write_text('{"value": 1}\n')
    with pytest.raises(ConfigError, match="choose one"):
        prepare_run_folder(out, command="train", resume=True, overwrite=True)
    with pytest.raises(ConfigError, match="no checkpoint"):
        prepare_run_folder(out, command="train", resume=True)
    assert not prepare_run_folder(out, command="train", overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == ["apo_values.jsonl"]  # the cache stays
    ckpt = out / "checkpoints" / "step_000003"
    ckpt.mkdir(parents=True)
    (ckpt / "trainer_state.json").write_text("{}")
    assert prepare_run_folder(out, command="train", resume=True)
    assert prepare_run_folder(out, command="train", resume_if_present=True)
    # clean-up after a failed start: only a folder this command made, holding leftovers
    made = tmp_path / "made"
    (made / "engine").mkdir(parents=True)
    (made / "config.yaml").write_text("x")
    assert clean_failed_start(made, existed=False) and not made.exists()
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "metrics.jsonl").write_text("{}\n")
    assert not clean_failed_start(kept, existed=False) and kept.exists()


def test_a_resume_under_another_layout_is_refused_before_any_process_starts(tmp_path):
    """Each rank's optimizer shard fits only the dp_shard/tp/ep/pp that wrote it: the
    launcher refuses another layout (the ranks would, after a whole start-up); an unset
    size is 1, and the same layout resumes."""
    out = tmp_path / "r"
    ckpt = out / "checkpoints" / "step_000001"
    ckpt.mkdir(parents=True)
    (ckpt / "trainer_state.json").write_text("{}")
    saved = {"run": {}, "rollout": {}, "distributed": {"strategy": "fsdp2", "tp": 2, "ep": 1}}
    (out / "config.yaml").write_text(json.dumps(saved))

    def resume(**sizes: int) -> bool:
        settings = {"run": {}, "rollout": {}, "distributed": {"strategy": "fsdp2", **sizes}}
        return prepare_run_folder(out, command="train", resume=True, settings=settings)

    assert resume(tp=2) and resume(tp=2, pp=1)
    with pytest.raises(ConfigError, match="resume with the same dp_shard/tp/ep/pp") as e:
        resume(ep=2)
    assert "'tp': 2" in str(e.value) and "'ep': 2" in str(e.value)


def test_a_layout_that_does_not_fit_the_processes_is_said_once_before_anything_starts(tmp_path):
    out = tmp_path / "run"
    r = cli(
        *_train_args(out, "distributed.strategy=fsdp2", "distributed.dp_shard=2"), "--nproc", "3"
    )
    _error(r, "= 2 processes, but this run has 3: launch with --nproc 2")
    assert r.stderr.count("processes, but this run has") == 1, r.stderr
    assert "--resume" not in r.stderr
    assert not out.exists()  # no health/, no run.lock left behind


# ------------------------------------------------------- issue 44: nothing a user owns goes


def _user_model(folder: Path) -> Path:
    """A folder holding what a user's model download holds (not agentgym's files)."""
    folder.mkdir(parents=True)
    for name in ("config.json", "model.safetensors", "tokenizer.json", "README.md"):
        (folder / name).write_text("{}")
    (folder / "original").mkdir()
    (folder / "original" / "params.json").write_text("{}")
    return folder


def test_overwrite_removes_only_what_agentgym_wrote_and_lists_it(tmp_path, capsys):
    out = tmp_path / "run"
    _user_model(out)  # a user's files share the folder with an earlier run
    (out / "config.yaml").write_text("run: {}\n")
    (out / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2}\n')
    (out / "samples.jsonl").write_text("{}\n")
    for d in ("plots", "checkpoints/step_000002", "tensorboard", "model"):
        (out / d).mkdir(parents=True)
    (out / "checkpoints" / "step_000002" / "trainer_state.json").write_text("{}")
    (out / "model" / "config.json").write_text("{}")
    (out / "apo_values.jsonl").write_text("{}\n")  # a cache: kept
    assert not prepare_run_folder(out, command="train", overwrite=True)
    left = sorted(p.name for p in out.iterdir())
    assert left == [
        "README.md", "apo_values.jsonl", "config.json", "model.safetensors", "original",
        "tokenizer.json",
    ]  # fmt: skip
    assert (out / "original" / "params.json").is_file()
    err = capsys.readouterr().err
    for removed in ("config.yaml", "metrics.jsonl", "samples.jsonl", "plots/", "checkpoints/",
                    "tensorboard/", "model/"):  # fmt: skip
        assert removed in err.split("left alone")[0], err
    assert "left alone" in err and "config.json" in err.split("left alone")[1], err


@pytest.mark.parametrize("where", ["is", "inside", "contains"])
def test_an_output_folder_that_is_inside_or_holds_the_model_is_refused(tmp_path, where):
    model = _user_model(tmp_path / "models" / "mine")
    out = {"is": model, "inside": model / "run", "contains": tmp_path / "models"}[where]
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    for overwrite in (False, True):
        with pytest.raises(ConfigError, match=r"model\.path") as e:
            prepare_run_folder(out, command="train", overwrite=overwrite, reads=[model])
        assert "run.output_dir" in str(e.value) and str(model) in str(e.value)
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before  # nothing touched
    # a folder beside the model is fine
    assert not prepare_run_folder(tmp_path / "models" / "run", command="train", reads=[model])


def test_train_into_the_models_own_folder_is_refused_before_anything_is_written(tmp_path):
    from agentgym.generation import build_preset, build_tokenizer, save_model

    tok = build_tokenizer()
    model = save_model(build_preset("tiny-qwen2", tok, overrides=TINY_QWEN), tok, tmp_path / "m")
    before = sorted(p.name for p in Path(model).iterdir())
    args = [a for a in _train_args(Path(model)) if not a.startswith("model.preset_overrides")]
    r = cli(*args, f"model.path={model}", "--overwrite")
    _error(r, "model.path", "run.output_dir")
    assert sorted(p.name for p in Path(model).iterdir()) == before
