"""Hooks never break a run: timeouts kill the hook's process group, crashes become notices,
hooks of one event run in parallel, and shell hooks get a scrubbed environment."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

from hookkit import START
from hookkit import TEXT_END
from hookkit import bash_tool
from hookkit import recorded
from hookkit import runner
from hookkit import tool_turn
from hookkit import write_script

from ketch import Agent
from ketch.context import Compactor
from ketch.hooks import HookNotice
from ketch.hooks import HookRunner
from ketch.llm import ToolResultMessage
from ketch.testing import FunctionModel
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call
from support import running


def tool_results_seen(model: ScriptedModel) -> list[str]:
    last = model.requests[-1].messages
    return ["".join(b.text for b in m.content) for m in last if isinstance(m, ToolResultMessage)]  # type: ignore[union-attr]


def gone_soon(pid: int) -> bool:
    """Wait (bounded) for a SIGKILLed process to disappear."""
    deadline = time.monotonic() + 10
    while running(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def agent_with(hooks: HookRunner, calls: list[dict[str, Any]]) -> tuple[Agent, ScriptedModel]:
    model = ScriptedModel([reply(tool_call("bash", {"command": "ls"}, id="c1")), "done"])
    return Agent(model, tools=[bash_tool(calls)], **hooks.agent_config()), model


async def test_timed_out_shell_hook_is_killed_with_its_group_and_reported(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    hook = write_script(tmp_path, "hang.sh", f"sleep 1000 &\necho \"$$ $!\" > {pids}\nwait\n")
    notices: list[HookNotice] = []
    hooks = runner(tmp_path, notices)
    hooks.add("PreToolUse", hook, timeout=1)
    calls: list[dict[str, Any]] = []
    agent, model = agent_with(hooks, calls)
    labels = recorded(agent)
    result = await agent.prompt("list")
    assert notices == [HookNotice("PreToolUse", "error", f"PreToolUse hook {hook} timed out after 1s and was stopped")]
    assert calls == [{"command": "ls"}]  # a timed-out hook does not block
    assert tool_results_seen(model) == ["ran: ls"]
    assert labels == [*START, *tool_turn("c1"), "turn_start", *TEXT_END]
    assert result.end_reason == "stop"
    shell, child = (int(p) for p in pids.read_text().split())
    assert gone_soon(shell) and gone_soon(child)


async def test_timed_out_python_hook_is_cancelled_and_reported(tmp_path: Path) -> None:
    notices: list[HookNotice] = []
    hooks = runner(tmp_path, notices)
    cancelled: list[bool] = []

    async def forever(event: dict[str, Any]) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    hooks.add("PostToolUse", forever, timeout=0.05)
    calls: list[dict[str, Any]] = []
    agent, model = agent_with(hooks, calls)
    result = await agent.prompt("list")
    assert cancelled == [True]
    assert notices == [
        HookNotice("PostToolUse", "error", "PostToolUse hook test_timed_out_python_hook_is_cancelled_and_reported.<locals>.forever timed out after 0.05s and was cancelled")
    ]
    assert tool_results_seen(model) == ["ran: ls"] and result.end_reason == "stop"


async def test_aborting_the_run_kills_a_running_hook(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    hook = write_script(tmp_path, "slow.sh", f"echo $$ > {pid_file}.tmp && mv {pid_file}.tmp {pid_file}\nexec sleep 1000\n")
    hooks = runner(tmp_path)
    hooks.add("PreToolUse", hook)
    calls: list[dict[str, Any]] = []
    agent, _ = agent_with(hooks, calls)
    task = asyncio.create_task(agent.prompt("list"))
    deadline = time.monotonic() + 20
    while not pid_file.exists():
        assert time.monotonic() < deadline, "the hook never started"
        await asyncio.sleep(0.01)
    agent.abort()
    result = await task
    assert result.end_reason == "aborted" and calls == []
    assert gone_soon(int(pid_file.read_text()))


async def test_matching_shell_hooks_run_in_parallel(tmp_path: Path) -> None:
    """Each hook waits for the other's marker: run one after the other, the first would give up."""

    def waiter(me: str, other: str) -> str:
        return write_script(
            tmp_path,
            f"{me}.sh",
            f"""
cat > /dev/null
touch {tmp_path}/{me}.mark
i=0
while [ ! -f {tmp_path}/{other}.mark ]; do
  i=$((i+1))
  if [ $i -gt 2000 ]; then echo "{other} never ran" >&2; exit 2; fi
  sleep 0.01
done
echo '{{"hookSpecificOutput": {{"additionalContext": "{me} saw {other}"}}}}'
""",
        )

    hooks = runner(tmp_path)
    hooks.add("PostToolUse", waiter("a", "b"), timeout=60)
    hooks.add("PostToolUse", waiter("b", "a"), timeout=60)
    agent, model = agent_with(hooks, [])
    await agent.prompt("list")
    assert tool_results_seen(model) == ["ran: ls\n\nPostToolUse hook context: a saw b\nb saw a"]


