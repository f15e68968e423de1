"""A minimal editor talking the Agent Client Protocol to ``ketch acp`` (what Zed does).

    pip install agent-client-protocol
    KETCH_EXAMPLE_MODEL=anthropic:claude-sonnet-4-5 python examples/editors/acp_client.py

Without ``KETCH_EXAMPLE_MODEL`` it runs offline on a scripted model (a file of replies).
The editor serves the file system (so ketch's edits land in its buffers) and answers
``session/request_permission``.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import acp
from acp import spawn_agent_process
from acp.schema import AllowedOutcome
from acp.schema import ClientCapabilities
from acp.schema import FileSystemCapabilities
from acp.schema import ReadTextFileResponse
from acp.schema import RequestPermissionResponse
from acp.schema import WriteTextFileResponse

KETCH = shutil.which("ketch") or str(Path(sys.executable).with_name("ketch"))

REPLIES = [
    {"blocks": [{"type": "tool_call", "id": "c0", "name": "read", "args": {"path": "a.txt"}}]},
    {"blocks": [{"type": "tool_call", "id": "c1", "name": "edit",
                 "args": {"path": "a.txt", "old_string": "world", "new_string": "there"}}]},
    "Edited a.txt.",
]


class Editor:
    def __init__(self) -> None:
        self.text = ""

    async def session_update(self, session_id: str, update: Any, **kw: Any) -> None:
        if update.session_update == "tool_call":
            print(f"tool call: {update.title} ({update.kind})")
            for item in update.content or []:
                if item.type == "diff":
                    print(f"  diff {Path(item.path).name}: {item.old_text!r} -> {item.new_text!r}")
        elif update.session_update == "tool_call_update" and update.status in ("completed", "failed"):
            print(f"  {update.status}")
        elif update.session_update == "agent_message_chunk":
            self.text += update.content.text

    async def request_permission(self, session_id: str, tool_call: Any, options: Any, **kw: Any) -> Any:
        print(f"permission for {tool_call.title}: {[o.option_id for o in options]} -> allow_once")
        return RequestPermissionResponse(outcome=AllowedOutcome(option_id="allow_once", outcome="selected"))

    async def read_text_file(self, session_id: str, path: str, **kw: Any) -> Any:
        return ReadTextFileResponse(content=await asyncio.to_thread(Path(path).read_text))

    async def write_text_file(self, session_id: str, path: str, content: str, **kw: Any) -> Any:
        print(f"editor buffer {Path(path).name} <- {content!r}")
        await asyncio.to_thread(Path(path).write_text, content)
        return WriteTextFileResponse()


def setup(folder: str) -> str:
    """The project's file; the model: KETCH_EXAMPLE_MODEL when set, else a scripted one playing REPLIES."""
    Path(folder, "a.txt").write_text("hello world\n")
    if os.environ.get("KETCH_EXAMPLE_MODEL"):
        return os.environ["KETCH_EXAMPLE_MODEL"]
    Path(folder, ".replies.json").write_text(json.dumps(REPLIES))
    return f"scripted:{Path(folder, '.replies.json')}"


async def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        model = setup(folder)
        editor = Editor()
        async with spawn_agent_process(editor, KETCH, "acp", "--model", model, cwd=folder) as (conn, _):
            fs = FileSystemCapabilities(read_text_file=True, write_text_file=True)
            await conn.initialize(protocol_version=1, client_capabilities=ClientCapabilities(fs=fs))
            session = await conn.new_session(cwd=folder, mcp_servers=[])
            answer = await conn.prompt(session_id=session.session_id, prompt=[acp.text_block("say hello there")])
            print(f"agent: {editor.text}")
            print(f"stop reason: {answer.stop_reason}")


if __name__ == "__main__":
    asyncio.run(main())
