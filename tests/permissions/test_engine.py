"""PermissionEngine on a real agent loop: evaluation order, modes, the can_use_tool callback,
PreToolUse hook verdicts, and the decision records (on the engine and as events)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from ketch import Agent
from ketch import Tool
from ketch.loop import ToolCallInfo
from ketch.permissions import PLAN_DENIED
from ketch.permissions import Approval
from ketch.permissions import HookVerdict
from ketch.permissions import PermissionAllow
from ketch.permissions import PermissionDecision
from ketch.permissions import PermissionDeny
from ketch.permissions import PermissionEngine
from ketch.permissions import PermissionRequest
from ketch.permissions import ReportsSandboxPolicy
from ketch.permissions import SandboxedTool
from ketch.permissions import Verdict
from ketch.permissions import args_digest
from ketch.sandbox import SandboxPolicy
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call

NO_APPROVER = (
    "Permission denied: {tool} needs approval, but nobody can approve it in this run "
    "(permission mode {mode}). Do not retry it; use read-only tools or explain what you would do instead."
)


class _Bash(Tool):
    """A bash tool; its sandbox is read-only unless ``writable`` (the real one's is in plan mode)."""

    def __init__(self, log: list[str], sandboxed: bool, writable: bool = False) -> None:
        async def run(args: dict[str, Any], ctx: Any) -> str:
            log.append(f"bash:{args['command']}")
            return "ran"

        super().__init__("bash", "bash", {"type": "object", "properties": {"command": {"type": "string"}}}, run, sequential=True)
        self.sandboxed = sandboxed
        self.writable = writable

    def policy(self) -> SandboxPolicy:
        return SandboxPolicy(workspace=Path("/ws"), write=self.writable)


def _tools(log: list[str], *, sandboxed: bool = False) -> list[Tool]:
    def make(name: str, read_only: bool) -> Tool:
        async def run(args: dict[str, Any], ctx: Any) -> str:
            log.append(f"{name}:{args.get('path')}")
            return f"{name} ok"

        props = {"path": {"type": "string"}, "content": {"type": "string"}}
        schema = {"type": "object", "properties": props}
        return Tool(name, name, schema, run, sequential=not read_only, read_only=read_only)

    return [make("read", True), make("edit", False), make("write", False), _Bash(log, sandboxed)]


async def _run(engine: PermissionEngine, calls: list[Any], *, sandboxed: bool = False) -> tuple[list[str], list[tuple[bool, str]], list[Any]]:
    log: list[str] = []
    events: list[Any] = []
    agent = Agent(ScriptedModel([reply(*calls), "done"]), tools=_tools(log, sandboxed=sandboxed), before_tool_call=engine.before_tool_call)
    agent.subscribe(events.append)
    result = await agent.prompt("go")
    results = [(m.is_error, m.text) for m in result.messages if m.role == "tool_result"]  # type: ignore[attr-defined]
    return log, results, events


class FakeHook:
    """A PreToolUseHook answering from a table keyed by tool name."""

    def __init__(self, verdicts: dict[str, HookVerdict | None]) -> None:
        self.verdicts = verdicts
        self.seen: list[tuple[str, dict[str, Any]]] = []

    async def pre_tool_use(self, call: ToolCallInfo) -> HookVerdict | None:
        self.seen.append((call.tool.name, dict(call.args)))
        return self.verdicts.get(call.tool.name)


def _decided(engine: PermissionEngine) -> list[tuple[str, str, str]]:
    return [(d.tool_name, d.decided_by, d.outcome) for d in engine.decisions]


# -- modes ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("mode", "sandboxed", "expected"),
    [
        ("default", False, ["read", "ask", "ask", "ask"]),
        ("default", True, ["read", "ask", "ask", "ask"]),
        ("accept_edits", False, ["read", "edit", "write", "ask"]),
        ("accept_edits", True, ["read", "edit", "write", "bash"]),
        ("plan", False, ["read", "deny", "deny", "deny"]),
        ("plan", True, ["read", "deny", "deny", "bash"]),
        ("bypass", False, ["read", "edit", "write", "bash"]),
    ],
)
async def test_each_mode(mode: str, sandboxed: bool, expected: list[str], tmp_path: Path) -> None:
    engine = PermissionEngine(mode, root=tmp_path)
    calls = [
        tool_call("read", {"path": "a"}),
        tool_call("edit", {"path": "a"}),
        tool_call("write", {"path": "b"}),
        tool_call("bash", {"command": "ls"}),
    ]
    _log, results, _ = await _run(engine, calls, sandboxed=sandboxed)
    got = []
    for name, (is_error, text) in zip(["read", "edit", "write", "bash"], results, strict=True):
        if not is_error:
            got.append(name)
        elif text.startswith("Permission denied: plan mode"):
            got.append("deny")
        else:
            assert text == NO_APPROVER.format(tool=name, mode=mode)
            got.append("ask")
    assert got == expected
    assert len(engine.decisions) == 4


