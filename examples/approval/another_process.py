"""Pause a run for approval, and approve it from another process.

    python examples/approval/another_process.py

A tool declared ``requires_approval=True`` pauses the run before it executes: the run
ends with ``end_reason == "approval_required"`` and a ``RunState``, plain JSON you can
store anywhere (a database row, a file, a queue message). Any process with the same
model, system prompt and tools resumes it with a decision per waiting call. Here the
first process saves the state to a file and starts a second process that approves.
"""

import asyncio
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from ketch import Agent
from ketch import Model
from ketch import RunState
from ketch import approve
from ketch import tool
from ketch.testing import Reply
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call

SYSTEM_PROMPT = "You manage the build directory. Ask before deleting anything."


@tool(requires_approval=True)
def delete_build_dir(path: str) -> str:
    """Delete a build directory.

    Args:
        path: The directory to delete.
    """
    return f"deleted {path}"


def make_agent(*replies: str | Reply) -> Agent[None]:
    """The same agent in both processes: model, system prompt and tools must match."""
    model: Model | str = os.environ.get("KETCH_EXAMPLE_MODEL") or ScriptedModel(replies)
    return Agent(model, system_prompt=SYSTEM_PROMPT, tools=[delete_build_dir])


async def first_process() -> str | None:
    """Run until the pause; return the paused run's state as JSON."""
    agent = make_agent(reply(tool_call("delete_build_dir", {"path": "build/"})))
    result = await agent.prompt("Clean the build directory.")
    if result.end_reason != "approval_required" or result.state is None:
        print("the model did not ask to delete anything:", result.text)
        return None
    for call in result.state.awaiting:
        print(f"waiting for approval: {call.tool_name}({call.args}) [{call.tool_call_id}]")
    return result.state.to_json()


async def second_process(saved: str) -> None:
    """Resume the paused run from its saved state, approving every waiting call."""
    state = RunState.from_json(saved)
    agent = make_agent("Done: build/ is deleted.")
    decisions = {call.tool_call_id: approve() for call in state.awaiting}  # or deny("why"), edit({...})
    result = await agent.resume(state, decisions=decisions)
    print(f"[pid {os.getpid()}] resumed: {result.end_reason}: {result.text}")


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--approve":  # the second process
        asyncio.run(second_process(Path(sys.argv[2]).read_text()))
        return
    saved = asyncio.run(first_process())
    if saved is None:
        return
    with tempfile.TemporaryDirectory() as folder:
        state_file = Path(folder) / "state.json"
        state_file.write_text(saved)  # or a database row, a queue message ...
        # Anyone may decide later; here a second Python process does, at once.
        subprocess.run([sys.executable, __file__, "--approve", str(state_file)], check=True)


if __name__ == "__main__":
    main()
