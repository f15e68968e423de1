"""Pure tools registered by the workers of this process, for the workflow to run inline.

A module shared by the workflow sandbox and the worker (passed through): the worker
registers an agent's pure tools here, the workflow looks them up by agent and name.
"""

from __future__ import annotations

from typing import Any
from typing import Protocol
from typing import runtime_checkable

from ..loop import Tool
from ..loop import ToolContext

_tools: dict[tuple[str, str], Tool] = {}


def register(agent: str, tool: Tool) -> None:
    """Make ``tool`` of ``agent`` available to workflows of this process."""
    _tools[(agent, tool.name)] = tool


def lookup(agent: str, name: str) -> Tool | None:
    """The pure tool ``name`` of ``agent``, if a worker of this process registered it."""
    return _tools.get((agent, name))


@runtime_checkable
class Invocable(Protocol):
    """A tool that can run its code on the calling thread (``@tool`` functions can):
    inside a workflow no thread may start, so a sync function is called this way."""

    async def invoke(self, args: dict[str, Any], ctx: ToolContext[Any]) -> Any:
        """Run the tool's code on this thread and return what it returned."""
        ...
