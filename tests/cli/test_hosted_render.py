"""The terminal shows a provider-hosted tool's call and result as they stream."""

from __future__ import annotations

import io

from rich.console import Console

from ketch import Agent
from ketch.cli._render import EventRenderer
from ketch.llm import HostedToolCall
from ketch.llm import HostedToolResult
from ketch.testing import ScriptedModel
from ketch.testing import reply


async def test_hosted_tool_calls_and_results_are_shown_between_the_text() -> None:
    call = HostedToolCall(id="s1", kind="web_search", name="web_search", input={"query": "ketch runtime"})
    found = HostedToolResult(call_id="s1", kind="web_search", output="ketch <https://example.com>\nmore <https://example.org>")
    code = HostedToolCall(id="c1", kind="code_execution", name="code_execution", input={})
    failed = HostedToolResult(call_id="c1", kind="code_execution", output="", is_error=True)
    model = ScriptedModel([reply("Looking.", call, found, code, failed, "Done.")])
    output = io.StringIO()
    agent = Agent(model)
    agent.subscribe(EventRenderer(Console(file=output, width=200, highlight=False)))
    await agent.prompt("?")
    lines = [line.rstrip() for line in output.getvalue().splitlines()]
    assert lines[-1].startswith("· 1 turn ·")  # the run's footer (its duration is not asserted)
    assert lines[:-1] == [
        "Looking.",
        "⏺ web_search (hosted): ketch runtime",
        "  ⎿ ketch <https://example.com>  … 1 more lines",
        "⏺ code_execution (hosted)",
        "  ⎿ (no output)",
        "Done.",
    ]
