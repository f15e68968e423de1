"""Stop, SubagentStop, UserPromptSubmit, SessionStart, SessionEnd, Notification and PreCompact,
each with a shell script and a Python callback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hookkit import START
from hookkit import TEXT_END
from hookkit import py_script
from hookkit import read_json
from hookkit import read_lines
from hookkit import recorded
from hookkit import runner
from hookkit import write_script

from ketch import Agent
from ketch.context import Compactor
from ketch.hooks import HookNotice
from ketch.llm import AssistantMessage
from ketch.llm import TextContent
from ketch.llm import ToolCall
from ketch.llm import ToolResultMessage
from ketch.llm import UserMessage
from ketch.loop import Conversation
from ketch.loop import StopDecision
from ketch.loop import StopInfo
from ketch.testing import FunctionModel
from ketch.testing import ScriptedModel


def texts(messages: list[Any]) -> list[tuple[str, str]]:
    out = []
    for m in messages:
        out.append((m.role, "".join(b.text for b in m.content if isinstance(b, TextContent))))
    return out


# -- Stop ----------------------------------------------------------------------------------


STOP_SCRIPT = """
with open(sys.argv[0] + ".log", "a") as f:
    f.write(json.dumps(data) + "\\n")
if not data["stop_hook_active"]:
    sys.stderr.write("run the tests first")
    sys.exit(2)
"""


async def test_stop_shell_hook_continues_once_with_stop_hook_active(tmp_path: Path) -> None:
    hook = py_script(tmp_path, "stop.py", STOP_SCRIPT)
    hooks = runner(tmp_path)
    hooks.add("Stop", hook)
    model = ScriptedModel(["done?", "tests pass"])
    agent = Agent(model, **hooks.agent_config())
    labels = recorded(agent)
    result = await agent.prompt("fix it")
    assert texts(agent.messages) == [
        ("user", "fix it"),
        ("assistant", "done?"),
        ("user", "Stop hook feedback: run the tests first"),
        ("assistant", "tests pass"),
    ]
    assert labels == [
        *START,
        "message_start:assistant",
        "message_end:assistant",
        "turn_end",
        "turn_start",
        "message_start:user",
        "message_end:user",
        *TEXT_END,
    ]
    logged = read_lines(hook + ".log")
    assert [(d["hook_event_name"], d["stop_hook_active"], d["last_assistant_message"]) for d in logged] == [
        ("Stop", False, "done?"),
        ("Stop", True, "tests pass"),
    ]
    assert result.end_reason == "stop" and result.text == "tests pass"


async def test_stop_python_callback_and_the_continuation_cap(tmp_path: Path) -> None:
    notices: list[HookNotice] = []
    hooks = runner(tmp_path, notices, max_stop_continuations=2)
    active: list[bool] = []

    @hooks.on("Stop")
    async def never_done(event: dict[str, Any]) -> dict[str, Any]:
        active.append(event["stop_hook_active"])
        return {"decision": "block", "reason": "keep going"}

    agent = Agent(ScriptedModel(["a", "b", "c"]), **hooks.agent_config())
    result = await agent.prompt("go")
    assert texts(agent.messages) == [
        ("user", "go"),
        ("assistant", "a"),
        ("user", "Stop hook feedback: keep going"),
        ("assistant", "b"),
        ("user", "Stop hook feedback: keep going"),
        ("assistant", "c"),
    ]
    assert active == [False, True, True]
    assert notices == [HookNotice("Stop", "error", "Stop hooks continued the run 2 times in a row; letting it end")]
    assert result.end_reason == "stop"
    # A new prompt starts afresh: stop_hook_active is false again.
    agent.model = ScriptedModel(["d", "e", "f"])
    await agent.prompt("again")
    assert active == [False, True, True, False, True, True]


async def test_stop_hook_continue_false_and_plain_exit_0_let_the_run_end(tmp_path: Path) -> None:
    notices: list[HookNotice] = []
    hooks = runner(tmp_path, notices)
    hooks.add("Stop", write_script(tmp_path, "ok.sh", "cat >/dev/null\necho fine\n"))
    hooks.add("Stop", lambda e: {"continue": False, "stopReason": "quota", "decision": "block", "reason": "x"})
    agent = Agent(ScriptedModel(["done"]), **hooks.agent_config())
    result = await agent.prompt("go")
    assert texts(agent.messages) == [("user", "go"), ("assistant", "done")]
    assert result.end_reason == "stop"
    assert notices == [HookNotice("Stop", "stopped", "Stop hook stopped the run: quota")]


# -- SubagentStop -----------------------------------------------------------------------------


async def test_subagent_stop_entry(tmp_path: Path) -> None:
    seen = tmp_path / "sub.json"
    hooks = runner(tmp_path)
    hooks.add("SubagentStop", write_script(tmp_path, "sub.sh", f"cat > {seen}\necho 'cite sources' >&2\nexit 2\n"), matcher="researcher")
    calls: list[dict[str, Any]] = []
    hooks.add("SubagentStop", lambda e: calls.append(e) or None)
    info = StopInfo(1, AssistantMessage(content=[TextContent(text="found it")]), Conversation())
    decision = await hooks.subagent_stop(info, agent_id="a1", agent_type="researcher", agent_transcript_path="/sub.jsonl")
    assert decision == StopDecision.continue_with(decision.message)  # type: ignore[union-attr,arg-type]
    assert isinstance(decision.message, UserMessage)  # type: ignore[union-attr]
    assert texts([decision.message]) == [("user", "SubagentStop hook feedback: cite sources")]  # type: ignore[union-attr]
    data = read_json(seen)
    assert {k: data[k] for k in ("hook_event_name", "stop_hook_active", "agent_id", "agent_type", "agent_transcript_path", "last_assistant_message")} == {
        "hook_event_name": "SubagentStop",
        "stop_hook_active": False,
        "agent_id": "a1",
        "agent_type": "researcher",
        "agent_transcript_path": "/sub.jsonl",
        "last_assistant_message": "found it",
    }
    assert [c["agent_type"] for c in calls] == ["researcher"]
    # The shell hook's matcher is on agent_type: another subagent type only runs the callback.
    assert await hooks.subagent_stop(info, agent_id="a2", agent_type="coder") is None
    assert [c["agent_type"] for c in calls] == ["researcher", "coder"]


async def test_subagent_on_stop_drives_a_subagent_loop(tmp_path: Path) -> None:
    hooks = runner(tmp_path)
    hooks.add("SubagentStop", lambda e: None if e["stop_hook_active"] else {"decision": "block", "reason": "summarise"})
    hooks.add("Stop", lambda e: {"decision": "block", "reason": "not for subagents"})
    sub = Agent(ScriptedModel(["raw notes", "summary"]), on_stop=hooks.subagent_on_stop(agent_id="a1", agent_type="notes"))
    result = await sub.prompt("research")
    assert texts(sub.messages)[2:] == [("user", "SubagentStop hook feedback: summarise"), ("assistant", "summary")]
    assert result.text == "summary"


# -- UserPromptSubmit -----------------------------------------------------------------------


async def test_user_prompt_submit_shell_exit_2_blocks_the_prompt(tmp_path: Path) -> None:
    hook = py_script(
        tmp_path,
        "ups.py",
        """