async def test_matching_python_hooks_run_in_parallel(tmp_path: Path) -> None:
    hooks = runner(tmp_path)
    ready = {"a": asyncio.Event(), "b": asyncio.Event()}

    def waiter(me: str, other: str) -> Any:
        async def hook(event: dict[str, Any]) -> dict[str, Any]:
            ready[me].set()
            await asyncio.wait_for(ready[other].wait(), 10)
            return {"hookSpecificOutput": {"additionalContext": f"{me} saw {other}"}}

        return hook

    hooks.add("PreToolUse", waiter("a", "b"))
    hooks.add("PreToolUse", waiter("b", "a"))
    agent, model = agent_with(hooks, [])
    await agent.prompt("list")
    assert tool_results_seen(model) == ["ran: ls\n\nPreToolUse hook context: a saw b\nb saw a"]


async def test_crashing_python_hooks_never_escape_a_run(tmp_path: Path) -> None:
    notices: list[HookNotice] = []
    hooks = runner(tmp_path, notices)

    def crash(event: dict[str, Any]) -> None:
        raise ValueError(f"bad {event['hook_event_name']}")

    for event in ("SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop", "PreCompact"):
        hooks.add(event, crash)  # type: ignore[arg-type]
    hooks.add("PostToolUse", lambda e: 42)
    calls: list[dict[str, Any]] = []
    model = ScriptedModel([reply(tool_call("bash", {"command": "ls"}, id="c1")), "done"])
    manager = Compactor(window=100_000, pre_compact=hooks.pre_compact, summary_model=FunctionModel(lambda c, o: "<summary>s</summary>"))
    agent = Agent(model, tools=[bash_tool(calls)], context_manager=manager, **hooks.agent_config())
    labels = recorded(agent)
    await hooks.session_start()
    result = await hooks.prompt(agent, "list")
    assert result.end_reason == "stop" and result.text == "done"
    assert calls == [{"command": "ls"}]
    assert tool_results_seen(model) == ["ran: ls"]
    assert labels == [*START, *tool_turn("c1"), "turn_start", *TEXT_END]
    await agent.compact()
    name = "test_crashing_python_hooks_never_escape_a_run.<locals>.crash"
    assert [n.text for n in notices] == [
        f"SessionStart hook {name} raised ValueError: bad SessionStart",
        f"UserPromptSubmit hook {name} raised ValueError: bad UserPromptSubmit",
        f"PreToolUse hook {name} raised ValueError: bad PreToolUse",
        f"PostToolUse hook {name} raised ValueError: bad PostToolUse",
        "PostToolUse hook test_crashing_python_hooks_never_escape_a_run.<locals>.<lambda> returned int; expected None, a dict or a HookResult",
        f"Stop hook {name} raised ValueError: bad Stop",
        f"PreCompact hook {name} raised ValueError: bad PreCompact",
    ]
    assert {n.kind for n in notices} == {"error"}


async def test_shell_hooks_get_a_scrubbed_environment_in_the_workspace(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_not_real")
    monkeypatch.setenv("CORP_CREDS", "hunter2")
    monkeypatch.setenv("KETCH_HOOK_TEST_VISIBLE", "yes")
    monkeypatch.setenv("KETCH_HOOK_TEST_HIDDEN", "no")
    out = tmp_path / "env.txt"
    work = tmp_path / "work"
    work.mkdir()
    notices: list[HookNotice] = []
    hooks = HookRunner(
        cwd=work,
        secret_names=["CORP_CREDS"],
        env_allow=["KETCH_HOOK_TEST_VISIBLE", "*_CREDS", "GITHUB_*"],
        on_notice=notices.append,
    )
    hooks.add("SessionStart", write_script(tmp_path, "env.sh", f"cat >/dev/null\npwd > {out}\nenv >> {out}\n"))
    await hooks.session_start()
    lines = out.read_text().splitlines()
    env = dict(line.split("=", 1) for line in lines[1:] if "=" in line)
    assert lines[0] == str(work.resolve())
    assert env["KETCH_PROJECT_DIR"] == env["CLAUDE_PROJECT_DIR"] == str(work.resolve())
    assert env["KETCH_HOOK_TEST_VISIBLE"] == "yes"
    assert env["PATH"] == os.environ["PATH"]
    assert {"OPENAI_API_KEY", "GITHUB_TOKEN", "CORP_CREDS", "KETCH_HOOK_TEST_HIDDEN"}.isdisjoint(env)
    assert notices == []
    assert "sk-test" not in out.read_text()


async def test_a_hook_that_cannot_start_is_a_notice(tmp_path: Path) -> None:
    notices: list[HookNotice] = []
    hooks = HookRunner(cwd=tmp_path / "missing", on_notice=notices.append, environment={})
    hooks.add("Notification", "true")
    outcome = await hooks.notification("hi")
    expected = "Notification hook true could not start: No such file or directory"
    assert outcome.errors == [expected]
    assert notices == [HookNotice("Notification", "error", expected)]


async def test_the_same_command_twice_runs_once(tmp_path: Path) -> None:
    log = tmp_path / "count"
    hook = write_script(tmp_path, "count.sh", f"cat >/dev/null\necho x >> {log}\n")
    hooks = runner(tmp_path)
    hooks.add("SessionStart", hook, matcher="startup")
    hooks.add("SessionStart", hook)
    await hooks.session_start()
    assert log.read_text() == "x\n"
