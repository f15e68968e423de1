"""The durable agents defined in this process, for the workflow to run their code inline.

A module shared by the workflow sandbox and the worker (passed through): a
:class:`~ketch.temporal.DurableAgent` registers itself here as it is made (and
:func:`~ketch.temporal.build_worker` again, so a worker's own definition wins); the
workflow looks the agent up by name for what runs inside it: pure tools, per-call tool
decisions and the worker-side hooks.
"""

from __future__ import annotations

from typing import Any
from typing import Protocol
from typing import runtime_checkable

from ..loop import Tool
from ..loop import ToolContext


class Registered(Protocol):
    """What this registry reads of a :class:`~ketch.temporal.DurableAgent`."""

    name: str
    tools: list[Tool]


_agents: dict[str, Registered] = {}
_served: set[str] = set()  # names a worker of this process registered


def register_agent(agent: Registered, *, worker: bool = False) -> None:
    """Make ``agent`` known to the workflows of this process (by its name). A worker's
    definition (``worker=True``) is not replaced by one a client of the same process
    makes later."""
    if worker:
        _served.add(agent.name)
    elif agent.name in _served:
        return
    _agents[agent.name] = agent


def agent(name: str) -> Registered | None:
    """The durable agent ``name`` defined in this process, if any."""
    return _agents.get(name)


def tool(agent_name: str, name: str) -> Tool | None:
    """The tool ``name`` of the durable agent ``agent_name`` defined in this process."""
    found = _agents.get(agent_name)
    if found is None:
        return None
    return next((t for t in found.tools if t.name == name), None)


@runtime_checkable
class Invocable(Protocol):
    """A tool that can run its code on the calling thread (``@tool`` functions can):
    inside a workflow no thread may start, so a sync function is called this way."""

    async def invoke(self, args: dict[str, Any], ctx: ToolContext[Any]) -> Any:
        """Run the tool's code on this thread and return what it returned."""
        ...