async def test_read_only_not_sequential_decides_what_runs_without_asking(tmp_path: Path) -> None:
    """A tool that must run alone but changes nothing runs in default mode; one that may
    run in parallel but changes things asks: scheduling plays no part in permissions."""
    log: list[str] = []

    async def run(args: dict[str, Any], ctx: Any) -> str:
        log.append(args["q"])
        return "ok"

    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    lookup = Tool("lookup", "", schema, run, sequential=True, read_only=True)
    post = Tool("post", "", schema, run, sequential=False)
    engine = PermissionEngine("default", root=tmp_path)
    model = ScriptedModel([reply(tool_call("lookup", {"q": "a"}, id="l"), tool_call("post", {"q": "b"}, id="p")), "done"])
    events: list[Any] = []
    agent = Agent(model, tools=[lookup, post], before_tool_call=engine.before_tool_call)
    agent.subscribe(events.append)
    result = await agent.prompt("go")
    results = [(m.tool_call_id, m.is_error, m.text) for m in result.messages if m.role == "tool_result"]  # type: ignore[attr-defined]
    assert results == [("l", False, "ok"), ("p", True, NO_APPROVER.format(tool="post", mode="default"))]
    assert log == ["a"]
    assert _decided(engine) == [("lookup", "mode default", "allow"), ("post", "no approver", "deny")]
    # still scheduled as sequential: the lookup ends before the post starts
    order = [(e.type, e.tool_call_id) for e in events if e.type in ("tool_execution_start", "tool_execution_end")]
    assert order == [
        ("tool_execution_start", "l"),
        ("tool_execution_end", "l"),
        ("tool_execution_start", "p"),
        ("tool_execution_end", "p"),
    ]


def test_read_only_as_a_function_of_the_arguments(tmp_path: Path) -> None:
    def only_gets(args: dict[str, Any]) -> bool:
        return args.get("method") == "GET"

    http = Tool("http", read_only=only_gets)
    engine = PermissionEngine("default", root=tmp_path)
    assert engine.check(http, {"method": "GET"}) == Verdict("allow", "mode default")
    assert engine.check(http, {"method": "POST"}) == Verdict("ask", "mode default")
    assert engine.check(http, {}) == Verdict("ask", "mode default")
    plan = PermissionEngine("plan", root=tmp_path)
    assert plan.check(http, {"method": "GET"}) == Verdict("allow", "mode plan")
    assert plan.check(http, {"method": "POST"}).outcome == "deny"
    assert (http.is_read_only({"method": "GET"}), http.is_read_only({"method": "PUT"})) == (True, False)
    assert (Tool("t").read_only, Tool("t").is_read_only({})) == (False, False)


async def test_accept_edits_asks_for_edits_outside_the_workspace(tmp_path: Path) -> None:
    engine = PermissionEngine("accept_edits", root=tmp_path / "ws")
    (tmp_path / "ws").mkdir()
    _, results, _ = await _run(engine, [tool_call("edit", {"path": "../x"}), tool_call("edit", {"path": "in.txt"})])
    assert results == [(True, NO_APPROVER.format(tool="edit", mode="accept_edits")), (False, "edit ok")]


