"""Policies: scripted, oracle, and the OpenAI-compatible client against a real loopback server."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agentgym.errors import ConfigError, PolicyError, UnknownNameError
from agentgym.policies import OpenAIPolicy, OraclePolicy, ScriptedPolicy, make_policy
from agentgym.types import Message, SamplingParams

MSGS = [Message("system", "be brief"), Message("user", "2+2?")]


class ChatServer:
    """A real HTTP server on 127.0.0.1 that speaks /v1/chat/completions.

    ``script`` is a list of (status, delay_s) answers consumed one per request; when it
    runs out every request succeeds at once.
    """

    def __init__(self, script=()):
        self.script = list(script)
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append(body)
                server.headers.append(dict(self.headers))
                status, delay = server.script.pop(0) if server.script else (200, 0.0)
                time.sleep(delay)
                if self.path != "/v1/chat/completions":
                    status = 404
                if status != 200:
                    payload = json.dumps({"error": {"message": f"status {status}"}}).encode()
                else:
                    text = "4" if body["messages"][-1]["content"] == "2+2?" else "?"
                    payload = json.dumps(
                        {
                            "choices": [
                                {
                                    "message": {"role": "assistant", "content": text},
                                    "finish_reason": "stop",
                                    "logprobs": {"content": [{"token": text, "logprob": -0.25}]},
                                }
                            ],
                            "usage": {"prompt_tokens": 11, "completion_tokens": 1},
                        }
                    ).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_openai_client_sends_the_request_and_parses_usage_and_logprobs():
    with ChatServer() as srv:
        policy = OpenAIPolicy("tiny", srv.url, api_key="k", backoff=0.01)
        sampling = SamplingParams(
            max_tokens=5, temperature=0.0, seed=9, stop=("\n",), logprobs=True
        )
        c = asyncio.run(policy(MSGS, sampling))
    assert (c.text, c.num_tokens, c.prompt_tokens, c.logprobs) == ("4", 1, 11, (-0.25,))
    body = srv.requests[0]
    assert body["model"] == "tiny" and body["max_tokens"] == 5 and body["seed"] == 9
    assert body["stop"] == ["\n"] and body["logprobs"] is True
    assert body["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "2+2?"},
    ]
    assert srv.headers[0]["Authorization"] == "Bearer k"


def test_openai_client_retries_transient_errors_then_succeeds():
    with ChatServer(script=[(503, 0), (429, 0)]) as srv:
        c = asyncio.run(OpenAIPolicy("m", srv.url, backoff=0.01)(MSGS, SamplingParams()))
    assert c.text == "4" and len(srv.requests) == 3


def test_openai_client_fails_fast_on_client_errors():
    with ChatServer(script=[(400, 0)]) as srv, pytest.raises(PolicyError, match="HTTP 400"):
        asyncio.run(OpenAIPolicy("m", srv.url, backoff=0.01)(MSGS, SamplingParams()))
    assert len(srv.requests) == 1


def test_openai_client_times_out_and_gives_up_after_retries():
    with (
        ChatServer(script=[(200, 1.0)] * 3) as srv,
        pytest.raises(PolicyError, match="after 2 attempts"),
    ):
        asyncio.run(
            OpenAIPolicy("m", srv.url, timeout=0.2, max_retries=1, backoff=0.01)(
                MSGS, SamplingParams()
            )
        )


def test_openai_client_fails_at_once_where_nothing_listens(monkeypatch):
    with ChatServer() as srv:  # a port that was just freed: connections are refused
        url = srv.url
    slept = []

    async def no_sleep(seconds):
        slept.append(seconds)

    monkeypatch.setattr("agentgym.policies.asyncio.sleep", no_sleep)
    with pytest.raises(PolicyError, match=r"nothing answers at .*Is the server running"):
        asyncio.run(OpenAIPolicy("m", url, max_retries=4)(MSGS, SamplingParams()))
    assert slept == []  # no backoff: waiting would not bring a server up


def test_openai_client_retries_a_refused_connection_once_it_was_reached():
    with ChatServer() as srv:
        policy = OpenAIPolicy("m", srv.url, max_retries=2, backoff=0.01)

        async def twice():
            first = await policy(MSGS, SamplingParams())
            srv.httpd.shutdown()
            srv.httpd.server_close()  # the server goes away (a restart)
            with pytest.raises(PolicyError, match="after 3 attempts"):
                await policy(MSGS, SamplingParams())
            return first

        assert asyncio.run(twice()).text == "4"


def test_openai_client_handles_many_concurrent_requests():
    with ChatServer() as srv:
        policy = OpenAIPolicy("m", srv.url, max_concurrency=4)

        async def many():
            return await asyncio.gather(*(policy(MSGS, SamplingParams()) for _ in range(16)))

        out = asyncio.run(many())
    assert [c.text for c in out] == ["4"] * 16 and len(srv.requests) == 16


def test_openai_needs_a_base_url(monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ConfigError, match="base URL"):
        OpenAIPolicy("m")


def test_scripted_policy_wraps_sync_and_async_functions():
    async def async_fn(messages):
        return "a" * 8

    c1 = asyncio.run(ScriptedPolicy(lambda m: m[-1].content.upper())(MSGS, SamplingParams()))
    c2 = asyncio.run(ScriptedPolicy(async_fn)(MSGS, SamplingParams()))
    assert c1.text == "2+2?" and c2.text == "aaaaaaaa" and c2.num_tokens == 2
    with pytest.raises(PolicyError, match="must return"):
        asyncio.run(ScriptedPolicy(lambda m: 3)(MSGS, SamplingParams()))


def test_make_policy_specs_and_errors():
    assert isinstance(make_policy("oracle"), OraclePolicy)
    p = make_policy("openai:tiny@http://127.0.0.1:9/v1")
    assert isinstance(p, OpenAIPolicy) and p.model == "tiny" and p.base_url.endswith("/v1")
    s = make_policy("scripted:json:dumps")
    assert isinstance(s, ScriptedPolicy)
    with pytest.raises(UnknownNameError, match="Did you mean: 'oracle'"):
        make_policy("orcle")
    with pytest.raises(ConfigError, match="cannot import"):
        make_policy("scripted:json:nope")


def test_oracle_refuses_envs_without_reference_solution():
    class NoOracle:
        unwrapped = object()

    with pytest.raises(PolicyError, match="no reference solution"):
        OraclePolicy().for_env(NoOracle())
