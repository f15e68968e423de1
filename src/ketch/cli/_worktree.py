"""``ketch worktree list|merge|remove`` and ``ketch --worktree [NAME]`` (see :mod:`ketch.worktrees`)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from ._config import ConfigError
from ._config import directory


def enter_worktree(cwd: str | None, name: str) -> str:
    """The folder of the worktree ``name`` ("" for a new name) of the repository at
    ``cwd``, made when missing; says on stderr where the session works. Raises
    :class:`ConfigError` with the one-line reason when there can be none."""
    from ..worktrees import WorktreeError
    from ..worktrees import create_worktree

    root = directory(cwd)
    try:
        wt = create_worktree(root, name or None)
    except WorktreeError as exc:
        raise ConfigError(f"--worktree: {exc}") from None
    sys.stderr.write(f"ketch: working in worktree {wt.name} (branch {wt.branch}, from {wt.base}) at {wt.path}\n")
    return str(wt.path)


def _pending(uncommitted: int, ahead: int, base: str | None) -> str:
    parts = []
    if uncommitted:
        parts.append(f"{uncommitted} uncommitted")
    if ahead > 0:
        parts.append(f"{ahead} commit(s) not in {base}")
    elif ahead < 0:
        parts.append("base branch gone")
    return ", ".join(parts) or "merged"


def worktree_command(argv: Sequence[str]) -> int:
    """``ketch worktree list | merge NAME | remove NAME [--force]``."""
    from ..worktrees import WorktreeError
    from ..worktrees import list_worktrees
    from ..worktrees import merge_worktree
    from ..worktrees import remove_worktree
    from ._args import OneLineParser

    parser = OneLineParser(prog="ketch worktree", description="the git worktrees ketch made (.ketch/worktrees/NAME)")
    parser.add_argument("-C", "--cwd", help="a folder of the repository (default: the current one)")
    sub = parser.add_subparsers(dest="action", required=True)
    sub.add_parser("list", help="each worktree: name, branch, base branch, pending work, folder")
    merge = sub.add_parser("merge", help="commit what is pending in NAME and merge its branch into its base")
    merge.add_argument("name")
    remove = sub.add_parser("remove", help="remove NAME's folder and branch (refused with unmerged work)")
    remove.add_argument("name")
    remove.add_argument("--force", action="store_true", help="also with uncommitted or unmerged work (it is lost)")
    args = parser.parse_args(list(argv))
    try:
        root = directory(args.cwd)
        if args.action == "list":
            worktrees = list_worktrees(root)
            if not worktrees:
                print("no worktrees (ketch --worktree NAME makes one)")
            for wt in worktrees:
                print(f"{wt.name}  {wt.branch} <- {wt.base or '?'}  [{_pending(wt.uncommitted, wt.ahead, wt.base)}]  {wt.path}")
            return 0
        if args.action == "merge":
            wt = merge_worktree(root, args.name)
            print(f"merged {wt.branch} into {wt.base}")
            return 0
        remove_worktree(root, args.name, force=args.force)
        print(f"removed worktree {args.name} and its branch")
        return 0
    except (WorktreeError, ConfigError) as exc:
        print(f"ketch worktree: {exc}", file=sys.stderr)
        return 1


