"""``agentgym serve``: an OpenAI-compatible HTTP server over the HF engine (or vLLM's).

What others take from here (the CLI, the perf benchmark, tests):

* :class:`ServedModels` / :func:`load_served_models`: a base model and its LoRA adapters
  served by name, generating on one engine thread through the trainer's
  :class:`~agentgym.trainers.engines.BatchingPolicy` (:mod:`.models`);
* :class:`ServerApp`, :class:`ServerThread`, :func:`start_site`: the aiohttp routes and
  ways to run them (:mod:`.app`); :func:`import_aiohttp` says which extra to install
  when aiohttp is missing;
* :class:`APIError`: a refused request with OpenAI's error body (:mod:`.protocol`);
* :func:`resolve_serve_engine`, :func:`vllm_server_command`, :func:`exec_vllm_server`:
  ``--engine vllm`` (or ``auto`` where vLLM and CUDA are present) hands the same
  arguments to vLLM's own OpenAI server (:mod:`.vllm`).

See docs/integrations.md for the routes and what each field does.
"""

from __future__ import annotations

import importlib
from typing import Any

#: public name -> the module that defines it (loaded on first use: no torch at import)
_LAZY = {
    "APIError": "agentgym.trainers.serve.protocol",
    "ServedModels": "agentgym.trainers.serve.models",
    "load_served_models": "agentgym.trainers.serve.models",
    "ServerApp": "agentgym.trainers.serve.app",
    "ServerThread": "agentgym.trainers.serve.app",
    "start_site": "agentgym.trainers.serve.app",
    "serve_forever": "agentgym.trainers.serve.app",
    "import_aiohttp": "agentgym.trainers.serve.app",
    "INSTALL_HINT": "agentgym.trainers.serve.app",
    "SERVE_ENGINES": "agentgym.trainers.serve.vllm",
    "VLLMServerCommand": "agentgym.trainers.serve.vllm",
    "resolve_serve_engine": "agentgym.trainers.serve.vllm",
    "vllm_server_command": "agentgym.trainers.serve.vllm",
    "exec_vllm_server": "agentgym.trainers.serve.vllm",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'agentgym.trainers.serve' has no attribute {name!r}")


__all__ = sorted(_LAZY)
