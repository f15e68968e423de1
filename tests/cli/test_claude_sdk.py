"""The Claude Agent SDK (the real ``claude-agent-sdk`` package) driving ``ketch`` as its
CLI (``ClaudeAgentOptions(cli_path=...)``), on scripted models."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys
from typing import Any

from claude_agent_sdk import AssistantMessage
from claude_agent_sdk import ClaudeAgentOptions
from claude_agent_sdk import ClaudeSDKClient
from claude_agent_sdk import HookMatcher
from claude_agent_sdk import PermissionResultAllow
from claude_agent_sdk import PermissionResultDeny
from claude_agent_sdk import ResultMessage
from claude_agent_sdk import StreamEvent
from claude_agent_sdk import SystemMessage
from claude_agent_sdk import TextBlock
from claude_agent_sdk import ToolResultBlock
from claude_agent_sdk import ToolUseBlock
from claude_agent_sdk import UserMessage
from claude_agent_sdk import create_sdk_mcp_server
from claude_agent_sdk import query
from claude_agent_sdk import tool
from clihelp import Env
from clihelp import call_reply
from clihelp import text_reply

GUARD = 60  # a guard against a hung child only; nothing waits on time

SDK_ARGS = ("--output-format", "stream-json", "--verbose", "--input-format", "stream-json")


def _cli(env: Env) -> str:
    """An executable running this checkout's ``ketch`` (what ``cli_path`` names)."""
    path = env.home / "ketch-cli"
    path.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m ketch "$@"\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def _options(env: Env, replies: list[Any] | None = None, *, name: str = "script.json", **kw: Any) -> ClaudeAgentOptions:
    variables = dict(env.vars)
    if replies is not None:
        variables["KETCH_TEST_SCRIPT"] = env.script(replies, name)
    errors: list[str] = kw.pop("errors", [])
    return ClaudeAgentOptions(cli_path=_cli(env), cwd=str(env.work), env=variables, stderr=errors.append, **kw)


async def _collect(prompt: str, options: ClaudeAgentOptions) -> list[Any]:
    async with asyncio.timeout(GUARD):
        return [m async for m in query(prompt=prompt, options=options)]


async def _response(client: ClaudeSDKClient) -> list[Any]:
    async with asyncio.timeout(GUARD):
        return [m async for m in client.receive_response()]


def _shape(messages: list[Any]) -> list[str]:
    out = []
    for m in messages:
        if isinstance(m, SystemMessage):
            out.append(f"system:{m.subtype}")
        elif isinstance(m, AssistantMessage | UserMessage):
            kind = "assistant" if isinstance(m, AssistantMessage) else "user"
            blocks = m.content if isinstance(m.content, list) else [m.content]
            out.append(f"{kind}:" + ",".join(type(b).__name__ if not isinstance(b, str) else "str" for b in blocks))
        elif isinstance(m, ResultMessage):
            out.append(f"result:{m.subtype}")
        else:
            out.append(type(m).__name__)
    return out


async def test_query_runs_a_tool_round(env: Env) -> None:
    (env.work / "notes.txt").write_text("hi\n")
    errors: list[str] = []
    looking = {"blocks": [{"type": "text", "text": "Looking."}, *call_reply(("c1", "ls", {"path": "."}))["blocks"]]}
    replies = [looking, text_reply("Done.", usage={"input": 10, "output": 2, "total_tokens": 12, "cost": {"total": 0.25}})]
    messages = await _collect("what is here?", _options(env, replies, errors=errors))
    assert _shape(messages) == [
        "system:init",
        "assistant:TextBlock,ToolUseBlock",
        "user:ToolResultBlock",
        "assistant:TextBlock",
        "result:success",
    ]
    init, call, result_line, answer, result = messages
    assert init.data["model"] == "scripted:scripted-model"
    assert init.data["tools"] == ["read", "write", "edit", "bash", "grep", "find", "ls", "todo_write"]
    assert init.data["permissionMode"] == "default"
    assert init.data["cwd"] == str(env.work)
    assert call.content == [TextBlock(text="Looking."), ToolUseBlock(id="c1", name="ls", input={"path": "."})]
    assert call.model == "scripted-model"
    assert result_line.content == [ToolResultBlock(tool_use_id="c1", content="notes.txt", is_error=False)]
    assert answer.content == [TextBlock(text="Done.")]
    assert (result.is_error, result.num_turns, result.result, result.total_cost_usd) == (False, 2, "Done.", 0.25)
    assert result.session_id == init.data["session_id"]
    assert result.stop_reason == "end_turn"
    assert errors == []


