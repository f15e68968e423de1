"""ketch.llm.proxy against the proxy sub-application (ketch.server.proxy_app) on loopback,
with scripted models as the upstream the server resolves."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from ketch import Agent
from ketch import tool
from ketch.llm import AbortSignal
from ketch.llm import AssistantMessage
from ketch.llm import Cost
from ketch.llm import MessageBuilder
from ketch.llm import Model
from ketch.llm import Request
from ketch.llm import StreamEvent
from ketch.llm import StreamOptions
from ketch.llm import TextContent
from ketch.llm import Usage
from ketch.llm import complete
from ketch.llm import proxy
from ketch.server import proxy_app
from ketch.testing import FunctionModel
from ketch.testing import ScriptedModel
from ketch.testing import error_reply
from ketch.testing import reply
from ketch.testing import thinking
from ketch.testing import tool_call

SECRET = "sk-proxy-test-provider-key-0123456789"
TOKEN = "client-token-abc123"


class Served:
    def __init__(self, url: str, upstream: dict[str, Model], seen: list[bytes]) -> None:
        self.url = url
        self.upstream = upstream
        self.seen = seen  # every response body the server sent


async def _serve(app: web.Application) -> tuple[web.AppRunner, str]:
    root = web.Application()
    root.add_subapp("/proxy", app)
    runner = web.AppRunner(root, access_log=None, handler_cancellation=True)
    await runner.setup()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    await web.SockSite(runner, sock).start()
    return runner, f"http://127.0.0.1:{port}/proxy"


@pytest.fixture
async def make_proxy(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Callable[..., Any]]:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    runners: list[web.AppRunner] = []

    async def start(upstream: dict[str, Model], budgets: dict[str, float | None] | None = None) -> Served:
        seen: list[bytes] = []

        def resolve(name: str) -> Model:
            return upstream[name]

        app = proxy_app(models=list(upstream), budgets=budgets or {TOKEN: None}, resolve=resolve)

        @web.middleware
        async def record(request: web.Request, handler: Any) -> web.StreamResponse:
            response = await handler(request)
            if isinstance(response, web.Response) and response.body is not None:
                seen.append(bytes(response.body))  # type: ignore[arg-type]
            return response

        app.middlewares.append(record)
        runner, url = await _serve(app)
        runners.append(runner)
        return Served(url, upstream, seen)

    yield start
    for runner in runners:
        await runner.cleanup()


def _usage(i: int, o: int, cost: float) -> Usage:
    return Usage(input=i, output=o, total_tokens=i + o, cost=Cost(total=cost))


async def test_text_and_tool_calls_stream_through_the_proxy(make_proxy: Any) -> None:
    upstream = ScriptedModel(
        [
            reply(thinking("plan", signature="sig-1"), "Let me add.", tool_call("add", {"a": 2, "b": 40}, id="c1")),
            reply("The answer is 42.", usage=_usage(30, 6, 0.001)),
        ],
        provider="openai",
        id="gpt-5-mini",
    )
    served = await make_proxy({"openai:gpt-5-mini": upstream})

    @tool
    def add(a: int, b: int) -> int:
        """Add.

        Args:
            a: One.
            b: Two.
        """
        return a + b

    model = proxy(served.url, TOKEN, model="openai:gpt-5-mini")
    agent = Agent(model, tools=[add], system_prompt="Be brief.")
    kinds: list[str] = []
    agent.subscribe(lambda ev: kinds.append(ev.event.type) if ev.type == "message_update" else None)
    result = await agent.prompt("What is 2 + 40?")

    assert result.text == "The answer is 42."
    first = result.messages[1]
    assert isinstance(first, AssistantMessage)
    assert first.provider == "openai" and first.model == "gpt-5-mini" and first.stop_reason == "tool_use"
    assert [type(b).__name__ for b in first.content] == ["ThinkingContent", "TextContent", "ToolCall"]
    assert first.content[0].signature == "sig-1"  # type: ignore[union-attr]
    assert first.tool_calls[0].args == {"a": 2, "b": 40}
    # The events were rebuilt: every kind streamed, in order, once per block.
    assert kinds[0] == "thinking_start" and "thinking_delta" in kinds and "toolcall_delta" in kinds
    assert kinds.count("toolcall_end") == 1 and kinds.count("text_start") == 2
    # What the upstream model received: the request as the client built it.
    second = upstream.requests[1]
    assert second.system_prompt == "Be brief."
    assert [m.role for m in second.messages] == ["user", "assistant", "tool_result"]
    assert second.tool_names == ["add"]
    final = result.messages[-1]
    assert isinstance(final, AssistantMessage) and final.usage.cost.total == 0.001
    upstream.assert_complete()


async def test_options_a_provider_may_see_are_forwarded_and_keys_are_not(make_proxy: Any) -> None:
    upstream = ScriptedModel(["ok"], provider="openai", id="gpt-5-mini")
    served = await make_proxy({"openai:gpt-5-mini": upstream})
    model = proxy(served.url, TOKEN, model="openai:gpt-5-mini")
    fmt = {"name": "answer", "schema": {"type": "object"}}
    options = StreamOptions(
        temperature=0.5,
        max_tokens=77,
        thinking="low",
        tool_choice="none",
        response_format=fmt,
        session_id="s-1",
        cache_key="k-1",
        api_key="client-key",
        extra={"model": "x"},
    )
    message = await complete(model, Request(messages=[]), options)
    assert message.text == "ok"
    got = upstream.requests[0].options
    assert (got.temperature, got.max_tokens, got.thinking, got.tool_choice) == (0.5, 77, "low", "none")
    assert (got.response_format, got.session_id, got.cache_key) == (fmt, "s-1", "k-1")
    assert got.api_key is None and got.extra is None and got.headers is None


async def test_a_model_off_the_allow_list_is_a_clear_invalid_request(make_proxy: Any) -> None:
    served = await make_proxy({"openai:gpt-5-mini": ScriptedModel(["never"])})
    message = await complete(proxy(served.url, TOKEN, model="openai:gpt-5-pro"), Request(messages=[]))
    assert message.stop_reason == "error"
    assert message.error_kind == "invalid_request"
    assert message.error_message == (
        "HTTP 403: Model 'openai:gpt-5-pro' is not allowed by this proxy; allowed: openai:gpt-5-mini"
    )


async def test_an_exhausted_budget_is_a_clear_error_and_counts_cost(make_proxy: Any) -> None:
    upstream = ScriptedModel(
        [reply("one", usage=_usage(10, 2, 0.004)), reply("two", usage=_usage(10, 2, 0.004)), "three"],
        provider="openai",
        id="gpt-5-mini",
    )
    served = await make_proxy({"openai:gpt-5-mini": upstream}, budgets={TOKEN: 0.008, "other": None})
    model = proxy(served.url, TOKEN, model="openai:gpt-5-mini")
    assert (await complete(model, Request(messages=[]))).text == "one"
    assert (await complete(model, Request(messages=[]))).text == "two"
    message = await complete(model, Request(messages=[]))
    assert message.stop_reason == "error" and message.error_kind == "auth"
    assert message.error_message == "HTTP 429: Budget exhausted for this token: spent $0.008000 of $0.008000"
    assert upstream.remaining == 1  # the third call never reached the model
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{served.url}/usage", headers={"authorization": f"Bearer {TOKEN}"}) as r:
            assert await r.json() == {"spent_usd": 0.008, "budget_usd": 0.008}
    # Another token's budget is its own.
    assert (await complete(proxy(served.url, "other", model="openai:gpt-5-mini"), Request(messages=[]))).text == "three"


async def test_a_wrong_or_missing_token_gets_401_on_every_route(make_proxy: Any) -> None:
    served = await make_proxy({"openai:gpt-5-mini": ScriptedModel(["never"])})
    async with aiohttp.ClientSession() as session:
        for headers in ({}, {"authorization": "Bearer nope"}, {"authorization": f"Basic {TOKEN}"}):
            for method, path in (("POST", "/stream"), ("GET", "/models"), ("GET", "/usage")):
                async with session.request(method, served.url + path, headers=headers, data=b"{}") as r:
                    assert r.status == 401, (method, path, headers)
                    assert await r.json() == {
                        "error": {
                            "kind": "auth",
                            "message": "Missing or invalid proxy token (Authorization: Bearer <token>)",
                        }
                    }
    message = await complete(proxy(served.url, "nope", model="openai:gpt-5-mini"), Request(messages=[]))
    assert message.error_kind == "auth"
    assert message.error_message == "HTTP 401: Missing or invalid proxy token (Authorization: Bearer <token>)"


async def test_upstream_errors_keep_their_kind_and_the_key_is_never_sent(make_proxy: Any) -> None:
    def fail(request: Request, options: StreamOptions) -> Any:
        return error_reply(f"upstream rejected key {SECRET}", "partial text", kind="rate_limit")

    upstream = FunctionModel(fail, provider="openai", id="gpt-5-mini")
    served = await make_proxy({"openai:gpt-5-mini": upstream})
    bodies: list[bytes] = []

    async def observe(exchange: Any) -> None:
        bodies.append(repr(exchange).encode())

    model = proxy(served.url, TOKEN, model="openai:gpt-5-mini", observer=observe)
    message = await complete(model, Request(messages=[]))
    assert message.stop_reason == "error"
    assert message.error_kind == "rate_limit"
    assert message.error_message == "upstream rejected key ***"
    assert message.text == "partial text"
    assert len(upstream.requests) == 1  # not retried by the client: the server's model already did
    # The raw stream, as any client sees it.
    async with aiohttp.ClientSession() as session:
        body = b'{"model": "openai:gpt-5-mini", "request": {"messages": []}}'
        async with session.post(
            f"{served.url}/stream", data=body, headers={"authorization": f"Bearer {TOKEN}"}
        ) as r:
            raw = await r.read()
        async with session.get(f"{served.url}/models", headers={"authorization": f"Bearer {TOKEN}"}) as r:
            listed = await r.read()
    assert b'"type":"error"' in raw and b"***" in raw
    for data in [raw, listed, *served.seen, *bodies]:
        assert SECRET.encode() not in data
    assert TOKEN.encode() not in b"".join(bodies)


async def test_upstream_errors_are_redacted_like_the_adapters_errors(make_proxy: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Any variable the sandbox treats as secret is masked, and so is a clipped key's prefix."""
    monkeypatch.setenv("WAREHOUSE_PASSWORD", "hunter2-warehouse")

    def fail(request: Request, options: StreamOptions) -> Any:
        return error_reply(f"login hunter2-warehouse failed; key {SECRET[:12]}…", kind="auth")

    served = await make_proxy({"openai:gpt-5-mini": FunctionModel(fail, provider="openai", id="gpt-5-mini")})
    message = await complete(proxy(served.url, TOKEN, model="openai:gpt-5-mini"), Request(messages=[]))
    assert message.error_message == "login *** failed; key ***…"


