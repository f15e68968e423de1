"""A stand-in for the ketch process: runs bash tool calls sent as JSON lines on stdin.

Started by the security suite with fake API keys in its *initial* environment (what
``/proc/<pid>/environ`` shows), it runs each request through the real bash tool with the
machine's default sandbox and answers one JSON line per request.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

from ketch.llm.signal import AbortSignal
from ketch.loop.tool import ToolContext
from ketch.sandbox import default_sandbox, sandbox_unavailable_reason
from ketch.tools.bash import BashTool
from ketch.tools.workspace import Workspace


async def main() -> None:
    sandbox = default_sandbox()
    print(json.dumps({"ready": True, "pid": os.getpid(), "reason": sandbox_unavailable_reason()}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        write = bool(request["write"])
        tool = BashTool(
            Workspace(request["workspace"]),
            sandbox=sandbox if request.get("sandbox", True) else None,
            write_allowed=lambda write=write: write,
            network=bool(request.get("network", False)),
            secret_names=request.get("secret_names", ()),
            env_allow=request.get("env_allow", ()),
            timeout=30,
        )
        ctx = ToolContext(call_id="c", tool_name="bash", signal=AbortSignal())
        result = await tool.execute({"command": request["command"]}, ctx)
        reply = {"text": result.text, "is_error": result.is_error, "sandboxed": tool.sandboxed}
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