async def test_the_model_can_come_from_the_user_config(env: Env) -> None:
    script = env.script([text_reply("Configured.")])
    env.user_config(f'model = "scripted:{script}"\n')
    messages = await _collect("hello", _options(env))
    assert messages[0].data["model"] == "scripted:scripted-model"
    assert messages[-1].result == "Configured."


async def test_partial_messages_stream_anthropic_events(env: Env) -> None:
    options = _options(env, [text_reply("Hello there", chunk_size=5)], include_partial_messages=True)
    messages = await _collect("greet", options)
    events = [m.event for m in messages if isinstance(m, StreamEvent)]
    assert [e["type"] for e in events] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert events[1]["content_block"] == {"type": "text", "text": ""}
    assert "".join(e["delta"]["text"] for e in events[2:5]) == "Hello there"
    assert events[6]["delta"]["stop_reason"] == "end_turn"
    assert _shape([m for m in messages if not isinstance(m, StreamEvent)]) == [
        "system:init",
        "assistant:TextBlock",
        "result:success",
    ]


async def test_can_use_tool_allows_edits_and_denies(env: Env) -> None:
    asked: list[tuple[str, dict[str, Any], str | None]] = []

    async def can_use_tool(name: str, args: dict[str, Any], context: Any) -> Any:
        asked.append((name, args, context.tool_use_id))
        if args.get("path") == "a.txt":
            return PermissionResultAllow()
        if args.get("path") == "b.txt":
            return PermissionResultAllow(updated_input={**args, "content": "edited\n"})
        return PermissionResultDeny(message="not today")

    replies = [
        call_reply(("c1", "write", {"path": "a.txt", "content": "one\n"})),
        call_reply(("c2", "write", {"path": "b.txt", "content": "two\n"})),
        call_reply(("c3", "bash", {"command": "rm -rf build"})),
        text_reply("Stopped."),
    ]
    options = _options(env, replies, can_use_tool=can_use_tool)
    async with ClaudeSDKClient(options) as client:
        await client.query("write the files")
        messages = await _response(client)
    assert asked == [
        ("write", {"path": "a.txt", "content": "one\n"}, "c1"),
        ("write", {"path": "b.txt", "content": "two\n"}, "c2"),
        ("bash", {"command": "rm -rf build"}, "c3"),
    ]
    assert (env.work / "a.txt").read_text() == "one\n"
    assert (env.work / "b.txt").read_text() == "edited\n"
    results = [b for m in messages if isinstance(m, UserMessage) for b in m.content]
    assert [(b.tool_use_id, b.is_error) for b in results] == [("c1", False), ("c2", False), ("c3", True)]
    assert results[2].content == "not today"
    final = messages[-1]
    assert final.subtype == "success"
    assert final.permission_denials == [{"tool_name": "bash", "tool_use_id": "c3", "tool_input": {"command": "rm -rf build"}}]


async def test_without_can_use_tool_a_call_that_needs_approval_is_denied(env: Env) -> None:
    replies = [call_reply(("c1", "write", {"path": "a.txt", "content": "x"})), text_reply("No.")]
    messages = await _collect("write", _options(env, replies))
    result_block = next(b for m in messages if isinstance(m, UserMessage) for b in m.content)
    assert result_block.is_error is True
    assert "non-interactive" in result_block.content
    assert not (env.work / "a.txt").exists()


