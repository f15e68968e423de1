"""Sessions: save a conversation as it happens, reopen it later, rewind files and all.

    python examples/sessions/resume_and_rewind.py

Each committed message is appended to the session at once (a crash loses at most the
message being written). Before a file-changing tool runs, the session saves the files'
prior content, so a rewind puts the files back as well as the conversation.
"""

import asyncio
import os
import tempfile
from pathlib import Path

from ketch import Agent
from ketch import Model
from ketch.sessions import JsonlStore
from ketch.sessions import Session
from ketch.sessions import export_markdown
from ketch.testing import Reply
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call
from ketch.tools import coding_tools


def demo_model(*replies: str | Reply) -> Model | str:
    return os.environ.get("KETCH_EXAMPLE_MODEL") or ScriptedModel(replies)


async def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        workspace = Path(folder) / "project"
        workspace.mkdir()
        store = JsonlStore(Path(folder) / "sessions")  # default: ~/.local/share/ketch/sessions

        # Day 1: a session records the run, message by message.
        session = await Session.create(store, cwd=workspace)
        agent = Agent(demo_model(
            reply(tool_call("write", {"path": "notes.md", "content": "# Notes\n"})),
            "Created notes.md.",
        ), tools=coding_tools(workspace), session=session)
        await agent.prompt("Create notes.md with a heading.")
        await session.close()
        print("saved session", session.id, "with", len(session.messages), "messages")

        # Day 2: reopen it (another process could): the transcript comes back.
        session = await Session.open(store, session.id)
        agent = Agent(demo_model("You asked me to create notes.md, and I did."),
                      tools=coding_tools(workspace), session=session)
        print("restored", len(agent.messages), "messages")
        result = await agent.prompt("What did you do yesterday?")
        print(result.text)

        # Go back to just after the first prompt: the conversation and the files.
        report = await session.rewind(session.message_ids[0])
        print("after the rewind:", len(agent.messages), "message(s); deleted", report.deleted,
              "- notes.md exists:", (workspace / "notes.md").exists())
        await session.close()

        for info in (await store.list(cwd=str(workspace))).sessions:
            print(f"listed: {info.id[:8]}  {info.title!r}")
        print(export_markdown(await store.load(session.id)).splitlines()[0])


if __name__ == "__main__":
    asyncio.run(main())
