"""A team: a coder and a reviewer that talk to each other, led by this program.

    python examples/teams/review.py

Each teammate is an ordinary Agent with a mailbox and three more tools:
``send_message(to, text)``, ``broadcast(text)`` and ``list_teammates``. A message to
an idle teammate starts a run; a message to a working one reaches its model at the next
turn. The code that runs the team is its lead ("lead"): ``team.receive()`` returns the
messages teammates send to it, and None once the team is idle and the inbox is read.
"""

import asyncio
import os

from ketch import Agent
from ketch import Model
from ketch.teams import Team
from ketch.testing import Reply
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call


def demo_model(*replies: str | Reply) -> Model | str:
    return os.environ.get("KETCH_EXAMPLE_MODEL") or ScriptedModel(replies)


async def main() -> None:
    coder = Agent(demo_model(
        reply(tool_call("send_message", {"to": "reviewer", "text": "Please review: def add(a, b): return a + b"})),
        "Sent my change to the reviewer.",
        reply(tool_call("send_message", {"to": "lead", "text": "Done: add() is written and reviewed."})),
        "Reported to the lead.",
    ), system_prompt="You write Python code. Ask the reviewer to review each change.")
    reviewer = Agent(demo_model(
        reply(tool_call("send_message", {"to": "coder", "text": "Looks good to me."})),
        "Reviewed.",
    ), system_prompt="You review code changes and answer the author.")

    async with Team() as team:  # shut down when the block ends
        team.add("coder", coder, description="writes the code")
        team.add("reviewer", reviewer, description="reviews every change")
        await team.send("coder", "Write add(a, b) and have it reviewed; tell me when done.")
        while (mail := await team.receive()) is not None:
            print(f"{mail.sender} -> lead: {mail.text}")
        for name in ("coder", "reviewer"):
            mate = team[name]
            print(f"{name}: sent {mate.sent}, received {mate.received}")
        print(f"team cost: ${team.cost:.5f}; failures: {len(team.failures)}")


if __name__ == "__main__":
    asyncio.run(main())
