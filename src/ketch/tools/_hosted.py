"""The :class:`HostedTools` capability: tools the provider runs itself.

``Agent(model, capabilities=[HostedTools("web_search", "code_execution")])`` asks the
model's provider to run those tools (Anthropic server tools, OpenAI Responses built-in
tools, Gemini grounding and code execution). The loop does not run them: their calls and
results arrive in the assistant message as :class:`~ketch.llm.HostedToolCall` and
:class:`~ketch.llm.HostedToolResult` blocks. A provider that does not run a kind fails the
request with an ``invalid_request`` error naming the kind and the provider. A response
the provider paused (stop reason ``pause``, Anthropic's ``pause_turn``) is continued: the
transcript goes back as it is, up to ``max_pause_continuations`` times a run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..llm import HostedTool
from ..loop import Capability
from ..loop import Contribution
from ..loop import continue_paused

__all__ = ["HostedTools"]


class HostedTools(Capability):
    """Provider-hosted tools for an agent, each a kind name (``"web_search"``) or a
    :class:`~ketch.llm.HostedTool` (with the provider's own ``options``). ``options``
    maps a kind to its options when given by name. A response the provider paused is
    sent back to continue, at most ``max_pause_continuations`` times a run (then the run
    ends with an error naming the setting; 0: a paused response ends the run). Off
    unless given: they reach the network (and cost what the provider charges for them)."""

    name = "hosted_tools"

    def __init__(
        self,
        *tools: HostedTool | str,
        options: Mapping[str, Mapping[str, Any]] | None = None,
        max_pause_continuations: int = 10,
    ) -> None:
        continue_paused(max_pause_continuations, owner="HostedTools")  # (a bad limit fails here)
        self.max_pause_continuations = max_pause_continuations
        given = dict(options or {})
        built: list[HostedTool] = []
        for tool in tools:
            if isinstance(tool, str):
                built.append(HostedTool(kind=tool, options=dict(given.pop(tool, {}))))
            elif isinstance(tool, HostedTool):
                built.append(tool)
            else:
                raise TypeError(f"HostedTools takes kind names or HostedTool objects, got {type(tool).__name__}")
        if given:
            raise ValueError(f"HostedTools options for {sorted(given)[0]!r}, which is not among the tools given")
        kinds = [t.kind for t in built]
        for kind in kinds:
            if kinds.count(kind) > 1:
                raise ValueError(f"HostedTools: the hosted tool {kind!r} is given twice")
        self.tools = tuple(built)

    def contribute(self) -> Contribution:
        return Contribution(
            hosted_tools=self.tools, at_stop=continue_paused(self.max_pause_continuations, owner="HostedTools")
        )

    def __repr__(self) -> str:
        return f"HostedTools({', '.join(t.kind for t in self.tools)})"