async def test_hook_callbacks_see_and_decide_the_calls(env: Env) -> None:
    seen: list[dict[str, Any]] = []

    async def no_shell(data: dict[str, Any], tool_use_id: str | None, context: Any) -> dict[str, Any]:
        seen.append(data)
        return {
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "deny",
                "permissionDecisionReason": "no shell here",
            }
        }

    async def after(data: dict[str, Any], tool_use_id: str | None, context: Any) -> dict[str, Any]:
        seen.append(data)
        return {}

    (env.work / "notes.txt").write_text("hi\n")
    replies = [
        call_reply(("c1", "bash", {"command": "echo hi"})),
        call_reply(("c2", "ls", {"path": "."})),
        text_reply("Done."),
    ]
    hooks: dict[Any, list[HookMatcher]] = {
        "PreToolUse": [HookMatcher(matcher="Bash", hooks=[no_shell])],
        "PostToolUse": [HookMatcher(matcher=None, hooks=[after])],
    }
    options = _options(env, replies, hooks=hooks, permission_mode="bypassPermissions")
    messages = await _collect("look around", options)
    assert [(d["hook_event_name"], d["tool_name"], d["tool_use_id"]) for d in seen] == [
        ("PreToolUse", "bash", "c1"),
        ("PostToolUse", "ls", "c2"),
    ]
    assert seen[0]["tool_input"] == {"command": "echo hi"}
    assert seen[0]["cwd"] == str(env.work)
    results = [b for m in messages if isinstance(m, UserMessage) for b in m.content]
    assert [(b.tool_use_id, b.is_error, b.content) for b in results] == [
        ("c1", True, "Denied by a PreToolUse hook: no shell here"),
        ("c2", False, "notes.txt"),
    ]


async def test_interrupt_stops_a_running_tool_and_the_session_goes_on(env: Env) -> None:
    gate = env.work / "gate"
    os.mkfifo(gate)
    replies = [call_reply(("c1", "bash", {"command": "read x < gate"})), text_reply("After.")]
    options = _options(env, replies, permission_mode="bypassPermissions")
    async with ClaudeSDKClient(options) as client:
        await client.query("wait for the gate")
        seen: list[Any] = []
        async with asyncio.timeout(GUARD):
            async for message in client.receive_messages():
                seen.append(message)
                if isinstance(message, AssistantMessage):
                    break
            # opening the fifo for writing returns once bash has it open for reading
            writer = await asyncio.to_thread(open, gate, "w")
        try:
            await client.interrupt()
            seen += await _response(client)
        finally:
            writer.close()
        assert _shape(seen) == ["system:init", "assistant:ToolUseBlock", "user:ToolResultBlock", "result:error_during_execution"]
        stopped = seen[-1]
        assert (stopped.is_error, stopped.terminal_reason) == (True, "aborted_tools")
        assert seen[2].content[0].is_error is True
        await client.query("and now?")
        after = await _response(client)
    assert _shape(after) == ["system:init", "assistant:TextBlock", "result:success"]
    assert after[-1].result == "After."


async def test_set_model_switches_the_model_between_queries(env: Env) -> None:
    other = env.script([text_reply("From B.")], "b.json")
    options = _options(env, [text_reply("From A.")])
    async with ClaudeSDKClient(options) as client:
        await client.query("first")
        first = await _response(client)
        await client.set_model(f"scripted:{other}")
        await client.query("second")
        second = await _response(client)
        try:
            await client.set_model("nowhere:model")
            raise AssertionError("set_model accepted an unknown provider")
        except Exception as exc:
            assert str(exc).startswith("set_model: cannot use model 'nowhere:model'")
    assert first[-1].result == "From A."
    assert second[-1].result == "From B."


async def test_resume_continues_a_session_and_fork_copies_it(env: Env) -> None:
    first = await _collect("first prompt", _options(env, [text_reply("First.")], name="1.json"))
    session_id = first[-1].session_id
    second = await _collect("second prompt", _options(env, [text_reply("Second.")], name="2.json", resume=session_id))
    assert second[0].data["session_id"] == session_id
    assert second[-1].session_id == session_id
    forked = await _collect(
        "third prompt", _options(env, [text_reply("Third.")], name="3.json", resume=session_id, fork_session=True)
    )
    fork_id = forked[-1].session_id
    assert fork_id != session_id
    show = env.run("sessions", "show", fork_id)
    assert show.returncode == 0, show.stderr
    assert show.stdout.splitlines() == [
        "user: first prompt",
        "assistant: First.",
        "user: second prompt",
        "assistant: Second.",
        "user: third prompt",
        "assistant: Third.",
    ]
    original = env.run("sessions", "show", session_id)
    assert original.stdout.splitlines()[-1] == "assistant: Second."


