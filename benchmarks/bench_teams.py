"""Teams: memory per idle teammate and the cost of a message round trip.

Run: ``python benchmarks/bench_teams.py`` (prints Markdown tables). Nothing here is a test.

- Memory: ``tracemalloc`` over creating N idle ``Agent`` objects, against N agents added
  to a ``Team`` (same model object for all, so the model is not counted). An idle
  teammate has no task; the difference is what the team adds to each agent (its mailbox,
  counters, three tools, the listener, the longer system prompt).
- Round trip: the lead sends ``ping`` to a teammate whose scripted model answers with a
  ``send_message`` call back to the lead and then stops; the lead's ``receive()`` returns
  the reply. Against the same two model calls as a plain ``agent.prompt`` (a tool call,
  then text), so the difference is the team's own work per message and back.
"""

from __future__ import annotations

import asyncio
import gc
import os
import platform
import statistics
import time
import tracemalloc
from typing import Any

from ketch import Agent
from ketch import Tool
from ketch.llm import Request
from ketch.llm import StreamOptions
from ketch.llm import ToolResultMessage
from ketch.teams import Team
from ketch.testing import FunctionModel
from ketch.testing import Reply
from ketch.testing import reply
from ketch.testing import tool_call

ROUND_TRIPS = 400
WARMUP = 40


def _answer(request: Request, options: StreamOptions) -> Reply | str:
    """A tool call after a message, text after the tool's result."""
    if isinstance(request.messages[-1], ToolResultMessage):
        return "done"
    return reply(tool_call("send_message", {"to": "lead", "text": "pong"}))


def _traced(build: Any, n: int) -> tuple[float, list[Any]]:
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    kept = build(n)
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return (after - before) / n, kept


async def memory(n: int) -> tuple[float, float, int]:
    model = FunctionModel(_answer)

    def agents(k: int) -> list[Any]:
        return [Agent(model, system_prompt="You review code.") for _ in range(k)]

    def team(k: int) -> list[Any]:
        t = Team()
        for i in range(k):
            t.add(f"m{i}", Agent(model, system_prompt="You review code."), description="reviews code")
        return [t]

    bare, _ = _traced(agents, n)
    teamed, kept = _traced(team, n)
    tasks = len([t for t in asyncio.all_tasks() if t.get_name().startswith("ketch-team:")])
    await kept[0].shutdown()
    return bare, teamed, tasks


async def round_trips() -> tuple[float, float, float, float]:
    async with Team() as team:
        team.add("echo", Agent(FunctionModel(_answer)))
        wall: list[float] = []
        cpu: list[float] = []
        for i in range(WARMUP + ROUND_TRIPS):
            w, c = time.perf_counter(), time.process_time()
            await team.send("echo", "ping")
            mail = await team.receive()
            await team.wait_idle()  # the teammate's run is over: both model calls made
            w, c = time.perf_counter() - w, time.process_time() - c
            assert mail is not None and mail.text == "pong"
            if i >= WARMUP:
                wall.append(w)
                cpu.append(c)

    async def noop(args: dict[str, Any], ctx: Any) -> str:
        return "Message #1 sent to lead."

    send = Tool("send_message", "", {"type": "object", "properties": {}}, noop, reports_progress=False)
    plain_wall: list[float] = []
    plain_cpu: list[float] = []
    agent = Agent(FunctionModel(_answer), tools=[send])
    for i in range(WARMUP + ROUND_TRIPS):
        w, c = time.perf_counter(), time.process_time()
        await agent.prompt("ping")
        w, c = time.perf_counter() - w, time.process_time() - c
        if i >= WARMUP:
            plain_wall.append(w)
            plain_cpu.append(c)
    ms = 1000
    return (
        statistics.median(wall) * ms,
        statistics.median(cpu) * ms,
        statistics.median(plain_wall) * ms,
        statistics.median(plain_cpu) * ms,
    )


def _machine() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return f"{line.split(':', 1)[1].strip()}, {os.cpu_count()} cores"
    except OSError:
        pass
    return platform.machine()


async def main() -> None:
    print(f"{_machine()}, Python {platform.python_version()}\n")
    print("| idle members | bare Agent (KB each) | teammate (KB each) | team's share (KB each) | tasks |")
    print("|---|---|---|---|---|")
    for n in (100, 1000):
        bare, teamed, tasks = await memory(n)
        print(f"| {n} | {bare / 1024:.2f} | {teamed / 1024:.2f} | {(teamed - bare) / 1024:.2f} | {tasks} |")
    wall, cpu, plain_wall, plain_cpu = await round_trips()
    print(f"\nmedian of {ROUND_TRIPS} round trips (two model calls each, scripted model)\n")
    print("| measure | wall ms | CPU ms |")
    print("|---|---|---|")
    print(f"| lead -> teammate -> lead (send, run, send_message, receive, idle) | {wall:.3f} | {cpu:.3f} |")
    print(f"| the same two model calls as agent.prompt | {plain_wall:.3f} | {plain_cpu:.3f} |")
    print(f"| the team's share | {wall - plain_wall:.3f} | {cpu - plain_cpu:.3f} |")


if __name__ == "__main__":
    asyncio.run(main())
