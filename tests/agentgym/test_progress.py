"""The core progress reporter: a few plain lines in logs, nothing when disabled."""

from __future__ import annotations

import io

from agentgym import Progress


def _lines(stream: io.StringIO) -> list[str]:
    return [line for line in stream.getvalue().splitlines() if line]


def test_logs_get_a_line_per_tenth_not_per_step():
    out = io.StringIO()
    with Progress(1500, desc="sft", stream=out, every_s=1e9) as bar:
        for i in range(1500):
            bar.update(1, {"loss": 1.0 / (i + 1)})
    lines = _lines(out)
    assert len(lines) == 10  # 150, 300, ..., 1500
    assert lines[0].startswith("[sft] 150/1500 steps  loss=0.006")
    assert lines[-1].startswith("[sft] 1500/1500 steps")
    assert bar.done == 1500


def test_a_short_run_still_reports_its_last_update_and_slow_steps_are_never_silent():
    out = io.StringIO()
    bar = Progress(3, desc="dapo", stream=out, every_s=0.0)
    for _ in range(3):
        bar.update()
    assert [line.split("  ")[0] for line in _lines(out)] == [
        "[dapo] 1/3 steps",
        "[dapo] 2/3 steps",
        "[dapo] 3/3 steps",
    ]


def test_a_resumed_run_says_where_it_starts():
    out = io.StringIO()
    bar = Progress(20, desc="bench", unit="episode", start=8, stream=out, every_s=1e9)
    bar.update(2)
    lines = _lines(out)
    assert lines[0] == "[bench] 8/20 episodes already done"
    assert lines[1].startswith("[bench] 10/20 episodes")


def test_disabled_or_empty_prints_nothing():
    out = io.StringIO()
    for bar in (
        Progress(10, desc="x", enabled=False, stream=out),
        Progress(0, desc="y", stream=out),
    ):
        bar.update(5, {"a": 1})
        bar.close()
        bar.close()  # twice is fine
    assert out.getvalue() == ""


# ------------------------------------------------------- issue 44: no silent minutes


def test_a_long_silence_gets_a_line_before_the_next_update(monkeypatch):
    import time

    out = io.StringIO()
    bar = Progress(5, desc="eval", unit="episode", stream=out, every_s=0.2)
    bar.note({"turns": 7})  # what is known between updates shows in the next line
    time.sleep(0.9)  # no update at all: the work is inside one long call
    bar.close()
    lines = _lines(out)
    assert len(lines) >= 2, lines
    assert lines[0].startswith("[eval] 0/5 episodes  turns=7"), lines
    assert bar.done == 0
    time.sleep(0.4)
    assert _lines(out) == lines  # closed: quiet


def test_only_the_innermost_open_bar_speaks_while_it_waits():
    import time

    out = io.StringIO()
    outer = Progress(3, desc="dapo", stream=out, every_s=0.2)
    inner = Progress(4, desc="eval", unit="episode", stream=out, every_s=0.2)
    time.sleep(0.7)
    inner.close()
    outer.close()
    lines = _lines(out)
    assert lines and all(line.startswith("[eval]") for line in lines), lines


def _slow_policy():
    import asyncio

    from agentgym import Completion

    async def reply(messages, sampling):
        await asyncio.sleep(0.3)
        return Completion("Noted.")

    return reply


def test_a_rollout_reports_turns_while_its_episodes_run(monkeypatch, capsys):
    import agentgym.progress as progress

    monkeypatch.setattr(progress, "DEFAULT_EVERY_S", 0.25)
    from agentgym import rollout

    rollout(
        "agentgym/MemoryRecall-v0",
        _slow_policy(),
        num_tasks=2,
        progress=True,
        env_kwargs={"num_facts": 2},
    )
    err = capsys.readouterr().err.splitlines()
    early = [line for line in err if line.startswith("[rollout] 0/2 episodes")]
    assert early and any("turns=" in line for line in early), err


def test_eval_json_keeps_its_progress_on_stderr_and_reports_accuracy(capsys):
    import json

    from agentgym.cli import main

    rc = main(
        ["eval", "agentgym/MemoryRecall-v0", "--policy", "oracle", "--episodes", "3", "--json"]
    )
    out, err = capsys.readouterr()
    assert rc == 0
    summary = json.loads(out)  # stdout holds the JSON alone
    assert summary["accuracy"] == 1.0  # the oracle solves every task
    assert "[rollout] 3/3 episodes" in err
