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