async def test_a_malformed_request_is_a_400_naming_the_problem(make_proxy: Any) -> None:
    served = await make_proxy({"openai:gpt-5-mini": ScriptedModel(["never"])})
    async with aiohttp.ClientSession() as session:
        async with session.post(
            f"{served.url}/stream", data=b'{"request": 5}', headers={"authorization": f"Bearer {TOKEN}"}
        ) as r:
            assert r.status == 400
            assert await r.json() == {
                "error": {
                    "kind": "invalid_request",
                    "message": "Malformed proxy request: Expected `object`, got `int` - at `$.request`",
                }
            }


async def test_the_default_model_and_the_models_route(make_proxy: Any) -> None:
    served = await make_proxy(
        {"openai:gpt-5-mini": ScriptedModel(["from mini"], provider="openai", id="gpt-5-mini"), "x:y": ScriptedModel()}
    )
    message = await complete(proxy(served.url, TOKEN), Request(messages=[]))
    assert message.text == "from mini"
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{served.url}/models", headers={"authorization": f"Bearer {TOKEN}"}) as r:
            assert await r.json() == {
                "object": "list",
                "data": [
                    {"id": "openai:gpt-5-mini", "object": "model", "created": 0, "owned_by": "ketch-proxy", "context_window": 128000},
                    {"id": "x:y", "object": "model", "created": 0, "owned_by": "ketch-proxy", "context_window": 128000},
                ],
                "default": "openai:gpt-5-mini",
            }


