"""``agentgym serve``: the official ``openai`` client against a real server on loopback.

The served model is a tiny Qwen2 saved to disk, plus a LoRA adapter trained from it by
``agentgym train`` (one step on a toy env), served as ``trained``. Everything goes over
HTTP on 127.0.0.1: sync and async clients, streaming and not, both endpoints, adapters
loaded and unloaded at run time, OpenAI-style errors, a client that hangs up mid-stream,
the ``agentgym serve`` command itself and ``agentgym eval --policy openai:NAME@URL``.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from conftest import TINY_QWEN

openai = pytest.importorskip(
    "openai", reason="the tests use the official openai client (dev extra)"
)
pytest.importorskip("aiohttp", reason="agentgym serve needs aiohttp: pip install 'agentgym[serve]'")

from agentgym import ConfigError  # noqa: E402
from agentgym.cli import main  # noqa: E402

#: one worker under --dist loadgroup: the module's trained adapter and server (~4 s) are
#: made once, not once per worker
pytestmark = pytest.mark.xdist_group("serve")

ADAPTER = "trained"
HI = [{"role": "user", "content": "Say something."}]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(base model dir, adapter dir): the adapter trained by ``agentgym train``."""
    import trainer_toy_envs

    from agentgym.generation import build_preset, build_tokenizer, save_model

    root = tmp_path_factory.mktemp("serve")
    tok = build_tokenizer()
    base = save_model(build_preset("tiny-qwen2", tok, overrides=TINY_QWEN), tok, root / "base")
    trainer_toy_envs.register()
    rc = main(
        [
            "train",
            f"run.output_dir={root / 'run'}",
            f"model.path={base}",
            "run.max_steps=2",
            "run.threads=1",
            "run.progress=false",
            "run.plots=false",
            "envs=[{id: agentgym-test/EvenChars-v0}]",
            "rollout.group_size=4",
            "rollout.batch_tasks=2",
            "rollout.max_tokens=8",
            "optim.lr=0.05",
        ]
    )
    assert rc == 0
    adapter = root / "run" / "checkpoints" / "step_000002" / "adapter"
    assert (adapter / "adapter_config.json").is_file()
    return base, adapter


@pytest.fixture(scope="module")
def server(trained):
    from agentgym.serve import ServerThread, load_served_models

    base, adapter = trained
    served = load_served_models(
        str(base), loras=[(ADAPTER, str(adapter))], served_name="base", max_model_len=512
    )
    srv = ServerThread(served)
    yield srv
    srv.close()
    served.close()


@pytest.fixture
def client(server):
    return openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0)


def test_models_lists_the_base_and_its_adapter(client):
    models = client.models.list().data
    assert [m.id for m in models] == ["base", ADAPTER]
    assert models[1].model_extra["parent"] == "base"
    assert models[0].model_extra["max_model_len"] == 512


def test_chat_with_n_seed_usage_and_logprobs(client):
    kwargs = dict(
        model=ADAPTER, messages=HI, n=3, seed=7, max_tokens=6, logprobs=True, top_logprobs=2
    )
    first = client.chat.completions.create(**kwargs)
    again = client.chat.completions.create(**kwargs)
    texts = [c.message.content for c in first.choices]
    assert [c.index for c in first.choices] == [0, 1, 2]
    assert texts == [c.message.content for c in again.choices]  # the seed makes it repeatable
    assert len(set(texts)) > 1  # each choice samples on its own
    tokens = sum(len(c.logprobs.content) for c in first.choices)
    assert first.usage.completion_tokens == tokens
    assert first.usage.total_tokens == first.usage.prompt_tokens + tokens
    for c in first.choices:
        assert c.finish_reason in ("stop", "length")
        for t in c.logprobs.content:
            assert t.logprob <= 0 and len(t.top_logprobs) == 2
            assert t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob
            assert t.logprob <= t.top_logprobs[0].logprob + 1e-5


def test_the_request_model_picks_the_adapter(client):
    def greedy(model):
        r = client.chat.completions.create(
            model=model, messages=HI, temperature=0, max_tokens=5, logprobs=True
        )
        return [t.logprob for t in r.choices[0].logprobs.content]

    base, adapted = greedy("base"), greedy(ADAPTER)
    assert greedy("base") == base  # the same model answers the same way
    assert base != adapted  # the trained adapter moved the distribution


