"""The sandbox's share of the deny rules: the paths ``Read`` and ``Edit`` deny rules name
(``hidden_paths``, ``protected_paths``), whether a tool's sandbox enforces them
(``unenforced``), the modes that only let sandboxed bash run unasked when it does, and a
folder whose contents may not be read, which may not be listed either."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from ketch import Agent
from ketch import Tool
from ketch.permissions import Approval
from ketch.permissions import PermissionEngine
from ketch.permissions import PermissionRequest
from ketch.sandbox import DEFAULT_PROTECTED
from ketch.sandbox import SandboxPolicy
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call
from ketch.tools import BashTool
from ketch.tools import Workspace
from ketch.tools import coding_tools

HOME = os.path.realpath(os.path.expanduser("~"))  # rules resolve their folders' symlinks
SSH = os.path.realpath(os.path.join(HOME, ".ssh"))
RULES = [
    "Read(./.env)",
    "Read(*.pem)",
    "Read(private/**)",
    "Read(~/.ssh/**)",
    "Read(//etc/shadow)",
    "Read(~/**/*.key)",
    "Bash(rm:*)",
    "Edit(src/**)",
    "Write(*.lock)",
    "Edit(//{root}/docs/x.md)",
    "Edit(//opt/elsewhere/**)",
    "Grep(logs)",
]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path.resolve()


def _engine(root: Path, mode: str = "default", deny: list[str] | None = None, **kw: Any) -> PermissionEngine:
    rules = [r.format(root=str(root).lstrip("/")) for r in (RULES if deny is None else deny)]
    return PermissionEngine(mode, root=root, deny=rules, **kw)


class _PolicyBash(Tool):
    """A sandboxed bash tool reporting ``policy``."""

    def __init__(self, policy: SandboxPolicy, log: list[str]) -> None:
        async def run(args: dict[str, Any], ctx: Any) -> str:
            log.append(args["command"])
            return "ran"

        super().__init__("bash", "bash", {"type": "object", "properties": {"command": {"type": "string"}}}, run)
        self.sandboxed = True
        self._policy = policy

    def policy(self) -> SandboxPolicy:
        return self._policy


def test_the_paths_read_and_edit_deny_rules_name(tmp_path: Path) -> None:
    root = tmp_path.resolve()
    engine = _engine(root)
    assert engine.hidden_paths() == (
        f"{root}/.env",
        f"{root}/**/*.pem",
        f"{root}/private/**",
        f"{SSH}/**",
        "/etc/shadow",
    )
    # workspace-relative; a rule naming paths outside the workspace has no share here
    assert engine.protected_paths() == ("src/**", "**/*.lock", "docs/x.md")
    assert _engine(root, deny=["Bash(rm:*)", "Read"]).hidden_paths() == ()
    # searching ~/** at every command would take seconds: left out (and reported unenforced)
    assert _engine(root, deny=["Read(~/**/*.key)", "Read(//**/.env)", "Read(~/*/id_*)"]).hidden_paths() == (
        f"{HOME}/*/id_*",
    )


def test_a_sandbox_given_those_paths_enforces_every_rule(tmp_path: Path) -> None:
    root = tmp_path.resolve()
    engine = _engine(root)
    wired = BashTool(
        Workspace(root),
        sandbox=None,
        hidden=engine.hidden_paths(),
        protected=(*DEFAULT_PROTECTED, *engine.protected_paths()),
    )
    assert str(engine.unenforced(wired)) == "Read(~/**/*.key)"
    engine.deny = [r for r in engine.deny if str(r) != "Read(~/**/*.key)"]
    # the sandbox keeps today's *.lock files read-only, but a command could create another
    assert str(engine.unenforced(wired)) == "Write(*.lock)"
    engine.deny = [r for r in engine.deny if str(r) != "Write(*.lock)"]
    assert engine.unenforced(wired) is None
    bare = BashTool(Workspace(root), sandbox=None)
    assert str(engine.unenforced(bare)) == "Read(./.env)"
    partly = BashTool(Workspace(root), sandbox=None, hidden=engine.hidden_paths())
    assert str(engine.unenforced(partly)) == "Edit(src/**)"
    read_only = BashTool(Workspace(root), sandbox=None, hidden=engine.hidden_paths(), write_allowed=lambda: False)
    assert engine.unenforced(read_only) is None  # nothing is writable: the Edit rules hold
    assert engine.unenforced(Tool("bash")) is not None  # reports no policy
    assert _engine(root, deny=["Bash(rm:*)", "Grep(logs)"]).unenforced(bare) is None


@pytest.mark.parametrize(
    ("rule", "writable", "expected"),
    [
        ("Read", (), "Read"),  # every file: no sandbox can hide that
        ("Edit", (), "Edit"),
        ("Edit(//opt/elsewhere/**)", (), None),  # read-only in the sandbox anyway
        ("Edit(//opt/elsewhere/**)", ("/opt/elsewhere/cache",), "Edit(//opt/elsewhere/**)"),
        ("Edit(//opt/**)", ("/opt/elsewhere",), "Edit(//opt/**)"),
        ("Edit(//{root})", (), "Edit(//{root})"),  # the whole workspace
        ("Edit(//opt/elsewhere/**), Edit(src/**)", (), "Edit(src/**)"),  # judged from the root
        ("Edit(src/*.py)", (), "Edit(src/*.py)"),  # a new src/x.py could be created
        ("Edit(.env)", (), "Edit(.env)"),  # **/.env: so could a new sub/.env
    ],
)
def test_edit_rules_the_sandbox_cannot_hold(tmp_path: Path, rule: str, writable: tuple[str, ...], expected: str | None) -> None:
    root = tmp_path.resolve()
    engine = _engine(root, deny=rule.split(", "))
    policy = SandboxPolicy(workspace=root, write=True, extra_writable=tuple(Path(w) for w in writable))
    got = engine.unenforced(_PolicyBash(policy, []))
    assert (str(got) if got is not None else None) == (expected.format(root=str(root).lstrip("/")) if expected else None)


async def _bash_run(engine: PermissionEngine, tool: Tool) -> tuple[list[str], list[tuple[bool, str]]]:
    asked: list[str] = []

    async def approver(req: PermissionRequest) -> Approval:
        asked.append(req.tool_name)
        return Approval.deny("no")

    engine.approver = approver
    agent = Agent(
        ScriptedModel([reply(tool_call("bash", {"command": "cat .env"})), "done"]),
        tools=[tool],
        before_tool_call=engine.before_tool_call,
    )
    result = await agent.prompt("go")
    results = [(m.is_error, m.text) for m in result.messages if m.role == "tool_result"]
    return asked, results


@pytest.mark.parametrize("mode", ["accept_edits", "plan"])
async def test_sandboxed_bash_asks_while_its_sandbox_does_not_enforce_the_deny_rules(root: Path, mode: str) -> None:
    log: list[str] = []
    engine = _engine(root, mode, deny=["Read(./.env)"])
    loose = _PolicyBash(SandboxPolicy(workspace=root, write=mode != "plan"), log)
    asked, results = await _bash_run(engine, loose)
    assert (asked, results, log) == (["bash"], [(True, "Permission denied by the user. Reason: no")], [])
    assert [(d.decided_by, d.outcome) for d in engine.decisions] == [("user", "deny")]
    assert engine.check(loose, {"command": "cat .env"}).decided_by == (
        f"mode {mode}; the sandbox does not enforce the deny rule Read(./.env) from code"
    )

    engine = _engine(root, mode, deny=["Read(./.env)"])
    policy = SandboxPolicy(workspace=root, write=mode != "plan", hidden=(root / ".env",))
    asked, results = await _bash_run(engine, _PolicyBash(policy, log))
    assert (asked, results, log) == ([], [(False, "ran")], ["cat .env"])
    assert [(d.decided_by, d.outcome) for d in engine.decisions] == [(f"mode {mode}", "allow")]


@pytest.mark.parametrize("mode", ["accept_edits", "plan"])
async def test_sandboxed_bash_asks_while_its_sandbox_does_not_enforce_the_ask_rules(root: Path, mode: str) -> None:
    # a command could read what an ask rule names with nobody asked: the command is asked
    log: list[str] = []
    engine = _engine(root, mode, deny=[], ask=["Read(./.env)"])
    loose = _PolicyBash(SandboxPolicy(workspace=root, write=mode != "plan"), log)
    assert str(engine.unenforced(loose)) == "Read(./.env)"
    asked, results = await _bash_run(engine, loose)
    assert (asked, results, log) == (["bash"], [(True, "Permission denied by the user. Reason: no")], [])
    assert engine.check(loose, {"command": "cat .env"}).decided_by == (
        f"mode {mode}; the sandbox does not enforce the ask rule Read(./.env) from code"
    )
    # a sandbox that hides the file holds the rule: the command runs unasked
    engine = _engine(root, mode, deny=[], ask=["Read(./.env)"])
    policy = SandboxPolicy(workspace=root, write=mode != "plan", hidden=(root / ".env",))
    asked, results = await _bash_run(engine, _PolicyBash(policy, log))
    assert (asked, results, log) == ([], [(False, "ran")], ["cat .env"])
    # an Edit ask rule: a writable sandbox must keep the path read-only, a read-only one does
    edits = _engine(root, mode, deny=[], ask=["Edit(docs/**)", "Bash(git push:*)"])
    expected = None if mode == "plan" else "Edit(docs/**)"
    got = edits.unenforced(_PolicyBash(SandboxPolicy(workspace=root, write=mode != "plan"), []))
    assert (str(got) if got is not None else None) == expected
    held = SandboxPolicy(workspace=root, write=mode != "plan", protected=("docs/**",))
    assert edits.unenforced(_PolicyBash(held, [])) is None
    # a deny rule comes first, and says so
    both = _engine(root, mode, deny=["Read(./.env)"], ask=["Read(./.env)"])
    assert both.check(loose, {"command": "ls"}).decided_by == (
        f"mode {mode}; the sandbox does not enforce the deny rule Read(./.env) from code"
    )


@pytest.mark.parametrize("tool", ["ls", "find", "grep"])
def test_a_folder_whose_contents_may_not_be_read_may_not_be_listed(root: Path, tool: str) -> None:
    (root / "private").mkdir()
    (root / "private" / "plans.txt").write_text("x\n")
    (root / "public.txt").write_text("x\n")
    engine = PermissionEngine("default", root=root, deny=["Read(private/**)"])
    tools = {t.name: t for t in coding_tools(root, read_only=True, ripgrep=False)}
    args = {"pattern": "x"} if tool == "grep" else {}
    assert engine.check(tools[tool], {**args, "path": "private"}).reason == (
        "Permission denied: the call matches the deny rule Read(private/**)."
    )
    assert engine.check(tools[tool], {**args, "path": "./private/"}).outcome == "deny"
    assert engine.check(tools["read"], {"path": "private/plans.txt"}).outcome == "deny"
    # the folder above it may be listed (its name shows, nothing inside it)
    assert engine.check(tools["ls"], {"path": "."}).outcome == "allow"
    assert engine.check(tools["read"], {"path": "public.txt"}).outcome == "allow"


@pytest.mark.parametrize(
    ("rule", "denied", "allowed"),
    [
        ("Read(//)", [("read", "a.txt"), ("grep", "."), ("ls", "sub")], [("write", "a.txt")]),
        ("Read(./)", [("read", "a.txt"), ("read", "sub/b.txt"), ("ls", ".")], [("edit", "a.txt")]),
        ("Edit(./)", [("write", "a.txt"), ("edit", "sub/b.txt")], [("read", "a.txt")]),
        ("Edit(//)", [("write", "sub/new.txt")], [("ls", ".")]),
        # a one-character pattern is a file name, not the workspace itself
        ("Read(?)", [], [("ls", "."), ("read", "a.txt")]),
    ],
)
def test_rules_naming_the_workspace_or_the_filesystem_cover_everything(
    root: Path, rule: str, denied: list[tuple[str, str]], allowed: list[tuple[str, str]]
) -> None:
    (root / "sub").mkdir()
    (root / "a.txt").write_text("a\n")
    (root / "sub" / "b.txt").write_text("b\n")
    engine = PermissionEngine("accept_edits", root=root, deny=[rule])
    tools = {t.name: t for t in coding_tools(root, sandbox=None, ripgrep=False)}

    def outcome(name: str, path: str) -> str:
        args = {"path": path, "pattern": "x", "content": "x", "old_string": "a", "new_string": "b"}
        return engine.check(tools[name], args).outcome

    assert [outcome(n, p) for n, p in denied] == ["deny"] * len(denied)
    assert [outcome(n, p) for n, p in allowed] == ["allow"] * len(allowed)


def test_a_rule_hiding_the_whole_filesystem_is_not_given_to_the_sandbox(root: Path) -> None:
    engine = PermissionEngine("plan", root=root, deny=["Read(//)", "Read(//..)"])
    assert engine.hidden_paths() == ()  # nothing would run
    bash = BashTool(Workspace(root), sandbox=None, write_allowed=lambda: False)
    assert str(engine.unenforced(bash)) == "Read(//)"


def test_rules_through_symlinks_name_the_files_they_lead_to(root: Path) -> None:
    real = root / "real"
    (real / "src").mkdir(parents=True)
    (real / ".env").write_text("k\n")
    (real / "src" / "a.py").write_text("a\n")
    (real / "lnk").symlink_to("src")
    alias = root / "alias"
    alias.symlink_to(real)
    # absolute rules written through an alias of the workspace
    engine = PermissionEngine("accept_edits", root=real, deny=[f"Read(/{alias}/.env)", f"Edit(/{alias}/src/**)"])
    tools = {t.name: t for t in coding_tools(real, sandbox=None)}
    assert engine.check(tools["read"], {"path": ".env"}).outcome == "deny"
    assert engine.check(tools["edit"], {"path": "src/a.py"}).outcome == "deny"
    assert engine.hidden_paths() == (f"{real}/.env",)
    assert engine.protected_paths() == ("src/**",)
    # a workspace rule through a symlinked folder: also the file the link leads to
    engine = PermissionEngine("accept_edits", root=real, deny=["Edit(lnk/a.py)"])
    assert engine.check(tools["write"], {"path": "src/a.py", "content": "x"}).outcome == "deny"
    assert engine.check(tools["write"], {"path": "lnk/a.py", "content": "x"}).outcome == "deny"
    assert engine.check(tools["write"], {"path": "src/b.py", "content": "x"}).outcome == "allow"


def test_a_bracket_that_is_no_character_set_is_itself(root: Path) -> None:
    (root / "a[]b").write_text("k\n")
    (root / "ab").write_text("k\n")
    engine = PermissionEngine("default", root=root, deny=["Read(./a[]b)", "Read(./x[z-a])"])
    tools = {t.name: t for t in coding_tools(root, sandbox=None)}
    assert engine.check(tools["read"], {"path": "a[]b"}).outcome == "deny"
    assert engine.check(tools["read"], {"path": "ab"}).outcome == "allow"
    assert engine.check(tools["ls"], {"path": "."}).outcome == "allow"
    assert engine.hidden_paths() == (f"{root}/a[]b", f"{root}/x[z-a]")


@pytest.mark.parametrize("answer", ["approver", "callback"])
async def test_deny_rules_are_checked_again_after_a_slow_answer(root: Path, answer: str) -> None:
    """While the user (or the application's callback) decides, a background command can
    turn the path into a symlink to a denied file; the answer does not cover that file."""
    (root / "src").mkdir()
    (root / "src" / "a.py").write_text("ORIG\n")
    (root / "x").symlink_to("new.py")  # a new file: the write tool's precheck lets it be asked about

    def swap() -> None:
        (root / "x").unlink()
        (root / "x").symlink_to("src/a.py")

    async def approver(req: PermissionRequest) -> Approval:
        swap()
        return Approval.always()

    async def callback(call: Any) -> Any:
        from ketch.permissions import PermissionAllow

        swap()
        return PermissionAllow()

    engine = PermissionEngine(
        "default",
        root=root,
        deny=["Edit(src/**)"],
        approver=approver if answer == "approver" else None,
        can_use_tool=callback if answer == "callback" else None,
    )
    tools = coding_tools(root, sandbox=None)
    agent = Agent(
        ScriptedModel([reply(tool_call("write", {"path": "x", "content": "PWNED\n"})), "done"]),
        tools=tools,
        before_tool_call=engine.before_tool_call,
    )
    result = await agent.prompt("go")
    texts = [m.text for m in result.messages if m.role == "tool_result"]
    assert texts == ["Permission denied: the call matches the deny rule Edit(src/**)."]
    assert (root / "src" / "a.py").read_text() == "ORIG\n"
    assert engine.session_rules == []  # nothing remembered for a denied call


async def test_a_workspace_whose_name_looks_like_a_pattern_keeps_its_rules(tmp_path: Path) -> None:
    # "proj[1]" is a folder name, not a character set: the rules still name its files
    from ketch.llm import AbortSignal
    from ketch.loop import ToolContext

    root = (tmp_path / "proj[1]").resolve()
    (root / "src").mkdir(parents=True)
    (tmp_path / "proj1").mkdir()  # what "proj[1]" would match as a pattern
    (root / ".env").write_text("KEY=sk-bracket-0123456789\n")
    (root / "src" / "a.txt").write_text("kept\n")
    engine = _engine(root, "accept_edits", deny=["Read(./.env)", "Edit(src/**)"])
    assert engine.hidden_paths() == (f"{str(root).replace('[', '[[]')}/.env",)
    assert engine.protected_paths() == ("src/**",)
    hidden, protected = engine.hidden_paths(), engine.protected_paths()
    workspace = Workspace(root, hidden=hidden, protected=protected)
    tools = {t.name: t for t in coding_tools(workspace, hidden=hidden, protected=(*DEFAULT_PROTECTED, *protected), ripgrep=False)}
    bash = tools["bash"]
    assert engine.unenforced(bash) is None
    command = "cat .env; echo pwned > src/a.txt; echo pwned > src/new.txt; echo done"
    assert engine.check(bash, {"command": command}).outcome == "allow"  # sandboxed: unasked

    def ctx(name: str) -> ToolContext[Any]:
        return ToolContext(call_id="c", tool_name=name, signal=AbortSignal())

    result = await bash.execute({"command": command}, ctx("bash"))
    assert "done" in result.text and "sk-bracket" not in result.text
    assert (root / "src" / "a.txt").read_text() == "kept\n" and not (root / "src" / "new.txt").exists()
    os.symlink(".env", root / "lnk")
    read = await tools["read"].execute({"path": "lnk"}, ctx("read"))
    assert read.text == "Permission denied: .env is hidden from the tools (a Read deny rule names it)."


async def test_a_git_directory_named_by_a_git_file_is_protected_too(root: Path) -> None:
    # ".git" may be a file pointing at the git directory (gitdir: ./.bare): git reads its
    # configuration and hooks there, so they stay read-only and edits of them ask
    from ketch.llm import AbortSignal
    from ketch.loop import ToolContext

    (root / ".bare" / "hooks").mkdir(parents=True)
    (root / ".bare" / "config").write_text("[core]\n")
    (root / ".git").write_text("gitdir: ./.bare\n")
    engine = _engine(root, "accept_edits", deny=[])
    tools = {t.name: t for t in coding_tools(root, ripgrep=False)}
    for path in (".bare/config", ".bare/hooks/pre-commit"):
        assert engine.check(tools["write"], {"path": path, "content": "x"}).outcome == "ask", path
    assert engine.check(tools["write"], {"path": ".bare/description", "content": "x"}).outcome == "allow"
    command = "echo '[core] fsmonitor = touch pwned' >> .bare/config; touch .bare/hooks/pre-commit; echo done"
    result = await tools["bash"].execute({"command": command}, ToolContext(call_id="c", tool_name="bash", signal=AbortSignal()))
    assert "done" in result.text
    assert (root / ".bare" / "config").read_text() == "[core]\n"
    assert os.listdir(root / ".bare" / "hooks") == []


@pytest.mark.parametrize("target", ["/elsewhere/repo/.git/worktrees/ws", "./.bare"])
async def test_a_git_file_itself_is_protected(root: Path, target: str) -> None:
    # rewritten ("gitdir: ./evil", a folder holding its own config and hooks) it would
    # point the user's next git command at code the agent wrote
    from ketch.llm import AbortSignal
    from ketch.loop import ToolContext

    (root / ".bare").mkdir()
    (root / ".git").write_text(f"gitdir: {target}\n")
    engine = _engine(root, "accept_edits", deny=[])
    tools = {t.name: t for t in coding_tools(root, ripgrep=False)}
    assert engine.check(tools["write"], {"path": ".git", "content": "gitdir: ./evil\n"}).outcome == "ask"
    assert engine.check(tools["write"], {"path": "notes.txt", "content": "x"}).outcome == "allow"
    command = "echo 'gitdir: ./evil' > .git; rm -f .git; mv .git moved; echo done"
    result = await tools["bash"].execute({"command": command}, ToolContext(call_id="c", tool_name="bash", signal=AbortSignal()))
    assert "done" in result.text
    assert (root / ".git").read_text() == f"gitdir: {target}\n"


@pytest.mark.parametrize("content", ["gitdir:", "gitdir:\n\n", "", "not a git file"])
def test_an_odd_git_file_is_protected_and_nothing_fails(root: Path, content: str) -> None:
    from ketch.sandbox import protected_path

    (root / ".git").write_text(content)
    assert protected_path(root, ".git") == ".git"
    assert protected_path(root, ".git/config") == ".git/config"
    assert protected_path(root, "notes.txt") is None


def test_a_git_named_pipe_does_not_block_the_check(root: Path) -> None:
    from ketch.sandbox import protected_path

    os.mkfifo(root / ".git")  # opening it for reading would wait for a writer forever
    assert protected_path(root, "notes.txt") is None
    assert protected_path(root, ".git/config") == ".git/config"


def test_plan_mode_lets_an_allow_rule_run_a_command_the_sandbox_cannot_fully_hold(root: Path) -> None:
    engine = _engine(root, "plan", deny=[], ask=["Read(./.env)"], allow=["Bash(git status)"])
    bash = _PolicyBash(SandboxPolicy(workspace=root, write=False), [])
    assert engine.check(bash, {"command": "git status"}).decided_by == "allow rule Bash(git status) from code"
    assert engine.check(bash, {"command": "cat .env"}).decided_by == (
        "mode plan; the sandbox does not enforce the ask rule Read(./.env) from code"
    )


@pytest.mark.parametrize("kind", ["deny", "ask"])
def test_a_wildcard_rule_that_names_a_symlink_names_where_it_leads(root: Path, kind: str) -> None:
    # the sandbox hides what sub/keys leads to; the engine judges vault/token the same way
    (root / "vault").mkdir()
    (root / "vault" / "token").write_text("sk-test\n")
    (root / "sub").mkdir()
    os.symlink("../vault", root / "sub" / "keys")
    rules = {"deny": [], "ask": []}
    rules[kind] = ["Read(./**/keys/**)"]
    engine = PermissionEngine("accept_edits", root=root, deny=rules["deny"], ask=rules["ask"])
    tools = {t.name: t for t in coding_tools(root, read_only=True, ripgrep=False)}
    for path in ("vault/token", "sub/keys/token", "vault"):
        assert engine.check(tools["read"], {"path": path}).outcome == kind, path
    (root / "notes.txt").write_text("x\n")
    assert engine.check(tools["read"], {"path": "notes.txt"}).outcome == "allow"


def test_where_a_wildcard_rule_leads_is_found_as_the_session_starts(root: Path) -> None:
    # a command renaming the link before any file tool runs keeps its target named; a
    # link made later counts from the next engine (or workspace) on
    (root / "vault").mkdir()
    (root / "vault" / "token").write_text("sk-test\n")
    (root / "other").mkdir()
    (root / "other" / "token").write_text("sk-test\n")
    (root / "sub").mkdir()
    os.symlink("../vault", root / "sub" / "keys")
    engine = PermissionEngine("accept_edits", root=root, deny=["Read(./**/keys/**)"])
    workspace = Workspace(root, hidden=engine.hidden_paths(all_rules=True))
    os.rename(root / "sub" / "keys", root / "sub" / "k2")
    os.symlink("../other", root / "sub" / "keys")
    read = {t.name: t for t in coding_tools(workspace, read_only=True, ripgrep=False)}["read"]
    assert engine.check(read, {"path": "vault/token"}).outcome == "deny"
    assert workspace.is_hidden(str(root / "vault" / "token"))
    assert engine.check(read, {"path": "other/token"}).outcome == "allow"
    assert not workspace.is_hidden(str(root / "other" / "token"))
    later = PermissionEngine("accept_edits", root=root, deny=["Read(./**/keys/**)"])
    assert later.check(read, {"path": "other/token"}).outcome == "deny"
    assert later.check(read, {"path": "vault/token"}).outcome == "allow"  # no longer a link's target
    assert Workspace(root, hidden=later.hidden_paths(all_rules=True)).is_hidden(str(root / "other" / "token"))


@pytest.mark.parametrize("target", ["..", "../..", "/"])
def test_a_link_to_the_folder_a_rule_searches_from_does_not_name_every_file(root: Path, target: str) -> None:
    (root / "sub").mkdir()
    (root / "notes.txt").write_text("x\n")
    os.symlink(target, root / "sub" / "keys")
    engine = PermissionEngine("accept_edits", root=root, deny=["Read(./**/keys/**)"])
    read = {t.name: t for t in coding_tools(root, read_only=True, ripgrep=False)}["read"]
    assert engine.check(read, {"path": "notes.txt"}).outcome == "allow"
    assert engine.check(read, {"path": "sub/keys/notes.txt"}).outcome == "deny"  # named as written
    assert not Workspace(root, hidden=engine.hidden_paths(all_rules=True)).is_hidden(str(root / "notes.txt"))


def test_an_engine_is_made_in_a_folder_that_is_gone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    assert PermissionEngine("default", deny=["Read(./**/keys/**)"]).mode == "default"
    assert PermissionEngine().mode == "default"


@pytest.mark.parametrize("kind", ["absent", "symlink", "fifo"])
def test_a_git_entry_that_is_no_folder_is_asked_about_before_it_is_written(root: Path, kind: str) -> None:
    # written as a file ("gitdir: ./evil"), it would point git at a configuration the agent wrote
    (root / "real-git").mkdir()
    if kind == "symlink":
        os.symlink("real-git", root / ".git")
    elif kind == "fifo":
        os.mkfifo(root / ".git")
    engine = _engine(root, "accept_edits", deny=[])
    tools = {t.name: t for t in coding_tools(root, ripgrep=False)}
    assert engine.check(tools["write"], {"path": ".git", "content": "gitdir: ./evil\n"}).outcome == "ask"
    assert engine.check(tools["write"], {"path": "notes.txt", "content": "x"}).outcome == "allow"


async def test_git_files_that_would_point_git_elsewhere_are_asked_about_and_read_only(root: Path) -> None:
    # a submodule's or a linked worktree's commondir, a nested repository's config: the
    # user's git would read configuration (core.fsmonitor) the agent wrote
    from ketch.llm import AbortSignal
    from ketch.loop import ToolContext

    for folder in (".git/modules/sub", ".git/worktrees/wt"):
        (root / folder).mkdir(parents=True)
        (root / folder / "commondir").write_text("../..\n")
    (root / ".git" / "worktrees" / "wt" / "config.worktree").write_text("[core]\n")
    engine = _engine(root, "accept_edits", deny=[])
    tools = {t.name: t for t in coding_tools(root, ripgrep=False)}
    for path in (
        ".git/modules/sub/commondir",
        ".git/worktrees/wt/commondir",
        ".git/worktrees/wt/config.worktree",
        ".git/modules/new/commondir",
        "src/.git/config",
        "src/.git",
        ".git/HEAD",
    ):
        assert engine.check(tools["write"], {"path": path, "content": "x"}).outcome == "ask", path
    assert engine.check(tools["write"], {"path": "src/.gitignore", "content": "x"}).outcome == "allow"
    command = (
        "echo ../../../evil > .git/modules/sub/commondir; echo ../../../evil > .git/worktrees/wt/commondir; "
        "echo '[core] fsmonitor = touch pwned' >> .git/worktrees/wt/config.worktree; echo done"
    )
    result = await tools["bash"].execute({"command": command}, ToolContext(call_id="c", tool_name="bash", signal=AbortSignal()))
    assert "done" in result.text
    assert (root / ".git" / "modules" / "sub" / "commondir").read_text() == "../..\n"
    assert (root / ".git" / "worktrees" / "wt" / "commondir").read_text() == "../..\n"
    assert (root / ".git" / "worktrees" / "wt" / "config.worktree").read_text() == "[core]\n"


def test_a_content_search_of_a_folder_holding_a_links_target_is_denied(root: Path) -> None:
    (root / "store" / "vault").mkdir(parents=True)
    (root / "store" / "vault" / "token").write_text("sk-test\n")
    (root / "store" / "readme.txt").write_text("x\n")
    (root / "sub").mkdir()
    os.symlink("../store/vault", root / "sub" / "keys")
    engine = PermissionEngine("accept_edits", root=root, deny=["Read(./**/keys/**)"])
    tools = {t.name: t for t in coding_tools(root, read_only=True, ripgrep=False)}
    assert engine.check(tools["grep"], {"pattern": "sk-", "path": "store"}).outcome == "deny"
    assert engine.check(tools["read"], {"path": "store/readme.txt"}).outcome == "allow"
    assert engine.check(tools["ls"], {"path": "store"}).outcome == "allow"  # names only


@pytest.mark.parametrize("rule", ["Read(./a\x00b/*)", "Read(./\ud800/*)"])
def test_a_rule_naming_what_no_file_can_be_called_does_not_break_construction(root: Path, rule: str) -> None:
    engine = PermissionEngine("accept_edits", root=root, deny=[rule])
    Workspace(root, hidden=engine.hidden_paths(all_rules=True))