async def test_accept_edits_asks_for_edits_of_protected_paths(tmp_path: Path) -> None:
    """An edit of .git/config or .ketch could turn a later command into code execution."""
    ws = tmp_path / "ws"
    (ws / ".git" / "hooks").mkdir(parents=True)
    (ws / "src").mkdir()
    (ws / "link").symlink_to(ws / ".git")
    engine = PermissionEngine("accept_edits", root=ws)
    paths = [".git/config", ".git/hooks/pre-commit", ".ketch/config.toml", "src/../.git/config", "link/config", "src/a.py"]
    _, results, _ = await _run(engine, [tool_call("write", {"path": p}) for p in paths])
    asked = (True, NO_APPROVER.format(tool="write", mode="accept_edits"))
    assert results == [asked, asked, asked, asked, asked, (False, "write ok")]


async def test_deny_wins_in_every_mode_and_ask_comes_before_the_mode(tmp_path: Path) -> None:
    for mode in ("default", "accept_edits", "plan", "bypass"):
        engine = PermissionEngine(mode, deny=["Read(secret)"], ask=["Bash(git push:*)"], root=tmp_path)
        _, results, _ = await _run(engine, [tool_call("read", {"path": "secret"}), tool_call("bash", {"command": "git push"})], sandboxed=True)
        assert results[0] == (True, "Permission denied: the call matches the deny rule Read(secret).")
        assert results[1] == (True, NO_APPROVER.format(tool="bash", mode=mode))
        assert _decided(engine) == [
            ("read", "deny rule Read(secret) from code", "deny"),
            ("bash", "no approver", "deny"),
        ]


async def test_allow_rules_come_after_the_mode(tmp_path: Path) -> None:
    engine = PermissionEngine("plan", allow=["Bash(make)", "Edit"], root=tmp_path)
    log, _results, _ = await _run(engine, [tool_call("bash", {"command": "make"}), tool_call("edit", {"path": "a"})])
    assert log == []
    assert _decided(engine) == [("bash", "mode plan", "deny"), ("edit", "mode plan", "deny")]
    engine = PermissionEngine("default", allow=["Bash(make)"], root=tmp_path)
    log, _, _ = await _run(engine, [tool_call("bash", {"command": "make"})])
    assert log == ["bash:make"]
    assert _decided(engine) == [("bash", "allow rule Bash(make) from code", "allow")]


# -- the can_use_tool callback -------------------------------------------------------------------
async def test_callback_allows_denies_edits_and_is_rechecked_against_deny_rules(tmp_path: Path) -> None:
    seen: list[str] = []

    async def can_use_tool(call: ToolCallInfo) -> PermissionAllow | PermissionDeny | None:
        command = call.args["command"]
        seen.append(command)
        if command == "make":
            return PermissionAllow()
        if command == "make x":
            return PermissionAllow(updated_input={"command": "make y"})
        if command == "make z":
            return PermissionAllow(updated_input={"command": "rm -rf /"})
        if command == "no":
            return PermissionDeny("not that")
        return None

    engine = PermissionEngine("default", deny=["Bash(rm:*)"], allow=["Bash(ls)"], can_use_tool=can_use_tool, root=tmp_path)
    calls = [tool_call("bash", {"command": c}) for c in ("make", "make x", "make z", "no", "other", "ls", "rm x")]
    log, results, _ = await _run(engine, calls)
    assert log == ["bash:make", "bash:make y", "bash:ls"]
    assert seen == ["make", "make x", "make z", "no", "other"]  # not for allow-rule or deny-rule calls
    assert results[2] == (True, "Permission denied: the call matches the deny rule Bash(rm:*).")
    assert results[3] == (True, "not that")
    assert results[4] == (True, NO_APPROVER.format(tool="bash", mode="default"))
    assert [(d.decided_by, d.outcome, d.args_digest) for d in engine.decisions] == [
        ("callback", "allow", args_digest({"command": "make"})),
        ("callback", "allow", args_digest({"command": "make y"})),
        ("deny rule Bash(rm:*) from code", "deny", args_digest({"command": "rm -rf /"})),
        ("callback", "deny", args_digest({"command": "no"})),
        ("no approver", "deny", args_digest({"command": "other"})),
        ("allow rule Bash(ls) from code", "allow", args_digest({"command": "ls"})),
        ("deny rule Bash(rm:*) from code", "deny", args_digest({"command": "rm x"})),
    ]