def test_the_proxy_model_knows_the_window_from_the_registry_and_hides_the_token() -> None:
    model = proxy("http://127.0.0.1:1/proxy", TOKEN, model="openai:gpt-5-mini")
    assert model.context_window == 400000
    assert model.provider == "proxy" and model.id == "openai:gpt-5-mini"
    assert TOKEN not in repr(model)
    model.set_context_window(1000)
    assert model.context_window == 1000
    # the model is named as get_model names it: a bare id the registry knows, or unknown
    assert proxy("http://127.0.0.1:1/proxy", TOKEN, model="gemini-2.5-pro").context_window == 1048576
    assert proxy("http://127.0.0.1:1/proxy", TOKEN, model="nobody:knows").context_window == 128000


def test_proxy_app_rejects_a_bad_configuration() -> None:
    with pytest.raises(ValueError, match="at least one allowed model"):
        proxy_app(models=[], budgets={"t": None})
    with pytest.raises(ValueError, match="at least one token"):
        proxy_app(models=["a:b"], budgets={})
    with pytest.raises(ValueError, match="non-negative number or None, got -1"):
        proxy_app(models=["a:b"], budgets={"t": -1})


class _Hanging:
    """An upstream model that streams a little, then waits until its stream is closed."""

    provider = "openai"
    api = "test"
    id = "gpt-5-mini"
    context_window = 1000

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.closed = asyncio.Event()

    async def stream(self, request: Request, options: StreamOptions | None = None) -> AsyncIterator[StreamEvent]:
        builder = MessageBuilder(provider="openai", model="gpt-5-mini")
        try:
            yield builder.start()
            start = builder.text_start()
            yield start
            yield builder.text_delta("partial", start.index)
            self.started.set()
            await asyncio.Event().wait()
        finally:
            self.closed.set()


