"""OpenTelemetry across Temporal: the trace context travels from the client through the
workflow into the activities (Temporal's TracingInterceptor), and the worker's
``wrap_model`` / ``middlewares`` seams give ketch's ``chat`` and ``execute_tool`` spans
there, in the caller's trace."""

from __future__ import annotations

from pathlib import Path

import temporal_app as test_app
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.client import Client
from temporalio.contrib.opentelemetry import TracingInterceptor

from ketch.telemetry import Instrumentation
from ketch.temporal import DevServer
from ketch.temporal import build_worker
from ketch.temporal import start_run


def _parent(span: ReadableSpan, spans: list[ReadableSpan]) -> str | None:
    assert span.parent is not None
    return next((s.name for s in spans if s.context.span_id == span.parent.span_id), None)


async def test_the_callers_trace_reaches_the_model_and_tool_activities(
    temporal_server: DevServer, queue: str, work_dir: Path
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    client = await Client.connect(temporal_server.address, interceptors=[TracingInterceptor(tracer)])
    instrumentation = Instrumentation(tracer_provider=provider)
    agent = test_app.agent()
    async with build_worker(
        client,
        task_queue=queue,
        agents=[agent],
        sticky_timeout=1.0,
        wrap_model=instrumentation.wrap_model,
        middlewares=[instrumentation.tool_middleware],
    ):
        with tracer.start_as_current_span("request"):
            run = await start_run(client, agent, "rounds 1", task_queue=queue)
        result = await run.result()
    assert result.summary.end_reason == "stop"

    spans = list(exporter.get_finished_spans())
    root = next(s for s in spans if s.name == "request")
    assert {s.context.trace_id for s in spans} == {root.context.trace_id}  # one trace
    ours = sorted((s.name, _parent(s, spans)) for s in spans if s.name.startswith(("chat ", "execute_tool ")))
    assert ours == [
        ("chat transcript-driven", "RunActivity:tester.model"),
        ("chat transcript-driven", "RunActivity:tester.model"),
        ("execute_tool effect", "RunActivity:tester.tool.effect"),
    ]
    tool_span = next(s for s in spans if s.name == "execute_tool effect")
    assert tool_span.attributes is not None
    assert tool_span.attributes["gen_ai.tool.name"] == "effect"
    assert tool_span.attributes["gen_ai.tool.call.id"] == "call_0"