async def test_callback_deny_with_stop_ends_the_run(tmp_path: Path) -> None:
    async def can_use_tool(call: ToolCallInfo) -> PermissionAllow | PermissionDeny | None:
        return PermissionDeny("stop everything", stop=True)

    engine = PermissionEngine("default", can_use_tool=can_use_tool, root=tmp_path)
    log: list[str] = []
    model = ScriptedModel([reply(tool_call("bash", {"command": "a"}), tool_call("bash", {"command": "b"})), "never reached"])
    agent = Agent(model, tools=_tools(log), before_tool_call=engine.before_tool_call)
    result = await agent.prompt("go")
    texts = [m.text for m in result.messages if m.role == "tool_result"]  # type: ignore[attr-defined]
    assert texts == ["stop everything", "stop everything"]
    assert result.text == ""  # the model was not called again
    assert [(d.decided_by, d.outcome) for d in engine.decisions] == [("callback", "deny"), ("stop", "deny")]
    assert log == []


async def test_callback_failure_denies(tmp_path: Path) -> None:
    async def can_use_tool(call: ToolCallInfo) -> PermissionAllow | PermissionDeny | None:
        raise RuntimeError("policy server down")

    engine = PermissionEngine("default", can_use_tool=can_use_tool, root=tmp_path)
    _, results, _ = await _run(engine, [tool_call("edit", {"path": "a"})])
    assert results == [(True, "Permission check failed: policy server down")]


# -- hooks ---------------------------------------------------------------------------------------
async def test_hook_verdicts(tmp_path: Path) -> None:
    hook = FakeHook(
        {
            "edit": HookVerdict(decision="allow"),
            "write": HookVerdict(decision="deny", reason="hook says no"),
            "read": HookVerdict(decision="ask"),
            "bash": HookVerdict(decision="allow", updated_input={"command": "rm -rf /"}),
        }
    )
    asked: list[str] = []

    async def approver(request: PermissionRequest) -> Approval:
        asked.append(request.tool_name)
        return Approval.once()

    engine = PermissionEngine("plan", deny=["Bash(rm:*)"], approver=approver, hooks=hook, root=tmp_path)
    calls = [
        tool_call("edit", {"path": "a"}),
        tool_call("write", {"path": "b"}),
        tool_call("read", {"path": "c"}),
        tool_call("bash", {"command": "ls"}),
    ]
    log, results, _ = await _run(engine, calls)
    assert log == ["edit:a", "read:c"]  # hook allow skips the mode (plan) ...
    assert results[1] == (True, "Denied by a PreToolUse hook: hook says no")
    assert asked == ["read"]  # ... hook ask forces the question even for a read-only tool
    assert results[3] == (True, "Permission denied: the call matches the deny rule Bash(rm:*).")  # updated input re-checked
    assert _decided(engine) == [
        ("edit", "hook", "allow"),
        ("write", "hook", "deny"),
        ("read", "user", "allow"),
        ("bash", "deny rule Bash(rm:*) from code", "deny"),
    ]
    assert hook.seen == [("edit", {"path": "a"}), ("write", {"path": "b"}), ("read", {"path": "c"}), ("bash", {"command": "ls"})]