def test_streaming_gives_the_same_reply_and_reports_usage(client):
    kwargs = dict(model=ADAPTER, messages=HI, seed=3, max_tokens=10)
    whole = client.chat.completions.create(**kwargs)
    chunks = list(client.chat.completions.create(stream=True, **kwargs))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    with_usage = list(
        client.chat.completions.create(
            stream=True, stream_options={"include_usage": True}, **kwargs
        )
    )
    assert (
        with_usage[-1].choices == []
        and with_usage[-1].usage.total_tokens == whole.usage.total_tokens
    )


def test_async_clients_are_batched_and_can_stream(server):
    async def go():
        client = openai.AsyncOpenAI(base_url=server.url, api_key="unused", max_retries=0)
        replies = await asyncio.gather(
            *[
                client.chat.completions.create(
                    model="base",
                    messages=[{"role": "user", "content": f"n{i}"}],
                    max_tokens=4,
                    seed=i,
                )
                for i in range(8)
            ]
        )
        stream = await client.chat.completions.create(
            model=ADAPTER, messages=HI, max_tokens=4, seed=1, stream=True
        )
        pieces = [c async for c in stream]
        await client.close()
        return replies, pieces

    replies, pieces = asyncio.run(go())
    assert len(replies) == 8 and all(r.usage.completion_tokens >= 1 for r in replies)
    assert pieces[-1].usage is not None
    sizes = server.served.policy("base", "chat").batch_sizes
    assert max(sizes) > 1, f"8 concurrent requests were never batched together: {sizes}"


def test_text_completions_with_logprobs(client):
    r = client.completions.create(
        model=ADAPTER, prompt=["12 + 3 =", "abc"], n=2, max_tokens=4, logprobs=2, seed=5
    )
    assert len(r.choices) == 4 and [c.index for c in r.choices] == [0, 1, 2, 3]
    for c in r.choices:
        assert len(c.logprobs.tokens) == len(c.logprobs.token_logprobs)
        assert all(len(top) <= 2 for top in c.logprobs.top_logprobs)
    assert r.usage.completion_tokens == sum(len(c.logprobs.tokens) for c in r.choices)
    stream = list(
        client.completions.create(model="base", prompt="x", max_tokens=4, seed=1, stream=True)
    )
    assert stream[-1].usage is not None and stream[-1].choices[0].finish_reason is not None


def test_stop_strings_end_the_reply(client):
    def reply(seed, **kw):
        r = client.chat.completions.create(
            model=ADAPTER, messages=HI, max_tokens=16, seed=seed, **kw
        )
        return r.choices[0]

    for seed in range(20):
        text = reply(seed).message.content
        stop = next((ch for ch in text[1:] if ch.isascii() and ch.isprintable()), None)
        if stop is not None:
            break
    else:
        pytest.skip("the random model wrote no printable ASCII to stop on")
    cut = reply(seed, stop=[stop])
    assert cut.message.content == text[: text.index(stop)]
    assert cut.finish_reason == "stop"


def test_errors_are_openai_shaped(client, server):
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="nope", messages=HI)
    assert e.value.body["code"] == "model_not_found"
    assert "base" in e.value.body["message"] and ADAPTER in e.value.body["message"]
    for bad, field in [
        ({"temperature": 3}, "temperature"),
        ({"n": 0}, "n"),
        ({"top_logprobs": 3}, "top_logprobs"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ]:
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(model="base", messages=HI, **bad)
        assert e.value.body["param"] == field, (bad, e.value.body)
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="base", messages=[])
    assert e.value.body["param"] == "messages"
    # beyond the context: refused, not cut
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="base", messages=HI, max_tokens=600)
    assert e.value.body["code"] == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model="base", messages=[{"role": "user", "content": "x" * 600}], max_tokens=1
        )
    assert e.value.body["code"] == "context_length_exceeded"
    r = httpx.post(f"{server.url}/chat/completions", content=b"{not json")
    assert r.status_code == 400 and r.json()["error"]["param"] == "body"
    r = httpx.get(f"{server.url}/no/such/route")
    assert r.status_code == 404 and "error" in r.json()


