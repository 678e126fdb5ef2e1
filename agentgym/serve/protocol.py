"""The OpenAI wire format: checked requests in, response bodies and stream chunks out.

Only what the server needs of the OpenAI API (and vLLM's additions) lives here, written
from the public API reference:

* :func:`parse_chat` / :func:`parse_completion` read a JSON body into a
  :class:`ParsedRequest`; every problem is an :class:`APIError` naming the field
  (``param``), which the app turns into OpenAI's error body
  ``{"error": {"message", "type", "param", "code"}}``;
* :func:`chat_response`, :func:`completion_response`, :func:`chat_chunk`,
  :func:`completion_chunk` and :func:`usage` build the bodies.

One field policy for both engines (:func:`check_fields`): the HF server parses every
request with it, and ``--engine vllm`` puts it in front of vLLM's own server (as a
middleware, :mod:`.vllm_check`), so both honour the same fields and refuse the same ones
with the same 400 body. Honoured: :data:`HONOURED`. Accepted and changing nothing:
:data:`ACCEPTED` (``user``, ``metadata``, ...). Refused unless left at a value that
changes nothing: :data:`NEUTRAL` (``top_k``, ``min_p``, the penalties, ``logit_bias``,
``ignore_eos``, ``response_format`` other than text, tools, ...: agentgym's engines
sample with temperature, top-p and a seed only). Anything else is a field no OpenAI or
vLLM client sends on purpose (a typo, most likely) and is refused with "did you mean".
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentgym import Message, did_you_mean

#: the most choices one request may ask for (``n``)
MAX_N = 64
#: the most alternatives per position (``top_logprobs``), as OpenAI allows
MAX_TOP_LOGPROBS = 20
#: the most stop strings, as OpenAI allows
MAX_STOP = 4

#: request fields both engines honour, per endpoint
HONOURED = {
    "chat": frozenset(
        {"model", "messages", "max_tokens", "max_completion_tokens", "n", "seed", "stop",
         "stream", "stream_options", "temperature", "top_p", "logprobs", "top_logprobs"}
    ),
    "text": frozenset(
        {"model", "prompt", "max_tokens", "n", "best_of", "seed", "stop", "stream",
         "stream_options", "temperature", "top_p", "logprobs"}
    ),
}  # fmt: skip
#: fields accepted that change nothing here (bookkeeping for the client's side)
ACCEPTED = frozenset({"user", "metadata", "store", "service_tier", "parallel_tool_calls"})
#: fields (OpenAI's and vLLM's) refused unless left at a value that changes nothing
NEUTRAL: dict[str, tuple[Any, ...]] = {
    "tools": (None, []),
    "functions": (None, []),
    "tool_choice": (None, "none", "auto"),
    "function_call": (None, "none", "auto"),
    "logit_bias": (None, {}),
    "presence_penalty": (None, 0, 0.0),
    "frequency_penalty": (None, 0, 0.0),
    "repetition_penalty": (None, 1, 1.0),
    "top_k": (None, -1, 0),
    "min_p": (None, 0, 0.0),
    "ignore_eos": (None, False),
    "min_tokens": (None, 0),
    "stop_token_ids": (None, []),
    "response_format": (None, {"type": "text"}),
    "echo": (None, False),
    "suffix": (None, ""),
    "audio": (None,),
    "modalities": (None, ["text"]),
    "prediction": (None,),
    "reasoning_effort": (None,),
    "use_beam_search": (None, False),
    "length_penalty": (None, 1, 1.0),
    "include_stop_str_in_output": (None, False),
    "skip_special_tokens": (None, True),
    "add_generation_prompt": (None, True),
    "chat_template": (None,),
    "chat_template_kwargs": (None, {}),
    "structured_outputs": (None,),
    "guided_json": (None,),
    "guided_regex": (None,),
    "guided_choice": (None,),
    "guided_grammar": (None,),
    "allowed_token_ids": (None,),
    "bad_words": (None, []),
    "prompt_logprobs": (None,),
}


def refusal(name: str) -> str:
    """The 400 message for a field neither engine honours (the same on both)."""
    neutral = next((v for v in NEUTRAL.get(name, ()) if v is not None), None)
    keep = f" or send {json.dumps(neutral)}" if neutral is not None else ""
    return (
        f"'{name}' is not supported by agentgym serve (on either engine, hf or vllm: they "
        f"sample with temperature, top_p and seed only); leave it out{keep}."
    )


def check_fields(body: Mapping[str, Any], kind: str) -> None:
    """Refuse (400, naming it) the first field of ``body`` that is not honoured on both
    engines: one set at a value that would change the reply, or one nobody knows."""
    honoured = HONOURED[kind]
    for name, value in body.items():
        if name in honoured or name in ACCEPTED:
            continue
        if name in NEUTRAL:
            if value not in NEUTRAL[name]:
                raise APIError(refusal(name), param=name)
            continue
        known = sorted(honoured | ACCEPTED | NEUTRAL.keys())
        raise APIError(
            f"Unrecognized request argument supplied: '{name}'.{did_you_mean(name, known)} "
            "agentgym serve refuses fields it does not know rather than ignore them.",
            param=name,
        )


class APIError(Exception):
    """A request the server refuses, with the HTTP status and OpenAI's error fields."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        param: str | None = None,
        code: str | None = None,
        type: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.param = param
        self.code = code
        self.type = type

    def body(self) -> dict[str, Any]:
        """OpenAI's error body."""
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


