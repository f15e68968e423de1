"""The built-in coding tool set, built around one shared :class:`Workspace`."""

from __future__ import annotations

import os
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from typing import Literal

from ..loop import Tool
from ..sandbox import DEFAULT_PROTECTED
from ..sandbox import NetworkPolicy
from ..sandbox import Sandbox
from ..sandbox import SandboxLimits
from ..sandbox import default_sandbox
from ..sandbox import sandbox_unavailable_reason
from ._bash import BashTool
from ._edit import EditTool
from ._ls import LsTool
from ._read import ReadTool
from ._search import FindTool
from ._search import GrepTool
from ._workspace import Workspace
from ._write import WriteTool


def coding_tools(
    root: str | os.PathLike[str] | Workspace,
    *,
    allowed_roots: Iterable[str | os.PathLike[str]] = (),
    read_only: bool = False,
    bash_env: Mapping[str, str] | None = None,
    bash_timeout: float = 120.0,
    scrub_env: bool = True,
    secret_names: Iterable[str] = (),
    ripgrep: str | Literal[False] | None = None,
    sandbox: Sandbox | Literal["default"] | None = "default",
    write_allowed: Callable[[], bool] | None = None,
    network: bool | NetworkPolicy = False,
    protected: Iterable[str] = DEFAULT_PROTECTED,
    env_allow: Iterable[str] = (),
    unsandboxed_reason: str | None = None,
    hidden: Iterable[str | os.PathLike[str]] = (),
    limits: SandboxLimits | None = None,
) -> list[Tool]:
    """The coding tools for a workspace: read, write, edit, bash, grep, find, ls.

    All tools share one :class:`Workspace` (``root`` may be one already), so paths are
    confined to ``root`` and ``allowed_roots`` and a ``read`` enables later edits.
    ``read_only`` leaves out write, edit and bash. ``bash_env`` adds variables to the
    (scrubbed, see ``scrub_env`` and ``secret_names``) environment of bash commands;
    ``bash_timeout`` is their default timeout in seconds. ``ripgrep`` is passed to
    :class:`~ketch.tools.GrepTool` (path of ``rg``, ``False`` for the Python
    search, ``None`` to look it up).

    Bash commands run in ``sandbox``: by default :func:`~ketch.sandbox.default_sandbox`
    (bubblewrap on Linux when it works; the bash tool's ``sandbox_warning`` says why
    when there is none), ``None`` for no sandbox. ``write_allowed`` is asked at each
    bash call whether the workspace is writable (default: always; wire it to "the
    permission mode is not plan"); ``network``, ``protected``, ``env_allow``,
    ``hidden`` and ``limits`` (each command's bounds) are passed to
    :class:`~ketch.tools.BashTool`; ``sandbox`` and ``hidden``
    also to :class:`~ketch.tools.GrepTool` (its search process runs in the sandbox,
    read-only); ``hidden`` is also the
    workspace's (the file tools refuse those paths) when ``root`` is not a
    :class:`Workspace` already. ``unsandboxed_reason`` says why a
    ``sandbox`` of None was chosen (it becomes the bash tool's ``sandbox_warning``).
    """
    hidden = tuple(hidden)
    workspace = root if isinstance(root, Workspace) else Workspace(root, hidden=hidden)
    for extra in allowed_roots:
        workspace.allow_root(extra)
    reason = unsandboxed_reason
    if sandbox == "default":
        sandbox = default_sandbox()
        reason = sandbox_unavailable_reason() if sandbox is None else None
    read = ReadTool(workspace)
    grep = GrepTool(workspace, ripgrep=ripgrep, sandbox=sandbox, hidden=hidden)
    search: list[Tool] = [grep, FindTool(workspace), LsTool(workspace)]
    if read_only:
        return [read, *search]
    bash = BashTool(
        workspace,
        timeout=bash_timeout,
        env=bash_env,
        scrub_env=scrub_env,
        secret_names=secret_names,
        sandbox=sandbox,
        write_allowed=write_allowed,
        network=network,
        protected=protected,
        env_allow=env_allow,
        unsandboxed_reason=reason,
        hidden=hidden,
        limits=limits,
    )
    return [read, WriteTool(workspace), EditTool(workspace), bash, *search]
