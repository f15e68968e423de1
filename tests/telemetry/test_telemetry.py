"""ketch.telemetry: the span tree, attributes and metrics of instrumented runs, on the
OpenTelemetry SDK's in-memory exporter and metric reader."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from ketch import Agent
from ketch import LoopConfig
from ketch import ToolContext
from ketch import Usage
from ketch import run_loop
from ketch import tool
from ketch.llm import Cost
from ketch.telemetry import instrument
from ketch.testing import ScriptedModel
from ketch.testing import error_reply
from ketch.testing import reply
from ketch.testing import tool_call


class Otel:
    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def tree(self) -> list[tuple[str, str | None]]:
        """(name, parent name) of every span, in start order."""
        spans = sorted(self.spans(), key=lambda s: s.start_time or 0)
        by_id = {s.context.span_id: s for s in spans if s.context is not None}
        out = []
        for s in spans:
            parent = by_id.get(s.parent.span_id) if s.parent is not None else None
            out.append((s.name, parent.name if parent is not None else None))
        return out

    def span(self, name: str) -> ReadableSpan:
        found = [s for s in self.spans() if s.name == name]
        assert len(found) == 1, [s.name for s in self.spans()]
        return found[0]

    def metrics(self) -> dict[str, list[tuple[dict[str, Any], Any]]]:
        data = self.reader.get_metrics_data()
        out: dict[str, list[tuple[dict[str, Any], Any]]] = {}
        assert data is not None
        for rm in data.resource_metrics:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    for point in metric.data.data_points:
                        out.setdefault(metric.name, []).append((dict(point.attributes or {}), point))
        return out


@pytest.fixture
def otel() -> Iterator[Otel]:
    o = Otel()
    yield o
    o.tracer_provider.shutdown()
    o.meter_provider.shutdown()


@tool
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


@tool
def explode(reason: str) -> str:
    """Fail on purpose.

    Args:
        reason: Why.
    """
    raise RuntimeError(reason)


def _usage(i: int, o: int, cache_read: int = 0, cost: float = 0.0) -> Usage:
    return Usage(input=i, output=o, cache_read=cache_read, total_tokens=i + o + cache_read, cost=Cost(total=cost))


def _nested_agent_tool(otel: Otel, inner_model: ScriptedModel) -> Any:
    @tool
    async def research(topic: str, ctx: ToolContext) -> str:
        """Ask a helper agent.

        Args:
            topic: What to look into.
        """
        inner = Agent(inner_model, tools=[add])
        instrument(inner, tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider, agent_name="helper")
        result = await inner.prompt(topic)
        return result.text

    return research


async def test_a_multi_tool_run_with_a_nested_agent_is_one_span_tree(otel: Otel) -> None:
    inner_model = ScriptedModel(
        [reply(tool_call("add", {"a": 1, "b": 2}, id="in1")), reply("three", usage=_usage(5, 1))],
        provider="anthropic",
        id="claude-haiku",
    )
    outer_model = ScriptedModel(
        [
            reply(
                tool_call("add", {"a": 2, "b": 40}, id="c1"),
                tool_call("research", {"topic": "sums"}, id="c2"),
                usage=_usage(100, 20, cache_read=30, cost=0.25),
            ),
            reply("done", usage=_usage(150, 5, cost=0.5)),
        ],
        provider="openai",
        id="gpt-5-mini",
    )
    agent = Agent(outer_model, tools=[add, _nested_agent_tool(otel, inner_model)])
    instrument(agent, tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider, agent_name="main")
    result = await agent.prompt("go")
    assert result.text == "done"

    tree = otel.tree()
    assert tree[0] == ("invoke_agent main", None)
    assert tree[1] == ("chat gpt-5-mini", "invoke_agent main")
    assert sorted(tree[2:4]) == [("execute_tool add", "invoke_agent main"), ("execute_tool research", "invoke_agent main")]
    assert tree[4:] == [
        ("invoke_agent helper", "execute_tool research"),
        ("chat claude-haiku", "invoke_agent helper"),
        ("execute_tool add", "invoke_agent helper"),
        ("chat claude-haiku", "invoke_agent helper"),
        ("chat gpt-5-mini", "invoke_agent main"),
    ]
    # One trace.
    assert len({s.context.trace_id for s in otel.spans() if s.context is not None}) == 1

    run = otel.span("invoke_agent main")
    assert dict(run.attributes or {}) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.provider.name": "openai",
        "gen_ai.system": "openai",
        "gen_ai.agent.name": "main",
        "gen_ai.request.model": "gpt-5-mini",
        "gen_ai.usage.input_tokens": 280,
        "gen_ai.usage.output_tokens": 25,
        "gen_ai.usage.cache_read.input_tokens": 30,
        "gen_ai.usage.cache_creation.input_tokens": 0,
        "ketch.usage.cost": 0.75,
        "ketch.turns": 2,
        "ketch.tool_calls": 2,
        "ketch.end_reason": "stop",
    }
    first_chat = sorted((s for s in otel.spans() if s.name == "chat gpt-5-mini"), key=lambda s: s.start_time or 0)[0]
    assert dict(first_chat.attributes or {}) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.system": "openai",
        "gen_ai.request.model": "gpt-5-mini",
        "ketch.turn": 1,
        "gen_ai.response.model": "gpt-5-mini",
        "gen_ai.response.finish_reasons": ("tool_call",),
        "gen_ai.usage.input_tokens": 130,
        "gen_ai.usage.output_tokens": 20,
        "gen_ai.usage.cache_read.input_tokens": 30,
        "gen_ai.usage.cache_creation.input_tokens": 0,
        "ketch.usage.cost": 0.25,
    }
    research = otel.span("execute_tool research")
    assert dict(research.attributes or {}) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "research",
        "gen_ai.tool.call.id": "c2",
        "gen_ai.tool.type": "function",
        "gen_ai.tool.description": "Ask a helper agent.",
        "ketch.turn": 1,
    }
    assert research.status.status_code == StatusCode.UNSET
    helper = otel.span("invoke_agent helper")
    assert helper.attributes is not None and helper.attributes["gen_ai.provider.name"] == "anthropic"
    # No content unless asked for.
    for s in otel.spans():
        assert not {k for k in (s.attributes or {}) if "messages" in k or "arguments" in k or "result" in k}


async def test_a_nested_agent_in_a_tool_run_in_the_loop_task_nests_too(otel: Otel) -> None:
    # A tool without a ToolContext, alone in its batch, runs in the loop's own task.
    inner_model = ScriptedModel(["inner answer"], provider="openai", id="inner")

    @tool
    async def ask(question: str) -> str:
        """Ask a helper.

        Args:
            question: The question.
        """
        inner = Agent(inner_model)
        instrument(inner, tracer_provider=otel.tracer_provider, agent_name="helper")
        return (await inner.prompt(question)).text

    model = ScriptedModel([reply(tool_call("ask", {"question": "q"}, id="a1")), "outer"], provider="openai", id="outer")
    agent = Agent(model, tools=[ask])
    instrument(agent, tracer_provider=otel.tracer_provider, agent_name="main")
    assert (await agent.prompt("go")).text == "outer"
    assert otel.tree() == [
        ("invoke_agent main", None),
        ("chat outer", "invoke_agent main"),
        ("execute_tool ask", "invoke_agent main"),
        ("invoke_agent helper", "execute_tool ask"),
        ("chat inner", "invoke_agent helper"),
        ("chat outer", "invoke_agent main"),
    ]
    # The run's span is no longer current once the run is over.
    from opentelemetry import trace

    assert not trace.get_current_span().get_span_context().is_valid


async def test_metrics_token_usage_and_operation_duration_per_call(otel: Otel) -> None:
    model = ScriptedModel(
        [reply("hi", usage=_usage(10, 3, cache_read=4))], provider="google", id="gemini-2.5-flash"
    )
    agent = Agent(model)
    instrument(agent, tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider)
    await agent.prompt("hello")
    metrics = otel.metrics()
    base = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "gcp.gemini",
        "gen_ai.system": "gcp.gemini",
        "gen_ai.request.model": "gemini-2.5-flash",
        "gen_ai.response.model": "gemini-2.5-flash",
    }
    tokens = sorted(((a, p.sum, p.count) for a, p in metrics["gen_ai.client.token.usage"]), key=lambda x: str(x[0]))
    assert tokens == [
        ({**base, "gen_ai.token.type": "input"}, 14, 1),
        ({**base, "gen_ai.token.type": "output"}, 3, 1),
    ]
    [(attrs, point)] = metrics["gen_ai.client.operation.duration"]
    assert attrs == base and point.count == 1


async def test_a_failing_tool_and_a_failing_model_call_carry_error_type(otel: Otel) -> None:
    model = ScriptedModel(
        [
            reply(tool_call("explode", {"reason": "boom"}, id="e1"), tool_call("nope", {}, id="e2")),
            error_reply("provider down", kind="overloaded"),
        ],
        provider="openai",
        id="gpt-5-mini",
    )
    agent = Agent(model, tools=[explode])
    instrument(agent, tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider)
    result = await agent.prompt("go")
    assert result.end_reason == "error"

    boom = otel.span("execute_tool explode")
    assert boom.attributes is not None and boom.attributes["error.type"] == "RuntimeError"
    assert boom.status.status_code == StatusCode.ERROR
    # A call that never ran (unknown tool) still has its span, from the events.
    missing = otel.span("execute_tool nope")
    assert missing.attributes is not None and missing.attributes["error.type"] == "tool_error"
    assert missing.parent is not None and missing.parent.span_id == otel.span("invoke_agent agent").context.span_id
    chats = sorted((s for s in otel.spans() if s.name == "chat gpt-5-mini"), key=lambda s: s.start_time or 0)
    assert chats[1].attributes is not None and chats[1].attributes["error.type"] == "overloaded"
    assert chats[1].attributes["gen_ai.response.finish_reasons"] == ("error",)
    run = otel.span("invoke_agent agent")
    assert run.attributes is not None and run.attributes["error.type"] == "overloaded"
    assert run.status.status_code == StatusCode.ERROR
    durations = {a.get("error.type") for a, _ in otel.metrics()["gen_ai.client.operation.duration"]}
    assert durations == {None, "overloaded"}


async def test_content_is_captured_only_when_enabled(otel: Otel) -> None:
    model = ScriptedModel(
        [reply(tool_call("add", {"a": 2, "b": 40}, id="c1")), reply("42")], provider="openai", id="gpt-5-mini"
    )
    agent = Agent(model, tools=[add], system_prompt="Be brief.")
    instrument(agent, tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider, capture_content=True)
    await agent.prompt("What is 2 + 40?")
    chats = sorted((s for s in otel.spans() if s.name == "chat gpt-5-mini"), key=lambda s: s.start_time or 0)
    a0 = chats[0].attributes or {}
    assert json.loads(str(a0["gen_ai.input.messages"])) == [
        {"role": "user", "parts": [{"type": "text", "content": "What is 2 + 40?"}]}
    ]
    assert json.loads(str(a0["gen_ai.output.messages"])) == [
        {
            "role": "assistant",
            "parts": [{"type": "tool_call", "id": "c1", "name": "add", "arguments": {"a": 2, "b": 40}}],
            "finish_reason": "tool_call",
        }
    ]
    a1 = chats[1].attributes or {}
    assert json.loads(str(a1["gen_ai.input.messages"]))[1:] == [
        {"role": "assistant", "parts": [{"type": "tool_call", "id": "c1", "name": "add", "arguments": {"a": 2, "b": 40}}]},
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "response": "42"}]},
    ]
    run = otel.span("invoke_agent agent").attributes or {}
    assert json.loads(str(run["gen_ai.system_instructions"])) == [{"type": "text", "content": "Be brief."}]
    t = otel.span("execute_tool add").attributes or {}
    assert json.loads(str(t["gen_ai.tool.call.arguments"])) == {"a": 2, "b": 40}
    assert t["gen_ai.tool.call.result"] == "42"


async def test_no_spans_without_instrument_and_none_after_uninstrument(otel: Otel) -> None:
    model = ScriptedModel(["one", "two"])
    agent = Agent(model, tools=[add])
    await agent.prompt("x")
    assert otel.spans() == []
    handle = instrument(agent, tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider)
    assert len(agent.config.middlewares) == 1
    handle.uninstrument()
    assert agent.config.middlewares == []
    await agent.prompt("y")
    assert otel.spans() == []


async def test_a_loop_config_gets_chat_and_tool_spans_under_the_current_span(otel: Otel) -> None:
    model = ScriptedModel(
        [reply(tool_call("add", {"a": 1, "b": 1}, id="c1")), reply("2")], provider="openai", id="gpt-5-mini"
    )
    config = LoopConfig(model=model)
    instrument(config, tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider, capture_content=True)
    assert config.model.id == "gpt-5-mini"
    tracer = otel.tracer_provider.get_tracer("app")
    from ketch import Conversation

    with tracer.start_as_current_span("request"):
        stream = run_loop("go", Conversation(tools=[add]), config)
        async for _ in stream:
            pass
        assert (await stream.result()).text == "2"
    assert otel.tree() == [
        ("request", None),
        ("chat gpt-5-mini", "request"),
        ("execute_tool add", "request"),
        ("chat gpt-5-mini", "request"),
    ]
    chat = sorted((s for s in otel.spans() if s.name == "chat gpt-5-mini"), key=lambda s: s.start_time or 0)[1]
    messages = json.loads(str((chat.attributes or {})["gen_ai.input.messages"]))
    assert [m["role"] for m in messages] == ["user", "assistant", "tool"]


def test_importing_ketch_telemetry_imports_no_opentelemetry() -> None:
    code = "import sys, ketch, ketch.telemetry; print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


async def test_the_agent_span_carries_the_session_id_as_the_conversation_id(otel: Otel, tmp_path: Any) -> None:
    from ketch.sessions import JsonlStore
    from ketch.sessions import Session

    session = await Session.create(JsonlStore(tmp_path / "sessions"), cwd=str(tmp_path))
    with_session = Agent(ScriptedModel(["one"]), session=session)
    without = Agent(ScriptedModel(["two"]))
    for agent, name in ((with_session, "a"), (without, "b")):
        instrument(agent, agent_name=name, tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider)
        await agent.prompt("x")
    await session.close()
    attributes = [dict(otel.span(f"invoke_agent {name}").attributes or {}) for name in ("a", "b")]
    assert [a.get("gen_ai.conversation.id") for a in attributes] == [session.id, None]
