"""Imports ketch implementation modules (private) directly, to measure them.

Long-conversation benchmark: 2,000 tool turns with large outputs on a 32k-token window.

Run: ``python benchmarks/bench_context.py``. Reports how many summary calls the default
Compactor made and the time its per-request accounting and projection cost at
turn 100 and at turn 2,000 (which must not grow with the history).
"""

from __future__ import annotations

import asyncio
import itertools
import statistics
import time
from typing import Any

from ketch import Agent
from ketch import Tool
from ketch.context import Compactor
from ketch.context._summary import SUMMARY_SYSTEM_PROMPT
from ketch.llm import ToolCall
from ketch.llm import Usage
from ketch.llm._tokens import estimate_message_tokens
from ketch.loop import ContextRequest
from ketch.testing import FunctionModel
from ketch.testing import Reply

TURNS = 2000
WINDOW = 32_000
OUTPUT = "log line with some content 0123456789\n" * 150  # ~5.8k chars, ~1.5k tokens


class TimedManager(Compactor):
    """Records the wall time of every ``manage`` call, by agent turn."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.times: list[float] = []

    async def manage(self, messages: Any, request: ContextRequest) -> Any:
        start = time.perf_counter()
        spent = 0.0
        async for item in super().manage(messages, request):
            spent += time.perf_counter() - start
            yield item
            start = time.perf_counter()
        if request.reason == "request":
            self.times.append(spent)


async def run() -> dict[str, float]:
    turn = {"n": 0}

    def respond(context: Any, options: Any) -> Reply:
        if context.system_prompt == SUMMARY_SYSTEM_PROMPT:
            return Reply(blocks=[], usage=Usage(input=1000, output=300), error=None)
        turn["n"] += 1
        tokens = sum(estimate_message_tokens(m) for m in context.messages)
        if turn["n"] > TURNS:
            return Reply(blocks=[], usage=Usage(input=tokens, output=1))
        call = ToolCall(id=f"c{turn['n']}", name="tail_log", args={"file": f"app{turn['n'] % 7}.log"})
        return Reply(blocks=[call], usage=Usage(input=tokens, output=20))

    def summarize(context: Any, options: Any) -> str:
        return "<summary>## Goal\nWatch the logs.\n## Progress\n- [x] read logs</summary>"

    def route(context: Any, options: Any) -> Any:
        return summarize(context, options) if context.system_prompt == SUMMARY_SYSTEM_PROMPT else respond(context, options)

    async def tail_log(args: dict[str, Any], ctx: Any) -> str:
        return OUTPUT

    manager = TimedManager(window=WINDOW)
    agent = Agent(FunctionModel(route), tools=[Tool("tail_log", "Tail a log", None, tail_log)], context_manager=manager)
    stamps: list[float] = []
    agent.subscribe(lambda ev: stamps.append(time.perf_counter()) if ev.type == "turn_end" else None)
    start = time.perf_counter()
    result = await agent.prompt("Watch the logs.")
    total = time.perf_counter() - start
    assert result.summary.turns == TURNS + 1, result.summary
    t = manager.times
    return {
        "turns": float(result.summary.turns),
        "summary calls": float(manager.summary_calls),
        "context cost per request near turn 100 (ms)": statistics.median(t[90:110]) * 1e3,
        "context cost per request near turn 2,000 (ms)": statistics.median(t[-20:]) * 1e3,
        "wall time per turn near turn 100 (ms)": statistics.median(_gaps(stamps[90:111])) * 1e3,
        "wall time per turn near turn 2,000 (ms)": statistics.median(_gaps(stamps[-21:])) * 1e3,
        "wall time per turn, whole run (ms)": total / result.summary.turns * 1e3,
    }


def _gaps(stamps: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(stamps)]


def main() -> None:
    rows = asyncio.run(run())
    print("| measure | value |")
    print("|---|---|")
    for name, value in rows.items():
        print(f"| {name} | {value:,.3f} |" if value % 1 else f"| {name} | {int(value):,} |")


if __name__ == "__main__":
    main()