async def test_a_client_abort_closes_the_upstream_call(make_proxy: Any) -> None:
    upstream = _Hanging()
    served = await make_proxy({"openai:gpt-5-mini": upstream})
    signal = AbortSignal()
    model = proxy(served.url, TOKEN, model="openai:gpt-5-mini")
    task = asyncio.create_task(complete(model, Request(messages=[]), StreamOptions(signal=signal)))
    await upstream.started.wait()
    signal.abort()
    message = await task
    assert message.stop_reason == "aborted"
    await asyncio.wait_for(upstream.closed.wait(), 30)  # the server's handler closed the upstream stream


def test_a_long_error_body_is_clipped_as_the_adapters_clip_it() -> None:
    """The body kept on the error is cut at 2000 characters without leaving the first
    characters of a word (it could be a key's)."""
    model = proxy("http://127.0.0.1:1/proxy", TOKEN, model="openai:gpt-5-mini")
    message = "x " * 975 + "sk-abcdefghijklmnopqrstuvwxyz"  # the key straddles character 2000
    body = json.dumps({"error": {"kind": "server", "message": message}}).encode()
    err = model.classify(500, body, {})
    assert err.kind == "server"
    assert err.body is not None and err.body.endswith(" …") and len(err.body) <= 2001
    assert "sk-" not in err.body


class _RetriesThenFails:
    """A model whose provider echoed the key into a retried error, then gave up."""

    provider = "openai"
    id = "gpt-5-mini"
    context_window = 128000

    async def stream(self, request: Request, options: StreamOptions | None = None) -> AsyncIterator[StreamEvent]:
        from ketch.llm import Retry

        builder = MessageBuilder(provider=self.provider, model=self.id)
        yield builder.start()
        yield Retry(
            attempt=1, max_attempts=2, delay=0.0, error_kind="server", error_message=f"bad {SECRET}", discard_partial=False
        )
        yield builder.error(f"still bad {SECRET}", kind="server")


async def test_retry_frames_are_redacted_like_the_final_error(make_proxy: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    served = await make_proxy({"openai:gpt-5-mini": _RetriesThenFails()})
    async with aiohttp.ClientSession() as session:
        body = b'{"model": "openai:gpt-5-mini", "request": {"messages": []}}'
        async with session.post(f"{served.url}/stream", data=body, headers={"authorization": f"Bearer {TOKEN}"}) as r:
            raw = await r.read()
    frames = [json.loads(line[6:]) for line in raw.decode().splitlines() if line.startswith("data: ")]
    assert [(f["type"], f.get("error_message")) for f in frames[:2]] == [("start", None), ("retry", "bad ***")]
    assert frames[2]["message"]["error_message"] == "still bad ***"
    assert SECRET.encode() not in raw


async def test_hosted_tools_are_forwarded_and_their_blocks_stream_back(make_proxy: Any) -> None:
    from ketch.llm import Citation
    from ketch.llm import HostedTool
    from ketch.llm import HostedToolCall
    from ketch.llm import HostedToolResult

    call = HostedToolCall(id="srv_1", kind="web_search", name="web_search", input={"query": "q"}, native={"type": "server_tool_use", "id": "srv_1"})
    result = HostedToolResult(call_id="srv_1", kind="web_search", output="a <https://a.example>", citations=[Citation(url="https://a.example")], native={"x": [1]})
    upstream = ScriptedModel([reply(call, result, "Found a.")], provider="openai", id="gpt-5-mini")
    served = await make_proxy({"openai:gpt-5-mini": upstream})
    model = proxy(served.url, TOKEN, model="openai:gpt-5-mini")
    wanted = (HostedTool(kind="web_search", options={"max_uses": 1}, fallback="web_search"),)
    events = [e async for e in model.stream(Request(messages=[]), StreamOptions(hosted_tools=wanted))]
    assert upstream.requests[0].options.hosted_tools == wanted
    assert [(e.type, getattr(e, "index", None)) for e in events[:3]] == [("start", None), ("hosted_tool", 0), ("hosted_tool", 1)]
    assert (events[1].block, events[2].block) == (call, result)
    assert events[-1].message.content == [call, result, TextContent(text="Found a.")]
