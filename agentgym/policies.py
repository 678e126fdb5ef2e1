"""Policies: anything that turns a message list into a completion.

A policy is any object with ``async __call__(messages, sampling) -> Completion``
(:class:`Policy`). Engines batch concurrent calls internally, so the rollout simply
awaits many calls at once. Built-ins:

* :class:`ScriptedPolicy` wraps a function ``messages -> str`` (sync or async); tests and
  baselines use it.
* :class:`OraclePolicy` plays an environment's reference solution
  (``env.unwrapped.oracle_action``). It is *env-bound*: the rollout calls
  ``policy.for_env(env)`` once per episode to get the bound policy.
* :class:`RandomPolicy` replies with random text from the env's action space: the
  weakest possible baseline, and a fuzzer for the malformed-action paths.
* :class:`OpenAIPolicy` calls any OpenAI-compatible ``/chat/completions`` endpoint (a
  vLLM server, a hosted API) over HTTP with retries, backoff and timeouts.

:func:`make_policy` builds one from a string spec, as the CLI's ``--policy`` does.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.metadata
import inspect
import os
import random
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from agentgym.errors import ConfigError, PolicyError, UnknownNameError
from agentgym.tokens import TokenCounter, approx_tokens
from agentgym.types import Completion, Message, SamplingParams, to_openai


@runtime_checkable
class Policy(Protocol):
    """The one interface every policy implements."""

    async def __call__(
        self, messages: Sequence[Message], sampling: SamplingParams
    ) -> Completion: ...


def completion_from_text(text: str, count_tokens: TokenCounter = approx_tokens) -> Completion:
    """A Completion for text that did not come from a tokenizer (token count approximated)."""
    return Completion(text=text, num_tokens=count_tokens(text), finish_reason="stop")


class ScriptedPolicy:
    """Wraps ``fn(messages) -> str | Completion`` (plain or ``async``) as a Policy.

    Args:
        fn: the function; it receives the message list (and ``sampling`` if it accepts a
            second parameter).
        count_tokens: used to fill ``Completion.num_tokens`` when ``fn`` returns text.
        name: shown in results and logs.
    """

    def __init__(
        self,
        fn: Callable[..., str | Completion | Awaitable[str | Completion]],
        *,
        count_tokens: TokenCounter = approx_tokens,
        name: str | None = None,
    ) -> None:
        if not callable(fn):
            raise ConfigError("ScriptedPolicy needs a callable messages -> str.")
        self.fn = fn
        self.count_tokens = count_tokens
        self.name = name or getattr(fn, "__name__", "scripted")
        try:
            self._takes_sampling = len(inspect.signature(fn).parameters) >= 2
        except (TypeError, ValueError):
            self._takes_sampling = False

    async def __call__(self, messages: Sequence[Message], sampling: SamplingParams) -> Completion:
        out = self.fn(messages, sampling) if self._takes_sampling else self.fn(messages)
        if inspect.isawaitable(out):
            out = await out
        if isinstance(out, Completion):
            return out
        if not isinstance(out, str):
            raise PolicyError(
                f"Scripted policy {self.name!r} returned {type(out).__name__}; it must return "
                "a str (the reply) or a Completion."
            )
        return completion_from_text(out, self.count_tokens)

    def __repr__(self) -> str:
        return f"ScriptedPolicy({self.name})"


class OraclePolicy:
    """Plays each environment's reference solution (``env.unwrapped.oracle_action``)."""

    name = "oracle"

    def __init__(self, count_tokens: TokenCounter | None = None) -> None:
        self.count_tokens = count_tokens

    def for_env(self, env: Any) -> Policy:
        base = env.unwrapped
        if not hasattr(base, "oracle_action") or (
            hasattr(base, "has_oracle") and not base.has_oracle()
        ):
            raise PolicyError(
                f"{type(base).__name__} has no reference solution, so the 'oracle' policy "
                "cannot play it. Use another policy (for example 'random' or 'openai:MODEL')."
            )
        count = self.count_tokens or getattr(base, "count_tokens", approx_tokens)
        return ScriptedPolicy(base.oracle_action, count_tokens=count, name="oracle")

    async def __call__(self, messages: Sequence[Message], sampling: SamplingParams) -> Completion:
        raise PolicyError(
            "The oracle policy must be bound to an environment: the rollout does this by "
            "calling policy.for_env(env). Use agentgym.rollout(...) rather than calling it."
        )


class RandomPolicy:
    """Replies with random text sampled from the env's action space (a floor baseline)."""

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self._n = 0

    def for_env(self, env: Any) -> Policy:
        space = env.action_space
        self._n += 1
        space.seed(self.seed + self._n)

        def act(messages: Sequence[Message]) -> str:
            return space.sample()

        return ScriptedPolicy(
            act, count_tokens=getattr(env.unwrapped, "count_tokens", approx_tokens), name="random"
        )

    async def __call__(self, messages: Sequence[Message], sampling: SamplingParams) -> Completion:
        raise PolicyError("The random policy must be bound to an environment with for_env(env).")