async def test_hook_updated_input_replaces_the_arguments_and_stop_ends_the_run(tmp_path: Path) -> None:
    hook = FakeHook({"bash": HookVerdict(updated_input={"command": "echo safe"})})
    engine = PermissionEngine("bypass", hooks=hook, root=tmp_path)
    log, _, _ = await _run(engine, [tool_call("bash", {"command": "echo unsafe"})])
    assert log == ["bash:echo safe"]
    assert [(d.decided_by, d.args_digest) for d in engine.decisions] == [("mode bypass", args_digest({"command": "echo safe"}))]

    stopper = FakeHook({"bash": HookVerdict(stop=True, stop_reason="policy: halt")})
    engine = PermissionEngine("bypass", hooks=stopper, root=tmp_path)
    log, results, _ = await _run(engine, [tool_call("bash", {"command": "x"})])
    assert (log, results) == ([], [(True, "Stopped by a PreToolUse hook: policy: halt")])
    assert _decided(engine) == [("bash", "hook", "deny")]


async def test_a_failing_hook_is_no_opinion(tmp_path: Path) -> None:
    class Broken:
        async def pre_tool_use(self, call: ToolCallInfo) -> HookVerdict | None:
            raise RuntimeError("hook crashed")

    engine = PermissionEngine("default", hooks=Broken(), root=tmp_path)
    log, results, _ = await _run(engine, [tool_call("read", {"path": "a"}), tool_call("edit", {"path": "a"})])
    assert log == ["read:a"]
    assert results[1] == (True, NO_APPROVER.format(tool="edit", mode="default"))


# -- records -------------------------------------------------------------------------------------
async def test_decisions_are_recorded_and_emitted_as_events(tmp_path: Path) -> None:
    engine = PermissionEngine("default", deny=["Edit(x)"], root=tmp_path)
    calls = [tool_call("read", {"path": "a"}, id="r1"), tool_call("edit", {"path": "x", "content": "é"}, id="e1")]
    _, _, events = await _run(engine, calls)
    expected = [
        PermissionDecision(tool_name="read", tool_call_id="r1", args_digest=args_digest({"path": "a"}), decided_by="mode default", outcome="allow"),
        PermissionDecision(
            tool_name="edit",
            tool_call_id="e1",
            args_digest=args_digest({"content": "é", "path": "x"}),
            decided_by="deny rule Edit(x) from code",
            outcome="deny",
            reason="Permission denied: the call matches the deny rule Edit(x).",
        ),
    ]
    assert engine.decisions == expected
    assert engine.denials == expected[1:]
    kinds = [(e.type, getattr(e, "tool_call_id", None)) for e in events if e.type.startswith("tool_")]
    assert kinds == [
        ("tool_execution_start", "r1"),
        ("tool_call_note", "r1"),
        ("tool_execution_end", "r1"),
        ("tool_execution_start", "e1"),  # edit runs alone (sequential)
        ("tool_call_note", "e1"),
        ("tool_execution_end", "e1"),
    ]
    notes = [e.note for e in events if e.type == "tool_call_note"]
    assert notes == expected


def test_args_digest_is_canonical() -> None:
    assert args_digest({"b": 1, "a": [1, 2]}) == args_digest({"a": [1, 2], "b": 1})
    assert len(args_digest({})) == 16
    assert args_digest({"a": 1}) != args_digest({"a": 2})
    import hashlib

    assert args_digest({"path": "x"}) == hashlib.sha256(b'{"path":"x"}').hexdigest()[:16]


def _always(tmp_path: Path) -> tuple[PermissionEngine, list[PermissionRequest]]:
    """An engine in default mode whose approver answers "always", and what it was asked."""
    requests: list[PermissionRequest] = []

    async def approver(request: PermissionRequest) -> Approval:
        requests.append(request)
        return Approval.always()

    return PermissionEngine("default", approver=approver, root=tmp_path), requests


async def test_always_answers_remember_one_rule_per_simple_command(tmp_path: Path) -> None:
    engine, requests = _always(tmp_path)
    calls = [
        tool_call("bash", {"command": "make && make 'install all'"}),
        tool_call("bash", {"command": "make"}),
        tool_call("bash", {"command": "echo $(id)"}),
        tool_call("bash", {"command": "echo $(id)"}),
    ]
    log, _, _ = await _run(engine, calls)
    assert [[str(r) for r in q.suggested_rules] for q in requests] == [["Bash(make)", "Bash(make 'install all')"], [], []]
    assert log == ["bash:make && make 'install all'", "bash:make", "bash:echo $(id)", "bash:echo $(id)"]
    assert [d.decided_by for d in engine.decisions] == [
        "user",
        "allow rule Bash(make) from session",
        "user",
        "user",
    ]


