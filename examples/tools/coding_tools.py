"""The built-in coding tools (read, write, edit, bash, grep, find, ls) on a workspace.

    python examples/tools/coding_tools.py

Every path the model names is confined to the workspace folder; bash commands run in
the OS sandbox (bubblewrap) when it is available. A permission engine decides which
calls run without asking: here ``accept_edits`` lets reads and edits inside the
workspace run, and asks about the rest (nobody answers here, so those are denied).
"""

import asyncio
import os
import tempfile
from pathlib import Path

from ketch import Agent
from ketch.loop import ToolExecutionEnd
from ketch.loop import ToolExecutionStart
from ketch.permissions import PermissionEngine
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call
from ketch.tools import coding_tools


async def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        (root / "greeting.py").write_text('print("helo, world")\n')

        model = os.environ.get("KETCH_EXAMPLE_MODEL") or ScriptedModel([
            reply(tool_call("read", {"path": "greeting.py"})),
            reply(tool_call("edit", {"path": "greeting.py", "old_string": "helo", "new_string": "hello"})),
            "Fixed the typo in greeting.py.",
        ])
        engine = PermissionEngine("accept_edits", root=root)
        agent = Agent(model, tools=coding_tools(root), before_tool_call=engine.before_tool_call,
                      system_prompt="You are a careful coding agent.")

        def show(event: object) -> None:
            if isinstance(event, ToolExecutionStart):
                print(f"-> {event.tool_name} {event.args}")
            elif isinstance(event, ToolExecutionEnd):
                print(f"   {'error: ' if event.is_error else ''}{event.result.text[:60]!r}")

        agent.subscribe(show)
        result = await agent.prompt("Fix the typo in greeting.py.")
        print(result.text)
        print((root / "greeting.py").read_text(), end="")
        for decision in engine.decisions:
            print(f"permission: {decision.tool_name} {decision.outcome} ({decision.decided_by})")


if __name__ == "__main__":
    asyncio.run(main())
