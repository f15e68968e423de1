"""White-box test: imports ketch implementation modules (private) directly.

The workspace's ``hidden`` and ``protected`` paths are checked again when a file tool
runs, and files are opened name by name without following a symlink: a path that
becomes a symlink after the permission engine checked it (a background command can swap
it at any moment) fails the call instead of reaching a denied or outside file."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from ketch.llm import AbortSignal
from ketch.loop import Tool
from ketch.loop import ToolContext
from ketch.loop import ToolResult
from ketch.permissions import PermissionEngine
from ketch.tools import Workspace
from ketch.tools import coding_tools

KEY = "sk-test-0123456789abcdef"


async def _run(tool: Tool, **args: Any) -> ToolResult:
    result = await tool.execute(args, ToolContext(call_id="c", tool_name=tool.name, signal=AbortSignal()))
    assert isinstance(result, ToolResult)
    return result


@pytest.fixture
def root(tmp_path: Path) -> Path:
    ws = (tmp_path / "ws").resolve()
    (ws / "sub").mkdir(parents=True)
    (ws / "secrets").mkdir()
    (ws / ".env").write_text(f"KEY={KEY}\n")
    (ws / "secrets" / "token").write_text(f"{KEY}\n")
    (ws / "notes.txt").write_text("notes\n")
    (ws / "sub" / "a.txt").write_text("a\n")
    (ws / ".ketch").mkdir()
    (ws / ".ketch" / "config.toml").write_text("x = 1\n")
    return ws


def _tools(root: Path, **kwargs: Any) -> dict[str, Tool]:
    workspace = Workspace(root, **kwargs)
    return {t.name: t for t in coding_tools(workspace, sandbox=None, ripgrep=False)}


async def test_hidden_paths_are_refused_by_every_file_tool(root: Path) -> None:
    tools = _tools(root, hidden=[".env", "secrets/**"])
    os.symlink(".env", root / "link")
    hidden = "Permission denied: {} is hidden from the tools (a Read deny rule names it)."
    cases = [
        ("read", {"path": ".env"}, hidden.format(".env")),
        ("read", {"path": "link"}, hidden.format(".env")),
        ("read", {"path": "secrets/token"}, hidden.format("secrets/token")),
        ("ls", {"path": "secrets"}, hidden.format("secrets")),
        ("find", {"pattern": "*", "path": "secrets"}, hidden.format("secrets")),
        ("grep", {"pattern": "sk-", "path": ".env"}, hidden.format(".env")),
        (
            "grep",
            {"pattern": "sk-"},
            "Permission denied: . holds files hidden from the tools (a Read deny rule names them); "
            "search a folder inside it that does not.",
        ),
        ("write", {"path": ".env", "content": "x"}, hidden.format(".env")),
        ("edit", {"path": "link", "old_string": "KEY", "new_string": "K"}, hidden.format(".env")),
    ]
    for name, args, message in cases:
        result = await _run(tools[name], **args)
        assert (result.is_error, result.text) == (True, message), (name, args)
    assert (root / ".env").read_text() == f"KEY={KEY}\n"
    # what is not hidden still works
    assert (await _run(tools["grep"], pattern="a", path="sub")).text == "sub/a.txt:1:a"
    assert (await _run(tools["read"], path="notes.txt")).text == "     1\tnotes"
    assert (await _run(tools["ls"])).text.splitlines() == [".env", ".ketch/", "link", "notes.txt", "secrets/", "sub/"]
    # a recursive find leaves out what is hidden, names included
    assert (await _run(tools["find"], pattern="**/*")).text.splitlines() == [".ketch/config.toml", "link", "notes.txt", "sub/a.txt"]
    assert (await _run(tools["find"], pattern="**/token")).text == "No files match '**/token' in .."


async def test_protected_paths_refuse_changes_not_reads(root: Path) -> None:
    tools = _tools(root, protected=[".ketch/**"])
    os.symlink(".ketch/config.toml", root / "cfg")
    assert (await _run(tools["read"], path="cfg")).text == "     1\tx = 1"
    refused = "Permission denied: .ketch/config.toml may not be changed (a deny rule on changing files names it)."
    for name, args in [
        ("write", {"path": ".ketch/config.toml", "content": "y"}),
        ("write", {"path": "cfg", "content": "y"}),
        ("edit", {"path": "cfg", "old_string": "x", "new_string": "y"}),
    ]:
        result = await _run(tools[name], **args)
        assert (result.is_error, result.text) == (True, refused), (name, args)
    new = await _run(tools["write"], path=".ketch/new.toml", content="y")
    assert (new.is_error, new.text) == (
        True,
        "Permission denied: .ketch/new.toml may not be changed (a deny rule on changing files names it).",
    )
    assert sorted(os.listdir(root / ".ketch")) == ["config.toml"]


async def test_a_file_swapped_for_a_symlink_after_the_engines_check_is_refused(root: Path) -> None:
    # The loop asks the engine, then runs the tool; a background command may act between.
    engine = PermissionEngine("bypass", deny=["Read(./.env)", "Edit(.ketch/**)"], root=root)
    workspace = Workspace(root, hidden=engine.hidden_paths(), protected=engine.protected_paths())
    tools = {t.name: t for t in coding_tools(workspace, sandbox=None, ripgrep=False)}
    assert engine.check(tools["read"], {"path": "notes.txt"}).outcome == "allow"
    assert engine.check(tools["write"], {"path": "notes.txt", "content": "y"}).outcome == "allow"
    (root / "notes.txt").unlink()
    os.symlink(".env", root / "notes.txt")
    read = await _run(tools["read"], path="notes.txt")
    assert (read.is_error, read.text) == (
        True,
        "Permission denied: .env is hidden from the tools (a Read deny rule names it).",
    )
    os.unlink(root / "notes.txt")
    os.symlink(".ketch/config.toml", root / "notes.txt")
    write = await _run(tools["write"], path="notes.txt", content="y")
    assert (write.is_error, write.text) == (
        True,
        "Permission denied: .ketch/config.toml may not be changed (a deny rule on changing files names it).",
    )
    assert (root / ".ketch" / "config.toml").read_text() == "x = 1\n"
    assert KEY not in read.text


async def test_a_folder_swapped_for_a_symlink_while_the_tool_opens_fails_the_call(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The swap lands between the tool's own resolution and its open (white-box: the
    # resolution is wrapped to make the background command's move at that moment).
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "a.txt").write_text(f"{KEY}\n")
    tools = _tools(root)
    resolve = Workspace.resolve

    def resolve_then_swap(self: Workspace, path: str) -> Path:
        resolved = resolve(self, path)
        os.rename(root / "sub", root / "sub.old")
        os.symlink(outside, root / "sub")
        return resolved

    changed = (
        "{} changed while it was being opened: a folder on its path is now a symbolic link or a file. "
        "Nothing was done; check the path and try again."
    )
    cases = [
        ("read", {"path": "sub/a.txt"}, changed.format("sub/a.txt")),
        ("write", {"path": "sub/new.txt", "content": "x"}, changed.format("sub/new.txt")),
        ("write", {"path": "sub/deep/new.txt", "content": "x"}, changed.format("sub/deep/new.txt")),
        ("ls", {"path": "sub"}, changed.format("sub")),
    ]
    for name, args, message in cases:
        if name == "read" or (name == "write" and "deep" not in args["path"]):
            await _run(tools["read"], path="sub/a.txt")  # nothing stale in the way
        monkeypatch.setattr(Workspace, "resolve", resolve_then_swap)
        result = await _run(tools[name], **args)
        monkeypatch.setattr(Workspace, "resolve", resolve)
        assert (result.is_error, result.text) == (True, message), (name, args)
        os.unlink(root / "sub")
        os.rename(root / "sub.old", root / "sub")
    assert sorted(os.listdir(outside)) == ["a.txt"]
    assert (outside / "a.txt").read_text() == f"{KEY}\n"


async def test_unwalkable_but_searchable_folders_still_open(root: Path) -> None:
    # O_PATH: a folder that may be searched but not listed is walked through as before
    tools = _tools(root)
    (root / "sub" / "inner").mkdir()
    (root / "sub" / "inner" / "b.txt").write_text("b\n")
    os.chmod(root / "sub", 0o311)
    try:
        assert (await _run(tools["read"], path="sub/inner/b.txt")).text == "     1\tb"
    finally:
        os.chmod(root / "sub", 0o755)


async def test_rules_a_sandbox_cannot_search_are_checked_by_the_file_tools(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # ~/**/*.pem would have a sandbox walk the home folder at every command, so the bash
    # tool is not given it (and asks instead); the file tools match names and get it
    home = (tmp_path / "home").resolve()
    root = home / "proj"
    root.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    (root / "key.pem").write_text(f"{KEY}\n")
    (root / "deps.lock").write_text("locked\n")
    (root / "pub.txt").write_text("public\n")
    engine = PermissionEngine("bypass", deny=["Read(~/**/*.pem)", "Edit(~/**/*.lock)"], root=root)
    assert engine.hidden_paths() == () and engine.protected_paths() == ()
    assert engine.hidden_paths(all_rules=True) == (f"{home}/**/*.pem",)
    assert engine.protected_paths(all_rules=True) == (f"{home}/**/*.lock",)
    workspace = Workspace(root, hidden=engine.hidden_paths(all_rules=True), protected=engine.protected_paths(all_rules=True))
    tools = {t.name: t for t in coding_tools(workspace, sandbox=None, ripgrep=False)}
    assert engine.check(tools["read"], {"path": "pub.txt"}).outcome == "allow"
    (root / "pub.txt").unlink()
    os.symlink("key.pem", root / "pub.txt")
    read = await _run(tools["read"], path="pub.txt")
    assert read.text == "Permission denied: key.pem is hidden from the tools (a Read deny rule names it)."
    os.unlink(root / "pub.txt")
    os.symlink("deps.lock", root / "pub.txt")
    write = await _run(tools["write"], path="pub.txt", content="tampered")
    assert write.text == "Permission denied: deps.lock may not be changed (a deny rule on changing files names it)."
    assert (root / "deps.lock").read_text() == "locked\n"


async def test_a_path_the_engine_asks_about_is_not_changed_through_a_symlink(root: Path) -> None:
    # accept_edits asks before .git/config changes and lets pub.txt change unasked; a
    # background command then makes pub.txt a symlink to .git/config
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("[core]\n")
    (root / "pub.txt").write_text("public\n")
    engine = PermissionEngine("accept_edits", root=root)
    tools = _tools(root)
    assert engine.check(tools["write"], {"path": ".git/config", "content": "x"}).outcome == "ask"
    assert engine.check(tools["write"], {"path": "pub.txt", "content": "x"}).outcome == "allow"
    (root / "pub.txt").unlink()
    os.symlink(".git/config", root / "pub.txt")
    write = await _run(tools["write"], path="pub.txt", content="[core]\n\tfsmonitor = touch pwned\n")
    assert write.text == (
        "Permission denied: pub.txt leads through a symlink to .git/config, which is asked about before it "
        "changes; give .git/config itself."
    )
    assert (root / ".git" / "config").read_text() == "[core]\n"
    # named as itself (after the engine asked), it changes
    await _run(tools["read"], path=".git/config")
    direct = await _run(tools["edit"], path="sub/../.git/config", old_string="[core]", new_string="[core] ")
    assert not direct.is_error, direct.text


async def test_a_path_an_ask_rule_names_is_not_reached_through_a_symlink(root: Path) -> None:
    # The engine asks before secrets/ is read and before deps.lock changes, and lets
    # pub.txt be read and written unasked; a background command then makes pub.txt (or a
    # folder) a symlink to one of them.
    (root / "pub.txt").write_text("public\n")
    (root / "deps.lock").write_text("locked\n")
    engine = PermissionEngine("accept_edits", root=root, ask=["Read(secrets/**)", "Edit(deps.lock)"])
    assert engine.ask_read_paths() == (f"{root}/secrets/**",)
    assert engine.ask_edit_paths() == (f"{root}/**/deps.lock",)
    tools = _tools(root, ask_read=engine.ask_read_paths(), ask_edit=engine.ask_edit_paths())
    assert engine.check(tools["read"], {"path": "secrets/token"}).outcome == "ask"
    assert engine.check(tools["read"], {"path": "pub.txt"}).outcome == "allow"
    assert engine.check(tools["grep"], {"pattern": "sk-", "path": "sub"}).outcome == "allow"
    assert engine.check(tools["write"], {"path": "pub.txt", "content": "x"}).outcome == "allow"
    (root / "pub.txt").unlink()
    os.symlink("secrets/token", root / "pub.txt")
    os.rename(root / "sub", root / "sub.old")
    os.symlink("secrets", root / "sub")
    via = "Permission denied: {} leads through a symlink to {}, which is asked about before it {}; give {} itself."
    cases = [
        ("read", {"path": "pub.txt"}, via.format("pub.txt", "secrets/token", "is read", "secrets/token")),
        ("read", {"path": "sub/token"}, via.format("sub/token", "secrets/token", "is read", "secrets/token")),
        ("ls", {"path": "sub"}, via.format("sub", "secrets", "is read", "secrets")),
        ("grep", {"pattern": "sk-", "path": "sub"}, via.format("sub", "secrets", "is read", "secrets")),
    ]
    for name, args, message in cases:
        result = await _run(tools[name], **args)
        assert (result.is_error, result.text) == (True, message), (name, args)
    # writing pub.txt would not read the asked file: only the Edit ask paths hold a write
    os.unlink(root / "pub.txt")
    os.symlink("deps.lock", root / "pub.txt")
    write = await _run(tools["write"], path="pub.txt", content="tampered")
    assert (write.is_error, write.text) == (True, via.format("pub.txt", "deps.lock", "changes", "deps.lock"))
    assert (root / "deps.lock").read_text() == "locked\n"
    # named as themselves (the engine asks), they are read and changed
    assert (await _run(tools["read"], path="secrets/token")).text == f"     1\t{KEY}"
    assert (await _run(tools["grep"], pattern="sk-", path="secrets")).text == f"secrets/token:1:{KEY}"
    await _run(tools["read"], path="deps.lock")
    assert not (await _run(tools["write"], path="deps.lock", content="new\n")).is_error
    # the default ask_edit (the sandbox's protected paths) no longer applies once replaced
    os.makedirs(root / ".git")
    (root / ".git" / "config").write_text("[core]\n")
    os.symlink(".git/config", root / "gitcfg")
    assert not (await _run(_tools(root)["read"], path="gitcfg")).is_error  # reading is not asked


async def test_a_symlink_the_asking_rule_names_itself_leads_where_that_rule_asks(root: Path) -> None:
    # conf -> shared is there on purpose: Read(./conf/**) and Edit(./conf/**) ask about
    # conf/a.txt, and what it leads to is the same rule's (the engine and the sandbox
    # resolve the link), so the approved call reads and writes it; asked once, not refused
    # and asked again as shared/a.txt
    (root / "shared").mkdir()
    (root / "shared" / "a.txt").write_text("shared\n")
    os.symlink("shared", root / "conf")
    engine = PermissionEngine("accept_edits", root=root, ask=["Read(./conf/**)", "Edit(./conf/**)", "Read(./secrets/**)"])
    tools = _tools(root, ask_read=engine.ask_read_paths(), ask_edit=engine.ask_edit_paths())
    assert engine.check(tools["read"], {"path": "conf/a.txt"}).outcome == "ask"
    assert engine.check(tools["write"], {"path": "conf/a.txt", "content": "x"}).outcome == "ask"
    assert (await _run(tools["read"], path="conf/a.txt")).text == "     1\tshared"
    assert (await _run(tools["ls"], path="conf")).text == "a.txt"
    assert (await _run(tools["grep"], pattern="sha", path="conf")).text == "shared/a.txt:1:shared"
    write = await _run(tools["write"], path="conf/a.txt", content="changed\n")
    assert not write.is_error, write.text
    assert (root / "shared" / "a.txt").read_text() == "changed\n"
    # any other link on the way is refused: to what another rule asks about, and to another
    # file this rule asks about (the question named conf/a.txt, not the file it leads to)
    os.symlink("../secrets/token", root / "shared" / "token")
    os.symlink("a.txt", root / "shared" / "alias.txt")
    via = "Permission denied: {} leads through a symlink to {}, which is asked about before it is read; give {} itself."
    for written, real in [("conf/token", "secrets/token"), ("conf/alias.txt", "shared/a.txt")]:
        assert engine.check(tools["read"], {"path": written}).outcome == "ask"
        read = await _run(tools["read"], path=written)
        assert (read.is_error, read.text) == (True, via.format(written, real, real)), written


async def test_a_base_link_repointed_after_the_workspace_was_made_is_a_detour(root: Path) -> None:
    # Read(./conf/*.key) names vault/master.key as conf/x.key too (shared/x.key leads
    # there); the engine asks about conf/master.key (approved), then a command repoints
    # conf to vault: the base link is no longer the one the session started with
    (root / "shared").mkdir()
    (root / "vault").mkdir()
    (root / "vault" / "master.key").write_text(f"{KEY}\n")
    os.symlink("../vault/master.key", root / "shared" / "x.key")
    (root / "prod").mkdir()
    (root / "prod" / "app.toml").write_text("prod\n")
    os.symlink("../prod/app.toml", root / "shared" / "x.toml")
    os.symlink("shared", root / "conf")
    engine = PermissionEngine("accept_edits", root=root, ask=["Read(./conf/*.key)", "Edit(./conf/*.toml)"])
    tools = _tools(root, ask_read=engine.ask_read_paths(), ask_edit=engine.ask_edit_paths())
    assert engine.check(tools["read"], {"path": "conf/master.key"}).outcome == "ask"
    assert engine.check(tools["grep"], {"pattern": "sk-", "path": "conf"}).outcome == "ask"
    assert engine.check(tools["write"], {"path": "conf/app.toml", "content": "x"}).outcome == "ask"
    os.unlink(root / "conf")
    os.symlink("vault", root / "conf")
    via = "Permission denied: {} leads through a symlink to {}, which is asked about before it {}; give {} itself."
    read = await _run(tools["read"], path="conf/master.key")
    assert (read.is_error, read.text) == (True, via.format("conf/master.key", "vault/master.key", "is read", "vault/master.key"))
    grep = await _run(tools["grep"], pattern="sk-", path="conf")
    assert (grep.is_error, grep.text) == (True, via.format("conf", "vault", "is read", "vault"))
    os.unlink(root / "conf")
    os.symlink("prod", root / "conf")
    write = await _run(tools["write"], path="conf/app.toml", content="tampered\n")
    assert (write.is_error, write.text) == (True, via.format("conf/app.toml", "prod/app.toml", "changes", "prod/app.toml"))
    assert (root / "prod" / "app.toml").read_text() == "prod\n"
    # a workspace made later in the same process (a fork, /clear, another session) keeps
    # the base where the first one found it: the repointed link is still a detour
    again = _tools(root, ask_read=engine.ask_read_paths(), ask_edit=engine.ask_edit_paths())
    write = await _run(again["write"], path="conf/app.toml", content="tampered\n")
    assert (write.is_error, write.text) == (True, via.format("conf/app.toml", "prod/app.toml", "changes", "prod/app.toml"))
    os.unlink(root / "conf")
    os.symlink("vault", root / "conf")
    read = await _run(again["read"], path="conf/master.key")
    assert (read.is_error, read.text) == (True, via.format("conf/master.key", "vault/master.key", "is read", "vault/master.key"))


@pytest.mark.parametrize(
    ("rule", "link", "target", "name", "args"),
    [
        ("Read(*.pem)", "test.pem", "keys/prod.pem", "read", {"path": "test.pem"}),
        ("Read(**/keys/**)", "tmp/keys/a", "prod/keys/id_rsa", "read", {"path": "tmp/keys/a"}),
        ("Read(s*/token)", "scratch/token", "secrets/token", "read", {"path": "scratch/token"}),
        ("Read(./conf/**)", "conf/public.txt", "conf/private.key", "read", {"path": "conf/public.txt"}),
        ("Read(*.pem)", "docs", "keys", "grep", {"pattern": "sk-", "path": "docs"}),
        ("Edit(**/*.pem)", "test.pem", "keys/prod.pem", "write", {"path": "test.pem", "content": "x"}),
    ],
)
async def test_one_approval_does_not_cover_another_file_the_same_rule_asks_about(
    root: Path, rule: str, link: str, target: str, name: str, args: dict[str, Any]
) -> None:
    # an ask rule asks about each file it names: the engine asks about the path the call
    # wrote, and a symlink there (made after the question, or before it: the tool sees the
    # same) that leads to another file the rule names is refused on that approval
    secret = root / "keys" / "prod.pem" if name == "grep" else root / target
    secret.parent.mkdir(parents=True, exist_ok=True)
    secret.write_text(f"{KEY}\n")
    written = root / link
    written.parent.mkdir(parents=True, exist_ok=True)
    if name == "grep":
        written.mkdir()
    else:
        written.write_text("mine\n")
    engine = PermissionEngine("accept_edits", root=root, ask=[rule])
    tools = _tools(root, ask_read=engine.ask_read_paths(), ask_edit=engine.ask_edit_paths())
    assert engine.check(tools[name], args).outcome == "ask"
    if name == "grep":
        written.rmdir()
    else:
        written.unlink()
    os.symlink("../" * link.count("/") + target, written)
    result = await _run(tools[name], **args)
    verb = "changes" if name == "write" else "is read"
    assert (result.is_error, result.text) == (
        True,
        f"Permission denied: {link} leads through a symlink to {target}, which is asked about before it {verb}; "
        f"give {target} itself.",
    )
    assert secret.read_text() == f"{KEY}\n"


async def test_a_symlink_a_wildcard_pattern_names_hides_or_protects_where_it_leads(root: Path) -> None:
    # the sandbox hides and protects what the named paths resolve to; so do the file tools
    (root / "vault").mkdir()
    (root / "vault" / "token").write_text(f"{KEY}\n")
    (root / "gen").mkdir()
    (root / "gen" / "out.txt").write_text("generated\n")
    os.symlink("../vault", root / "sub" / "keys")
    os.symlink("../gen", root / "sub" / "build")
    tools = _tools(root, hidden=["**/keys/**"], protected=["sub/b*"])
    read = await _run(tools["read"], path="vault/token")
    assert (read.is_error, read.text) == (
        True,
        "Permission denied: vault/token is hidden from the tools (a Read deny rule names it).",
    )
    assert (await _run(tools["ls"], path="vault")).is_error
    await _run(tools["read"], path="gen/out.txt")
    write = await _run(tools["write"], path="gen/out.txt", content="x")
    assert (write.is_error, write.text) == (
        True,
        "Permission denied: gen/out.txt may not be changed (a deny rule on changing files names it).",
    )
    assert (root / "gen" / "out.txt").read_text() == "generated\n"
    # what no pattern names, through a link or not, is untouched
    assert (await _run(tools["read"], path="sub/a.txt")).text == "     1\ta"


async def test_a_path_written_with_the_workspaces_name_cannot_switch_files_after_the_check(root: Path) -> None:
    # "ws/.claude/settings.json" names ws/.claude/settings.json while a folder ws exists in
    # the workspace (the engine allows that decoy: only the root's .claude is protected),
    # and .claude/settings.json once a command removes the folder
    (root / ".claude").mkdir()
    (root / ".claude" / "settings.json").write_text("{}\n")
    (root / "ws" / ".claude").mkdir(parents=True)
    (root / "ws" / ".claude" / "settings.json").write_text("[decoy]\n")
    assert root.name == "ws"
    engine = PermissionEngine("accept_edits", root=root, ask=["Read(secrets/**)"])
    tools = _tools(root, ask_read=engine.ask_read_paths())
    assert engine.check(tools["write"], {"path": "ws/.claude/settings.json", "content": "x"}).outcome == "allow"
    assert engine.check(tools["read"], {"path": "ws/secrets/token"}).outcome == "allow"
    # (a decoy git file or .ketch is asked about already: those anywhere below the root are)
    assert engine.check(tools["write"], {"path": "ws/.git/config", "content": "x"}).outcome == "ask"
    assert engine.check(tools["write"], {"path": "ws/.ketch/config.toml", "content": "x"}).outcome == "ask"
    shutil.rmtree(root / "ws")
    by_name = "Permission denied: {} stands for {} by the workspace's folder name, which is asked about before it {}; give {} itself."
    write = await _run(tools["write"], path="ws/.claude/settings.json", content='{"permissions": {}}\n')
    shown = ".claude/settings.json"
    assert (write.is_error, write.text) == (True, by_name.format("ws/.claude/settings.json", shown, "changes", shown))
    assert (root / ".claude" / "settings.json").read_text() == "{}\n"
    read = await _run(tools["read"], path="ws/secrets/token")
    assert (read.is_error, read.text) == (True, by_name.format("ws/secrets/token", "secrets/token", "is read", "secrets/token"))
    # what nothing asks about may still be named so
    assert (await _run(tools["read"], path="ws/notes.txt")).text == "     1\tnotes"


async def test_a_symlink_above_the_workspace_is_no_detour(root: Path, tmp_path: Path) -> None:
    # an absolute path through another name of the workspace (/tmp -> /private/tmp on
    # macOS, a linked home folder) names the file itself; a link inside still counts
    os.symlink(tmp_path, tmp_path.parent / f"{tmp_path.name}-alias")
    alias = tmp_path.parent / f"{tmp_path.name}-alias" / "ws"
    os.symlink("secrets/token", root / "pub.txt")
    tools = _tools(root, ask_read=["secrets/**"])
    assert (await _run(tools["read"], path=f"{alias}/secrets/token")).text == f"     1\t{KEY}"
    via = await _run(tools["read"], path=f"{alias}/pub.txt")
    assert (via.is_error, via.text) == (
        True,
        f"Permission denied: {alias}/pub.txt leads through a symlink to secrets/token, which is asked about "
        "before it is read; give secrets/token itself.",
    )
    # a link inside the workspace to itself is a detour, also after the alias
    os.symlink(".", root / "self")
    loop = await _run(tools["read"], path=f"{alias}/self/secrets/token")
    assert loop.is_error and loop.text.startswith(f"Permission denied: {alias}/self/secrets/token leads through a symlink")


async def test_ask_edit_entries_are_patterns_like_the_rules(root: Path) -> None:
    (root / "src").mkdir()
    (root / "src" / "deps.lock").write_text("locked\n")
    os.symlink("src/deps.lock", root / "lnk")
    for entry in ("./src/*.lock", "src/*.lock/", str(root / "src" / "*.lock")):
        write = await _run(_tools(root, ask_edit=[entry])["write"], path="lnk", content="x")
        assert write.is_error and write.text.startswith("Permission denied: lnk leads through a symlink"), entry
    assert (root / "src" / "deps.lock").read_text() == "locked\n"


async def test_a_path_that_cannot_be_encoded_is_an_error_result(root: Path) -> None:
    tools = _tools(root)
    for name, args in [("read", {"path": "a\ud800"}), ("write", {"path": "a\ud800", "content": "x"}), ("ls", {"path": "\ud800"})]:
        result = await _run(tools[name], **args)
        assert result.is_error and result.text.startswith(f"The path {args['path']!r} cannot be used: "), result.text


@pytest.mark.parametrize("backend", ["rg", "python"])
async def test_a_search_in_the_sandbox_cannot_follow_a_swapped_folder_to_hidden_files(
    root: Path, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The swap lands after grep's own check (white-box: the check is wrapped to make the
    # background command's move at that moment); the search process runs in the sandbox,
    # where the hidden folder is empty. Without the sandbox the search reads the key.
    import shutil

    from ketch.sandbox import default_sandbox
    from ketch.tools import GrepTool

    sandbox = default_sandbox()
    assert sandbox is not None, "bubblewrap is needed: run `bash scripts/test.sh`, which installs it"
    rg = shutil.which("rg") if backend == "rg" else False
    assert rg is not None, "ripgrep is needed: run `bash scripts/test.sh`, which installs it"
    (root / "pub").mkdir()
    (root / "pub" / "token").write_text("public\n")
    # hidden as a library user writes it: relative to the workspace
    grep = GrepTool(Workspace(root, hidden=["secrets/**"]), ripgrep=rg, sandbox=sandbox, hidden=["secrets/**"])
    assert grep.hidden == (root / "secrets/**",)
    refusal = Workspace.refusal

    def refusal_then_swap(self: Workspace, *args: Any, **kwargs: Any) -> str | None:
        answer = refusal(self, *args, **kwargs)
        os.rename(root / "pub", root / "pub.old")
        os.symlink("secrets", root / "pub")
        return answer

    assert (await _run(grep, pattern="sk-|public", path="pub")).text == "pub/token:1:public"
    monkeypatch.setattr(Workspace, "refusal", refusal_then_swap)
    swapped = await _run(grep, pattern="sk-|public", path="pub")
    assert swapped.text == "No matches for 'sk-|public' in pub."


async def test_a_pattern_through_a_symlinked_folder_follows_the_link_as_it_is_now(root: Path) -> None:
    for release in ("v1", "v2"):
        (root / "releases" / release).mkdir(parents=True)
        (root / "releases" / release / ".env").write_text(f"KEY={KEY}\n")
    os.symlink("releases/v1", root / "current")
    tools = _tools(root, hidden=["current/.env"])
    refused = "Permission denied: releases/{} is hidden from the tools (a Read deny rule names it)."
    assert (await _run(tools["read"], path="releases/v1/.env")).text == refused.format("v1/.env")
    os.unlink(root / "current")
    os.symlink("releases/v2", root / "current")
    assert (await _run(tools["read"], path="releases/v2/.env")).text == refused.format("v2/.env")
    assert (await _run(tools["read"], path="releases/v1/.env")).text == f"     1\tKEY={KEY}"


async def test_find_does_not_follow_a_folder_swapped_for_a_symlink(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # white-box: the swaps land at the moments a background command would need
    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    (outside / "id_rsa").write_text("x")
    (root / "pub" / "inner").mkdir(parents=True)
    (root / "pub" / "inner" / "a.txt").write_text("a")
    tools = _tools(root, hidden=["secrets/**"])
    assert (await _run(tools["find"], pattern="**/*", path="pub")).text == "pub/inner/a.txt"
    is_hidden = Workspace.is_hidden

    def swap_inner(self: Workspace, path: str, patterns: tuple[str, ...] | None = None) -> bool:
        if path.endswith("/pub/inner") and not os.path.islink(path):
            os.rename(path, path + ".old")
            os.symlink(outside, path)
        return is_hidden(self, path, patterns)

    monkeypatch.setattr(Workspace, "is_hidden", swap_inner)
    assert (await _run(tools["find"], pattern="**/*", path="pub")).text == "No files match '**/*' in pub."
    monkeypatch.setattr(Workspace, "is_hidden", is_hidden)
    os.unlink(root / "pub" / "inner")
    os.rename(root / "pub" / "inner.old", root / "pub" / "inner")
    refusal = Workspace.refusal

    def refusal_then_swap(self: Workspace, *args: Any, **kwargs: Any) -> str | None:
        answer = refusal(self, *args, **kwargs)
        os.rename(root / "pub", root / "pub.old")
        os.symlink(outside, root / "pub")
        return answer

    monkeypatch.setattr(Workspace, "refusal", refusal_then_swap)
    result = await _run(tools["find"], pattern="**/*", path="pub")
    assert result.text == (
        "pub changed while it was being opened: a folder on its path is now a symbolic link or a file. "
        "Nothing was done; check the path and try again."
    )


class _BrokenSandbox:
    """A sandbox whose wrapper fails the way bwrap does without user namespaces."""

    name = "broken"

    def __init__(self, usable: bool) -> None:
        self.usable = usable

    def unavailable_reason(self) -> str | None:
        return None if self.usable else "user namespaces are disabled"

    def wrap(self, argv: Any, policy: Any, env: Any) -> tuple[list[str], dict[str, str]]:
        return ["/bin/sh", "-c", "echo 'bwrap: setting up uid map: Permission denied' >&2; exit 1"], dict(env)

    def release(self, wrapped: Any) -> None:
        pass


async def test_a_search_whose_sandbox_fails_is_an_error_not_no_matches(root: Path) -> None:
    import shutil

    from ketch.tools import GrepTool

    rg = shutil.which("rg")
    assert rg is not None, "ripgrep is needed: run `bash scripts/test.sh`, which installs it"
    assert GrepTool(Workspace(root), ripgrep=rg, sandbox=_BrokenSandbox(usable=False)).sandbox is None
    grep = GrepTool(Workspace(root), ripgrep=rg, sandbox=_BrokenSandbox(usable=True))
    result = await _run(grep, pattern="notes")
    assert (result.is_error, result.text) == (True, "ripgrep failed: bwrap: setting up uid map: Permission denied")


def _programs_in(folder: Path, rg: str) -> tuple[str, str]:
    """A copy of ripgrep and a link to this Python in ``folder`` (under /tmp)."""
    import sys

    folder.mkdir()
    os.symlink(os.path.realpath(sys.executable), folder / "python")
    return str(shutil.copy(os.path.realpath(rg), folder / "rg")), str(folder / "python")


async def test_a_search_program_kept_in_tmp_still_runs_in_the_sandbox(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # /tmp is private in the sandbox: a ripgrep or a Python (a virtualenv) under it must
    # be shown there, or the search cannot start
    import shutil
    import sys

    from ketch.sandbox import default_sandbox
    from ketch.tools import GrepTool

    sandbox = default_sandbox()
    assert sandbox is not None, "bubblewrap is needed: run `bash scripts/test.sh`, which installs it"
    found = shutil.which("rg")
    assert found is not None, "ripgrep is needed: run `bash scripts/test.sh`, which installs it"
    rg, python = _programs_in(tmp_path / "programs", found)
    grep = GrepTool(Workspace(root), ripgrep=str(rg), sandbox=sandbox)
    assert (await _run(grep, pattern="notes", path=".")).text == "notes.txt:1:notes"
    monkeypatch.setattr(sys, "executable", python)
    fallback = GrepTool(Workspace(root), ripgrep=False, sandbox=sandbox)
    assert (await _run(fallback, pattern="notes", path=".")).text == "notes.txt:1:notes"