@dataclass(frozen=True)
class ParsedRequest:
    """A checked generation request (chat or text completion).

    Attributes:
        kind: ``"chat"`` (``messages``) or ``"text"`` (``prompts``, one choice set each).
        model: the served model name asked for.
        messages: the chat messages (chat only).
        prompts: the prompt texts (text completions only).
        n: choices per prompt.
        max_tokens: the reply cap, or ``None`` for "whatever the context leaves".
        temperature / top_p / seed / stop: sampling.
        stream: answer with server-sent events.
        include_usage: ``stream_options.include_usage``: a last chunk with only usage.
        logprobs: return the log-prob of each sampled token.
        top_logprobs: and this many alternatives per position.
    """

    kind: str
    model: str
    messages: tuple[Message, ...] = ()
    prompts: tuple[str, ...] = ()
    n: int = 1
    max_tokens: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stream: bool = False
    include_usage: bool = False
    logprobs: bool = False
    top_logprobs: int = 0


def _need(cond: bool, message: str, param: str) -> None:
    if not cond:
        raise APIError(message, param=param)


def _number(body: Mapping[str, Any], name: str, default: float, lo: float, hi: float) -> float:
    value = body.get(name, default)
    if value is None:
        return default
    _need(
        isinstance(value, (int, float)) and not isinstance(value, bool),
        f"'{name}' must be a number, got {value!r}.",
        name,
    )
    _need(lo <= value <= hi, f"'{name}' must be between {lo} and {hi}, got {value}.", name)
    return float(value)


def _integer(body: Mapping[str, Any], name: str, lo: int, hi: int | None = None) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    _need(
        isinstance(value, int) and not isinstance(value, bool),
        f"'{name}' must be an integer, got {value!r}.",
        name,
    )
    _need(value >= lo, f"'{name}' must be >= {lo}, got {value}.", name)
    if hi is not None:
        _need(value <= hi, f"'{name}' must be <= {hi}, got {value}.", name)
    return int(value)


def _common(body: Any, kind: str) -> dict[str, Any]:
    """The sampling fields chat and text completions share."""
    _need(isinstance(body, Mapping), "The request body must be a JSON object.", "body")
    model = body.get("model")
    _need(
        isinstance(model, str) and bool(model),
        "'model' is required: the name of a served model (GET /v1/models lists them).",
        "model",
    )
    check_fields(body, kind)
    stop = body.get("stop")
    if stop is None:
        stops: tuple[str, ...] = ()
    elif isinstance(stop, str):
        stops = (stop,)
    else:
        _need(
            isinstance(stop, list) and all(isinstance(s, str) for s in stop),
            "'stop' must be a string or a list of strings.",
            "stop",
        )
        _need(len(stop) <= MAX_STOP, f"'stop' takes at most {MAX_STOP} strings.", "stop")
        stops = tuple(stop)
    stops = tuple(s for s in stops if s)
    n = _integer(body, "n", 1, MAX_N) or 1
    best_of = _integer(body, "best_of", 1)
    if best_of is not None and best_of != n:
        raise APIError("'best_of' other than 'n' is not supported.", param="best_of")
    max_tokens = _integer(body, "max_completion_tokens", 1)
    if max_tokens is None:
        max_tokens = _integer(body, "max_tokens", 1)
    stream = body.get("stream", False)
    _need(isinstance(stream, bool) or stream is None, "'stream' must be true or false.", "stream")
    options = body.get("stream_options") or {}
    _need(isinstance(options, Mapping), "'stream_options' must be an object.", "stream_options")
    seed = body.get("seed")
    _need(
        seed is None or (isinstance(seed, int) and not isinstance(seed, bool)),
        f"'seed' must be an integer, got {seed!r}.",
        "seed",
    )
    top_p = _number(body, "top_p", 1.0, 0.0, 1.0)
    _need(top_p > 0, "'top_p' must be greater than 0.", "top_p")
    return {
        "kind": kind,
        "model": model,
        "n": n,
        "max_tokens": max_tokens,
        "temperature": _number(body, "temperature", 1.0, 0.0, 2.0),
        "top_p": top_p,
        "seed": seed,
        "stop": stops,
        "stream": bool(stream),
        "include_usage": bool(options.get("include_usage", False)),
    }


def _content_text(content: Any, where: str) -> str:
    """A message's content as text: a string, or a list of ``{"type": "text"}`` parts."""
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    _need(isinstance(content, list), f"'{where}' must be a string or a list of parts.", where)
    texts = []
    for part in content:
        _need(
            isinstance(part, Mapping) and part.get("type") == "text",
            f"'{where}' may only hold text parts ({{'type': 'text', 'text': ...}}).",
            where,
        )
        texts.append(str(part.get("text", "")))
    return "".join(texts)


