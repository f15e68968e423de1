"""Subagents: a parent agent delegates focused work to agents with their own context.

    python examples/subagents/delegate.py

The parent's model gets one ``subagent`` tool. Each call starts a fresh Agent from a
``SubagentSpec`` (its own system prompt, tools and model, or the parent's model); its
final text is the tool's result, its usage is added to the parent's run, and its events
reach the parent's listeners as ``SubagentEvent``s.
"""

import asyncio
import os

from ketch import Agent
from ketch import Model
from ketch import tool
from ketch.loop import ToolExecutionUpdate
from ketch.subagents import SubagentEvent
from ketch.subagents import Subagents
from ketch.subagents import SubagentSpec
from ketch.testing import Reply
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call


def demo_model(*replies: str | Reply) -> Model | str:
    return os.environ.get("KETCH_EXAMPLE_MODEL") or ScriptedModel(replies)


@tool(read_only=True)
def search_docs(query: str) -> str:
    """Search the product documentation.

    Args:
        query: What to look for.
    """
    return "Refunds are possible within 30 days of purchase, with the receipt."


async def main() -> None:
    researcher = SubagentSpec(
        "researcher",
        "Finds facts in the documentation and answers with a short summary.",
        system_prompt="Search the docs and answer in one sentence.",
        tools=[search_docs],
        model=demo_model(reply(tool_call("search_docs", {"query": "refund"})), "Refunds: 30 days, with a receipt."),
    )
    parent = Agent(demo_model(
        reply(tool_call("subagent", {"agent": "researcher", "task": "What is the refund policy?"})),
        "You can get a refund within 30 days if you keep the receipt.",
    ), system_prompt="You answer customers. Delegate research to the researcher.")
    subagents = Subagents([researcher]).attach(parent)

    def show(event: object) -> None:
        if isinstance(event, ToolExecutionUpdate) and isinstance(event.partial, SubagentEvent):
            inner = event.partial.event
            if inner.type == "tool_execution_start":
                print(f"  {event.partial.path} -> {inner.tool_name}")

    parent.subscribe(show)
    result = await parent.prompt("Can I return my order?")
    print(result.text)
    for path, run in subagents.runs.items():
        print(f"{path}: {run.status}, {run.turns} turns, answered {run.text!r}")
    print("usage by subagent:", list(result.summary.tool_usage))


if __name__ == "__main__":
    asyncio.run(main())
