"""The HF server's request checks in front of vLLM's own OpenAI server (``--engine vllm``).

vLLM's server takes ``--middleware MODULE.NAME``; ``agentgym serve --engine vllm`` hands it
:class:`RequestCheck`, an ASGI middleware that reads each generation request's JSON body
and runs the HF server's parser over it (:func:`~agentgym.serve.protocol.parse_chat`,
:func:`~agentgym.serve.protocol.parse_completion`), so both servers honour the same fields
and refuse the same ones with the same 400 body. A ``/v1/load_lora_adapter`` body gets
:func:`~agentgym.serve.lora.check_load`: the path forms ``--lora`` takes (a run folder, a
checkpoint, ``RUN/checkpoints/latest``) are resolved to the adapter folder vLLM needs, and
a path without an adapter is a 400 naming it (vLLM answered 500). Everything else passes
through unchanged, and so does a body that passes.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from agentgym.serve.lora import LoraPolicy, check_load
from agentgym.serve.protocol import APIError, parse_chat, parse_completion

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

#: the routes whose bodies are checked -> what checks them
CHECKED = ("/v1/chat/completions", "/v1/completions", "/v1/load_lora_adapter")


class RequestCheck:
    """ASGI middleware (see the module docstring); vLLM builds it with the app only."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self.app = app
        self.lora = LoraPolicy.from_env()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http" or scope.get("method") != "POST":
            return await self.app(scope, receive, send)
        path = scope.get("path", "")
        if path not in CHECKED:
            return await self.app(scope, receive, send)
        raw, disconnected = await _read_body(receive)
        if disconnected:
            return None
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            return await _answer(
                send, APIError(f"The request body is not valid JSON: {e}.", param="body")
            )
        try:
            raw = self._check(path, body, raw)
        except APIError as e:
            return await _answer(send, e)
        return await self.app(_with_length(scope, len(raw)), _replay(raw, receive), send)

    def _check(self, path: str, body: Any, raw: bytes) -> bytes:
        """The body to hand on (raises :class:`APIError` for one to refuse)."""
        if path == "/v1/chat/completions":
            parse_chat(body)
            return raw
        if path == "/v1/completions":
            parse_completion(body)
            return raw
        _name, folder = check_load(body, self.lora)
        return json.dumps({**body, "lora_path": str(folder)}).encode()


async def _read_body(receive: Receive) -> tuple[bytes, bool]:
    chunks, more = [], True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b"", True
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
    return b"".join(chunks), False


def _replay(raw: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives the (possibly rewritten) body once, then the real one's."""
    sent = False

    async def again() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": raw, "more_body": False}
        return await receive()

    return again


def _with_length(scope: Scope, length: int) -> Scope:
    headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() != b"content-length"]
    return {**scope, "headers": [*headers, (b"content-length", str(length).encode())]}


async def _answer(send: Send, error: APIError) -> None:
    payload = json.dumps(error.body()).encode()
    await send(
        {
            "type": "http.response.start",
            "status": error.status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})
