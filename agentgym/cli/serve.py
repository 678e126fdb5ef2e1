"""``agentgym serve --model PATH_OR_PRESET [--lora NAME=PATH ...]``: an OpenAI-compatible server."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from agentgym import ConfigError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve",
        help="serve a model and its LoRA adapters over the OpenAI API",
        description=(
            "An OpenAI-compatible HTTP server (/v1/models, /v1/chat/completions, "
            "/v1/completions, streaming, n, seed, stop, log-probs) over the HF engine, "
            "batching concurrent requests as the trainer does. Adapters are served by name "
            "as vLLM does (--lora name=PATH; a request's 'model' picks one) and can be "
            "loaded and unloaded at run time (POST /v1/load_lora_adapter, "
            "/v1/unload_lora_adapter). Needs aiohttp: pip install 'agentgym-toolkit[serve]'. "
            "With --engine vllm (auto: where vLLM and a CUDA device are present) the same "
            "arguments start vLLM's own OpenAI server instead. See docs/integrations.md."
        ),
    )
    p.add_argument(
        "--model",
        required=True,
        help="a local Hugging Face model folder (e.g. an `agentgym sft` run's model/) or a "
        "preset name (tiny-qwen2: random weights, for trying the server)",
    )
    p.add_argument(
        "--lora",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="serve a peft adapter as model NAME; PATH is the adapter folder, a checkpoint, "
        "RUN/checkpoints/latest or a run folder (its latest checkpoint's adapter, as "
        "hf:MODEL@RUN finds it); repeatable",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: loopback)")
    p.add_argument("--port", type=int, default=8000, help="port (default: 8000; 0: any free one)")
    p.add_argument(
        "--served-model-name", default=None, help="the base model's name (default: --model)"
    )
    p.add_argument(
        "--max-model-len",
        type=int,
        default=None,
        help="context length, prompt plus reply (default: the model's)",
    )
    p.add_argument(
        "--engine",
        choices=["auto", "hf", "vllm"],
        default="auto",
        help="hf: agentgym's server over the HF engine (CPU or GPU); vllm: hand the same "
        "arguments to vLLM's OpenAI server (CUDA, or vLLM's CPU build: set "
        "VLLM_CPU_KVCACHE_SPACE to size its KV cache in GiB); auto (default): vllm where "
        "vLLM and a CUDA device are present, else hf",
    )
    p.add_argument(
        "--max-batch", type=int, default=None, help="most requests per engine batch (hf; 64)"
    )
    p.add_argument(
        "--gather-window-ms",
        type=float,
        default=None,
        help="a batch waits this long after the last arrival for more requests (hf; 5)",
    )
    p.add_argument(
        "--device",
        default=None,
        help="auto (default: cuda:0 where torch sees a GPU, else cpu), cpu, cuda or cuda:N (hf)",
    )
    p.add_argument(
        "--dtype",
        choices=["auto", "bfloat16", "float16", "float32"],
        default="auto",
        help="the weights' dtype; auto (default): the dtype the model was saved in, on both "
        "engines (a preset: bfloat16 on a GPU, else float32)",
    )
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (hf)")
    p.add_argument("--seed", type=int, default=0, help="seed for requests that bring none")
    p.add_argument(
        "--enable-lora",
        action="store_true",
        help="serve LoRA adapters loaded at run time (/v1/load_lora_adapter) even with no "
        "--lora; without it or --lora no adapter is served (as vLLM)",
    )
    p.add_argument(
        "--max-lora-rank",
        type=int,
        default=None,
        help="the largest adapter rank served (default: the largest --lora's, at least 16)",
    )
    p.add_argument(
        "--no-runtime-lora",
        action="store_true",
        help="with adapters on: refuse /v1/load_lora_adapter and /v1/unload_lora_adapter",
    )
    p.add_argument(
        "--engine-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an engine option, repeatable: for vllm any of vLLM's engine arguments "
        "(tensor_parallel_size=2, max_num_seqs=64, enforce_eager=true; vLLM's own flags "
        "such as --tensor-parallel-size 2 are passed through too); for hf the HF engine's "
        "options (decode=lean|generate, merge_lora, fast_attention, fused)",
    )
    p.set_defaults(func=cmd_serve, engine_args=[])


def parse_lora(specs: list[str]) -> list[tuple[str, str]]:
    """``NAME=PATH`` pairs, checked; each PATH resolved to its adapter folder the way
    ``hf:MODEL@ADAPTER`` resolves one (a checkpoint, ``RUN/checkpoints/latest`` or a run
    folder: its latest checkpoint's ``adapter/``)."""
    from agentgym.generation import resolve_adapter

    out = []
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise ConfigError(
                f"--lora {spec!r}: write it as NAME=PATH (e.g. math=runs/dapo, a run folder, "
                "or math=runs/dapo/checkpoints/step_000010/adapter)."
            )
        try:
            folder = resolve_adapter(path)
        except ConfigError as e:
            raise ConfigError(f"--lora {spec}: {e}") from e
        out.append((name, str(folder)))
    return out


#: HF-server options that vLLM has no counterpart for (flag -> argparse attribute)
HF_ONLY = {
    "--device": "device",
    "--max-batch": "max_batch",
    "--gather-window-ms": "gather_window_ms",
    "--threads": "threads",
}


def _lora(args: argparse.Namespace, loras: list[tuple[str, str]]) -> Any:
    from agentgym.serve import lora_policy

    return lora_policy(
        loras,
        enable_lora=args.enable_lora,
        max_lora_rank=args.max_lora_rank,
        runtime=not args.no_runtime_lora,
    )


def _hf_options(args: argparse.Namespace) -> Any:
    """The HF engine's options from ``--engine-option`` (values parsed as YAML); a vLLM
    flag given with ``--engine hf`` is refused by name."""
    import yaml

    from agentgym import AgentGymError, config_from_dict
    from agentgym.generation import HFEngineOptions

    if args.engine_args:
        raise ConfigError(
            f"{' '.join(args.engine_args)}: not an option of agentgym serve with --engine hf "
            "(vLLM's engine flags need --engine vllm; the HF engine takes --engine-option "
            "KEY=VALUE for decode, merge_lora, fast_attention, fused). "
            "See agentgym serve --help."
        )
    values = {}
    for item in args.engine_option:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(
                f"--engine-option {item!r}: write it as KEY=VALUE, e.g. decode=generate."
            )
        values[key.strip().lstrip("-").replace("-", "_")] = yaml.safe_load(raw)
    try:
        return config_from_dict(HFEngineOptions, values)
    except AgentGymError as e:
        raise ConfigError(f"--engine-option (the HF engine's options): {e}") from None


def cmd_serve(args: argparse.Namespace) -> int:
    from agentgym.serve import resolve_serve_engine

    loras = parse_lora(args.lora)
    lora = _lora(args, loras)
    if resolve_serve_engine(args.engine) == "vllm":
        return _serve_vllm(args, loras, lora)
    from agentgym.serve import import_aiohttp, load_served_models, serve_forever

    options = _hf_options(args)
    import_aiohttp()  # fail before loading a model when the extra is missing
    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)
    served = load_served_models(
        args.model,
        loras=loras,
        served_name=args.served_model_name,
        device=args.device or "auto",
        dtype=args.dtype,
        max_model_len=args.max_model_len,
        max_batch=64 if args.max_batch is None else args.max_batch,
        gather_window_s=(5.0 if args.gather_window_ms is None else args.gather_window_ms) / 1000.0,
        seed=args.seed,
        options=options,
    )

    def ready(port: int) -> None:
        names = ", ".join(served.names())
        adapters = (
            "no LoRA"
            if not lora.enabled
            else (
                f"LoRA up to rank {lora.max_rank}"
                + (", adapters load at run time" if lora.runtime else "")
            )
        )
        print(
            f"[agentgym serve] {names} at http://{args.host}:{port}/v1 "
            f"(context {served.max_model_len} tokens, {served.dtype}, {adapters}; "
            "Ctrl-C stops)",
            file=sys.stderr,
            flush=True,
        )

    try:
        serve_forever(served, host=args.host, port=args.port, lora=lora, on_ready=ready)
    finally:
        served.close()
    return 0


def _serve_vllm(args: argparse.Namespace, loras: list[tuple[str, str]], lora: Any) -> int:
    """Replace this process with vLLM's OpenAI server for the same model and adapters."""
    import torch

    from agentgym.serve import engine_option_args, exec_vllm_server, vllm_server_command

    given = [flag for flag, attr in HF_ONLY.items() if getattr(args, attr) is not None]
    if given:
        raise ConfigError(
            f"{', '.join(given)}: options of the HF server only; vLLM batches on its own. "
            "Drop them, or use --engine hf."
        )
    exec_vllm_server(
        vllm_server_command(
            args.model,
            loras=loras,
            lora=lora,
            served_name=args.served_model_name,
            host=args.host,
            port=args.port,
            max_model_len=args.max_model_len,
            dtype=args.dtype,
            seed=args.seed,
            engine_args=[*engine_option_args(args.engine_option), *args.engine_args],
            cpu=not torch.cuda.is_available(),
        )
    )
    return 0  # not reached: exec replaces the process