async def test_decisions_are_on_the_run_result(tmp_path: Path) -> None:
    engine = PermissionEngine("plan", root=tmp_path)
    calls = [tool_call("read", {"path": "a"}, id="r1"), tool_call("write", {"path": "b"}, id="w1")]
    log: list[str] = []
    agent = Agent(ScriptedModel([reply(*calls), "done"]), tools=_tools(log), before_tool_call=engine.before_tool_call)
    result = await agent.prompt("go")
    assert [(n.tool_call_id, n.tool_name, n.note) for n in result.tool_call_notes] == [
        ("r1", "read", engine.decisions[0]),
        ("w1", "write", engine.decisions[1]),
    ]
    assert [(d.decided_by, d.outcome) for d in engine.decisions] == [("mode plan", "allow"), ("mode plan", "deny")]


def test_the_bash_tool_is_a_sandboxed_tool(tmp_path: Path) -> None:
    from ketch.tools import BashTool
    from ketch.tools import Workspace

    bash = BashTool(Workspace(tmp_path), unsandboxed_reason="no sandbox here")
    assert isinstance(bash, SandboxedTool) and bash.sandboxed is False
    assert isinstance(_Bash([], True), SandboxedTool)
    assert not isinstance(Tool("bash"), SandboxedTool)  # says nothing: never judged sandboxed
    engine = PermissionEngine("plan", root=tmp_path)
    assert engine.check(Tool("bash"), {"command": "ls"}).outcome == "deny"
    assert engine.check(_Bash([], True), {"command": "ls"}) == Verdict("allow", "mode plan")
    # plan trusts the sandbox only when it is read-only for this call
    writable = engine.check(_Bash([], True, writable=True), {"command": "touch x"})
    assert writable == Verdict("deny", "mode plan", PLAN_DENIED.format(tool="bash"))
    assert isinstance(bash, ReportsSandboxPolicy) and bash.policy().write is True  # built without write_allowed


# -- paths as the tools read them ------------------------------------------------------------
@pytest.mark.parametrize("lead", ["", "/"])
async def test_a_path_through_the_root_name_is_judged_as_the_file_the_tool_touches(lead: str, tmp_path: Path) -> None:
    """The workspace tools read ``myproj/x`` (``/myproj/x``) as ``x`` of the root
    ``.../myproj``; the engine's modes, protected paths and rules judge that same file."""
    from ketch.tools import coding_tools

    root = tmp_path / "x" / f"proj-{uuid.uuid4().hex}"  # "/<name>" must not exist
    (root / ".git").mkdir(parents=True)
    (root / ".git" / "config").write_text("[core]\n")
    (root / "secret.txt").write_text("s3cret\n")
    prefix = f"{lead}{root.name}/"
    engine = PermissionEngine("accept_edits", deny=["Read(secret.txt)"], root=root)
    tools = [t for t in coding_tools(root, sandbox=None) if t.name in ("read", "write")]
    calls = [
        tool_call("write", {"path": prefix + ".git/config", "content": "[core]\n\thooksPath = /tmp\n"}),
        tool_call("read", {"path": prefix + "secret.txt"}),
        tool_call("write", {"path": prefix + "src/new.py", "content": "x = 1\n"}),
    ]
    agent = Agent(ScriptedModel([reply(*calls), "done"]), tools=tools, before_tool_call=engine.before_tool_call)
    result = await agent.prompt("go")
    texts = [m.text for m in result.messages if m.role == "tool_result"]  # type: ignore[attr-defined]
    assert texts[:2] == [
        NO_APPROVER.format(tool="write", mode="accept_edits"),
        "Permission denied: the call matches the deny rule Read(secret.txt).",
    ]
    assert (root / ".git" / "config").read_text() == "[core]\n"
    assert (root / "src" / "new.py").read_text() == "x = 1\n"
    assert [(d.tool_name, d.outcome) for d in engine.decisions] == [("write", "deny"), ("read", "deny"), ("write", "allow")]