if "password" in data["prompt"]:
    sys.stderr.write("prompts must not contain passwords")
    sys.exit(2)
""",
    )
    hooks = runner(tmp_path)
    hooks.add("UserPromptSubmit", hook)
    model = ScriptedModel(["ok"])
    agent = Agent(model, **hooks.agent_config())
    labels = recorded(agent)
    result = await hooks.prompt(agent, "my password is hunter2")
    assert result.end_reason == "stop_guard"
    assert result.summary.error == "Prompt blocked by a UserPromptSubmit hook: prompts must not contain passwords"
    assert result.messages == [] and agent.messages == [] and labels == [] and model.requests == []
    result = await hooks.prompt(agent, "hello")
    assert result.text == "ok"
    assert texts(agent.messages) == [("user", "hello"), ("assistant", "ok")]


async def test_user_prompt_submit_stdout_and_context_go_with_the_prompt(tmp_path: Path) -> None:
    hooks = runner(tmp_path)
    hooks.add("UserPromptSubmit", write_script(tmp_path, "branch.sh", "cat >/dev/null\necho 'branch: main'\n"))
    hooks.add("UserPromptSubmit", lambda e: {"hookSpecificOutput": {"additionalContext": f"{len(e['prompt'])} chars"}})
    model = ScriptedModel(["ok"])
    agent = Agent(model)
    await hooks.prompt(agent, "status?")
    sent = model.requests[0].messages[0]
    assert isinstance(sent, UserMessage)
    assert sent.content == [
        TextContent(text="status?"),
        TextContent(text="\n\nUserPromptSubmit hook context: branch: main\n7 chars"),
    ]


async def test_user_prompt_submit_python_block_and_continue_false(tmp_path: Path) -> None:
    for output, reason in (
        ({"decision": "block", "reason": "off topic"}, "off topic"),
        ({"continue": False, "stopReason": "closed for today"}, "closed for today"),
    ):
        hooks = runner(tmp_path)
        hooks.add("UserPromptSubmit", lambda e, output=output: output)
        agent = Agent(ScriptedModel([]))
        result = await hooks.prompt(agent, "hi")
        assert (result.end_reason, result.summary.error) == ("stop_guard", f"Prompt blocked by a UserPromptSubmit hook: {reason}")


# -- SessionStart / SessionEnd / Notification ---------------------------------------------


async def test_session_start_context_goes_with_the_first_prompt_only(tmp_path: Path) -> None:
    hooks = runner(tmp_path)
    hooks.add("SessionStart", write_script(tmp_path, "start.sh", "cat >/dev/null\necho 'TODO: fix flaky test'\n"), matcher="startup")
    hooks.add("SessionStart", lambda e: {"hookSpecificOutput": {"additionalContext": "cleared!"}}, matcher="clear")
    seen: list[str] = []
    hooks.add("SessionStart", lambda e: seen.append(e["source"]))
    model = ScriptedModel(["one", "two"])
    agent = Agent(model)
    outcome = await hooks.session_start("startup")
    assert outcome.context == "TODO: fix flaky test" and seen == ["startup"]
    await hooks.prompt(agent, "first")
    await hooks.prompt(agent, "second")
    assert texts([model.requests[0].messages[0]]) == [("user", "first\n\nSessionStart hook context: TODO: fix flaky test")]
    assert texts([model.requests[1].messages[2]]) == [("user", "second")]
    assert (await hooks.session_start("clear")).context == "cleared!"
    assert seen == ["startup", "clear"]


async def test_session_end_and_notification(tmp_path: Path) -> None:
    log = tmp_path / "events.log"
    script = py_script(
        tmp_path,
        "log.py",
        f"""