class OpenAIPolicy:
    """A client for OpenAI-compatible chat completion endpoints.

    Token counts come from the response's ``usage`` (``completion_tokens``); log-probs
    are requested when ``sampling.logprobs`` is set and returned when the server sends
    them. Connection errors, timeouts, HTTP 408/409/429 and 5xx are retried with
    exponential backoff and jitter; other HTTP errors fail at once with the server's
    message, and so does a refused connection before the server ever answered this
    client (nothing listens at the URL: waiting would not help).

    Args:
        model: the model name the server expects.
        base_url: the API root, e.g. ``http://127.0.0.1:8000/v1`` (default: the
            ``OPENAI_BASE_URL`` environment variable).
        api_key: sent as a bearer token (default: ``OPENAI_API_KEY``, else none).
        timeout: seconds per HTTP request.
        max_retries: retries after the first attempt.
        backoff: first retry delay in seconds (doubles each retry, capped at 30 s).
        max_concurrency: requests in flight at once from this client.
        extra_body: extra JSON fields sent with every request.
    """

    RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        *,
        api_key: str | None = None,
        timeout: float = 120.0,
        max_retries: int = 4,
        backoff: float = 0.5,
        max_concurrency: int = 64,
        extra_body: dict[str, Any] | None = None,
    ) -> None:
        base_url = base_url or os.environ.get("OPENAI_BASE_URL")
        if not base_url:
            raise ConfigError(
                "OpenAIPolicy needs a base URL: pass base_url=... (e.g. "
                "'http://127.0.0.1:8000/v1'), use the spec 'openai:MODEL@URL', or set "
                "OPENAI_BASE_URL."
            )
        if not base_url.startswith(("http://", "https://")):
            raise ConfigError(
                f"OpenAIPolicy base URL {base_url!r} needs http:// or https:// (for example "
                f"'http://{base_url.split('://')[-1]}'); nothing was sent."
            )
        if max_retries < 0 or timeout <= 0 or max_concurrency < 1:
            raise ConfigError("max_retries must be >= 0, timeout > 0 and max_concurrency >= 1.")
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.extra_body = dict(extra_body or {})
        self._sem: asyncio.Semaphore | None = None
        self._max_concurrency = max_concurrency
        self._clients: dict[int, Any] = {}
        self._reached = False  # the server has answered at least once
        self.name = f"openai:{model}"

    def _client(self):
        import httpx

        loop_id = id(asyncio.get_running_loop())
        client = self._clients.get(loop_id)
        if client is None:
            headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
            client = httpx.AsyncClient(
                base_url=self.base_url,
                timeout=self.timeout,
                headers=headers,
                limits=httpx.Limits(max_connections=self._max_concurrency),
            )
            self._clients[loop_id] = client
            self._sem = asyncio.Semaphore(self._max_concurrency)
        return client

    def request_body(self, messages: Sequence[Message], sampling: SamplingParams) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": to_openai(messages),
            "max_tokens": sampling.max_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
        }
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        if sampling.stop:
            body["stop"] = list(sampling.stop)
        if sampling.logprobs:
            body["logprobs"] = True
        body.update(self.extra_body)
        return body

    async def __call__(self, messages: Sequence[Message], sampling: SamplingParams) -> Completion:
        import httpx

        client = self._client()
        assert self._sem is not None
        body = self.request_body(messages, sampling)
        last_error = ""
        async with self._sem:
            for attempt in range(self.max_retries + 1):
                if attempt:
                    delay = min(30.0, self.backoff * 2 ** (attempt - 1))
                    await asyncio.sleep(delay * (0.5 + random.random()))
                try:
                    resp = await client.post("/chat/completions", json=body)
                except (httpx.TransportError, httpx.TimeoutException) as e:
                    if isinstance(e, httpx.ConnectError) and not self._reached:
                        raise PolicyError(
                            f"nothing answers at {self.base_url} ({e}). Is the server running "
                            "(e.g. agentgym serve --model ...) and is the URL right?"
                        ) from e
                    last_error = f"{type(e).__name__}: {e}"
                    continue
                self._reached = True
                if resp.status_code in self.RETRY_STATUS:
                    last_error = f"HTTP {resp.status_code}: {resp.text[:300]}"
                    continue
                if resp.status_code >= 400:
                    raise PolicyError(
                        f"{self.base_url}/chat/completions answered HTTP {resp.status_code}: "
                        f"{resp.text[:500]}. Check the model name ({self.model!r}) and the request."
                    )
                return self.parse_response(resp.json())
        raise PolicyError(
            f"{self.base_url}/chat/completions failed after {self.max_retries + 1} attempts "
            f"(last error: {last_error}). Is the server running and reachable?"
        )

    @staticmethod
    def parse_response(data: dict[str, Any]) -> Completion:
        try:
            choice = data["choices"][0]
            text = choice["message"].get("content") or ""
        except (KeyError, IndexError, TypeError, AttributeError) as e:
            raise PolicyError(
                f"Malformed chat completion response (no choices[0].message): {data!r:.300}"
            ) from e
        usage = data.get("usage") or {}
        logprobs: list[float] = []
        lp = choice.get("logprobs") or {}
        for item in lp.get("content") or []:
            if isinstance(item, dict) and "logprob" in item:
                logprobs.append(float(item["logprob"]))
        return Completion(
            text=text,
            logprobs=tuple(logprobs),
            finish_reason=choice.get("finish_reason") or "stop",
            num_tokens=usage.get("completion_tokens"),
            prompt_tokens=usage.get("prompt_tokens"),
        )

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()
        self._clients.clear()


