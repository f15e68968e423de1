"""Git worktrees for parallel work: each session, subagent or teammate on its own branch.

A worktree is a second checkout of the repository, in ``.ketch/worktrees/NAME`` of the
main checkout, on the branch ``ketch/NAME`` made from the branch it came from (its
*base*). ``.ketch/worktrees`` holds a ``.gitignore`` of ``*``, so git (and the search
tools, which read ``.gitignore``) leave it out of the main checkout::

    wt = create_worktree(repo, "fix-login")        # or reuse: same name, same worktree
    ...                                            # agents work in wt.path
    merge_worktree(repo, "fix-login")              # commit what is pending, merge into the base
    remove_worktree(repo, "fix-login")             # refuses unmerged work unless force=True

:func:`rebase_tools` gives an agent's tools a workspace rooted in a worktree (a
subagent's or teammate's ``isolation="worktree"``). Everything raises
:class:`WorktreeError` with a one-line message; a merge that conflicts raises
:class:`WorktreeConflict` (its ``files``) and leaves both branches as they were.
"""

from ._git import WORKTREES_DIR
from ._git import Worktree
from ._git import WorktreeConflict
from ._git import WorktreeError
from ._git import create_worktree
from ._git import list_worktrees
from ._git import merge_worktree
from ._git import rebase_tools
from ._git import remove_worktree

__all__ = [
    "WORKTREES_DIR",
    "Worktree",
    "WorktreeConflict",
    "WorktreeError",
    "create_worktree",
    "list_worktrees",
    "merge_worktree",
    "rebase_tools",
    "remove_worktree",
]
