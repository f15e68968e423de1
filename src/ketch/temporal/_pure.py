"""Pure tools registered by the workers of this process, for the workflow to run inline.

A module shared by the workflow sandbox and the worker (passed through): the worker
registers an agent's pure tools here, the workflow looks them up by agent and name.
"""

from __future__ import annotations

from ..loop import Tool

_tools: dict[tuple[str, str], Tool] = {}


def register(agent: str, tool: Tool) -> None:
    """Make ``tool`` of ``agent`` available to workflows of this process."""
    _tools[(agent, tool.name)] = tool


def lookup(agent: str, name: str) -> Tool | None:
    """The pure tool ``name`` of ``agent``, if a worker of this process registered it."""
    return _tools.get((agent, name))
