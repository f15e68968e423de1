"""A first agent: one tool, one prompt, the answer and what it cost.

    python examples/first_agent.py                                      # offline
    KETCH_EXAMPLE_MODEL=openai:gpt-5-mini python examples/first_agent.py   # a real model

Offline, a ScriptedModel plays the model: it asks for the tool, then answers. With
KETCH_EXAMPLE_MODEL set (and the provider's key in the environment, e.g.
OPENAI_API_KEY), the same program talks to that model instead.
"""

import asyncio
import os

from ketch import Agent
from ketch import tool
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call


@tool
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


async def main() -> None:
    model = os.environ.get("KETCH_EXAMPLE_MODEL") or ScriptedModel(
        [reply(tool_call("add", {"a": 2, "b": 40})), "2 + 40 = 42."]
    )
    agent = Agent(model, system_prompt="Be brief. Use the add tool for sums.", tools=[add])
    result = await agent.prompt("What is 2 + 40?")
    if result.error:  # why the run did not end normally, e.g. no OPENAI_API_KEY for a real model
        raise SystemExit(f"failed: {result.error}")
    print(result.text)
    print(f"{result.end_reason}: {result.summary.turns} model calls, {result.summary.tool_calls} tool call(s), ${result.cost:.5f}")


if __name__ == "__main__":
    asyncio.run(main())
