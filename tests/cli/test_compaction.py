"""White-box test: imports ketch implementation modules (private) directly.

Context management in the command: the default context manager and its window, automatic
compactions in ``stream-json`` and on the terminal, ``/compact``, and turning it off."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from clihelp import Env
from clihelp import Terminal
from clihelp import call_reply
from clihelp import lines
from clihelp import shape
from clihelp import text_reply

from ketch.cli._config import Settings
from ketch.cli._factory import build_agent
from ketch.cli._factory import context_reserve
from ketch.cli._interactive import Session
from ketch.cli._render import EventRenderer
from ketch.context import Compactor
from ketch.context import ContextSummary
from ketch.context._summary import SUMMARY_SYSTEM_PROMPT
from ketch.llm._messages import UserMessage
from ketch.llm._messages import message_text
from ketch.llm._providers.local import LocalModel
from ketch.testing import ScriptedModel

SUMMARY = "<analysis>two reads</analysis><summary>## Goal\nRead a.txt and b.txt.</summary>"

# With --context-window 200 the threshold is 150 tokens (200 minus a reserve of 50). The
# second reply reports 120 tokens; with the second file's contents the third request would
# take 182, so the older part is summarised first: the summary request takes the third
# scripted reply, the third model call the fourth.
READS = [
    call_reply(("c1", "read", {"path": "a.txt"}), usage={"input": 40, "output": 10, "total_tokens": 50}),
    call_reply(("c2", "read", {"path": "b.txt"}), usage={"input": 110, "output": 10, "total_tokens": 120}),
    text_reply(SUMMARY, usage={"input": 90, "output": 20, "total_tokens": 110, "cost": {"total": 0.0012}}),
    text_reply("Both files read.", usage={"input": 61, "output": 5, "total_tokens": 66}),
]


# Window 400: threshold 300, summaries keep the newest 150 tokens. Each request stays
# under the threshold (no automatic compaction); the last reply reports 340 tokens.
TURNS = [
    text_reply("a" * 400, usage={"input": 60, "output": 100, "total_tokens": 160}),
    text_reply("b" * 400, usage={"input": 180, "output": 100, "total_tokens": 280}),
    text_reply("c" * 200, usage={"input": 290, "output": 50, "total_tokens": 340}),
]


def _files(env: Env) -> None:
    (env.work / "a.txt").write_text("alpha line of text here\n" * 8)
    (env.work / "b.txt").write_text("bravo line of text here\n" * 8)


def _compactions(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["type"].startswith("compaction")]


def test_automatic_compaction_in_stream_json_and_the_run_goes_on(env: Env) -> None:
    _files(env)
    script = env.script(READS)
    proc = env.run(
        "run", "-o", "stream-json", "--model", f"scripted:{script}", "--tools", "read", "--context-window", "200", "read both"
    )
    assert proc.returncode == 0, proc.stderr
    events = lines(proc.stdout)
    assert [s for s in shape(events) if not s.startswith("update:")] == [
        "init",
        "agent_start",
        "turn_start",
        "message_start:user",
        "message_end:user",
        "message_start:assistant",
        "message_end:assistant",
        "tool_execution_start:c1",
        "tool_call_note",
        "tool_execution_end:c1",
        "message_start:tool_result",
        "message_end:tool_result",
        "turn_end",
        "turn_start",
        "message_start:assistant",
        "message_end:assistant",
        "tool_execution_start:c2",
        "tool_call_note",
        "tool_execution_end:c2",
        "message_start:tool_result",
        "message_end:tool_result",
        "turn_end",
        "turn_start",
        "compaction_start",
        "compaction_end",
        "message_start:assistant",
        "message_end:assistant",
        "turn_end",
        "agent_end",
        "result",
    ]
    assert _compactions(events) == [
        {"type": "compaction_start", "reason": "threshold", "tokens_before": 182},
        {
            "type": "compaction_end",
            "reason": "threshold",
            "tokens_before": 182,
            "tokens_after": 92,
            "messages_summarized": 3,
            "cost": 0.0012,
            "error": None,
            "usage": {"input": 90, "output": 20, "total_tokens": 110, "cost": {"total": 0.0012}},
        },
    ]
    result = events[-1]
    assert (result["end_reason"], result["text"], result["turns"], result["tool_calls"]) == (
        "stop",
        "Both files read.",
        3,
        2,
    )


def test_no_compaction_flag_and_config_key_turn_it_off(env: Env) -> None:
    _files(env)
    args = ("run", "-o", "stream-json", "--tools", "read", "--context-window", "200", "read both")
    proc = env.run(*args, "--no-compaction", "--model", f"scripted:{env.script(READS)}")
    assert proc.returncode == 0, proc.stderr
    events = lines(proc.stdout)
    # The reply meant for the summary is the third model call's answer.
    assert (_compactions(events), events[-1]["text"]) == ([], SUMMARY)
    env.user_config("compaction = false\n")
    proc = env.run(*args, "--model", f"scripted:{env.script(READS)}")
    assert proc.returncode == 0, proc.stderr
    events = lines(proc.stdout)
    assert (_compactions(events), events[-1]["text"]) == ([], SUMMARY)


def test_config_shows_compaction_and_window(env: Env) -> None:
    path = env.user_config("compaction = false\n")
    proc = env.run("config", extra={"KETCH_CONTEXT_WINDOW": "32000"})
    assert proc.returncode == 0, proc.stderr
    rows = proc.stdout.splitlines()
    assert f"compaction      false  (user config {path})" in rows
    assert "context_window  32000  (environment KETCH_CONTEXT_WINDOW)" in rows
    env.user_config("")
    rows = env.run("config").stdout.splitlines()
    assert "compaction      true  (default)" in rows
    assert "context_window  (unset)  (default)" in rows
    proc = env.run("run", "go", extra={"KETCH_CONTEXT_WINDOW": "0"})
    assert (proc.returncode, proc.stderr) == (
        2,
        "ketch: environment KETCH_CONTEXT_WINDOW: context_window must be a positive integer, got 0\n",
    )


def test_context_reserve() -> None:
    assert context_reserve(200_000, None) == 16_384
    assert context_reserve(128_000, 4096) == 16_384
    assert context_reserve(32_000, None) == 4_160
    assert context_reserve(4096, None) == 1024
    assert context_reserve(4096, 512) == 1024
    assert context_reserve(4096, 3000) == 2048
    assert context_reserve(200, None) == 50


async def test_agent_gets_a_context_manager_sized_for_its_model(tmp_path: Path) -> None:
    scripted = ScriptedModel(["x"])
    built = build_agent(Settings(), tmp_path, approver=None, model=scripted, environ={})
    manager = built.agent.config.context_manager
    assert isinstance(manager, Compactor) and manager is built.context_manager
    assert (built.window, manager.window, manager.reserve) == (128_000, 128_000, 16_384)

    local = LocalModel("smollm2", n_ctx=2048)
    built = build_agent(Settings(max_tokens=256), tmp_path, approver=None, model=local, environ={})
    assert built.context_manager is not None
    assert (built.window, built.context_manager.window, built.context_manager.reserve) == (2048, 2048, 512)
    built.agent.model = scripted
    built.fit_context(Settings(context_window=1000))
    assert (built.window, built.context_manager.window, built.context_manager.reserve) == (1000, 1000, 250)

    built = build_agent(Settings(compaction=False), tmp_path, approver=None, model=scripted, environ={})
    assert (built.context_manager, built.agent.config.context_manager) == (None, None)


async def test_compact_command_sends_its_instructions_to_the_summary(tmp_path: Path) -> None:
    script = tmp_path / "s.json"
    script.write_text(json.dumps([*TURNS, "<summary>Names: Ada.</summary>"]))
    session = Session(Settings(model=f"scripted:{script}", context_window=400), tmp_path)
    output = io.StringIO()
    from rich.console import Console

    session.renderer = EventRenderer(Console(file=output, width=200, highlight=False))
    session.agent.subscribe(session.renderer)
    for text in ("one", "two", "three"):
        await session.handle(text)
        assert session.task is not None
        await session.task
    await session.command("/compact keep names")
    assert session.task is not None and session.compacting
    await session.task
    model = session.agent.model
    assert isinstance(model, ScriptedModel)
    summary_request = model.requests[-1]
    assert summary_request.system_prompt == SUMMARY_SYSTEM_PROMPT
    prompt = summary_request.messages[0]
    assert isinstance(prompt, UserMessage) and not isinstance(prompt.content, str)
    text = message_text(prompt)
    assert text.startswith("<conversation>\n[User]: one\n\n[Assistant]: aaaa")
    assert text.endswith("\n\nAdditional instructions: keep names")
    messages = session.agent.messages
    assert isinstance(messages[0], ContextSummary) and messages[0].summary == "Names: Ada."
    assert [message_text(m)[:1] for m in messages[1:]] == ["b", "t", "c"]
    assert session.compacting is False
    assert output.getvalue().splitlines()[-1] == (
        f"⇣ context compacted (manual): 340 → {session.built.context().tokens} tokens · 3 messages summarised · $0.0000"
    )


def _start(env: Env, terminals: list[Terminal], script: str, *args: str) -> Terminal:
    term = Terminal(env, "--model", f"scripted:{script}", *args)
    terminals.append(term)
    term.expect("/help for commands")
    term.expect("›")
    return term


def test_automatic_compaction_is_announced_in_the_session(env: Env, terminals: list[Terminal]) -> None:
    _files(env)
    term = _start(env, terminals, env.script(READS), "--tools", "read", "--context-window", "200")
    term.sendline("read both")
    term.expect(r"⏺ read\(b\.txt\)")
    term.expect(
        r"⇣ context compacted \(automatic\): 182 → 92 tokens · 3 messages summarised · \$0\.0012"
    )
    term.expect("Both files read.")
    term.expect(r"· 3 turns")
    term.expect(r"\$0\.0012 │ ctx 33% │")
    term.sendline("/cost")
    term.expect(r"3 model calls · input 211 · output 25 ")
    term.expect(r"1 context compaction · \$0\.0012")
    term.sendline("/exit")
    assert term.wait_exit() == 0


def test_compact_command_announces_and_the_context_percent_drops(env: Env, terminals: list[Terminal]) -> None:
    script = env.script([*TURNS, "<summary>Names: Ada.</summary>"])
    term = _start(env, terminals, script, "--context-window", "400")
    term.sendline("/compact")
    term.expect("nothing to compact: the conversation is shorter than what compaction keeps")
    term.sendline("/help")
    term.expect(r"/compact \[text\]       summarise older history now \(text: what the summary must keep\)")
    for prompt, percent in (("one", 40), ("two", 70), ("three", 85)):
        term.sendline(prompt)
        term.expect(r"· 1 turn")
        term.expect(rf"│ ctx {percent}% │")
    term.sendline("/compact keep names")
    term.expect(r"⇣ context compacted \(manual\): 340 → 164 tokens · 3 messages summarised · \$0\.0000")
    term.expect(r"│ ctx 41% │")
    term.sendline("/exit")
    assert term.wait_exit() == 0


def test_compact_is_refused_while_running_and_when_off(env: Env, terminals: list[Terminal]) -> None:
    term = _start(env, terminals, env.script([{"hang": True}]))
    term.sendline("wait")
    term.expect(r"Working… \d+\.\ds")
    term.sendline("/compact")
    term.expect(r"busy: wait for the run to end \(or Ctrl-C\) before compacting")
    term.ctrl("c")
    term.expect(r"· aborted · 1 turn")
    term.sendline("/exit")
    assert term.wait_exit() == 0
    term = _start(env, terminals, env.script([]), "--no-compaction")
    term.sendline("/compact")
    term.expect(r"context compaction is off in this session \(--no-compaction or compaction = false\)")
    term.sendline("/exit")
    assert term.wait_exit() == 0


def test_ctrl_c_cancels_a_manual_compaction(env: Env, terminals: list[Terminal]) -> None:
    script = env.script(
        [
            text_reply("a" * 400, usage={"input": 60, "output": 100, "total_tokens": 160}),
            text_reply("b" * 400, usage={"input": 180, "output": 100, "total_tokens": 280}),
            {"hang": True},
        ]
    )
    term = _start(env, terminals, script, "--context-window", "400")
    for prompt in ("one", "two"):
        term.sendline(prompt)
        term.expect(r"· 1 turn")
    term.sendline("/compact")
    term.expect(r"Compacting context… \d+\.\ds")
    term.sendline("more")
    term.expect(r"busy compacting the context: send it when that is done \(Ctrl-C cancels\)")
    term.ctrl("c")
    term.expect(r"✗ context compaction \(manual\) failed: Request was aborted")
    term.expect(r"│ ctx 70% │")
    term.sendline("/exit")
    assert term.wait_exit() == 0


def test_text_output_announces_compactions_on_a_terminal(env: Env, terminals: list[Terminal]) -> None:
    _files(env)
    script = env.script(READS)
    term = Terminal(env, "run", "--model", f"scripted:{script}", "--tools", "read", "--context-window", "200", "read both")
    terminals.append(term)
    term.expect(r"→ read b\.txt")
    term.expect(r"⇣ context compacted \(automatic\): 182 → 92 tokens · 3 messages summarised · \$0\.0012")
    term.expect("Both files read.")
    assert term.wait_exit() == 0
