"""What OpenTelemetry costs a run: per turn through ``Agent`` on bench_core's minimal
model (one no-op tool call a turn, so the loop's own cost shows), without
instrumentation, instrumented with the API's default no-op providers, and instrumented
with the SDK exporting every span to memory.

Run: ``python benchmarks/bench_telemetry.py`` (needs the ``otel`` extra; prints a
Markdown table: median of the repeats, alternating the variants). Nothing here is a test.
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from bench_core import NOOP
from bench_core import MinimalModel
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ketch import Agent
from ketch.telemetry import instrument

TURNS = 2000
REPEATS = 5


async def _per_turn(variant: str) -> float:
    agent = Agent(MinimalModel(TURNS), tools=[NOOP])  # type: ignore[arg-type]
    providers: Any = None
    if variant == "no-op providers":
        instrument(agent)
    elif variant == "SDK, spans to memory":
        exporter = InMemorySpanExporter()
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
        meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
        providers = (tracer_provider, meter_provider)
        instrument(agent, tracer_provider=tracer_provider, meter_provider=meter_provider)
    gc.collect()
    start = time.perf_counter()
    result = await agent.prompt("go")
    elapsed = time.perf_counter() - start
    assert result.summary.turns == TURNS + 1, result.summary
    if providers is not None:
        assert len(exporter.get_finished_spans()) == 2 * TURNS + 2
        for p in providers:
            p.shutdown()
    return elapsed / (TURNS + 1)


def main() -> None:
    variants = ("not instrumented", "no-op providers", "SDK, spans to memory")
    times: dict[str, list[float]] = {v: [] for v in variants}
    for _ in range(REPEATS):
        for v in variants:
            times[v].append(asyncio.run(_per_turn(v)))
    print("| per turn through Agent (minimal model, one no-op tool) | µs |")
    print("|---|---|")
    for v in variants:
        print(f"| {v} | {statistics.median(times[v]) * 1e6:,.1f} |")


if __name__ == "__main__":
    main()
