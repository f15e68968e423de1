"""PermissionEngine on an agent: modes, rules, approvals, denials reaching the model."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest

from ketch import Agent
from ketch import Tool
from ketch.permissions import RULE_FORMS
from ketch.permissions import Approval
from ketch.permissions import PermissionEngine
from ketch.permissions import PermissionRequest
from ketch.permissions import Rule
from ketch.permissions import Verdict
from ketch.permissions import args_digest
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call

NO_APPROVER_TEXT = (
    "Permission denied: {tool} needs approval, but nobody can approve it in this run "
    "(permission mode {mode}). Do not retry it; use read-only tools or explain what you would do instead."
)
PLAN_TEXT = (
    "Permission denied: plan mode allows read-only tools only, and this {tool} call may change "
    "things. Describe the change instead of making it."
)


def _tools(log: list[str]) -> list[Tool]:
    def make(name: str, sequential: Any, read_only: bool = False) -> Tool:
        async def run(args: dict[str, Any], ctx: Any) -> str:
            log.append(f"{name}:{args}")
            return f"{name} ok"

        return Tool(
            name,
            f"{name} tool",
            {"type": "object", "properties": {"path": {"type": "string"}, "command": {"type": "string"}}},
            run,
            sequential=sequential,
            read_only=read_only,
        )

    def bash_mutates(args: dict[str, Any]) -> bool:
        return not str(args.get("command", "")).startswith(("ls", "git status"))

    return [make("read", False, read_only=True), make("edit", True), make("write", True), make("bash", bash_mutates)]


async def _run(gate: PermissionEngine, calls: list[Any]) -> tuple[list[str], list[tuple[str, bool, str]]]:
    log: list[str] = []
    model = ScriptedModel([reply(*calls), "done"])
    agent = Agent(model, tools=_tools(log), before_tool_call=gate.before_tool_call)
    result = await agent.prompt("go")
    assert result.end_reason == "stop"
    results = [(m.tool_name, m.is_error, m.text) for m in result.messages if m.role == "tool_result"]  # type: ignore[attr-defined]
    return log, results


def test_rule_parse_and_str() -> None:
    assert Rule.parse("edit") == Rule("edit")
    assert Rule.parse("Bash(git status*)") == Rule("bash", "git status*")
    assert Rule.parse(" bash( ls ) ") == Rule("bash", "ls")
    assert str(Rule.parse("Bash(git *)")) == "Bash(git *)"
    assert Rule.parse("bash()") == Rule("bash")
    assert Rule.parse("Read(./.env)", "project").source == "project"
    forms = re.escape(RULE_FORMS)
    with pytest.raises(ValueError, match=rf"^Invalid permission rule 'bash\(x': {forms}$"):
        Rule.parse("bash(x")
    with pytest.raises(ValueError, match="Invalid permission rule ''"):
        Rule.parse("")
    with pytest.raises(ValueError, match=r"^Invalid permission rule 'Bash\(a && b\)': a bash specifier is one simple"):
        Rule.parse("Bash(a && b)")
    with pytest.raises(ValueError, match=r"^Invalid permission rule 'Edit\(\.\./x\)': a workspace path pattern cannot"):
        Rule.parse("Edit(../x)")


def test_rule_matching() -> None:
    git = Rule.parse("bash(git status*)")
    assert git.allows("bash", {"command": "git status --short"}, None)
    assert not git.allows("bash", {"command": "git push"}, None)
    assert git.allows("bash", {"command": "git status && git status -s"}, None)
    assert not git.allows("bash", {"command": "git status && rm -rf /"}, None)
    assert not git.allows("bash", {"command": "git status; rm x"}, None)
    assert not git.allows("bash", {"command": "git status $(rm x)"}, None)
    assert not git.allows("bash", {"command": "git status > out"}, None)
    assert not git.allows("read", {"command": "git status"}, None)
    root = "/work/p"
    assert Rule.parse("edit(src/*)").allows("edit", {"path": "src/a.py"}, root)
    assert not Rule.parse("edit(src/*)").allows("edit", {"path": "tests/a.py"}, root)
    assert Rule.parse("edit").allows("EDIT", {}, root)
    assert not Rule.parse("edit(x)").allows("edit", {}, root)
    exact = Rule.parse("Bash(rm '*.tmp')")
    assert exact.allows("bash", {"command": "rm '*.tmp'"}, None)
    assert not exact.allows("bash", {"command": "rm *.tmp -rf"}, None)


def test_deny_rules_match_any_part_and_every_spelling_of_a_path() -> None:
    rm = Rule.parse("bash(rm *)")
    for command in ("rm -rf x", "git status && rm -rf x", "ls; rm x", "echo $(rm x)", "ls `rm x`", "(rm x)", "ls | rm x"):
        assert rm.denies("bash", {"command": command}, None), command
    assert not rm.denies("bash", {"command": "git status"}, None)
    secrets = Rule.parse("read(secrets/*)")
    for path in ("secrets/a", "./secrets/a", "x/../secrets/a", "/work/p/secrets/a"):
        assert secrets.denies("read", {"path": path}, "/work/p"), path
    assert not secrets.denies("read", {"path": "/elsewhere/secrets/a"}, "/work/p")
    assert not secrets.allows("read", {"path": "public/a"}, "/work/p")


async def test_deny_rule_applies_to_read_only_tools_too(tmp_path: Path) -> None:
    gate = PermissionEngine("bypass", deny=["read(.env)"], root=tmp_path)
    log, results = await _run(gate, [tool_call("read", {"path": str(tmp_path / ".env")}), tool_call("read", {"path": "a"})])
    assert log == ["read:{'path': 'a'}"]
    assert results[0] == ("read", True, "Permission denied: the call matches the deny rule read(.env).")


def test_unknown_mode_rejected() -> None:
    with pytest.raises(
        ValueError, match=r"Unknown permission mode 'yolo'; expected one of default, accept_edits, plan, bypass \(or accept-edits\)"
    ):
        PermissionEngine("yolo")
    gate = PermissionEngine()
    with pytest.raises(ValueError, match="Unknown permission mode 'x'"):
        gate.set_mode("x")
    gate.set_mode("plan")
    assert gate.mode == "plan"
    gate.set_mode("accept-edits")
    assert gate.mode == "accept_edits"


async def test_default_mode_without_approver_denies_changes_but_runs_read_only() -> None:
    gate = PermissionEngine("default")
    log, results = await _run(
        gate,
        [
            tool_call("read", {"path": "a"}),
            tool_call("bash", {"command": "ls -la"}),
            tool_call("edit", {"path": "a"}),
            tool_call("bash", {"command": "rm a"}),
        ],
    )
    # issue 12: bash is never judged read-only by its command; unsandboxed, it always asks
    assert log == ["read:{'path': 'a'}"]
    assert results == [
        ("read", False, "read ok"),
        ("bash", True, NO_APPROVER_TEXT.format(tool="bash", mode="default")),
        ("edit", True, NO_APPROVER_TEXT.format(tool="edit", mode="default")),
        ("bash", True, NO_APPROVER_TEXT.format(tool="bash", mode="default")),
    ]
    assert [(d.tool_name, d.args_digest) for d in gate.denials] == [
        ("bash", args_digest({"command": "ls -la"})),
        ("edit", args_digest({"path": "a"})),
        ("bash", args_digest({"command": "rm a"})),
    ]


async def test_accept_edits_allows_edits_but_not_bash() -> None:
    log, results = await _run(
        PermissionEngine("accept-edits"),
        [tool_call("write", {"path": "a"}), tool_call("edit", {"path": "a"}), tool_call("bash", {"command": "make"})],
    )
    assert log == ["write:{'path': 'a'}", "edit:{'path': 'a'}"]
    assert results[2] == ("bash", True, NO_APPROVER_TEXT.format(tool="bash", mode="accept_edits"))


async def test_bypass_allows_everything_but_deny_rules() -> None:
    log, results = await _run(
        PermissionEngine("bypass", deny=["bash(rm *)"]),
        [tool_call("edit", {"path": "a"}), tool_call("bash", {"command": "make"}), tool_call("bash", {"command": "rm -rf x"})],
    )
    assert log == ["edit:{'path': 'a'}", "bash:{'command': 'make'}"]
    assert results[2] == ("bash", True, "Permission denied: the call matches the deny rule bash(rm *).")


async def test_plan_mode_is_read_only_even_with_allow_rules() -> None:
    log, results = await _run(
        PermissionEngine("plan", allow=["edit", "bash"]),
        [tool_call("read", {"path": "a"}), tool_call("edit", {"path": "a"}), tool_call("bash", {"command": "make"})],
    )
    assert log == ["read:{'path': 'a'}"]
    assert results[1:] == [("edit", True, PLAN_TEXT.format(tool="edit")), ("bash", True, PLAN_TEXT.format(tool="bash"))]


async def test_allow_rules_skip_the_prompt() -> None:
    asked: list[str] = []

    async def approver(req: PermissionRequest) -> Approval:
        asked.append(req.tool_name)
        return Approval.deny()

    log, _ = await _run(
        PermissionEngine("default", approver=approver, allow=["bash(make*)", "write"]),
        [tool_call("bash", {"command": "make test"}), tool_call("write", {"path": "a"}), tool_call("edit", {"path": "a"})],
    )
    assert log == ["bash:{'command': 'make test'}", "write:{'path': 'a'}"]
    assert asked == ["edit"]
    # Claude Code style: an Edit rule covers every file-editing tool (edit and write)
    asked.clear()
    log, _ = await _run(
        PermissionEngine("default", approver=approver, allow=["Edit"]),
        [tool_call("write", {"path": "a"}), tool_call("edit", {"path": "a"}), tool_call("bash", {"command": "make"})],
    )
    assert log == ["write:{'path': 'a'}", "edit:{'path': 'a'}"]
    assert asked == ["bash"]


async def test_approver_once_always_and_deny_with_reason() -> None:
    requests: list[PermissionRequest] = []
    answers = [Approval.once(), Approval.always(), Approval.deny("use a branch"), Approval.deny()]

    async def approver(req: PermissionRequest) -> Approval:
        requests.append(req)
        return answers.pop(0)

    gate = PermissionEngine("default", approver=approver)
    log, results = await _run(
        gate,
        [
            tool_call("edit", {"path": "a"}, id="c0"),
            tool_call("bash", {"command": "git push"}, id="c1"),
            tool_call("bash", {"command": "git push"}, id="c2"),
            tool_call("bash", {"command": "git push -f"}, id="c3"),
            tool_call("write", {"path": "b"}, id="c4"),
            tool_call("edit", {"path": "c"}, id="c5"),
        ],
    )
    ids = [f"c{i}" for i in range(6)]
    assert [(r.tool_name, r.kind, r.subject, [str(x) for x in r.suggested_rules], r.mode) for r in requests] == [
        ("edit", "edit", "a", ["edit"], "default"),
        ("bash", "execute", "git push", ["Bash(git push)"], "default"),
        ("bash", "execute", "git push -f", ["Bash(git push -f)"], "default"),
        ("write", "edit", "b", ["write"], "default"),
        ("edit", "edit", "c", ["edit"], "default"),
    ]
    assert log == ["edit:{'path': 'a'}", "bash:{'command': 'git push'}", "bash:{'command': 'git push'}"]
    assert [str(r) for r in gate.session_rules] == ["Bash(git push)"]
    assert [(d.tool_call_id, d.decided_by, d.outcome, d.asked) for d in gate.decisions] == [
        (ids[0], "user", "allow", True),
        (ids[1], "user", "allow", True),
        (ids[2], "allow rule Bash(git push) from session", "allow", False),
        (ids[3], "user", "deny", True),
        (ids[4], "user", "deny", True),
        (ids[5], "user", "deny", True),
    ]
    assert results[3:] == [
        ("bash", True, "Permission denied by the user. Reason: use a branch"),
        ("write", True, "Permission denied by the user."),
        ("edit", True, "Permission check failed: pop from empty list"),
    ]


async def test_approver_failure_becomes_denial() -> None:
    async def approver(req: PermissionRequest) -> Approval:
        raise RuntimeError("terminal gone")

    _, results = await _run(PermissionEngine("default", approver=approver), [tool_call("edit", {"path": "a"})])
    assert results == [("edit", True, "Permission check failed: terminal gone")]


async def test_prompts_are_serialised_and_always_covers_waiting_calls() -> None:
    started = asyncio.Event()
    release: asyncio.Future[Approval] = asyncio.get_running_loop().create_future()
    asked: list[str | None] = []

    async def approver(req: PermissionRequest) -> Approval:
        asked.append(req.subject)
        started.set()
        return await release

    gate = PermissionEngine("default", approver=approver)
    log: list[str] = []
    tools = _tools(log)
    for t in tools:
        t.sequential = False  # run in parallel; every bash call still needs approval via the rule check
    bash = tools[3]

    def needs(args: dict[str, Any]) -> bool:
        return True

    bash.sequential = needs
    model = ScriptedModel([reply(tool_call("bash", {"command": "make"}), tool_call("bash", {"command": "make"})), "done"])
    agent = Agent(model, tools=tools, before_tool_call=gate.before_tool_call)
    run = asyncio.create_task(agent.prompt("go"))
    await started.wait()
    release.set_result(Approval.always())
    result = await run
    assert asked == ["make"]
    assert log == ["bash:{'command': 'make'}", "bash:{'command': 'make'}"]
    assert result.end_reason == "stop"


async def test_abort_while_waiting_for_approval() -> None:
    started = asyncio.Event()
    cancelled: list[bool] = []

    async def approver(req: PermissionRequest) -> Approval:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        raise AssertionError("unreachable")

    log: list[str] = []
    model = ScriptedModel([reply(tool_call("edit", {"path": "a"}, id="c1"))])
    agent = Agent(model, tools=_tools(log), before_tool_call=PermissionEngine("default", approver=approver).before_tool_call)
    run = asyncio.create_task(agent.prompt("go"))
    await started.wait()
    agent.abort()
    result = await run
    assert result.end_reason == "aborted"
    assert cancelled == [True]
    assert log == []
    tr = result.messages[-1]
    assert tr.role == "tool_result" and tr.is_error  # type: ignore[attr-defined]


def test_check_is_a_pure_policy() -> None:
    gate = PermissionEngine("default", allow=["bash(git *)"])
    log: list[str] = []
    read, edit, _, bash = _tools(log)
    assert gate.check(read, {"path": "x"}) == Verdict("allow", "mode default")
    assert gate.check(edit, {"path": "x"}) == Verdict("ask", "mode default")
    assert gate.check(bash, {"command": "git log"}) == Verdict("allow", "allow rule bash(git *) from code")
    assert gate.check(bash, {"command": "make"}) == Verdict("ask", "mode default")

    def broken(args: dict[str, Any]) -> bool:
        raise RuntimeError("classifier failed")

    read.read_only = broken
    assert gate.check(read, {"path": "x"}) == Verdict("ask", "mode default")
    assert repr(gate) == "PermissionEngine(mode='default', allow=['bash(git *)'], ask=[], deny=[])"