def test_adapters_load_and_unload_at_run_time(client, server, trained):
    _, adapter = trained
    url = server.url
    r = httpx.post(
        f"{url}/load_lora_adapter", json={"lora_name": "second", "lora_path": str(adapter)}
    )
    assert r.status_code == 200, r.text
    assert "second" in [m.id for m in client.models.list().data]
    reply = client.chat.completions.create(model="second", messages=HI, max_tokens=3, seed=1)
    same = client.chat.completions.create(model=ADAPTER, messages=HI, max_tokens=3, seed=1)
    assert reply.choices[0].message.content == same.choices[0].message.content  # same weights
    r = httpx.post(
        f"{url}/load_lora_adapter", json={"lora_name": "second", "lora_path": str(adapter)}
    )
    assert r.status_code == 400 and r.json()["error"]["param"] == "lora_name"
    r = httpx.post(f"{url}/load_lora_adapter", json={"lora_name": "x", "lora_path": "/no/such"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "lora_path"
    r = httpx.post(f"{url}/unload_lora_adapter", json={"lora_name": "second"})
    assert r.status_code == 200, r.text
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="second", messages=HI, max_tokens=3)
    r = httpx.post(f"{url}/unload_lora_adapter", json={"lora_name": "second"})
    assert r.status_code == 404
    # the other adapter and the base are untouched
    again = client.chat.completions.create(model=ADAPTER, messages=HI, max_tokens=3, seed=1)
    assert again.choices[0].message.content == same.choices[0].message.content


def test_unloading_every_adapter_gives_back_the_base_model(trained):
    from agentgym.serve import load_served_models

    base, adapter = trained
    served = load_served_models(str(base), loras=[("a", str(adapter))])
    try:
        assert served.model is not served.base
        served.unload_adapter("a")
        assert served.model is served.base and served.names() == [str(base)]
        assert not any("lora" in n for n, _ in served.base.named_parameters())
    finally:
        served.close()


def test_lora_names_a_run_folder_as_hf_model_at_run_does(trained):
    """``--lora NAME=RUN`` serves the run's latest checkpoint's adapter."""
    from agentgym.cli.serve import parse_lora
    from agentgym.serve import load_served_models

    base, adapter = trained
    run = adapter.parent.parent.parent  # RUN/checkpoints/step_000002/adapter
    served = load_served_models(str(base), loras=parse_lora([f"latest={run}"]))
    try:
        assert served.names() == [str(base), "latest"]
        assert served.adapters["latest"] == str(adapter)
    finally:
        served.close()


def test_an_adapter_for_another_model_is_refused_and_leaves_the_base_alone(trained, tmp_path):
    from peft import LoraConfig, get_peft_model

    from agentgym.generation import build_preset, build_tokenizer
    from agentgym.serve import APIError, load_served_models

    other = build_preset(
        "tiny-qwen2", build_tokenizer(), overrides={**TINY_QWEN, "hidden_size": 64}
    )
    get_peft_model(other, LoraConfig(r=4, target_modules=["q_proj", "v_proj"])).save_pretrained(
        str(tmp_path / "other")
    )
    base, adapter = trained
    served = load_served_models(str(base))
    try:
        for _ in range(2):  # first adapter (wraps the base), then with one loaded
            with pytest.raises(APIError) as e:
                served.load_adapter("other", tmp_path / "other")
            assert e.value.param == "lora_path" and "does not fit" in e.value.message
            assert "other" not in served.names()
            served.load_adapter("good", adapter) if "good" not in served.names() else None
        served.unload_adapter("good")
        assert served.model is served.base
        assert not any("lora" in n for n, _ in served.base.named_parameters())
    finally:
        served.close()


def test_a_client_that_hangs_up_mid_stream_does_not_hurt_the_server(client, server):
    body = {"model": "base", "messages": HI, "max_tokens": 200, "stream": True, "seed": 1}
    with httpx.stream("POST", f"{server.url}/chat/completions", json=body, timeout=30) as r:
        first = next(r.iter_lines())
        assert first.startswith("data: ")
    # the connection is closed; the server goes on serving
    deadline = time.monotonic() + 30
    while server.server.disconnects == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.server.disconnects >= 1
    ok = client.chat.completions.create(model="base", messages=HI, max_tokens=2)
    assert ok.choices[0].message.content is not None


def test_missing_aiohttp_names_the_extra(monkeypatch):
    from agentgym import ConfigError
    from agentgym.serve import import_aiohttp

    monkeypatch.setitem(sys.modules, "aiohttp", None)
    with pytest.raises(ConfigError, match=r"agentgym-toolkit\[serve\]"):
        import_aiohttp()


def test_the_serve_command_and_agentgym_eval_over_http(trained, tmp_path):
    base, adapter = trained
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agentgym",
            "serve",
            "--engine",
            "hf",
            "--model",
            str(base),
            "--lora",
            f"{ADAPTER}={adapter}",
            "--port",
            "0",
            "--threads",
            "1",
        ],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        url = None
        deadline = time.monotonic() + 180
        while url is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line and proc.poll() is not None:
                break
            if line.startswith("[agentgym serve]"):
                url = line.split(" at ")[1].split()[0]
        assert url, "agentgym serve did not come up"
        names = [m["id"] for m in httpx.get(f"{url}/models").json()["data"]]
        assert names == [str(base), ADAPTER]
        out = tmp_path / "episodes.jsonl"
        rc = main(
            [
                "eval",
                "agentgym/MemoryRecall-v0",
                "--policy",
                f"openai:{ADAPTER}@{url}",
                "--episodes",
                "2",
                "--max-tokens",
                "6",
                "--out",
                str(out),
            ]
        )
        assert rc == 0
        lines = [json.loads(x) for x in out.read_text().splitlines()]
        assert len(lines) == 2 and all(len(ep["turns"]) >= 2 for ep in lines)
        assert all(t["completion"]["num_tokens"] >= 1 for ep in lines for t in ep["turns"])
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert Path(out).exists()