async def test_a_symlink_then_dotdot_is_judged_as_the_file_the_tool_touches(tmp_path: Path) -> None:
    """``x/../f`` with ``x`` a symlink two levels down: the tools take ``..`` first (``f``
    of the root), the kernel follows ``x`` first; the engine judges both files."""
    from ketch.tools import coding_tools

    root = tmp_path / "ws"
    (root / ".git").mkdir(parents=True)
    (root / ".git" / "config").write_text("[core]\n")
    (root / "d1" / "d2").mkdir(parents=True)
    (root / "src" / "a").mkdir(parents=True)
    (root / ".env").write_text("KEY=s3cret\n")
    (root / "x").symlink_to("d1/d2")
    (root / "y").symlink_to("src/a")
    (root / "l").symlink_to(".env")
    tools = [t for t in coding_tools(root, sandbox=None) if t.name in ("read", "write")]
    calls = [
        tool_call("write", {"path": "x/../.git/config", "content": "[core]\n\tfsmonitor = true\n"}),  # protected
        tool_call("read", {"path": "x/../l"}),  # the denied .env through a link
        tool_call("write", {"path": "y/../.git/hooks/pre-commit", "content": "#!/bin/sh\n"}),  # allowed as src/**?
    ]
    engine = PermissionEngine("accept_edits", deny=["Read(.env)"], allow=["Write(src/**)"], root=root)
    agent = Agent(ScriptedModel([reply(*calls), "done"]), tools=tools, before_tool_call=engine.before_tool_call)
    result = await agent.prompt("go")
    texts = [m.text for m in result.messages if m.role == "tool_result"]  # type: ignore[attr-defined]
    assert texts == [
        NO_APPROVER.format(tool="write", mode="accept_edits"),
        "Permission denied: the call matches the deny rule Read(.env).",
        NO_APPROVER.format(tool="write", mode="accept_edits"),
    ]
    assert (root / ".git" / "config").read_text() == "[core]\n"
    assert not (root / ".git" / "hooks").exists()


async def test_a_submodules_config_and_hooks_are_protected_paths_too(tmp_path: Path) -> None:
    from ketch.sandbox import protected_path

    root = tmp_path / "ws"
    (root / ".git" / "modules" / "lib" / "modules" / "inner").mkdir(parents=True)
    assert protected_path(root, ".git/modules/lib/config") == ".git/modules/**/config"
    assert protected_path(root, ".git/modules/lib/hooks/post-checkout") == ".git/modules/**/hooks"
    assert protected_path(root, ".git/modules/lib/modules/inner/config") == ".git/modules/**/config"
    assert protected_path(root, ".git/modules/lib/commondir") == ".git/modules/**/commondir"
    assert protected_path(root, ".git/modules/lib/info/exclude") == ".git"  # git's own: still asked
    engine = PermissionEngine("accept_edits", root=root)
    _, results, _ = await _run(engine, [tool_call("write", {"path": ".git/modules/lib/config"})])
    assert results == [(True, NO_APPROVER.format(tool="write", mode="accept_edits"))]


async def test_always_does_not_turn_a_quoted_star_into_a_wildcard(tmp_path: Path) -> None:
    """A remembered rule is compared word by word; a word with * ? [ would match more than
    the call that was approved, so such a call is allowed once and nothing is remembered."""
    engine, requests = _always(tmp_path)
    commands = ("rm -f 'tmp*'", "rm -f tmp -r /home/user/project", "find . -name '*'", "find . -name x -delete")
    await _run(engine, [tool_call("bash", {"command": c}) for c in commands])
    assert [[str(r) for r in q.suggested_rules] for q in requests] == [
        [],
        ["Bash(rm -f tmp -r /home/user/project)"],
        [],
        ["Bash(find . -name x -delete)"],
    ]
    assert [d.decided_by for d in engine.decisions] == ["user", "user", "user", "user"]  # each one asked
