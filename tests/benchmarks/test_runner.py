"""The suite runner: real MemoryRecall runs, results, resuming, the OpenAI client path."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from threading import Thread

import pytest

from agentgym.benchmarks.baselines import hoarder
from agentgym.benchmarks.runner import (
    EPISODES_FILE,
    RESULT_FILE,
    load_done,
    policy_slug,
    repair_torn_tail,
    run_suite,
    task_key,
)
from agentgym.errors import DataError
from agentgym.policies import ScriptedPolicy
from agentgym.types import Message, read_episodes


def seed_echo_policy(calls: list | None = None) -> ScriptedPolicy:
    """The hoarder, plus the request's sampling seed in the reply (so seeds are visible)."""

    def act(messages, sampling):
        if calls is not None:
            calls.append(sampling.seed)
        return f"{hoarder(messages)}\nseed {sampling.seed}"

    return ScriptedPolicy(act, name="seed-echo")


def keyed_texts(path: Path) -> dict:
    return {task_key(e): [t.completion.text for t in e.turns] for e in read_episodes(path)}


def test_oracle_beats_weak_policies_and_results_are_complete(tmp_path, tiny_suite, specs):
    results = {
        name: run_suite(tiny_suite, spec, out=tmp_path, concurrency=4)
        for name, spec in specs.items()
    }
    reward = {n: r["metrics"]["reward"]["value"] for n, r in results.items()}
    assert reward["oracle"] == 1.0
    assert reward["forgetful"] == 0.0
    assert 0.0 < reward["hoarder"] < 1.0
    h = tiny_suite.content_hash()
    for name, r in results.items():
        run_dir = Path(r["_dir"])
        assert run_dir.parent.name == f"memory-mini-{h[:12]}"
        saved = json.loads((run_dir / RESULT_FILE).read_text())
        assert saved["suite"]["hash"] == h
        assert saved["policy"]["spec"] == specs[name]
        assert saved["complete"] and saved["episodes"] == saved["expected_episodes"] == 12
        assert len(saved["tasks"]) == 6 and all(t["samples"] == 2 for t in saved["tasks"])
        assert set(saved["by_entry"]) == {"default", "long"}
        for cell in saved["metrics"].values():
            assert cell["ci_low"] <= cell["value"] <= cell["ci_high"]
        assert saved["usage"]["completion_tokens"] > 0 and saved["usage"]["policy_calls"] > 0
        assert saved["wall_time_s"] >= 0
        assert len(read_episodes(run_dir / EPISODES_FILE)) == 12
    # the oracle writes more than "OK." each turn
    assert (
        results["oracle"]["metrics"]["mean_tokens"]["value"]
        > results["forgetful"]["metrics"]["mean_tokens"]["value"]
    )


def test_resumed_run_matches_an_uninterrupted_one(tmp_path, tiny_suite):
    full = run_suite(tiny_suite, seed_echo_policy(), out=tmp_path / "a")

    first = run_suite(tiny_suite, seed_echo_policy(), out=tmp_path / "b", max_episodes=5)
    assert not first["complete"] and first["episodes"] == 5
    calls: list = []
    seen: list = []
    second = run_suite(
        tiny_suite, seed_echo_policy(calls), out=tmp_path / "b", on_episode=seen.append
    )
    assert second["complete"]
    assert second["resumed_episodes"] == 5 and second["new_episodes"] == 7
    assert len(seen) == 7  # only the missing episodes were played ...
    assert len(calls) == sum(len(e.turns) for e in seen)  # ... and nothing else was called
    done_first = {task_key(e) for e in read_episodes(Path(first["_dir"]) / EPISODES_FILE)[:5]}
    assert not done_first & {task_key(e) for e in seen}

    # the same requests (seeds included) and the same scores as the uninterrupted run
    a = keyed_texts(Path(full["_dir"]) / EPISODES_FILE)
    b = keyed_texts(Path(second["_dir"]) / EPISODES_FILE)
    assert a == b and len(a) == 12
    assert second["metrics"] == full["metrics"]
    assert second["tasks"] == full["tasks"]


def test_a_torn_last_line_is_cut_and_the_run_completes(tmp_path, tiny_suite):
    first = run_suite(tiny_suite, seed_echo_policy(), out=tmp_path, max_episodes=3)
    path = Path(first["_dir"]) / EPISODES_FILE
    with path.open("a") as f:
        f.write('{"env_id": "agentgym/MemoryRec')  # a write killed half-way
    r = run_suite(tiny_suite, seed_echo_policy(), out=tmp_path)
    assert r["complete"] and r["resumed_episodes"] == 3
    assert len(read_episodes(path)) == 12
    assert path.read_text().endswith("\n")


