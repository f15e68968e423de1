"""The Claude Agent SDK driving ketch: ``cli_path`` names the ``ketch`` command.

    pip install claude-agent-sdk
    KETCH_EXAMPLE_MODEL=anthropic:claude-sonnet-4-5 python examples/editors/claude_sdk.py

Without ``KETCH_EXAMPLE_MODEL`` it runs offline on a scripted model (a file of replies).
The SDK asks ``can_use_tool`` before a call that needs approval (here: the write).
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

from claude_agent_sdk import AssistantMessage
from claude_agent_sdk import ClaudeAgentOptions
from claude_agent_sdk import PermissionResultAllow
from claude_agent_sdk import PermissionResultDeny
from claude_agent_sdk import ResultMessage
from claude_agent_sdk import TextBlock
from claude_agent_sdk import ToolUseBlock
from claude_agent_sdk import query

KETCH = shutil.which("ketch") or str(Path(sys.executable).with_name("ketch"))

REPLIES = [
    {"blocks": [{"type": "tool_call", "id": "c1", "name": "write", "args": {"path": "hello.txt", "content": "hi\n"}}]},
    "I wrote hello.txt.",
]


def model(folder: str) -> str:
    """KETCH_EXAMPLE_MODEL when set, else a scripted model playing REPLIES."""
    if os.environ.get("KETCH_EXAMPLE_MODEL"):
        return os.environ["KETCH_EXAMPLE_MODEL"]
    script = Path(folder) / "replies.json"
    script.write_text(json.dumps(REPLIES))
    return f"scripted:{script}"


async def can_use_tool(name: str, args: dict[str, Any], context: Any) -> Any:
    print(f"asked: {name} {args.get('path')}")
    if name == "write" and str(args.get("path", "")).endswith(".txt"):
        return PermissionResultAllow()
    return PermissionResultDeny(message="only .txt files")


async def prompts():  # can_use_tool needs the streaming input mode
    yield {"type": "user", "message": {"role": "user", "content": "write hello.txt"}}


async def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        options = ClaudeAgentOptions(cli_path=KETCH, cwd=folder, model=model(folder), can_use_tool=can_use_tool)
        async for message in query(prompt=prompts(), options=options):
            if isinstance(message, AssistantMessage):
                for block in message.content:
                    if isinstance(block, ToolUseBlock):
                        print(f"-> {block.name}({block.input})")
                    elif isinstance(block, TextBlock):
                        print(f"assistant: {block.text}")
            elif isinstance(message, ResultMessage):
                print(f"result: {message.subtype}, {message.num_turns} turns")
        print("hello.txt:", (Path(folder) / "hello.txt").read_text().strip())


if __name__ == "__main__":
    asyncio.run(main())
