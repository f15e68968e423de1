"""The cost of delegating: a ``subagent`` call against a plain tool call, on scripted models.

Two measures, each the median over RUNS runs after WARMUP:

- the tool alone: ``subagent`` ``execute`` (a fresh child :class:`ketch.Agent`, its run
  on a scripted model answering ``ok`` in one text chunk, events forwarded to the
  parent's ``ctx.report``) against a plain tool returning ``ok``;
- in a parent run: a whole two-turn parent run (call the tool, then answer) with the
  ``subagent`` tool against the same run with the plain tool.

Run: ``python benchmarks/bench_subagents.py`` (prints a Markdown table). Figures are
medians of wall time on the machine it runs on; nothing here is a test.
"""

from __future__ import annotations

import asyncio
import platform
import statistics
import time
from collections.abc import Awaitable
from collections.abc import Callable
from typing import Any

from ketch import Agent
from ketch.llm import AbortSignal
from ketch.llm import Request
from ketch.llm import StreamOptions
from ketch.loop import Tool
from ketch.loop import ToolContext
from ketch.subagents import Subagents
from ketch.subagents import SubagentSpec
from ketch.testing import FunctionModel
from ketch.testing import Reply
from ketch.testing import reply
from ketch.testing import tool_call

RUNS = 500
WARMUP = 50


async def _median_us(step: Callable[[], Awaitable[Any]]) -> float:
    times = []
    for i in range(WARMUP + RUNS):
        start = time.perf_counter()
        await step()
        elapsed = time.perf_counter() - start
        if i >= WARMUP:
            times.append(elapsed)
    return statistics.median(times) * 1e6


def _child() -> FunctionModel:
    return FunctionModel(lambda request, options: reply("ok", chunk_size=64))


def _parent(name: str, args: dict[str, Any]) -> FunctionModel:
    def respond(request: Request, options: StreamOptions) -> Reply:
        if request.messages[-1].role == "user":
            return reply(tool_call(name, args), chunk_size=64)
        return reply("done", chunk_size=64)

    return FunctionModel(respond)


async def main() -> None:
    plain = Tool("echo", execute=lambda args, ctx: "ok")
    holder = Agent(_child())
    subagents = Subagents([SubagentSpec("helper", "answers ok", model=_child(), tools=[])]).attach(holder)
    sub_tool = subagents.tool()
    updates = 0

    async def report(partial: Any) -> None:
        nonlocal updates
        updates += 1

    ctx = ToolContext(call_id="c", tool_name="subagent", signal=AbortSignal(), report=report)
    args = {"agent": "helper", "task": "say ok"}

    async def plain_call() -> Any:
        return await plain.execute({}, ctx)

    async def sub_call() -> Any:
        result = await sub_tool.execute(args, ctx)
        if result.is_error:
            raise RuntimeError(result.text)
        return result

    tool_plain = await _median_us(plain_call)
    tool_sub = await _median_us(sub_call)
    subagents.runs.clear()  # keep memory flat between the two parts

    async def run_plain() -> Any:
        agent = Agent(_parent("echo", {}), tools=[plain])
        return await agent.prompt("go")

    async def run_sub() -> Any:
        agent = Agent(_parent("subagent", args))
        Subagents([SubagentSpec("helper", "answers ok", model=_child(), tools=[])]).attach(agent)
        result = await agent.prompt("go")
        if result.summary.tool_errors:
            raise RuntimeError("the subagent call failed")
        return result

    run_p = await _median_us(run_plain)
    run_s = await _median_us(run_sub)
    print(f"median of {RUNS} runs; Python {platform.python_version()}, {platform.machine()}\n")
    print("| measure | plain tool (µs) | subagent (µs) | overhead (µs) |")
    print("|---|---|---|---|")
    print(f"| the tool call alone | {tool_plain:.1f} | {tool_sub:.1f} | {tool_sub - tool_plain:.1f} |")
    print(f"| a two-turn parent run | {run_p:.1f} | {run_s:.1f} | {run_s - run_p:.1f} |")


if __name__ == "__main__":
    asyncio.run(main())
