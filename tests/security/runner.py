"""White-box test: imports ketch implementation modules (private) directly.

A stand-in for the ketch process: runs tool calls sent as JSON lines on stdin.

Started by the security suite with fake API keys in its *initial* environment (what
``/proc/<pid>/environ`` shows), it runs each request through the real bash tool with the
machine's default sandbox and answers one JSON line per request (the result's text, the
exit status and the log file of a long output). A request may give the command's
``timeout`` and ``limits`` (the fields of :class:`~ketch.sandbox.SandboxLimits`).

A request with an ``agent`` key instead runs a whole agent loop: the coding tools of
:func:`ketch.tools._builtins.coding_tools` (bash in the same sandbox, writable unless the
mode is ``plan``), a :class:`~ketch.permissions.PermissionEngine` in the given mode whose
approver allows every call it is asked about, and a scripted model making the given tool
calls one per turn. The request's ``deny`` rules go to the engine, and the paths they
name to the sandbox, as the command does. The answer holds every tool result, every
decision, the calls the approver was asked about and all events as JSON.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

import msgspec

from ketch import Agent
from ketch.llm import AbortSignal
from ketch.loop import ToolContext
from ketch.permissions import Approval
from ketch.permissions import PermissionEngine
from ketch.permissions import PermissionRequest
from ketch.sandbox import DEFAULT_PROTECTED
from ketch.sandbox import Sandbox
from ketch.sandbox import SandboxLimits
from ketch.sandbox import default_sandbox
from ketch.sandbox import sandbox_unavailable_reason
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call
from ketch.tools import BashTool
from ketch.tools import Workspace
from ketch.tools import coding_tools


async def run_agent(request: dict[str, Any], sandbox: Sandbox | None) -> dict[str, Any]:
    """One agent run (see the module docstring)."""
    spec = request["agent"]
    asked: list[str] = []

    async def approve_everything(req: PermissionRequest) -> Approval:
        asked.append(req.tool_name)
        return Approval.once()

    engine = PermissionEngine(
        spec["mode"], approver=approve_everything, root=request["workspace"], deny=spec.get("deny", ())
    )
    tools = coding_tools(
        request["workspace"],
        sandbox=sandbox,
        write_allowed=lambda: engine.mode != "plan",
        secret_names=request.get("secret_names", ()),
        ripgrep=spec.get("ripgrep"),
        bash_timeout=30,
        hidden=engine.hidden_paths(),  # as the command wires them
        protected=(*DEFAULT_PROTECTED, *engine.protected_paths()),
    )
    bash = next(t for t in tools if t.name == "bash")
    model = ScriptedModel([*(reply(tool_call(name, args)) for name, args in spec["calls"]), "done"])
    events: list[Any] = []
    agent = Agent(model, tools=tools, before_tool_call=engine.before_tool_call)
    agent.subscribe(events.append)
    result = await agent.prompt("go")
    results = [
        [m.tool_name, m.is_error, m.text]  # type: ignore[attr-defined]
        for m in result.messages
        if m.role == "tool_result"
    ]
    return {
        "results": results,
        "decisions": [[d.tool_name, d.decided_by, d.outcome, d.asked] for d in engine.decisions],
        "asked": asked,
        "events": msgspec.json.encode(events, enc_hook=repr).decode(),
        "sandboxed": getattr(bash, "sandboxed", False),
    }


async def main() -> None:
    sandbox = default_sandbox()
    print(json.dumps({"ready": True, "pid": os.getpid(), "reason": sandbox_unavailable_reason()}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        if "agent" in request:
            print(json.dumps(await run_agent(request, sandbox)), flush=True)
            continue
        write = bool(request["write"])
        limits = request.get("limits")
        tool = BashTool(
            Workspace(request["workspace"]),
            sandbox=sandbox if request.get("sandbox", True) else None,
            write_allowed=lambda write=write: write,
            network=bool(request.get("network", False)),
            secret_names=request.get("secret_names", ()),
            env_allow=request.get("env_allow", ()),
            timeout=float(request.get("timeout", 30)),
            limits=SandboxLimits(**limits) if limits is not None else None,
        )
        ctx = ToolContext(call_id="c", tool_name="bash", signal=AbortSignal())
        result = await tool.execute({"command": request["command"]}, ctx)
        details = result.details if isinstance(result.details, dict) else {}
        reply = {
            "text": result.text,
            "is_error": result.is_error,
            "sandboxed": tool.sandboxed,
            "exit_code": details.get("exit_code"),
            "output_file": details.get("output_file"),
        }
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