def test_the_base_is_placed_on_the_device_and_in_the_dtype_asked_for(trained):
    import torch

    from agentgym.serve import load_served_models

    base, adapter = trained
    served = load_served_models(
        str(base), loras=[("a", str(adapter))], device="cpu", dtype="bfloat16"
    )
    try:
        weights = {p.dtype for n, p in served.base.named_parameters() if "lora" not in n}
        assert weights == {torch.bfloat16} and served.base.device.type == "cpu"
        out = served.call(lambda: served.score("a", [1, 2, 3], [4, 5], 2, str))
        assert [t.token for t in out] == ["4", "5"] and all(t.logprob <= 0 for t in out)
        assert all(len(t.top) == 2 for t in out)
    finally:
        served.close()
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="torch sees no GPU"):
            load_served_models(str(base), device="cuda")


def test_hf_and_openai_policies_score_alike_with_the_runs_settings(trained, server, capsys):
    """``eval --config RUN/config.yaml`` applies the run's envs, reply length and
    temperature to every policy kind: the adapter in-process (``hf:``) and the same
    adapter behind ``agentgym serve`` (``openai:``) give the same greedy episodes."""
    base, adapter = trained
    config = adapter.parents[2] / "config.yaml"  # the run's: rollout.max_tokens=8
    results = {}
    for kind, policy in (
        ("hf", f"hf:{base}@{adapter}"),
        ("openai", f"openai:{ADAPTER}@{server.url}"),
    ):
        args = ["eval", "--config", str(config), "--policy", policy, "--episodes", "4", "--json"]
        assert main(args) == 0
        results[kind] = json.loads(capsys.readouterr().out)
    hf, served = results["hf"], results["openai"]
    assert hf["mean_reward"] == served["mean_reward"]
    assert hf["mean_policy_tokens"] == served["mean_policy_tokens"] <= 8  # the run's length
    # an explicit flag wins, and the difference from the run is said
    assert main(["eval", "--config", str(config), "--policy", "random", "--max-tokens", "3",
                 "--episodes", "1", "--json"]) == 0  # fmt: skip
    assert "--max-tokens 3 differs from the run's 8" in capsys.readouterr().err


# ------------------------------------------------ issue 44: one behaviour for both servers