async def test_an_in_process_sdk_mcp_tool_runs(env: Env) -> None:
    added: list[tuple[float, float]] = []

    @tool("add", "Add two numbers", {"a": float, "b": float})
    async def add(args: dict[str, Any]) -> dict[str, Any]:
        added.append((args["a"], args["b"]))
        return {"content": [{"type": "text", "text": str(args["a"] + args["b"])}]}

    server = create_sdk_mcp_server("calc", tools=[add])
    replies = [call_reply(("c1", "mcp__calc__add", {"a": 2, "b": 3})), text_reply("It is 5.")]
    options = _options(env, replies, mcp_servers={"calc": server}, allowed_tools=["mcp__calc__add"])
    async with ClaudeSDKClient(options) as client:
        status = await client.get_mcp_status()
        await client.query("add 2 and 3")
        messages = await _response(client)
    calc = next(s for s in status["mcpServers"] if s["name"] == "calc")
    assert (calc["status"], calc["tools"]) == ("connected", [{"name": "add"}])
    assert added == [(2, 3)]
    init = messages[0]
    assert "mcp__calc__add" in init.data["tools"]
    assert {"name": "calc", "status": "connected", "source": "sdk"} in init.data["mcp_servers"]
    block = next(b for m in messages if isinstance(m, UserMessage) for b in m.content)
    assert (block.tool_use_id, block.content, block.is_error) == ("c1", "5", False)
    assert messages[-1].result == "It is 5."


def _raw(env: Env, lines: list[dict[str, Any]], *args: str) -> tuple[int, list[dict[str, Any]], str]:
    proc = subprocess.run(
        [sys.executable, "-m", "ketch", *SDK_ARGS, *args],
        cwd=env.work,
        env=env.vars,
        input="".join(json.dumps(line) + "\n" for line in lines),
        capture_output=True,
        text=True,
        timeout=GUARD,
    )
    return proc.returncode, [json.loads(line) for line in proc.stdout.splitlines()], proc.stderr


def test_unknown_control_requests_are_answered_with_an_error(env: Env) -> None:
    env.vars["KETCH_TEST_SCRIPT"] = env.script([])
    code, out, err = _raw(
        env,
        [
            {"type": "control_request", "request_id": "r1", "request": {"subtype": "initialize", "hooks": None}},
            {"type": "control_request", "request_id": "r2", "request": {"subtype": "fly"}},
        ],
    )
    assert code == 0, err
    first, second = out
    assert first["response"]["subtype"] == "success"
    assert first["response"]["response"]["agent"] == "ketch"
    assert second == {
        "type": "control_response",
        "response": {
            "subtype": "error",
            "request_id": "r2",
            "error": "Unsupported control request subtype: fly; ketch supports initialize, interrupt, "
            "set_permission_mode, set_model, mcp_status, get_context_usage, rewind_files, mcp_reconnect, mcp_toggle",
        },
    }


def test_flags_ketch_cannot_honour_are_errors_or_named_warnings(env: Env) -> None:
    code, out, err = _raw(env, [], "--permission-mode", "auto")
    assert (code, out) == (2, [])
    assert err == "ketch: --permission-mode 'auto' is not one of default, acceptEdits, plan, bypassPermissions, dontAsk\n"
    code, out, err = _raw(env, [], "--frobnicate")
    assert (code, out) == (2, [])
    assert err == "ketch: unrecognized arguments: --frobnicate (see ketch (Claude Code compatible mode) --help)\n"
    env.vars["KETCH_TEST_SCRIPT"] = env.script([text_reply("ok")])
    user = {"type": "user", "message": {"role": "user", "content": "hi"}, "parent_tool_use_id": None, "session_id": ""}
    code, out, err = _raw(env, [user], "--betas", "x", "--json-schema", "{}")
    assert code == 0
    assert out[-1]["subtype"] == "success"
    assert err.splitlines() == [
        "ketch: warning: --betas is not supported by ketch and is ignored",
        "ketch: warning: --json-schema is not supported by ketch and is ignored",
    ]


def test_ketch_own_stream_json_is_unchanged(env: Env) -> None:
    """``ketch run --input-format stream-json -o stream-json`` keeps ketch's protocol."""
    env.vars["KETCH_TEST_SCRIPT"] = env.script([text_reply("Mine.")])
    proc = subprocess.run(
        [sys.executable, "-m", "ketch", "run", "--input-format", "stream-json", "-o", "stream-json", "--no-session"],
        cwd=env.work,
        env=env.vars,
        input=json.dumps({"type": "user", "text": "hi"}) + "\n",
        capture_output=True,
        text=True,
        timeout=GUARD,
    )
    kinds = [json.loads(line)["type"] for line in proc.stdout.splitlines()]
    assert kinds[0] == "init" and kinds[1] == "ack" and kinds[-1] == "result"



