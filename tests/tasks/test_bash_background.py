"""``bash`` with ``background: true``: the id comes back at once, the task is listed, its
output read incrementally, and stopping it kills its process group."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ketch import Agent
from ketch.llm import AbortSignal
from ketch.loop import ToolContext
from ketch.loop import ToolResult
from ketch.tasks import TaskRegistry
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call
from ketch.tools import Workspace
from ketch.tools._bash import BashTool
from support import running

pytestmark = pytest.mark.usefixtures("scratch_in_tmp_path")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root.resolve()


def _group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return not any(
        running(int(p))
        and Path(f"/proc/{p}/stat").read_bytes().rsplit(b")", 1)[1].split()[2] == str(pgid).encode()
        for p in os.listdir("/proc")
        if p.isdigit()
    )


async def test_a_background_command_is_listed_read_and_stopped(root: Path) -> None:
    tasks = TaskRegistry()
    bash = BashTool(Workspace(root), kill_grace=0.5, tasks=tasks)
    ctx = ToolContext(call_id="c1", tool_name="bash", signal=AbortSignal())
    result = await bash.execute(
        {
            "command": "sleep 30 & echo $! > child.pid; echo started; wait",
            "background": True,
            "description": "sleeper",
        },
        ctx,
    )
    assert isinstance(result, ToolResult) and not result.is_error
    assert result.text == (
        "Started background task bash-1: sleeper\nRead its output with task_output(task_id='bash-1'); stop it with task_stop."
    )
    tools = {t.name: t for t in tasks.tools()}
    listed = await tools["task_list"].execute({}, ctx)
    assert listed.text.startswith("bash-1 [running] shell: sleeper — ")
    out = await tasks.wait_output("bash-1", 0)
    assert (out.text, out.next_offset) == ("started\n", 8)
    info = tasks.get("bash-1")
    assert info.pgid is not None
    pid = int((root / "child.pid").read_text())
    assert running(pid)
    stopped = await tools["task_stop"].execute({"task_id": "bash-1"}, ctx)
    assert stopped.text.startswith("bash-1 [stopped] shell: sleeper")
    assert not running(pid)
    assert _group_gone(info.pgid)
    assert tasks.output("bash-1", since=8).text == ""


async def test_a_background_command_finishes_with_its_exit_code(root: Path) -> None:
    tasks = TaskRegistry()
    bash = BashTool(Workspace(root), tasks=tasks)
    ctx = ToolContext(call_id="c1", tool_name="bash", signal=AbortSignal())
    await bash.execute({"command": "echo hi; exit 4", "background": True}, ctx)
    info = await tasks.wait("bash-1")
    assert (info.status, info.exit_code, info.description) == ("completed", 4, "echo hi; exit 4")
    assert tasks.output("bash-1").text == "hi\n"


async def test_background_needs_a_registry_and_a_boolean(root: Path) -> None:
    ctx = ToolContext(call_id="c1", tool_name="bash", signal=AbortSignal())
    plain = BashTool(Workspace(root))
    assert "background" not in plain.parameters["properties"]
    result = await plain.execute({"command": "true", "background": True}, ctx)
    assert (
        result.is_error and result.text == "background commands need a task registry (BashTool(tasks=...))."
    )
    with_tasks = BashTool(Workspace(root), tasks=TaskRegistry())
    result = await with_tasks.execute({"command": "true", "background": "yes"}, ctx)
    assert result.is_error and result.text == "background must be true or false, got 'yes'."


async def test_the_model_starts_reads_and_stops_a_background_command(root: Path) -> None:
    tasks = TaskRegistry()
    bash = BashTool(Workspace(root), kill_grace=0.5, tasks=tasks)
    model = ScriptedModel(
        [
            reply(tool_call("bash", {"command": "echo up; sleep 30", "background": True})),
            reply(tool_call("task_list", {})),
            reply(tool_call("task_stop", {"task_id": "bash-1"})),
            "stopped it",
        ]
    )
    agent = Agent(model, tools=[bash, *tasks.tools()])
    result = await agent.prompt("start a server")
    assert result.text == "stopped it"
    texts = [m.text for m in result.messages if m.role == "tool_result"]  # type: ignore[attr-defined]
    assert texts[0].startswith("Started background task bash-1: echo up; sleep 30")
    assert texts[1].startswith("bash-1 [running] shell: echo up; sleep 30")
    assert texts[2].startswith("bash-1 [stopped] shell: echo up; sleep 30")
    assert tasks.list(status="running") == []
