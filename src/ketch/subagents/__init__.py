"""Subagents: delegate work to agents with their own context, tools and model.

Define them in code or in Markdown agent files (Claude Code's shape), attach them to
a parent agent, and the model gets one ``subagent`` tool with four modes::

    specs = [SubagentSpec("researcher", "Finds facts in the code", system_prompt="...", tools=["read", "grep"])]
    specs += load_agents([".ketch/agents"])[0]
    tasks = TaskRegistry()                               # for background: true
    subagents = Subagents(specs, tasks=tasks).attach(agent)
    await agent.prompt("...")                            # the model calls subagent(...)
    subagents.runs["main/researcher#1"].messages         # a run's transcript, kept

Single (``agent``, ``task``), parallel (``tasks: [...]``), chain (``chain: [...]``,
``{previous}`` replaced by the previous answer) and background (``background: true``).
Each subagent's usage counts in the parent's run (``RunSummary.tool_usage`` itemises
it by path), its events reach the parent's subscribers as :class:`SubagentEvent`, and
aborting the parent aborts it. See :class:`Subagents`.

A remote agent served over A2A is a subagent too: ``await a2a_agent(url, token=...)``
is a tool that hands it a task and returns its answer.
"""

from ._a2a import A2AError
from ._a2a import a2a_agent
from ._events import SubagentEvent
from ._runtime import DEFAULT_MAX_DEPTH
from ._runtime import MAX_BATCH
from ._runtime import MODES
from ._runtime import SUBAGENT_TOOLS
from ._runtime import Mode
from ._runtime import SubagentRun
from ._runtime import Subagents
from ._spec import SubagentFileError
from ._spec import SubagentSpec
from ._spec import load_agent_file
from ._spec import load_agents
from ._spec import parse_agent_file

__all__ = [
    "DEFAULT_MAX_DEPTH",
    "MAX_BATCH",
    "MODES",
    "SUBAGENT_TOOLS",
    "A2AError",
    "Mode",
    "SubagentEvent",
    "SubagentFileError",
    "SubagentRun",
    "SubagentSpec",
    "Subagents",
    "a2a_agent",
    "load_agent_file",
    "load_agents",
    "parse_agent_file",
]
