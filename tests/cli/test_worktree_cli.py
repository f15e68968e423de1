"""``ketch --worktree NAME`` and ``ketch worktree list|merge|remove`` (scripted model)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from clihelp import Env


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def _repo(env: Env) -> Path:
    root = env.work.resolve()
    subprocess.run(["git", "init", "-q", "-b", "main", str(root)], check=True)
    (root / "a.txt").write_text("one\n")
    _git(root, "add", "a.txt")
    _git(root, "commit", "-q", "-m", "first")
    return root


def test_a_run_in_a_worktree_then_list_merge_and_remove(env: Env) -> None:
    root = _repo(env)
    script = env.script(
        [
            {"blocks": [{"type": "tool_call", "id": "w", "name": "write", "args": {"path": "new.txt", "content": "N\n"}}]},
            {"blocks": [{"type": "tool_call", "id": "b", "name": "bash", "args": {"command": "sed -i s/one/ONE/ a.txt"}}]},
            "done",
        ]
    )
    wt = root / ".ketch/worktrees/fix"
    proc = env.run("run", "--worktree", "fix", "--permission-mode", "bypass", "--model", f"scripted:{script}", "go")
    assert (proc.returncode, proc.stdout) == (0, "done\n"), proc.stderr
    assert proc.stderr == f"ketch: working in worktree fix (branch ketch/fix, from main) at {wt}\n"
    assert (wt / "new.txt").read_text() == "N\n"
    assert (wt / "a.txt").read_text() == "ONE\n"
    assert (root / "a.txt").read_text() == "one\n"
    assert not (root / "new.txt").exists()
    assert _git(root, "status", "--porcelain") == ""

    listed = env.run("worktree", "list")
    assert (listed.returncode, listed.stdout) == (0, f"fix  ketch/fix <- main  [2 uncommitted]  {wt}\n")
    refused = env.run("worktree", "remove", "fix")
    assert (refused.returncode, refused.stdout, refused.stderr) == (
        1,
        "",
        "ketch worktree: worktree 'fix' has 2 uncommitted change(s): merge it first (ketch worktree merge fix) "
        "or remove it with --force\n",
    )
    merged = env.run("worktree", "merge", "fix")
    assert (merged.returncode, merged.stdout, merged.stderr) == (0, "merged ketch/fix into main\n", "")
    assert (root / "a.txt").read_text() == "ONE\n"
    assert (root / "new.txt").read_text() == "N\n"
    assert env.run("worktree", "list").stdout == f"fix  ketch/fix <- main  [merged]  {wt}\n"
    removed = env.run("worktree", "remove", "fix")
    assert (removed.returncode, removed.stdout) == (0, "removed worktree fix and its branch\n")
    assert env.run("worktree", "list").stdout == "no worktrees (ketch --worktree NAME makes one)\n"


def test_worktree_errors_are_one_line(env: Env) -> None:
    script = env.script(["never"])
    proc = env.run("run", "--worktree", "x", "--model", f"scripted:{script}", "go")
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == (
        f"ketch: --worktree: {env.work.resolve()} is not inside a git repository's checkout: "
        "worktrees need one (git init, one commit)\n"
    )
    _repo(env)
    bad = env.run("worktree", "merge", "nope")
    assert (bad.returncode, bad.stderr) == (1, "ketch worktree: no worktree named 'nope' (there are: none)\n")
