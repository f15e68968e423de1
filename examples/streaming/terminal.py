"""Stream an agent's answer to the terminal as it is written, with its tool calls.

    python examples/streaming/terminal.py
    KETCH_EXAMPLE_MODEL=anthropic:claude-sonnet-4-5 python examples/streaming/terminal.py

Every run is a sequence of events (``agent_start`` ... ``agent_end``). A listener given
to ``agent.subscribe`` sees each of them in order; ``message_update`` events carry the
provider's stream event, so text arrives as ``TextDelta`` pieces. The same events can be
read with ``async for`` from the stateless loop (``run_loop``), shown second.
"""

import asyncio
import os
import sys

from ketch import Agent
from ketch import Conversation
from ketch import LoopConfig
from ketch import Model
from ketch import get_model
from ketch import run_loop
from ketch import tool
from ketch.llm import TextDelta
from ketch.llm import ThinkingDelta
from ketch.loop import AgentEvent
from ketch.loop import MessageUpdate
from ketch.loop import ToolExecutionEnd
from ketch.loop import ToolExecutionStart
from ketch.testing import Reply
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import thinking
from ketch.testing import tool_call


@tool(read_only=True)
def forecast(city: str) -> str:
    """Tomorrow's weather for a city.

    Args:
        city: The city.
    """
    return f"{city}: 18 °C, light rain in the afternoon"


def demo_model(*replies: str | Reply) -> Model | str:
    """KETCH_EXAMPLE_MODEL when set, else a scripted model playing these replies."""
    return os.environ.get("KETCH_EXAMPLE_MODEL") or ScriptedModel(replies)


def show(event: AgentEvent) -> None:
    """Print text as it streams; thinking dimmed; one line per tool call."""
    if isinstance(event, MessageUpdate):
        if isinstance(event.event, TextDelta):
            sys.stdout.write(event.event.delta)
        elif isinstance(event.event, ThinkingDelta):
            sys.stdout.write(f"\x1b[2m{event.event.delta}\x1b[0m" if sys.stdout.isatty() else event.event.delta)
        sys.stdout.flush()
    elif isinstance(event, ToolExecutionStart):
        print(f"\n-> {event.tool_name}({event.args})")
    elif isinstance(event, ToolExecutionEnd):
        print(f"   {event.result.text}")
    elif event.type == "agent_end":
        print(f"\n[{event.summary.end_reason}, {event.summary.turns} turns]")


async def main() -> None:
    # 1. An Agent: subscribe a listener, then prompt.
    agent = Agent(
        demo_model(
            reply(thinking("The user wants tomorrow's weather; ask the tool."), tool_call("forecast", {"city": "Paris"})),
            "Tomorrow in Paris: 18 °C with light rain in the afternoon, so take an umbrella.",
        ),
        tools=[forecast],
        thinking="low",
    )
    agent.subscribe(show)
    await agent.prompt("What's the weather in Paris tomorrow?")

    # 2. The stateless loop: iterate the events of a run yourself.
    conversation = Conversation(system_prompt="Be brief.", tools=[forecast])
    config = LoopConfig(model=get_model(demo_model("Bonjour! How can I help?")))
    stream = run_loop("Say hello in French.", conversation, config)
    async for event in stream:
        show(event)
    result = await stream.result()
    print(f"the conversation holds {len(conversation.messages)} messages; the answer: {result.text!r}")


if __name__ == "__main__":
    asyncio.run(main())