async def test_the_to_do_list_is_a_tool_and_todowrite_in_tools_names_it(env: Env) -> None:
    todos = [{"content": "Look around", "status": "in_progress"}, {"content": "Report", "status": "pending"}]
    replies = [call_reply(("t1", "todo_write", {"todos": todos})), text_reply("Planned.")]
    messages = await _collect("plan", _options(env, replies, tools=["Read", "TodoWrite"]))
    assert messages[0].data["tools"] == ["read", "todo_write"]
    assert messages[1].content == [ToolUseBlock(id="t1", name="todo_write", input={"todos": todos})]
    assert messages[2].content == [
        ToolResultBlock(
            tool_use_id="t1", content="To-do list updated (0 of 2 completed):\n[>] Look around\n[ ] Report", is_error=False
        )
    ]
    without = await _collect("hello", _options(env, [text_reply("Hi.")], name="2.json", tools=["Read"]))
    assert without[0].data["tools"] == ["read"]


def test_initialize_fields_are_applied_confirmed_or_named(env: Env) -> None:
    """What the TypeScript SDK sends in ``initialize`` rather than as flags: a bad value is
    an error naming it, fields ketch does not support a named warning, the ones it applies
    confirmed in the answer."""
    env.vars["KETCH_TEST_SCRIPT"] = env.script([text_reply("ok")])
    bad = {"subtype": "initialize", "systemPrompt": 5}
    code, out, err = _raw(env, [{"type": "control_request", "request_id": "r1", "request": bad}])
    assert out[0]["response"] == {
        "subtype": "error",
        "request_id": "r1",
        "error": "initialize: systemPrompt must be a string or a list of strings",
    }
    request = {
        "subtype": "initialize",
        "systemPrompt": ["Be brief.", "Answer in French."],
        "appendSystemPrompt": "Sign with K.",
        "disallowedTools": ["Bash"],
        "settings": {"permissions": {"deny": ["Read(secret.txt)"]}},
        "title": "A title",
        "promptSuggestions": True,
        "planModeInstructions": None,
        "jsonSchema": {"type": "object"},
    }
    env.vars["KETCH_TEST_REQUESTS"] = str(env.home / "requests.jsonl")
    user = {"type": "user", "message": {"role": "user", "content": "hi"}, "parent_tool_use_id": None, "session_id": ""}
    code, out, err = _raw(env, [{"type": "control_request", "request_id": "r1", "request": request}, user])
    assert code == 0, err
    answer = out[0]["response"]["response"]
    assert (answer["settings_applied"], answer["disallowed_tools_applied"]) == (True, True)
    assert "mcp_servers_applied" not in answer
    assert err.splitlines() == [
        "ketch: warning: initialize: jsonSchema (structured output) is not supported by ketch and is ignored",
        "ketch: warning: initialize: promptSuggestions, title are not supported by ketch and ignored",
    ]
    sent = json.loads((env.home / "requests.jsonl").read_text().splitlines()[0])
    assert sent["system_prompt"] == "Be brief.\n\nAnswer in French.\n\nSign with K."


def test_the_typescript_sdks_flags_are_taken(env: Env) -> None:
    env.vars["KETCH_TEST_SCRIPT"] = env.script([text_reply("ok")])
    user = {"type": "user", "message": {"role": "user", "content": "hi"}, "parent_tool_use_id": None, "session_id": ""}
    code, out, err = _raw(
        env,
        [user],
        "--permission-mode",
        "bypassPermissions",
        "--allow-dangerously-skip-permissions",
        "--no-session-persistence",
        "--permission-prompts",
        "none",
        "--agent",
        "reviewer",
    )
    assert code == 0, err
    assert out[-1]["subtype"] == "success"
    assert err.splitlines() == ["ketch: warning: --agent is not supported by ketch and is ignored"]
    listed = env.run("sessions", "list")
    assert listed.stderr == f"ketch: no saved sessions in {env.work}\n"
    code, out, err = _raw(env, [], "--managed-settings", "{}")
    assert (code, out) == (2, [])
    assert err == (
        "ketch: --managed-settings: ketch does not enforce Claude Code's managed (policy) settings; "
        "put the rules in ketch's configuration instead\n"
    )