#: fields neither engine honours, each with a value that would change the reply
REFUSED = [
    ("top_k", 5),
    ("min_p", 0.1),
    ("repetition_penalty", 1.2),
    ("presence_penalty", 0.5),
    ("frequency_penalty", 0.5),
    ("logit_bias", {"3": 5}),
    ("ignore_eos", True),
    ("min_tokens", 2),
    ("response_format", {"type": "json_object"}),
    ("tools", [{"type": "function", "function": {"name": "f", "parameters": {}}}]),
    ("max_token", 4),  # a typo: never silently ignored
]
#: the same fields at values that change nothing: accepted
NEUTRAL = [
    ("top_k", -1),
    ("min_p", 0.0),
    ("repetition_penalty", 1.0),
    ("presence_penalty", 0),
    ("logit_bias", {}),
    ("ignore_eos", False),
    ("response_format", {"type": "text"}),
    ("user", "me"),
]


def test_fields_the_server_cannot_honour_are_refused_by_name_never_ignored(client):
    for field, value in REFUSED:
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(
                model="base", messages=HI, max_tokens=2, extra_body={field: value}
            )
        body = e.value.body
        assert body["param"] == field, (field, body)
        assert f"'{field}'" in body["message"] and "agentgym serve" in body["message"], body
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="base", messages=HI, extra_body={"max_token": 4})
    assert "Did you mean: 'max_tokens'" in e.value.body["message"]
    for field, value in NEUTRAL:
        r = client.chat.completions.create(
            model="base", messages=HI, max_tokens=2, extra_body={field: value}
        )
        assert r.choices[0].finish_reason in ("stop", "length"), field


def test_the_served_dtype_is_the_models_own(tmp_path):
    import torch

    from agentgym.generation import build_preset, build_tokenizer, save_model
    from agentgym.serve import load_served_models

    tok = build_tokenizer()
    model = build_preset("tiny-qwen2", tok, overrides=TINY_QWEN).to(torch.bfloat16)
    folder = save_model(model, tok, tmp_path / "bf16")
    served = load_served_models(str(folder), device="cpu")  # --dtype auto
    try:
        assert served.dtype == "bfloat16"  # not the CPU's float32
    finally:
        served.close()


def test_lora_is_on_only_when_adapters_are_asked_for(trained):
    from agentgym.serve import ServerThread, load_served_models
    from agentgym.serve.lora import lora_policy

    base, adapter = trained
    run = adapter.parent.parent.parent  # RUN/checkpoints/step_000002/adapter
    served = load_served_models(str(base), served_name="base")
    try:
        with ServerThread(served) as srv:  # no --lora, no --enable-lora
            r = httpx.post(
                f"{srv.url}/load_lora_adapter", json={"lora_name": "a", "lora_path": str(adapter)}
            )
            assert r.status_code == 400 and "--enable-lora" in r.json()["error"]["message"]
            assert "a" not in served.names()
        with ServerThread(served, lora=lora_policy([], enable_lora=True)) as srv:
            # the path forms --lora takes: here a run folder (its latest checkpoint's adapter)
            r = httpx.post(
                f"{srv.url}/load_lora_adapter", json={"lora_name": "a", "lora_path": str(run)}
            )
            assert r.status_code == 200, r.text
            assert served.adapters["a"] == str(adapter)
            r = httpx.post(
                f"{srv.url}/load_lora_adapter",
                json={"lora_name": "b", "lora_path": str(run / "no-such")},
            )
            assert r.status_code == 400 and str(run / "no-such") in r.json()["error"]["message"]
    finally:
        served.close()


def test_engine_options_go_to_the_engine_and_vllm_flags_need_vllm(trained, monkeypatch, capsys):
    import agentgym.serve as serve

    base, _ = trained
    seen = {}

    def fake_load(model, **kwargs):
        seen.update(kwargs)
        raise SystemExit(0)  # stop before serving

    monkeypatch.setattr(serve, "load_served_models", fake_load)
    with pytest.raises(SystemExit):
        main(
            ["serve", "--engine", "hf", "--model", str(base), "--engine-option", "decode=generate"]
        )
    assert seen["options"].decode == "generate"
    rc = main(["serve", "--engine", "hf", "--model", str(base), "--tensor-parallel-size", "2"])
    err = capsys.readouterr().err
    assert rc == 2 and "--tensor-parallel-size 2" in err and "--engine vllm" in err
    rc = main(["serve", "--engine", "hf", "--model", str(base), "--engine-option", "decod=lean"])
    assert rc == 2 and "'decode'" in capsys.readouterr().err  # did you mean
