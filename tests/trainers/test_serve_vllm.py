"""``agentgym serve --engine vllm``: the same arguments, served by vLLM's own OpenAI server.

On CPU: which engine ``--engine`` picks, the vLLM command the arguments become, and the
refusals (no vLLM here, a preset, HF-only options). On a GPU with vLLM installed: the
command starts a real vLLM server that the official ``openai`` client talks to.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from agentgym import ConfigError
from agentgym.cli import main
from agentgym.serve import (
    resolve_serve_engine,
    vllm_server_command,
)


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
    assert resolve_serve_engine("vllm", vllm_here=True) == "vllm"
    with pytest.raises(ConfigError, match=r"agentgym\[vllm\].*--engine hf"):
        resolve_serve_engine("vllm", vllm_here=False)
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
    assert argv[:3] == ["python3", "-m", "vllm.entrypoints.openai.api_server"]

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
    assert cmd.env == {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}


def test_without_adapters_or_runtime_loading_vllm_serves_the_base_alone(tmp_path):
    model = _model_dir(tmp_path)
    cmd = vllm_server_command(model, runtime_lora=False)
    assert "--enable-lora" not in cmd.argv and "--lora-modules" not in cmd.argv
    assert "--max-model-len" not in cmd.argv  # vLLM's default: the model's
    assert "--dtype" not in cmd.argv  # vLLM's auto
    assert cmd.argv[-2:] != ["--dtype", "bfloat16"]
    bf16 = vllm_server_command(model, dtype="bfloat16", runtime_lora=False)
    assert bf16.argv[bf16.argv.index("--dtype") + 1] == "bfloat16"
    assert cmd.argv[cmd.argv.index("--served-model-name") + 1] == model
    assert cmd.env == {}
    # runtime loading alone still needs LoRA switched on, at vLLM's default rank
    rt = vllm_server_command(model)
    assert "--enable-lora" in rt.argv and rt.argv[rt.argv.index("--max-lora-rank") + 1] == "16"
    assert "--lora-modules" not in rt.argv


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


@pytest.mark.skipif(
    __import__("importlib").util.find_spec("vllm") is not None,
    reason="vLLM is installed here: --engine vllm would start it",
)
def test_the_cli_says_what_to_install_for_vllm(tmp_path, capsys):
    rc = main(["serve", "--engine", "vllm", "--model", _model_dir(tmp_path)])
    assert rc == 2
    assert "agentgym[vllm]" in capsys.readouterr().err


def test_hf_only_options_are_refused_with_vllm(tmp_path, capsys, monkeypatch):
    import agentgym.serve.vllm as serve_vllm

    monkeypatch.setattr(serve_vllm, "vllm_present", lambda: True)
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


@pytest.mark.gpu
def test_agentgym_serve_hands_over_to_a_real_vllm_server(tmp_path):
    pytest.importorskip("vllm")
    openai = pytest.importorskip("openai")
    import httpx

    from agentgym.trainers import build_preset, build_tokenizer, save_model

    tok = build_tokenizer()
    base = save_model(build_preset("tiny-qwen2", tok), tok, tmp_path / "base")
    port = _free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agentgym",
            "serve",
            "--engine",
            "vllm",
            "--model",
            str(base),
            "--served-model-name",
            "base",
            "--port",
            str(port),
            "--max-model-len",
            "512",
        ],
        env=os.environ.copy(),
    )
    try:
        url = f"http://127.0.0.1:{port}/v1"
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(2)
        client = openai.OpenAI(base_url=url, api_key="unused")
        assert [m.id for m in client.models.list().data] == ["base"]
        r = client.completions.create(model="base", prompt="1 + 1 =", max_tokens=4, seed=0)
        assert r.usage.completion_tokens >= 1
    finally:
        proc.terminate()
        proc.wait(timeout=60)