def parse_chat(body: Any) -> ParsedRequest:
    """Check a ``/v1/chat/completions`` body (raises :class:`APIError`)."""
    fields = _common(body, "chat")
    raw = body.get("messages")
    _need(
        isinstance(raw, list) and bool(raw),
        "'messages' is required: a non-empty list of {role, content} objects.",
        "messages",
    )
    messages = []
    for i, m in enumerate(raw):
        where = f"messages[{i}]"
        _need(isinstance(m, Mapping), f"'{where}' must be an object.", where)
        role = m.get("role")
        role = "system" if role == "developer" else role
        _need(
            role in ("system", "user", "assistant"),
            f"'{where}.role' must be system, developer, user or assistant, got {role!r}.",
            f"{where}.role",
        )
        messages.append(Message(role, _content_text(m.get("content"), f"{where}.content")))
    logprobs = body.get("logprobs", False)
    _need(
        isinstance(logprobs, bool) or logprobs is None,
        "'logprobs' must be true or false.",
        "logprobs",
    )
    top = _integer(body, "top_logprobs", 0, MAX_TOP_LOGPROBS) or 0
    _need(not top or bool(logprobs), "'top_logprobs' needs 'logprobs': true.", "top_logprobs")
    return ParsedRequest(
        messages=tuple(messages), logprobs=bool(logprobs), top_logprobs=top, **fields
    )


def parse_completion(body: Any) -> ParsedRequest:
    """Check a ``/v1/completions`` body (raises :class:`APIError`)."""
    fields = _common(body, "text")
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        prompts: tuple[str, ...] = (prompt,)
    else:
        _need(
            isinstance(prompt, list) and bool(prompt) and all(isinstance(p, str) for p in prompt),
            "'prompt' is required: a string or a non-empty list of strings "
            "(token-id prompts are not supported).",
            "prompt",
        )
        prompts = tuple(prompt)
    top = _integer(body, "logprobs", 0, 5)
    return ParsedRequest(prompts=prompts, logprobs=top is not None, top_logprobs=top or 0, **fields)


# ---------------------------------------------------------------------- responses


def new_id(prefix: str) -> str:
    """A response id in OpenAI's style (``chatcmpl-...``, ``cmpl-...``)."""
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def now() -> int:
    """The ``created`` timestamp (seconds)."""
    return int(time.time())


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    """OpenAI's usage object."""
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token with its log-prob and the best alternatives at its position."""

    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()


def _bytes(token: str) -> list[int]:
    return list(token.encode("utf-8", errors="replace"))


def chat_logprobs(tokens: Sequence[TokenLogprob]) -> dict[str, Any]:
    """A chat choice's ``logprobs`` object (``{"content": [...]}``)."""
    return {
        "content": [
            {
                "token": t.token,
                "logprob": t.logprob,
                "bytes": _bytes(t.token),
                "top_logprobs": [
                    {"token": s, "logprob": lp, "bytes": _bytes(s)} for s, lp in t.top
                ],
            }
            for t in tokens
        ],
        "refusal": None,
    }


def text_logprobs(tokens: Sequence[TokenLogprob], start: int = 0) -> dict[str, Any]:
    """A text completion choice's ``logprobs`` object (the legacy layout)."""
    offsets, at = [], start
    for t in tokens:
        offsets.append(at)
        at += len(t.token)
    return {
        "tokens": [t.token for t in tokens],
        "token_logprobs": [t.logprob for t in tokens],
        "top_logprobs": [dict(t.top) for t in tokens],
        "text_offset": offsets,
    }


def chat_response(
    rid: str, model: str, choices: Sequence[dict[str, Any]], use: dict[str, int]
) -> dict[str, Any]:
    """A whole ``chat.completion`` body; ``choices`` already in OpenAI's layout."""
    return {
        "id": rid,
        "object": "chat.completion",
        "created": now(),
        "model": model,
        "choices": list(choices),
        "usage": use,
        "system_fingerprint": None,
    }


def completion_response(
    rid: str, model: str, choices: Sequence[dict[str, Any]], use: dict[str, int]
) -> dict[str, Any]:
    """A whole ``text_completion`` body."""
    return {
        "id": rid,
        "object": "text_completion",
        "created": now(),
        "model": model,
        "choices": list(choices),
        "usage": use,
        "system_fingerprint": None,
    }


def chat_chunk(
    rid: str,
    model: str,
    created: int,
    choices: Sequence[dict[str, Any]],
    use: dict[str, int] | None = None,
) -> dict[str, Any]:
    """One ``chat.completion.chunk`` of a stream."""
    chunk: dict[str, Any] = {
        "id": rid,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": list(choices),
        "system_fingerprint": None,
    }
    if use is not None:
        chunk["usage"] = use
    return chunk


def completion_chunk(
    rid: str,
    model: str,
    created: int,
    choices: Sequence[dict[str, Any]],
    use: dict[str, int] | None = None,
) -> dict[str, Any]:
    """One streamed ``text_completion`` chunk."""
    chunk: dict[str, Any] = {
        "id": rid,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": list(choices),
        "system_fingerprint": None,
    }
    if use is not None:
        chunk["usage"] = use
    return chunk
