"""One agent definition: the options an Agent takes, checked by name, and what a child
agent (a spawned teammate, a subagent) takes from its parent.

    python examples/agents/options.py                                      # offline
    KETCH_EXAMPLE_MODEL=openai:gpt-5-mini python examples/agents/options.py   # a real model

The options are the keywords of ketch.AgentOptions (the LoopConfig fields an Agent
takes). ketch.loop.INHERITANCE says, per option, whether a child inherits it, starts
from the default (reset) or takes its own definition's value (override).
"""

import asyncio
import os

from ketch import Agent
from ketch import AgentOptions
from ketch import UsageLimits
from ketch import tool
from ketch.loop import INHERITANCE
from ketch.loop import stop_after_tool
from ketch.teams import Team
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call


@tool
def submit(summary: str) -> str:
    """Submit the finished work.

    Args:
        summary: What was done.
    """
    return f"submitted: {summary}"


# The options of one definition, checked by a type checker like keyword arguments.
LEAD_OPTIONS: AgentOptions = {
    "max_turns": 8,
    "max_budget_usd": 0.50,
    "usage_limits": UsageLimits(tool_calls=20),
    "stop_when": [stop_after_tool("submit")],
}


async def main() -> None:
    model = os.environ.get("KETCH_EXAMPLE_MODEL") or ScriptedModel(
        [reply(tool_call("submit", {"summary": "the plan is written"})), "Submitted."]
    )
    lead = Agent(model, system_prompt="You lead a small team. Call submit when done.", tools=[submit], **LEAD_OPTIONS)
    result = await lead.prompt("Write the plan, then submit it.")
    print("lead:", result.end_reason, result.error)

    # A misspelt option is a one-line TypeError naming the closest allowed name.
    try:
        Agent(model, max_turn=3)  # type: ignore[call-arg]
    except TypeError as exc:
        print("typo:", str(exc).split(";")[0])

    # A teammate spawned from the lead takes the options INHERITANCE says.
    async with Team() as team:
        reviewer = team.spawn("reviewer", lead, description="reviews the plan", system_prompt="You review plans.")
        child = reviewer.agent.config
        shown = {
            "max_budget_usd": child.max_budget_usd,
            "usage_limits": f"tool_calls={child.usage_limits.tool_calls}" if child.usage_limits else None,
            "max_turns": child.max_turns,
            "stop_when": len(child.stop_when),
        }
        for name, value in shown.items():
            print(f"reviewer {name}: {INHERITANCE[name].rule} -> {value}")


if __name__ == "__main__":
    asyncio.run(main())
