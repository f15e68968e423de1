"""The event a subagent's own events reach its parent in."""

from __future__ import annotations

from typing import ClassVar
from typing import Literal

import msgspec

from ..loop import AgentEvent


class SubagentEvent(msgspec.Struct, tag_field="type", tag="subagent_event", kw_only=True):
    """One event of a subagent, tagged with its path (``main/researcher#2``; nested
    subagents add a part each: ``main/researcher#2/scout#1``).

    The ``subagent`` tool reports it with ``ctx.report``, so the parent's subscribers see
    it as the ``partial`` of a ``tool_execution_update`` of the ``subagent`` call; on the
    wire (``msgspec.json.encode``) it is ``{"type": "subagent_event", "path": ...,
    "event": {...}}``. A nested subagent's events are passed up as they are (one level of
    wrapping, whatever the depth).
    """

    type: ClassVar[Literal["subagent_event"]] = "subagent_event"
    path: str
    event: AgentEvent
