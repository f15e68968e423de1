"""Core micro-benchmarks: loop overhead per turn, Agent construction, import time.

Run: ``python benchmarks/bench_core.py`` (prints a Markdown table). Figures are
medians of repeated measurements on the machine it runs on; nothing here is a test.
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections.abc import AsyncIterator
from typing import Any

from ketch import Agent
from ketch import Conversation
from ketch import LoopConfig
from ketch import Tool
from ketch import run_loop
from ketch.llm import MessageBuilder
from ketch.llm import Request
from ketch.llm import StreamEvent
from ketch.llm import StreamOptions
from ketch.llm import Usage
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call

TURNS = 2000
REPEATS = 5


async def _noop(args: dict[str, Any], ctx: Any) -> str:
    return "ok"


NOOP = Tool("noop", "Does nothing.", {"type": "object", "properties": {}}, _noop)


class MinimalModel:
    """Emits the fewest events a tool-call turn can have, so the loop's own cost shows."""

    provider = api = id = "minimal"
    context_window = 128_000

    def __init__(self, turns: int) -> None:
        self.left = turns

    async def stream(self, request: Request, options: StreamOptions | None = None) -> AsyncIterator[StreamEvent]:
        b = MessageBuilder(provider="minimal", api="minimal", model="minimal")
        yield b.start()
        if self.left > 0:
            self.left -= 1
            ev = b.tool_call_start(f"c{self.left}", "noop")
            yield ev
            yield b.tool_call_end(ev.index)
        else:
            ev2 = b.text_start()
            yield ev2
            yield b.text_delta("done", ev2.index)
            yield b.text_end(ev2.index)
        yield b.done()


async def _loop_per_turn(turns: int) -> float:
    context = Conversation(tools=[NOOP])
    config = LoopConfig(model=MinimalModel(turns))  # type: ignore[arg-type]
    gc.collect()
    start = time.perf_counter()
    result = await run_loop("go", context, config).result()
    elapsed = time.perf_counter() - start
    assert result.summary.turns == turns + 1, result.summary
    return elapsed / (turns + 1)


async def _per_turn(model_factory: Any, turns: int) -> float:
    agent = Agent(model_factory(turns), tools=[NOOP])
    gc.collect()
    start = time.perf_counter()
    result = await agent.prompt("go")
    elapsed = time.perf_counter() - start
    assert result.summary.turns == turns + 1, result.summary
    return elapsed / (turns + 1)


def _scripted(turns: int) -> ScriptedModel:
    usage = Usage(input=10, output=5, total_tokens=15)
    return ScriptedModel([reply(tool_call("noop"), usage=usage) for _ in range(turns)] + [reply("done", usage=usage)])


def measure_loop() -> dict[str, float]:
    loop = [asyncio.run(_loop_per_turn(TURNS)) for _ in range(REPEATS)]
    minimal = [asyncio.run(_per_turn(MinimalModel, TURNS)) for _ in range(REPEATS)]
    scripted = [asyncio.run(_per_turn(_scripted, TURNS)) for _ in range(REPEATS)]
    return {
        "loop overhead per turn: run_loop, minimal model, one no-op tool (µs)": statistics.median(loop) * 1e6,
        "the same through Agent (µs)": statistics.median(minimal) * 1e6,
        "per turn through Agent with ScriptedModel streaming (µs)": statistics.median(scripted) * 1e6,
    }


def measure_agent_construction() -> dict[str, float]:
    model = ScriptedModel()
    n = 10_000
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        for _ in range(n):
            Agent(model, tools=[NOOP])
        times.append((time.perf_counter() - start) / n)
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    agents = [Agent(model, tools=[NOOP]) for _ in range(n)]
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    size = sum(s.size_diff for s in after.compare_to(before, "filename"))
    del agents
    return {
        "Agent construction (µs)": statistics.median(times) * 1e6,
        "memory per idle Agent (bytes)": size / n,
    }


def measure_import() -> dict[str, float]:
    code = "import time; t = time.perf_counter(); import ketch; print(time.perf_counter() - t)"
    runs = [float(subprocess.check_output([sys.executable, "-c", code])) for _ in range(REPEATS * 2)]
    return {"import ketch (ms)": statistics.median(runs) * 1e3}


def main() -> None:
    rows: dict[str, float] = {}
    rows.update(measure_import())
    rows.update(measure_agent_construction())
    rows.update(measure_loop())
    print("| measure | value |")
    print("|---|---|")
    for name, value in rows.items():
        print(f"| {name} | {value:,.1f} |")


if __name__ == "__main__":
    main()
