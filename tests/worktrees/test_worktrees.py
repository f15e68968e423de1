"""Git worktrees for parallel work: ketch.worktrees' create / list / merge / remove, the
sandbox's protection of a worktree's git files, subagents and teammates with
``isolation="worktree"`` (scripted models)."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from ketch import Agent
from ketch.llm import AbortSignal
from ketch.loop import ToolContext
from ketch.loop import ToolResult
from ketch.sandbox import default_sandbox
from ketch.sandbox import sandbox_unavailable_reason
from ketch.sessions import FileCheckpoints
from ketch.subagents import SubagentFileError
from ketch.subagents import Subagents
from ketch.subagents import SubagentSpec
from ketch.subagents import parse_agent_file
from ketch.teams import Team
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call
from ketch.tools import BashTool
from ketch.tools import Workspace
from ketch.tools import coding_tools
from ketch.worktrees import WorktreeConflict
from ketch.worktrees import WorktreeError
from ketch.worktrees import create_worktree
from ketch.worktrees import list_worktrees
from ketch.worktrees import merge_worktree
from ketch.worktrees import rebase_tools
from ketch.worktrees import remove_worktree

pytestmark = pytest.mark.usefixtures("scratch_in_tmp_path")


def git(root: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = (tmp_path / "repo").resolve()
    root.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main", str(root)], check=True)
    git(root, "config", "user.name", "t")
    git(root, "config", "user.email", "t@example.com")
    (root / "a.txt").write_text("one\n")
    git(root, "add", "a.txt")
    git(root, "commit", "-q", "-m", "first")
    return root


def test_a_worktree_is_made_listed_merged_and_removed(repo: Path) -> None:
    wt = create_worktree(repo, "fix")
    assert (wt.name, wt.path, wt.branch, wt.base) == ("fix", repo / ".ketch/worktrees/fix", "ketch/fix", "main")
    assert (wt.path / "a.txt").read_text() == "one\n"
    assert git(repo, "status", "--porcelain") == ""  # .ketch/worktrees is git-ignored
    assert create_worktree(repo, "fix").path == wt.path  # the same name: the same worktree
    (wt.path / "a.txt").write_text("two\n")
    (wt.path / "new.txt").write_text("new\n")
    [listed] = list_worktrees(repo)
    assert (listed.name, listed.uncommitted, listed.ahead) == ("fix", 2, 0)
    assert [w.name for w in list_worktrees(wt.path)] == ["fix"]  # also asked from inside the worktree
    with pytest.raises(WorktreeError) as refused:
        remove_worktree(repo, "fix")
    assert str(refused.value) == (
        "worktree 'fix' has 2 uncommitted change(s): merge it first (ketch worktree merge fix) or remove it with --force"
    )
    merged = merge_worktree(repo, "fix")
    assert (merged.uncommitted, merged.ahead) == (0, 0)
    assert (repo / "a.txt").read_text() == "two\n"
    assert (repo / "new.txt").read_text() == "new\n"
    assert git(repo, "log", "--first-parent", "--format=%s").splitlines() == ["Merge worktree fix (ketch/fix)", "first"]
    assert git(repo, "log", "-1", "--format=%s", "ketch/fix") == "ketch worktree fix\n"
    remove_worktree(repo, "fix")
    assert not wt.path.exists()
    assert list_worktrees(repo) == []
    assert git(repo, "branch", "--list", "ketch/*") == ""


def test_a_conflicting_merge_is_reported_and_undone(repo: Path) -> None:
    wt = create_worktree(repo, "other")
    (wt.path / "a.txt").write_text("from the worktree\n")
    (repo / "a.txt").write_text("from main\n")
    git(repo, "commit", "-qam", "main's change")
    with pytest.raises(WorktreeConflict) as conflict:
        merge_worktree(repo, "other")
    assert conflict.value.files == ["a.txt"]
    assert str(conflict.value) == (
        f"merging ketch/other into main conflicts in a.txt; nothing was merged (resolve it yourself: git merge ketch/other in {repo})"
    )
    assert (repo / "a.txt").read_text() == "from main\n"
    assert not (repo / ".git/MERGE_HEAD").exists()
    assert git(repo, "status", "--porcelain") == ""
    [listed] = list_worktrees(repo)
    assert (listed.uncommitted, listed.ahead) == (0, 1)  # the worktree's change was committed on its branch
    with pytest.raises(WorktreeError, match=r"^branch ketch/other has 1 commit\(s\) not merged into main: merge it first"):
        remove_worktree(repo, "other")
    remove_worktree(repo, "other", force=True)
    assert list_worktrees(repo) == []


def test_bad_names_and_places_are_one_line_errors(repo: Path, tmp_path: Path) -> None:
    with pytest.raises(WorktreeError) as bad:
        create_worktree(repo, "../x")
    assert str(bad.value) == "worktree name '../x': use letters, digits, '-' and '_' (up to 63, starting with a letter or digit)"
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(WorktreeError, match=r"^.*plain is not inside a git repository's checkout"):
        create_worktree(plain)
    with pytest.raises(WorktreeError) as missing:
        merge_worktree(repo, "nope")
    assert str(missing.value) == "no worktree named 'nope' (there are: none)"
    git(repo, "checkout", "-q", "--detach")
    with pytest.raises(WorktreeError, match=r"^HEAD is detached in .*: check out a branch first"):
        create_worktree(repo, "x")


async def _bash(tool: BashTool, command: str) -> ToolResult:
    return await tool.execute({"command": command}, ToolContext(call_id="c", tool_name="bash", signal=AbortSignal()))


async def test_a_sandboxed_command_in_a_worktree_cannot_change_git_files(repo: Path) -> None:
    sandbox = default_sandbox()
    if sandbox is None:
        pytest.fail(f"this test needs a working sandbox: {sandbox_unavailable_reason()}")
    wt = create_worktree(repo, "boxed")
    tool = BashTool(Workspace(wt.path), sandbox=sandbox, write_allowed=lambda: True)
    before = {p: (repo / p).read_bytes() for p in (".git/config", ".git/worktrees/boxed/HEAD", ".git/worktrees/boxed/commondir")}
    dot_git = (wt.path / ".git").read_bytes()
    attempts = [
        "echo 'touch /tmp/pwned' > ../../../.git/hooks/pre-commit",
        f"echo '[core]' >> {repo}/.git/config",
        f"echo x > {repo}/.git/worktrees/boxed/config.worktree",
        f"echo ref > {repo}/.git/worktrees/boxed/HEAD",
        f"echo /tmp > {repo}/.git/worktrees/boxed/commondir",
        "echo 'gitdir: /tmp/elsewhere' > .git",
        "rm -f .git",
        "git config core.hooksPath /tmp",
    ]
    for command in attempts:
        result = await _bash(tool, command + " && echo WROTE")
        assert "WROTE" not in result.text, command
    assert {p: (repo / p).read_bytes() for p in before} == before
    assert (wt.path / ".git").read_bytes() == dot_git
    assert not (repo / ".git/hooks/pre-commit").exists()
    assert not (repo / ".git/worktrees/boxed/config.worktree").exists()
    # the work tree itself is writable
    assert (await _bash(tool, "echo hi > b.txt && cat b.txt")).text == "hi"


def _writer(content: str) -> ScriptedModel:
    return ScriptedModel(
        [
            reply(tool_call("write", {"path": "out.txt", "content": content}, id="w")),
            reply(tool_call("bash", {"command": "echo more >> out.txt && sed -i s/one/ONE/ a.txt"}, id="b")),
            f"wrote {content.strip()}",
        ]
    )


async def test_two_subagents_write_the_same_path_in_their_own_worktrees(repo: Path) -> None:
    sandbox = default_sandbox()
    tools = coding_tools(repo, sandbox=sandbox)
    parent = Agent(
        ScriptedModel(
            [
                reply(
                    tool_call(
                        "subagent",
                        {"tasks": [{"agent": "left", "task": "write L"}, {"agent": "right", "task": "write R"}]},
                    )
                ),
                "both done",
            ]
        ),
        tools=tools,
    )
    subagents = Subagents(
        [
            SubagentSpec("left", "writes", model=_writer("L\n"), isolation="worktree"),
            SubagentSpec("right", "writes", model=_writer("R\n"), isolation="worktree"),
        ]
    ).attach(parent)
    await parent.prompt("go")
    left, right = (subagents.runs[p] for p in ("main/left#1", "main/right#1"))
    assert (left.status, right.status) == ("completed", "completed")
    assert left.worktree is not None and right.worktree is not None
    assert left.worktree.path != right.worktree.path
    assert (left.worktree.path / "out.txt").read_text() == "L\nmore\n"
    assert (right.worktree.path / "out.txt").read_text() == "R\nmore\n"
    assert (left.worktree.path / "a.txt").read_text() == (right.worktree.path / "a.txt").read_text() == "ONE\n"
    assert not (repo / "out.txt").exists()  # the parent's workspace is untouched
    assert (repo / "a.txt").read_text() == "one\n"
    [text] = [m.text for m in parent.messages if m.role == "tool_result"]  # type: ignore[attr-defined]
    assert f"(Worked in git worktree {left.worktree.name}, branch {left.worktree.branch}, at {left.worktree.path};" in text
    assert sorted(w.name for w in list_worktrees(repo)) == sorted([left.worktree.name, right.worktree.name])
    assert all(w.name.startswith(("left-", "right-")) for w in list_worktrees(repo))
    # the first merges cleanly; the second conflicts on out.txt and a.txt, and is reported
    merge_worktree(repo, left.worktree.name)
    assert (repo / "out.txt").read_text() == "L\nmore\n"
    with pytest.raises(WorktreeConflict) as conflict:
        merge_worktree(repo, right.worktree.name)
    assert conflict.value.files == ["out.txt"]


async def test_a_subagent_needing_a_worktree_outside_a_repository_fails_with_the_reason(tmp_path: Path) -> None:
    plain = (tmp_path / "plain").resolve()
    plain.mkdir()
    parent = Agent(
        ScriptedModel([reply(tool_call("subagent", {"agent": "iso", "task": "x"})), "ok"]),
        tools=coding_tools(plain, sandbox=None),
    )
    Subagents([SubagentSpec("iso", "isolated", model=ScriptedModel(["never"]), isolation="worktree")]).attach(parent)
    await parent.prompt("go")
    [text] = [m.text for m in parent.messages if m.role == "tool_result"]  # type: ignore[attr-defined]
    assert text == (
        f"Subagent main/iso#1 failed: agent 'iso' needs a worktree (isolation: worktree): "
        f"{plain} is not inside a git repository's checkout: worktrees need one (git init, one commit)"
    )


def test_isolation_in_agent_files_and_specs() -> None:
    spec = parse_agent_file("---\nname: w\ndescription: d\nisolation: worktree\n---\nbody\n")
    assert spec.isolation == "worktree"
    assert parse_agent_file("---\nname: w\ndescription: d\n---\n").isolation is None
    with pytest.raises(SubagentFileError) as bad:
        parse_agent_file("---\nname: w\ndescription: d\nisolation: container\n---\n", source="a.md")
    assert str(bad.value) == "a.md: isolation must be 'worktree' or absent, got 'container'"


async def test_a_teammate_spawned_with_a_worktree_works_there(repo: Path) -> None:
    lead = Agent(ScriptedModel(["lead"]), tools=coding_tools(repo, sandbox=None))
    async with Team() as team:
        mate = team.spawn(
            "builder", lead, model=ScriptedModel([reply(tool_call("write", {"path": "t.txt", "content": "T"})), "ok"]),
            isolation="worktree",
        )
        assert mate.worktree is not None and mate.worktree.name.startswith("builder-")
        await mate.agent.prompt("go")
        assert (mate.worktree.path / "t.txt").read_text() == "T"
        assert not (repo / "t.txt").exists()
        with pytest.raises(ValueError, match=r"^isolation must be 'worktree' or None, got 'vm'$"):
            team.spawn("other", lead, isolation="vm")
    assert [w.name for w in list_worktrees(repo)] == [mate.worktree.name]


class _Blobs:
    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}

    async def put_blob(self, data: bytes) -> str:
        import hashlib

        digest = hashlib.sha256(data).hexdigest()
        self.blobs[digest] = data
        return digest

    async def get_blob(self, digest: str) -> bytes:
        return self.blobs[digest]


async def _checkpointed(checkpoints: Any, tool: BashTool, command: str, meanwhile: Any) -> None:
    """Run ``command`` (which blocks reading the FIFO ``sync`` in its workspace) through
    the checkpoint middleware; ``meanwhile()`` runs once the command waits, then it is released."""
    ctx: ToolContext[Any] = ToolContext(call_id="c", tool_name="bash", signal=AbortSignal())
    fifo = tool.workspace.root / "sync"
    os.mkfifo(fifo)

    def release() -> None:
        with open(fifo, "w") as f:  # blocks until the command opened it: the "before" scan is done
            meanwhile()
            f.write("go\n")

    async def run(args: dict[str, Any]) -> ToolResult:
        return await tool.execute(args, ctx)

    call: Any = SimpleNamespace(tool=tool, args={"command": command}, tool_call=SimpleNamespace(id="b1"))
    result, _ = await asyncio.gather(checkpoints.middleware(call, run), asyncio.to_thread(release))
    assert not result.is_error, result.text
    os.unlink(fifo)


async def test_a_bash_checkpoint_in_a_worktree_covers_that_worktree_only(repo: Path) -> None:
    sandbox = default_sandbox()
    if sandbox is None:
        pytest.fail(f"this test needs a working sandbox: {sandbox_unavailable_reason()}")
    wt = create_worktree(repo, "scoped")
    records: list[dict[str, Any]] = []

    async def record(payload: dict[str, Any]) -> None:
        records.append(payload)

    checkpoints = FileCheckpoints(repo, _Blobs(), record=record)
    in_worktree = BashTool(Workspace(wt.path), sandbox=sandbox)
    await _checkpointed(
        checkpoints, in_worktree, "read line < sync && echo $line > mine.txt", lambda: (repo / "main.txt").write_text("x")
    )
    assert [f["path"] for f in records[0]["files"]] == [".ketch/worktrees/scoped/mine.txt"]  # not main.txt
    in_root = BashTool(Workspace(repo), sandbox=sandbox)
    await _checkpointed(
        checkpoints, in_root, "read line < sync && echo $line > root.txt", lambda: (wt.path / "theirs.txt").write_text("y")
    )
    assert [f["path"] for f in records[1]["files"]] == ["root.txt"]  # not the worktree's theirs.txt
    unsandboxed = BashTool(Workspace(repo), sandbox=None)
    await _checkpointed(
        checkpoints, unsandboxed, "read line < sync && echo $line > free.txt", lambda: (wt.path / "more.txt").write_text("z")
    )
    assert [f["path"] for f in records[2]["files"]] == [".ketch/worktrees/scoped/more.txt", "free.txt"]


def test_rebase_tools_moves_the_workspace_also_inside_a_wrapper(repo: Path, tmp_path: Path) -> None:
    from ketch import tool
    from ketch.tools import WriteTool

    class Wrapper:  # as the editor's file tools over ACP: the wrapped tool is ``inner``
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

    @tool
    def shout(text: str) -> str:
        """Shout."""
        return text.upper()

    ws = Workspace(repo)
    write = WriteTool(ws)
    wrapped = Wrapper(WriteTool(ws))
    other = tmp_path / "other"
    other.mkdir()
    moved_write, moved_wrapped, moved_shout = rebase_tools([write, wrapped, shout], other)  # type: ignore[list-item]
    assert moved_shout is shout
    assert moved_write.workspace.root == other.resolve()  # type: ignore[attr-defined]
    assert moved_wrapped.inner.workspace is moved_write.workspace  # type: ignore[attr-defined]
    assert (write.workspace.root, wrapped.inner.workspace.root) == (repo, repo)