def test_repair_torn_tail_cuts_only_an_unterminated_line(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text("a\nb\n")
    assert repair_torn_tail(p) == 0 and p.read_text() == "a\nb\n"
    p.write_text("a\nb\npart")
    assert repair_torn_tail(p) == 4 and p.read_text() == "a\nb\n"
    p.write_text("only-part")
    assert repair_torn_tail(p) == 9 and p.read_text() == ""


def test_limit_runs_a_prefix_that_a_full_run_completes(tmp_path, tiny_suite, specs):
    quick = run_suite(tiny_suite, specs["oracle"], out=tmp_path, limit=1)
    assert not quick["complete"] and quick["episodes"] == 4  # 2 entries x 1 task x 2 samples
    assert {t["task"] for t in quick["tasks"]} == {"default/0", "long/100"}
    full = run_suite(tiny_suite, specs["oracle"], out=tmp_path)
    assert full["complete"] and full["resumed_episodes"] == 4 and full["new_episodes"] == 8


def test_a_killed_cli_run_resumes_without_redoing_episodes(tmp_path, tiny_suite_file, cli):
    out = tmp_path / "res"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]
        ),
        "BENCH_TEST_DELAY": "0.1",
    }
    args = [
        sys.executable, "-m", "agentgym", "bench", str(tiny_suite_file),
        "--policy", "scripted:bench_policies:slow_hoarder", "--out", str(out),
        "--concurrency", "2", "--json",
    ]  # fmt: skip
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    files: list[Path] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        files = list(out.glob(f"*/*/{EPISODES_FILE}"))
        if files and files[0].read_text().count("\n") >= 3:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run finished before it could be interrupted"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    path = files[0]
    repair_torn_tail(path)
    before = len(read_episodes(path))
    assert 3 <= before < 12

    r = cli(
        "bench", str(tiny_suite_file), "--policy", "scripted:bench_policies:slow_hoarder",
        "--out", str(out), "--concurrency", "4", "--json",
        env={"BENCH_TEST_DELAY": "0"},
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    assert result["complete"]
    assert result["resumed_episodes"] == before
    assert result["new_episodes"] == 12 - before
    keys = [task_key(e) for e in read_episodes(path)]
    assert len(keys) == len(set(keys)) == 12


def test_episodes_of_another_env_in_the_file_are_refused(tmp_path, tiny_suite):
    r = run_suite(tiny_suite, seed_echo_policy(), out=tmp_path, max_episodes=1)
    path = Path(r["_dir"]) / EPISODES_FILE
    line = json.loads(path.read_text())
    line["env_id"] = "agentgym/Other-v0"
    path.write_text(json.dumps(line) + "\n")
    with pytest.raises(DataError, match="does not belong to this suite"):
        load_done(path, tiny_suite)


def test_policy_slugs_are_readable_and_distinct():
    assert policy_slug("oracle") == "oracle"
    a = policy_slug("openai:m@http://a:8000/v1")
    b = policy_slug("openai:m@http-a-8000-v1")
    assert a != b and a.startswith("openai-m-http-a-8000-v1-")
    assert "/" not in policy_slug("hf:/models/x@/adapters/y")


class _HoarderChatServer:
    """A loopback OpenAI-compatible server whose 'model' is the hoarder baseline."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append(body)
                msgs = [Message(m["role"], m["content"]) for m in body["messages"]]
                data = {
                    "choices": [{"message": {"content": hoarder(msgs)}, "finish_reason": "stop"}],
                    "usage": {"completion_tokens": 7, "prompt_tokens": 50},
                }
                raw = json.dumps(data).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def test_openai_endpoint_policy_runs_a_suite(tmp_path, tiny_suite, specs):
    server = _HoarderChatServer()
    try:
        r = run_suite(tiny_suite, f"openai:tiny-model@{server.url}", out=tmp_path, concurrency=4)
    finally:
        server.close()
    scripted = run_suite(tiny_suite, specs["hoarder"], out=tmp_path)
    assert r["complete"]
    assert r["metrics"]["reward"] == scripted["metrics"]["reward"]
    calls = r["usage"]["policy_calls"]
    assert calls == len(server.requests) > 0
    assert r["usage"]["completion_tokens"] == 7 * calls  # the endpoint's usage, not a guess
    assert r["usage"]["prompt_tokens"] == 50 * calls
    assert r["policy"]["kind"] == "openai" and r["policy"]["model"] == "tiny-model"
    assert r["policy"]["base_url"] == server.url
    req = server.requests[0]
    assert req["model"] == "tiny-model" and req["max_tokens"] == tiny_suite.max_tokens
    assert req["temperature"] == tiny_suite.temperature and isinstance(req["seed"], int)


def test_failed_episodes_are_reported_never_scored_and_retried_next_run(tmp_path):
    """An env that fails on one seed: the other tasks are scored, the failure is counted
    apart (not a zero), written to failures.jsonl, and played again by the next run."""
    import trainer_toy_envs  # noqa: F401  (registers agentgym-test/EvenChars-v0)

    from agentgym.benchmarks.runner import FAILURES_FILE
    from agentgym.benchmarks.suites import Suite, SuiteEntry

    suite = Suite(
        name="flaky-mini",
        version=1,
        description="one seed of four always fails",
        entries=(
            SuiteEntry("even", "agentgym-test/EvenChars-v0", (0, 1, 2, 3), {"fail_on_seeds": [2]}),
        ),
        samples_per_task=1,
        max_tokens=16,
        metrics=("reward",),
        primary_metric="reward",
        plot_metric="reward",
        success="full_reward",
    )
    first = run_suite(suite, "oracle", out=tmp_path, retries=1)
    assert first["failed_episodes"] == 1 and first["failed_by_reason"] == {"injected": 1}
    assert first["retried_attempts"] == 1  # seed 2's first attempt, played again
    assert first["retried_by_reason"] == {"injected": 1}
    assert first["episodes"] == 3 and not first["complete"]
    assert first["metrics"]["reward"]["value"] == 1.0  # the oracle's; no zero for the failure
    rdir = Path(first["_dir"])
    assert [e.seed for e in read_episodes(rdir / FAILURES_FILE)] == [2]
    assert sorted(e.seed for e in read_episodes(rdir / "episodes.jsonl")) == [0, 1, 3]
    again = run_suite(suite, "oracle", out=tmp_path, retries=0)
    assert again["resumed_episodes"] == 3 and again["new_episodes"] == 0
    assert again["failed_episodes"] == 1  # only the failed task was played again
