"""LoRA on ``agentgym serve``: when adapters are served at all, and what a run-time load
(``POST /v1/load_lora_adapter``) accepts, the same on both engines.

As vLLM's server does, LoRA is on only when adapters are asked for: ``--lora NAME=PATH``
(served from the start) or ``--enable-lora`` (none yet, loaded at run time). With LoRA
on, adapters load and unload at run time unless ``--no-runtime-lora``; an adapter's rank
may not exceed ``--max-lora-rank`` (default: the largest of the ``--lora`` adapters',
rounded up to one vLLM takes, at least 16). A load names its adapter the ways
``--lora`` and ``hf:MODEL@ADAPTER`` do (an adapter folder, a checkpoint,
``RUN/checkpoints/latest``, a run folder); a path that holds none is a 400 naming it.

The HF server applies :func:`check_load` itself; for ``--engine vllm`` the settings travel
to the middleware in vLLM's process (:mod:`.vllm_check`) through environment variables
(:meth:`LoraPolicy.env` / :meth:`LoraPolicy.from_env`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentgym import ConfigError
from agentgym.serve.protocol import APIError

#: vLLM's default --max-lora-rank, and ours when no adapter says more
DEFAULT_MAX_LORA_RANK = 16
_ENV = "AGENTGYM_SERVE_LORA"


@dataclass(frozen=True)
class LoraPolicy:
    """Whether LoRA is on, whether adapters load at run time, and the largest rank."""

    enabled: bool = False
    runtime: bool = False
    max_rank: int = DEFAULT_MAX_LORA_RANK

    def env(self) -> dict[str, str]:
        """The environment variable that carries this policy to vLLM's process."""
        return {_ENV: json.dumps({"enabled": self.enabled, "runtime": self.runtime,
                                  "max_rank": self.max_rank})}  # fmt: skip

    @classmethod
    def from_env(cls) -> LoraPolicy:
        raw = os.environ.get(_ENV)
        return cls(**json.loads(raw)) if raw else cls()


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


def lora_policy(
    loras: Sequence[tuple[str, str]],
    *,
    enable_lora: bool = False,
    max_lora_rank: int | None = None,
    runtime: bool = True,
) -> LoraPolicy:
    """The policy the command line asks for (see the module docstring)."""
    from agentgym.generation import vllm_lora_rank

    if not loras and not enable_lora:
        if max_lora_rank is not None:
            raise ConfigError(
                "--max-lora-rank without adapters: add --enable-lora (adapters loaded at run "
                "time) or --lora NAME=PATH."
            )
        return LoraPolicy()
    ranks = {path: adapter_rank(path) for _, path in loras}
    need = max(ranks.values(), default=DEFAULT_MAX_LORA_RANK)
    if max_lora_rank is not None and need > max_lora_rank:
        path = max(ranks, key=lambda p: ranks[p])
        raise ConfigError(
            f"--lora {path} has rank {need}, above --max-lora-rank {max_lora_rank}: raise "
            f"--max-lora-rank to {vllm_lora_rank(need)} or leave it out."
        )
    rank = vllm_lora_rank(max(need, max_lora_rank or DEFAULT_MAX_LORA_RANK))
    return LoraPolicy(enabled=True, runtime=runtime, max_rank=rank)


def check_runtime(policy: LoraPolicy) -> None:
    """Refuse a run-time load or unload when LoRA is off, or run-time loading is."""
    if not policy.enabled:
        raise APIError(
            "This server serves no LoRA adapters: it was started without --lora or "
            "--enable-lora. Restart it with --enable-lora (adapters loaded at run time) "
            "or --lora NAME=PATH.",
            status=400,
            param="lora_path",
        )
    if not policy.runtime:
        raise APIError(
            "Loading adapters at run time is off (the server was started with --no-runtime-lora).",
            status=403,
            type="permission_error",
        )


def check_load(body: Any, policy: LoraPolicy) -> tuple[str, Path]:
    """The name and adapter folder of a ``/v1/load_lora_adapter`` body (raises a 4xx
    :class:`~agentgym.serve.APIError` that names what is wrong)."""
    from agentgym.generation import resolve_adapter

    check_runtime(policy)
    if not isinstance(body, Mapping):
        raise APIError("The request body must be a JSON object.", param="body")
    name, path = body.get("lora_name"), body.get("lora_path")
    if not isinstance(name, str) or not name:
        raise APIError("'lora_name' is required: the name to serve it under.", param="lora_name")
    if not isinstance(path, str) or not path:
        raise APIError("'lora_path' is required: a peft adapter folder.", param="lora_path")
    try:
        folder = resolve_adapter(path)
        rank = adapter_rank(folder)
    except ConfigError as e:
        raise APIError(f"lora_path: {e}", param="lora_path") from e
    if rank > policy.max_rank:
        raise APIError(
            f"The adapter at {str(folder)!r} has rank {rank}, above this server's "
            f"--max-lora-rank {policy.max_rank}: restart it with --max-lora-rank {rank} or "
            "more.",
            param="lora_path",
        )
    return name, folder
