"""``agentgym serve`` throughput: requests/s and tokens/s at 1, 8 and 32 concurrent clients.

A real server (:class:`agentgym.serve.ServerThread` on 127.0.0.1, the HF engine
batching concurrent requests with the trainer's ``BatchingPolicy``) and real HTTP
clients (``httpx.AsyncClient``, one connection per client) in a separate process, so
that the clients do not compete with the server for the interpreter lock. Each of
``C`` clients sends chat completions one after another (a fixed reply length:
``max_tokens`` new tokens, ``temperature`` 1, a seed per request) until the level's
request budget is spent (``--requests``, at least 4 per client); the level's wall time gives requests/s and completion tokens/s
(from each response's ``usage``), with the median latency and the engine's mean batch
size. The model is the ``tiny-qwen2`` preset (random weights, byte-level tokenizer: a
reply is ``max_tokens`` tokens unless an eos is sampled), so the numbers measure the
server and the engine, not a model's quality.

Run: ``python -m agentgym.benchmarks.perf.serve [--quick] [--clients 1 8 32]
[--requests 64] [--max-tokens 32] [--threads 2]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

LEVELS = (1, 8, 32)


async def _level(url: str, clients: int, total: int, max_tokens: int) -> dict[str, Any]:
    import httpx

    latencies: list[float] = []
    tokens = 0
    sent = 0

    async def client(k: int) -> None:
        nonlocal tokens, sent
        async with httpx.AsyncClient(base_url=url, timeout=600) as http:
            while sent < total:
                sent += 1
                body = {
                    "model": "tiny-qwen2",
                    "messages": [{"role": "user", "content": f"Request {sent} from client {k}."}],
                    "max_tokens": max_tokens,
                    "temperature": 1.0,
                    "seed": sent,
                }
                t0 = time.perf_counter()
                r = await http.post("/chat/completions", json=body)
                r.raise_for_status()
                latencies.append(time.perf_counter() - t0)
                tokens += r.json()["usage"]["completion_tokens"]

    t0 = time.perf_counter()
    await asyncio.gather(*[client(k) for k in range(clients)])
    wall = time.perf_counter() - t0
    return {
        "requests": len(latencies),
        "seconds": round(wall, 3),
        "requests_per_s": round(len(latencies) / wall, 2),
        "tokens_per_s": round(tokens / wall, 1),
        "latency_p50_s": round(statistics.median(latencies), 3),
    }


def _client_process(url: str, clients: int, total: int, max_tokens: int, out: Any) -> None:
    """One concurrency level, in a child process; puts the result on ``out``."""
    out.put(asyncio.run(_level(url, clients, total, max_tokens)))


def _measure(url: str, clients: int, total: int, max_tokens: int) -> dict[str, Any]:
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    proc = ctx.Process(target=_client_process, args=(url, clients, total, max_tokens, out))
    proc.start()
    try:
        return out.get(timeout=1800)
    finally:
        proc.join(timeout=60)


def run(
    quick: bool = False,
    clients: tuple[int, ...] = LEVELS,
    requests: int | None = None,
    max_tokens: int = 32,
    threads: int = 2,
) -> dict[str, Any]:
    """Measure each concurrency level in turn (see the module docstring)."""
    import torch

    from agentgym.serve import ServerThread, load_served_models

    torch.set_num_threads(threads)
    total = requests or (16 if quick else 64)
    served = load_served_models("tiny-qwen2", max_batch=64)
    levels: dict[str, Any] = {}
    try:
        with ServerThread(served) as server:
            _measure(server.url, 1, 2, max_tokens)  # warm-up
            for c in clients:
                policy = served.policy("tiny-qwen2", "chat")
                before = len(policy.batch_sizes)
                n = max(total, 4 * c)  # every client sends several requests
                levels[str(c)] = _measure(server.url, c, n, max_tokens)
                sizes = policy.batch_sizes[before:]
                levels[str(c)]["engine_batch_mean"] = round(sum(sizes) / max(1, len(sizes)), 1)
    finally:
        served.close()
    base = levels[str(clients[0])]
    figures = {f"{c}_clients/{k}": v for c, level in levels.items() for k, v in level.items()}
    ratios = {
        f"tokens_per_s_{c}_vs_{clients[0]}_clients": round(
            levels[str(c)]["tokens_per_s"] / base["tokens_per_s"], 2
        )
        for c in clients[1:]
    }
    return {
        "title": "agentgym serve: throughput at 1, 8 and 32 concurrent clients",
        "ratios": ratios,
        "figures": figures,
        "notes": (
            f"tiny-qwen2 preset (random weights), {max_tokens} new tokens a request, "
            f"{threads} torch threads in the server, clients in another process, loopback HTTP."
        ),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--clients", type=int, nargs="+", default=list(LEVELS))
    ap.add_argument("--requests", type=int, default=None, help="requests per level")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    result = run(args.quick, tuple(args.clients), args.requests, args.max_tokens, args.threads)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
