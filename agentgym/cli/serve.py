"""``agentgym serve --model PATH_OR_PRESET [--lora NAME=PATH ...]``: an OpenAI-compatible server."""

from __future__ import annotations

import argparse
import sys

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
            "/v1/unload_lora_adapter). Needs aiohttp: pip install 'agentgym[serve]'. "
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
        choices=["auto", "bfloat16", "float32"],
        default="auto",
        help="the weights' dtype; auto (default): bfloat16 on a GPU that has it, else float32",
    )
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (hf)")
    p.add_argument("--seed", type=int, default=0, help="seed for requests that bring none")
    p.add_argument(
        "--no-runtime-lora",
        action="store_true",
        help="refuse /v1/load_lora_adapter and /v1/unload_lora_adapter",
    )
    p.set_defaults(func=cmd_serve)


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


def cmd_serve(args: argparse.Namespace) -> int:
    from agentgym.serve import resolve_serve_engine

    loras = parse_lora(args.lora)
    if resolve_serve_engine(args.engine) == "vllm":
        return _serve_vllm(args, loras)
    from agentgym.serve import import_aiohttp, load_served_models, serve_forever

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
    )

    def ready(port: int) -> None:
        names = ", ".join(served.names())
        print(
            f"[agentgym serve] {names} at http://{args.host}:{port}/v1 "
            f"(context {served.max_model_len} tokens; Ctrl-C stops)",
            file=sys.stderr,
            flush=True,
        )

    try:
        serve_forever(
            served,
            host=args.host,
            port=args.port,
            runtime_lora=not args.no_runtime_lora,
            on_ready=ready,
        )
    finally:
        served.close()
    return 0


def _serve_vllm(args: argparse.Namespace, loras: list[tuple[str, str]]) -> int:
    """Replace this process with vLLM's OpenAI server for the same model and adapters."""
    import torch

    from agentgym.serve import exec_vllm_server, vllm_server_command

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
            served_name=args.served_model_name,
            host=args.host,
            port=args.port,
            max_model_len=args.max_model_len,
            dtype=args.dtype,
            seed=args.seed,
            runtime_lora=not args.no_runtime_lora,
            cpu=not torch.cuda.is_available(),
        )
    )
    return 0  # not reached: exec replaces the process