#: Entry-point group of extra ``--policy`` schemes: ``name = "module:function"``, the
#: function taking the text after ``name:``. agentgym's own trainers fill it (``hf``, in
#: pyproject.toml), so the core names no module of a higher layer; other packages can add
#: schemes the same way, or call :func:`register_policy_scheme`.
POLICY_GROUP = "agentgym.policies"

_registered_schemes: dict[str, str] = {}


def register_policy_scheme(name: str, factory: str) -> None:
    """Make ``--policy NAME:ARGS`` call ``factory`` (``"module:function"``) with ``ARGS``."""
    if not name.isidentifier():
        raise ConfigError(f"policy scheme {name!r} must be a plain name (letters, digits, _).")
    if ":" not in factory:
        raise ConfigError(f"policy scheme {name!r}: give the factory as 'module:function'.")
    _registered_schemes[name] = factory


def policy_schemes() -> dict[str, str]:
    """Every extra policy scheme: name -> ``"module:function"`` (entry points, then
    :func:`register_policy_scheme`)."""
    schemes: dict[str, str] = {}
    try:
        for ep in importlib.metadata.entry_points(group=POLICY_GROUP):
            schemes[ep.name] = ep.value
    except Exception:  # broken package metadata must not break policy parsing
        pass
    schemes.update(_registered_schemes)
    return schemes


BUILTIN_POLICIES = (
    "oracle",
    "random",
    "scripted:MODULE:FUNCTION",
    "openai:MODEL[@BASE_URL]",
    "hf:PATH[@ADAPTER]",
)


def make_policy(spec: str | Policy, **kwargs: Any) -> Any:
    """Build a policy from a CLI-style spec.

    Specs:
        ``oracle``: the env's reference solution.
        ``random``: random text (a floor baseline).
        ``scripted:MODULE:FUNCTION``: ``FUNCTION(messages) -> str`` imported from MODULE
            (the current folder is searched too, as ``python -m`` does). The function gets
            the observation, a list of :class:`~agentgym.Message` (``role``, ``content``),
            and returns the reply text (or a :class:`~agentgym.Completion`); with a second
            parameter it also gets the :class:`~agentgym.SamplingParams`; it may be
            ``async``.
        ``openai:MODEL`` or ``openai:MODEL@BASE_URL``: an OpenAI-compatible endpoint.
        ``hf:PATH[@ADAPTER]``: a local Hugging Face model (from agentgym.trainers).
    """
    if not isinstance(spec, str):
        return spec
    scheme, _, rest = spec.partition(":")
    if spec == "oracle":
        return OraclePolicy(**kwargs)
    if spec == "random":
        return RandomPolicy(**kwargs)
    if scheme == "scripted" and rest:
        if ":" not in rest:
            raise ConfigError(f"Policy spec {spec!r}: use 'scripted:MODULE:FUNCTION'.")
        fn = _import_object(rest, f"Policy spec {spec!r}")
        return (
            fn
            if isinstance(fn, Policy) and not inspect.isfunction(fn)
            else ScriptedPolicy(fn, name=rest)
        )
    if scheme == "openai" and rest:
        model, _, url = rest.partition("@")
        return OpenAIPolicy(model, url or None, **kwargs)
    schemes = policy_schemes()
    if scheme in schemes and rest:
        factory = _import_object(schemes[scheme], f"Policy scheme {scheme!r}")
        return factory(rest, **kwargs)
    raise UnknownNameError(
        "policy",
        spec,
        ["oracle", "random", "scripted", "openai", *schemes],
        hint="Specs: " + ", ".join(BUILTIN_POLICIES) + ".",
    )


def _import_object(path: str, what: str) -> Any:
    """Import ``module:attribute``; a failure is a ConfigError that names ``what``.

    The current folder is on the search path, as for ``python -m``, so a module next to
    where the command runs is found.
    """
    import sys

    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    module, _, attr = path.rpartition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"{what}: cannot import {attr} from {module} ({e}).") from e
