"""``agentgym serve``: an OpenAI-compatible HTTP server over the HF engine (or vLLM's).

What others take from here (the CLI, the perf benchmark, tests):

* :class:`ServedModels` / :func:`load_served_models`: a base model and its LoRA adapters
  served by name, generating on one engine thread through the trainer's
  :class:`~agentgym.generation.BatchingPolicy` (:mod:`.models`);
* :class:`ServerApp`, :class:`ServerThread`, :func:`start_site`: the aiohttp routes and
  ways to run them (:mod:`.app`); :func:`import_aiohttp` says which extra to install
  when aiohttp is missing;
* :class:`APIError`: a refused request with OpenAI's error body (:mod:`.protocol`);
* :func:`resolve_serve_engine`, :func:`vllm_server_command`, :func:`exec_vllm_server`,
  :func:`engine_option_args`: ``--engine vllm`` (or ``auto`` where vLLM and CUDA are
  present) hands the same arguments to vLLM's own OpenAI server (:mod:`.vllm`), with the
  HF server's request checks in front (:mod:`.vllm_check`);
* :class:`LoraPolicy`, :func:`lora_policy`: LoRA only when adapters are asked for, and
  what a run-time load accepts, the same on both engines (:mod:`.lora`);
  :func:`served_dtype`: the model's own dtype on both (:mod:`.weights`).

See docs/integrations.md for the routes and what each field does.
"""

from __future__ import annotations

from agentgym import lazy_exports

#: public name -> the module that defines it (loaded on first use: no torch at import)
_LAZY = {
    "APIError": "agentgym.serve.protocol",
    "ServedModels": "agentgym.serve.models",
    "load_served_models": "agentgym.serve.models",
    "ServerApp": "agentgym.serve.app",
    "ServerThread": "agentgym.serve.app",
    "start_site": "agentgym.serve.app",
    "serve_forever": "agentgym.serve.app",
    "import_aiohttp": "agentgym.serve.app",
    "INSTALL_HINT": "agentgym.serve.app",
    "SERVE_ENGINES": "agentgym.serve.vllm",
    "VLLMServerCommand": "agentgym.serve.vllm",
    "resolve_serve_engine": "agentgym.serve.vllm",
    "vllm_server_command": "agentgym.serve.vllm",
    "exec_vllm_server": "agentgym.serve.vllm",
    "engine_option_args": "agentgym.serve.vllm",
    "LoraPolicy": "agentgym.serve.lora",
    "lora_policy": "agentgym.serve.lora",
    "served_dtype": "agentgym.serve.weights",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)


__all__ = sorted(_LAZY)