with open({str(log)!r}, "a") as f:
    f.write(json.dumps([data["hook_event_name"], data.get("reason"), data.get("message"), data.get("notification_type")]) + "\\n")
""",
    )
    hooks = runner(tmp_path)
    hooks.add("SessionEnd", script)
    hooks.add("Notification", script, matcher="permission_prompt")
    called: list[str] = []
    hooks.add("Notification", lambda e: called.append(e["message"]))
    hooks.add("SessionEnd", lambda e: called.append(e["reason"]))
    hooks.notify("ketch needs your permission to use bash")  # in the background
    hooks.notify("idle", notification_type="idle_prompt")
    await hooks.session_end("prompt_input_exit")  # waits for the notifications first
    import json

    lines = sorted(json.loads(line) for line in log.read_text().splitlines())
    assert lines == [
        ["Notification", None, "ketch needs your permission to use bash", "permission_prompt"],
        ["SessionEnd", "prompt_input_exit", None, None],
    ]
    assert sorted(called[:2]) == ["idle", "ketch needs your permission to use bash"]  # background: any order
    assert called[2:] == ["prompt_input_exit"]


# -- PreCompact ------------------------------------------------------------------------------


def long_transcript() -> list[Any]:
    msgs: list[Any] = [UserMessage(content="start the task")]
    for i in range(10):
        call = ToolCall(id=f"c{i}", name="read", args={"path": f"f{i}.py"})
        msgs.append(AssistantMessage(content=[call], stop_reason="tool_use"))
        msgs.append(ToolResultMessage(tool_call_id=f"c{i}", tool_name="read", content=[TextContent(text="x" * 400)]))
    return msgs


async def test_pre_compact_hooks_run_before_a_compaction(tmp_path: Path) -> None:
    seen = tmp_path / "compact.json"
    hooks = runner(tmp_path)
    hooks.add("PreCompact", write_script(tmp_path, "pc.sh", f"cat > {seen}\n"), matcher="manual")
    triggers: list[tuple[str, str]] = []
    hooks.add("PreCompact", lambda e: triggers.append((e["trigger"], e["custom_instructions"])))
    summaries = FunctionModel(lambda context, options: "<summary>## Goal\nfinish</summary>")
    manager = Compactor(window=100_000, keep_recent_tokens=300, pre_compact=hooks.pre_compact, summary_model=summaries)
    agent = Agent(ScriptedModel([]), messages=long_transcript(), context_manager=manager)
    events = recorded(agent)
    assert await agent.compact("keep the API decisions") is True
    assert events == ["compaction_start", "compaction_end"]
    assert triggers == [("manual", "keep the API decisions")]
    data = read_json(seen)
    assert (data["hook_event_name"], data["trigger"], data["custom_instructions"]) == (
        "PreCompact",
        "manual",
        "keep the API decisions",
    )


async def test_exit_2_where_nothing_can_be_blocked_is_shown_to_the_user(tmp_path: Path) -> None:
    notices: list[HookNotice] = []
    hooks = runner(tmp_path, notices)
    hook = write_script(tmp_path, "two.sh", "cat >/dev/null\necho 'cannot block this' >&2\nexit 2\n")
    for event in ("SessionStart", "Notification", "SessionEnd"):
        hooks.add(event, hook)  # type: ignore[arg-type]
    assert (await hooks.session_start()).blocked is False
    await hooks.notification("hi")
    await hooks.session_end()
    assert [(n.event, n.kind, n.text) for n in notices] == [
        (event, "error", f"{event} hook {hook} (exit code 2): cannot block this")
        for event in ("SessionStart", "Notification", "SessionEnd")
    ]
