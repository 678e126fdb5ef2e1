"""The HTTP side of ``agentgym serve``: aiohttp routes speaking the OpenAI API.

Routes: ``GET /v1/models``, ``POST /v1/chat/completions``, ``POST /v1/completions``
(both with ``stream``), vLLM's ``POST /v1/load_lora_adapter`` and
``POST /v1/unload_lora_adapter`` (when LoRA is on: :mod:`.lora`), and ``GET /health``. Errors are OpenAI's JSON body
with the status that fits (400 naming the field, 404 for an unknown model or route, 500
for a failure inside the engine).

A request longer than the context (prompt tokens plus ``max_tokens`` beyond
``max_model_len``) is refused with ``code: context_length_exceeded``, never cut; without
``max_tokens`` the reply may use what the context leaves, as vLLM does.

Streaming: the engine generates a batch at a time, so a streamed reply arrives once its
batch is done; the server sends the role chunk at once, then the text in token-sized
pieces (with their log-probs when asked), the finish reason, the usage, and ``[DONE]``.
Without ``stream_options.include_usage`` the usage rides on the last choice chunk, so
every response reports it. A client that goes away cancels its requests (those not yet
in a batch never run) and the server carries on.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from agentgym import Completion, ConfigError, Message, SamplingParams, install_hint
from agentgym.serve.lora import LoraPolicy, check_load, check_runtime, lora_policy
from agentgym.serve.models import CHAT, ServedModels
from agentgym.serve.protocol import (
    APIError,
    ParsedRequest,
    TokenLogprob,
    chat_chunk,
    chat_logprobs,
    chat_response,
    completion_chunk,
    completion_response,
    new_id,
    now,
    parse_chat,
    parse_completion,
    text_logprobs,
    usage,
)

INSTALL_HINT = f"agentgym serve needs aiohttp: {install_hint('serve')}"


def import_aiohttp() -> Any:
    """``aiohttp.web``, or a :class:`ConfigError` saying which extra to install."""
    try:
        from aiohttp import web
    except ImportError as e:
        raise ConfigError(f"{INSTALL_HINT} ({e}).") from e
    return web


def _json(web: Any, body: dict[str, Any], status: int = 200) -> Any:
    return web.json_response(body, status=status)


def _error(web: Any, error: APIError) -> Any:
    return _json(web, error.body(), error.status)


class _Job:
    """One prompt of a request: its messages, token ids and the sampling of its choices."""

    def __init__(self, messages: tuple[Message, ...], prompt_ids: list[int]) -> None:
        self.messages = messages
        self.prompt_ids = prompt_ids


def _jobs(served: ServedModels, req: ParsedRequest) -> list[_Job]:
    """The prompts of a request, encoded and checked against the context length."""
    batches = [req.messages] if req.kind == CHAT else [(Message("user", p),) for p in req.prompts]
    jobs = []
    for messages in batches:
        ids = served.prompt_ids(req.kind, messages)
        asked = req.max_tokens if req.max_tokens is not None else 1
        if len(ids) + asked > served.max_model_len:
            field = "messages" if req.kind == CHAT else "prompt"
            wanted = f"{len(ids)} in the {field}"
            if req.max_tokens is not None:
                wanted += f" plus {req.max_tokens} for the completion"
            raise APIError(
                f"This model's maximum context length is {served.max_model_len} tokens; this "
                f"request needs {wanted}. Shorten the {field} or lower max_tokens.",
                param=field if req.max_tokens is None else "max_tokens",
                code="context_length_exceeded",
            )
        jobs.append(_Job(messages, ids))
    return jobs


def _sampling(served: ServedModels, req: ParsedRequest, job: _Job, choice: int) -> SamplingParams:
    max_tokens = req.max_tokens or served.max_model_len - len(job.prompt_ids)
    return SamplingParams(
        max_tokens=max_tokens,
        temperature=req.temperature,
        top_p=req.top_p,
        seed=None if req.seed is None else (req.seed + choice) & 0x7FFFFFFF,
        stop=req.stop,
        logprobs=req.logprobs,
    )


class ServerApp:
    """The aiohttp application over :class:`ServedModels`.

    Args:
        served: what to serve.
        lora: whether adapters are served and load at run time, and their largest rank
            (default: on, loading at run time, when ``served`` has adapters; off without).
    """

    def __init__(self, served: ServedModels, *, lora: LoraPolicy | None = None) -> None:
        self.web = import_aiohttp()
        self.served = served
        if lora is None:
            lora = lora_policy(list(served.adapters.items()))
        self.lora = lora
        self.disconnects = 0
        web = self.web
        self.app = web.Application(middlewares=[self._errors], client_max_size=64 * 2**20)
        self.app.add_routes(
            [
                web.get("/health", self.health),
                web.get("/v1/models", self.models),
                web.post("/v1/chat/completions", self.chat),
                web.post("/v1/completions", self.completions),
                web.post("/v1/load_lora_adapter", self.load_lora),
                web.post("/v1/unload_lora_adapter", self.unload_lora),
            ]
        )

    # ------------------------------------------------------------------ plumbing

    @property
    def _errors(self) -> Callable[..., Awaitable[Any]]:
        web = self.web

        @web.middleware
        async def errors(request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
            try:
                return await handler(request)
            except APIError as e:
                return _error(web, e)
            except web.HTTPException as e:
                if e.status < 400:
                    raise
                return _error(
                    web,
                    APIError(
                        f"{e.reason}: {request.method} {request.path}",
                        status=e.status,
                        type="invalid_request_error" if e.status < 500 else "server_error",
                    ),
                )

        return errors

    async def _body(self, request: Any) -> Any:
        try:
            return await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise APIError(f"The request body is not valid JSON: {e}.", param="body") from e

    # ------------------------------------------------------------------ routes

    async def health(self, request: Any) -> Any:
        return _json(self.web, {"status": "ok"})

    async def models(self, request: Any) -> Any:
        created = now()
        data = [
            {
                "id": m.name,
                "object": "model",
                "created": created,
                "owned_by": "agentgym",
                "root": m.adapter_path or self.served.base_name,
                "parent": None if m.adapter_path is None else self.served.base_name,
                "max_model_len": self.served.max_model_len,
            }
            for m in self.served.served()
        ]
        return _json(self.web, {"object": "list", "data": data})

    async def load_lora(self, request: Any) -> Any:
        name, folder = check_load(await self._body(request), self.lora)
        await asyncio.to_thread(self.served.load_adapter, name, folder)
        return self.web.Response(text=f"Success: LoRA adapter '{name}' added successfully.")

    async def unload_lora(self, request: Any) -> Any:
        check_runtime(self.lora)
        body = await self._body(request)
        if not isinstance(body, dict):
            raise APIError("The request body must be a JSON object.", param="body")
        name = body.get("lora_name")
        if not isinstance(name, str) or not name:
            raise APIError("'lora_name' is required.", param="lora_name")
        await asyncio.to_thread(self.served.unload_adapter, name)
        return self.web.Response(text=f"Success: LoRA adapter '{name}' removed successfully.")

    async def chat(self, request: Any) -> Any:
        return await self._generate(request, parse_chat(await self._body(request)))

    async def completions(self, request: Any) -> Any:
        return await self._generate(request, parse_completion(await self._body(request)))

    # ------------------------------------------------------------------ generation

    async def _one(self, req: ParsedRequest, job: _Job, choice: int, choice_index: int) -> _Choice:
        served = self.served
        sampling = _sampling(served, req, job, choice)
        completion = await served.generate(req.model, req.kind, job.messages, sampling)
        tokens = None
        if req.logprobs:
            tok = served.tokenizer

            def decode(t: int) -> str:
                return tok.decode([t], skip_special_tokens=False)

            tokens = await served.acall(
                lambda: served.score(
                    req.model, job.prompt_ids, completion.token_ids, req.top_logprobs, decode
                )
            )
        return _Choice(choice_index, completion, tokens)

    async def _generate(self, request: Any, req: ParsedRequest) -> Any:
        served = self.served
        served.check_name(req.model)
        jobs = _jobs(served, req)
        slots = [(j, job, i) for j, job in enumerate(jobs) for i in range(req.n)]
        tasks = [
            asyncio.ensure_future(self._one(req, job, i, k)) for k, (_, job, i) in enumerate(slots)
        ]
        prompt_tokens = sum(len(job.prompt_ids) for job in jobs)
        try:
            if req.stream:
                return await self._stream(request, req, tasks, prompt_tokens)
            try:
                results = await asyncio.gather(*tasks)
            except APIError:
                raise
            except Exception as e:
                raise _engine_error(e) from e
        finally:
            for t in tasks:
                t.cancel()
        done = sum(r.completion.num_tokens or 0 for r in results)
        use = usage(prompt_tokens, done)
        if req.kind == CHAT:
            choices = [
                {
                    "index": k,
                    "message": {"role": "assistant", "content": r.completion.text},
                    "logprobs": chat_logprobs(r.tokens) if r.tokens is not None else None,
                    "finish_reason": r.completion.finish_reason,
                }
                for k, r in enumerate(results)
            ]
            return _json(self.web, chat_response(new_id("chatcmpl"), req.model, choices, use))
        choices = [
            {
                "index": k,
                "text": r.completion.text,
                "logprobs": text_logprobs(r.tokens) if r.tokens is not None else None,
                "finish_reason": r.completion.finish_reason,
            }
            for k, r in enumerate(results)
        ]
        return _json(self.web, completion_response(new_id("cmpl"), req.model, choices, use))

    async def _stream(
        self, request: Any, req: ParsedRequest, tasks: list[asyncio.Future[_Choice]], prompt: int
    ) -> Any:
        web = self.web
        chat = req.kind == CHAT
        rid, created = new_id("chatcmpl" if chat else "cmpl"), now()
        chunk = chat_chunk if chat else completion_chunk
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)

        async def send(body: dict[str, Any] | str) -> None:
            text = body if isinstance(body, str) else json.dumps(body)
            await response.write(f"data: {text}\n\n".encode())

        try:
            if chat:
                await send(
                    chunk(
                        rid,
                        req.model,
                        created,
                        [
                            {
                                "index": k,
                                "delta": {"role": "assistant", "content": ""},
                                "logprobs": None,
                                "finish_reason": None,
                            }
                            for k in range(len(tasks))
                        ],
                    )
                )
            completion_tokens, left = 0, len(tasks)
            for next_done in asyncio.as_completed(tasks):
                try:
                    result = await next_done
                except asyncio.CancelledError:
                    raise
                except Exception as e:
                    error = e if isinstance(e, APIError) else _engine_error(e)
                    await send(error.body())
                    break
                k = result.index
                for text, tokens in _pieces(self.served.tokenizer, result):
                    if chat:
                        delta: dict[str, Any] = {
                            "index": k,
                            "delta": {"content": text},
                            "logprobs": chat_logprobs(tokens) if tokens is not None else None,
                            "finish_reason": None,
                        }
                    else:
                        delta = {
                            "index": k,
                            "text": text,
                            "logprobs": text_logprobs(tokens) if tokens is not None else None,
                            "finish_reason": None,
                        }
                    await send(chunk(rid, req.model, created, [delta]))
                completion_tokens += result.completion.num_tokens or 0
                left -= 1
                end: dict[str, Any] = {
                    "index": k,
                    "logprobs": None,
                    "finish_reason": result.completion.finish_reason,
                }
                end.update({"delta": {}} if chat else {"text": ""})
                last = left == 0 and not req.include_usage
                await send(
                    chunk(
                        rid,
                        req.model,
                        created,
                        [end],
                        usage(prompt, completion_tokens) if last else None,
                    )
                )
            else:
                if req.include_usage:
                    await send(chunk(rid, req.model, created, [], usage(prompt, completion_tokens)))
                await send("[DONE]")
            await response.write_eof()
        except ConnectionError:
            # the client went away: its requests are cancelled by the caller's finally
            self.disconnects += 1
        except asyncio.CancelledError:
            self.disconnects += 1
            raise
        return response


class _Choice:
    """A finished choice: its index, the completion and, when asked, its log-probs."""

    def __init__(
        self, index: int, completion: Completion, tokens: list[TokenLogprob] | None
    ) -> None:
        self.index = index
        self.completion = completion
        self.tokens = tokens


def _engine_error(e: Exception) -> APIError:
    if isinstance(e, APIError):
        return e
    return APIError(
        f"The engine failed on this request: {type(e).__name__}: {e}",
        status=500,
        type="server_error",
    )


def _pieces(tokenizer: Any, result: _Choice) -> list[tuple[str, list[TokenLogprob] | None]]:
    """The reply's text cut at token boundaries (a piece waits for a split character to
    be whole), each with the log-probs of its tokens; falls back to one piece when the
    pieces would not add up to the text (a stop string cut it mid-token)."""
    completion, tokens = result.completion, result.tokens
    text, ids = completion.text, list(completion.token_ids)
    pieces: list[tuple[str, list[TokenLogprob] | None]] = []
    start, shown = 0, 0
    for k in range(len(ids)):
        part = tokenizer.decode(ids[start : k + 1], skip_special_tokens=True)
        if part.endswith("\ufffd") and k + 1 < len(ids):
            continue
        part = part[: max(0, len(text) - shown)]
        group = tokens[start : k + 1] if tokens is not None else None
        if part or group:
            pieces.append((part, group))
        shown += len(part)
        start = k + 1
    if "".join(p for p, _ in pieces) != text:
        return [(text, tokens)]
    return pieces or [(text, tokens)]


class ServerThread:
    """An :class:`ServerApp` listening on ``host:port`` from a background thread (tests,
    benchmarks, notebooks). ``port=0`` picks a free port; :attr:`url` is the API root."""

    def __init__(
        self, served: ServedModels, *, host: str = "127.0.0.1", port: int = 0, **kwargs: Any
    ) -> None:
        self.server = ServerApp(served, **kwargs)
        self.served = served
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._runner: Any = None
        self.port = port
        self.host = host
        self._thread = threading.Thread(target=self._run, name="agentgym-serve-http", daemon=True)
        self._thread.start()
        self._ready.wait(60)
        if self._error is not None:
            raise self._error

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.port = self.loop.run_until_complete(self._start())
        except BaseException as e:
            self._error = e
            self._ready.set()
            return
        self._ready.set()
        self.loop.run_forever()

    async def _start(self) -> int:
        self._runner, port = await start_site(self.server, self.host, self.port)
        return port

    def close(self) -> None:
        """Stop listening (the served models stay open; close them separately)."""
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=30)

    def __enter__(self) -> ServerThread:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def start_site(server: ServerApp, host: str, port: int) -> tuple[Any, int]:
    """Start listening; returns the aiohttp runner and the port (chosen when 0)."""
    web = server.web
    runner = web.AppRunner(server.app, handler_cancellation=True, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    addresses = runner.addresses
    bound = addresses[0][1] if addresses else port
    return runner, int(bound)


def serve_forever(
    served: ServedModels,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    lora: LoraPolicy | None = None,
    on_ready: Callable[[int], None] | None = None,
) -> None:
    """Serve until interrupted (Ctrl-C raises ``KeyboardInterrupt`` to the caller).

    ``on_ready(port)`` is called once the server listens.
    """
    server = ServerApp(served, lora=lora)

    async def main() -> None:
        runner, bound = await start_site(server, host, port)
        if on_ready is not None:
            on_ready(bound)
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    asyncio.run(main())
