"""Tool search: a large tool set sent to the model on demand.

An agent with many tools (MCP servers bring hundreds) pays for every definition in
every request, and models choose worse among too many. :class:`ToolSearch` is a
capability (``Agent(..., capabilities=[ToolSearch()])``): when a run has more tools than
its ``threshold``, or tools declared ``deferred=True``, the model is sent only the tools
that are not deferred plus a ``tool_search`` tool whose description lists the deferred
ones by name. A ``tool_search`` call finds deferred tools by exact name, keywords
(matched against names and descriptions) or a regular expression, and activates the
matches: from the next model call on they are sent like any other tool.

Where activations live: in the transcript, so that everything that keeps a transcript
keeps them. A successful ``tool_search`` result records the names it activated in its
``details`` (the application's part of a tool result, never sent to the model), and
the active set is derived from the transcript. Sessions persist tool results with their
details, so an agent restored from a session gets the same tools back. Compaction
replaces older messages by a summary, which would drop those results: the capability
wraps the agent's context manager, and a committed rewrite that loses activations gets a
:class:`ToolActivations` message right after its summary, a custom message the model
never sees (its ``to_llm`` is None) that sessions store like any other. Deriving the
set from the transcript also makes a forked or rewound session agree with it, and a run
paused for approval resume with the tools it paused with (the results of a paused batch
are committed only when it resumes).

Nothing in the loop knows about tool search: the capability's contribution is a tools
view (:data:`ketch.loop.ToolsView`, asked at a run's start and after every turn) and a
context manager's wrapper; the agent's own tools are never changed.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from collections.abc import Iterable
from collections.abc import Sequence
from typing import TYPE_CHECKING
from typing import Any

import msgspec

from ..llm import CustomMessage
from ..llm import Message
from ..llm import ToolResultMessage
from ..loop import Capability
from ..loop import ContextManager
from ..loop import ContextRequest
from ..loop import Contribution
from ..loop import Projection
from ..loop import Tool
from ..loop import ToolContext
from ..loop import ToolResult

if TYPE_CHECKING:
    from .. import Agent

TOOL_SEARCH = "tool_search"
"""The name of the search tool the model is given."""

DEFAULT_THRESHOLD = 30
"""More tools than this defers every tool not declared ``deferred=False``."""

_MAX_LIMIT = 50
_DESCRIPTION_CLIP = 200

_TOOL_DESCRIPTION = (
    "Load tools that are not loaded yet. The deferred tools are listed by name at the end of this description; "
    "they cannot be called until this tool has loaded them. `query` is one of: exact tool names "
    "separated by commas or spaces (loads those tools); keywords, matched against tool names and "
    "descriptions (loads the best matches); or, with `regex` true, a regular expression matched "
    "case-insensitively against names and descriptions. The result lists the tools loaded with "
    "their descriptions; call them from your next step on."
)

_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {
            "type": "string",
            "description": "Exact tool names, keywords, or (with regex true) a regular expression.",
        },
        "regex": {
            "type": "boolean",
            "description": "Treat query as a regular expression. Default false.",
        },
        "limit": {
            "type": "integer",
            "minimum": 1,
            "maximum": _MAX_LIMIT,
            "description": "At most this many tools are loaded by a keyword or regex search.",
        },
    },
    "required": ["query"],
}


class ToolActivations(CustomMessage, tag="tool_activations"):
    """Tools that ``tool_search`` activated earlier in the transcript: a marker the
    model never sees.

    :class:`ToolSearch` puts one right after the summary when a compaction (any
    committed rewrite by the context manager) would drop the ``tool_search`` results
    that activated ``names``.
    """

    names: list[str] = msgspec.field(default_factory=list)


def _activated_in(details: Any) -> list[str]:
    if isinstance(details, dict):
        names = details.get("activated")
        if isinstance(names, list):
            return [n for n in names if isinstance(n, str)]
    return []


def activated_tools(messages: Iterable[Message]) -> list[str]:
    """The tool names ``tool_search`` activated in a transcript, in order of first
    activation: from its successful results (their ``details["activated"]``) and from
    :class:`ToolActivations` markers."""
    seen: dict[str, None] = {}
    for m in messages:
        kind = type(m)
        if kind is ToolResultMessage:
            assert isinstance(m, ToolResultMessage)
            if m.tool_name != TOOL_SEARCH or m.is_error:
                continue
            names = _activated_in(m.details)
        elif kind is ToolActivations:
            assert isinstance(m, ToolActivations)
            names = m.names
        else:
            continue
        for name in names:
            seen.setdefault(name, None)
    return list(seen)


def _first_line(text: str) -> str:
    line = text.strip().split("\n", 1)[0].strip()
    return line if len(line) <= _DESCRIPTION_CLIP else line[: _DESCRIPTION_CLIP - 3] + "..."


class ToolSearch(Capability):
    """Deferred tools and the ``tool_search`` tool: a capability (see the module docstring).

    ``threshold``: when a run has more tools than this, every tool not declared
    ``deferred=False`` is deferred (tools declared ``deferred=True`` are deferred
    whatever the count). ``max_results``: how many tools a keyword or regex search loads
    unless the model asks for another ``limit``. ::

        agent = Agent(model, tools=[*core_tools, *mcp_tools], session=session,
                      context_manager=Compactor(), capabilities=[ToolSearch(threshold=30)])

    The catalogue is every tool of a run (the agent's and those other capabilities add,
    such as MCP servers'), read at the run's start; an agent restored from a session gets
    the tools its transcript activated. With nothing to defer, it changes nothing (the
    model gets no ``tool_search`` tool). :meth:`attach` adds it to an existing agent.
    """

    name = "tool search"

    def __init__(self, *, threshold: int = DEFAULT_THRESHOLD, max_results: int = 5) -> None:
        if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 0:
            raise ValueError(f"ToolSearch threshold must be an integer >= 0, got {threshold!r}")
        if isinstance(max_results, bool) or not isinstance(max_results, int) or not 1 <= max_results <= _MAX_LIMIT:
            raise ValueError(f"ToolSearch max_results must be an integer from 1 to {_MAX_LIMIT}, got {max_results!r}")
        self.threshold = threshold
        self.max_results = max_results
        self._agent: Agent[Any] | None = None

    def contribute(self) -> Contribution:
        """Per run: the tools view (deferring, loading what the transcript activated) and
        the context manager's wrapper that keeps activations through a compaction."""
        catalogue = Catalogue(self)
        return Contribution(tools_view=catalogue.view, wrap_context_manager=catalogue.keep_activations)

    def deferred_in(self, tools: Sequence[Tool]) -> list[Tool]:
        """The tools of ``tools`` this search defers (the threshold and each tool's ``deferred``)."""
        over = len(tools) > self.threshold
        return [t for t in tools if t.deferred is True or (t.deferred is None and over)]

    # -- an agent's ---------------------------------------------------------------------------
    def attach(self, agent: Agent[Any]) -> None:
        """Add this capability to ``agent`` (as ``capabilities=[...]`` would), for
        :attr:`deferred`, :attr:`active` and :meth:`search` to read its tools. Raises
        ``RuntimeError`` when already attached and ``ValueError`` when the agent already
        has a tool named ``tool_search``."""
        if self._agent is not None:
            raise RuntimeError("This ToolSearch is already attached to an agent; make one per agent")
        if any(t.name == TOOL_SEARCH for t in agent.tools):
            raise ValueError(f"The agent already has a tool named {TOOL_SEARCH!r}; ToolSearch adds its own")
        self._agent = agent
        agent.config.capabilities = (*agent.config.capabilities, self)

    @property
    def deferred(self) -> list[str]:
        """The names of the attached agent's deferred tools, in its order (empty when nothing is deferred)."""
        return [t.name for t in self._catalogue()]

    @property
    def active(self) -> list[str]:
        """The deferred tools the attached agent's transcript activated, in order of activation."""
        agent = self._agent
        names = {t.name for t in self._catalogue()}
        return [n for n in activated_tools(agent.messages) if n in names] if agent is not None else []

    def _catalogue(self) -> list[Tool]:
        return self.deferred_in(self._agent.tools) if self._agent is not None else []

    # -- the tool -------------------------------------------------------------------------
    def search(self, query: str, *, regex: bool = False, limit: int | None = None) -> list[Tool]:
        """The attached agent's deferred tools ``query`` finds (as ``tool_search`` would
        load them; see :func:`find_tools`)."""
        deferred = {t.name: t for t in self._catalogue()}
        return find_tools(deferred, query, regex=regex, limit=limit or self.max_results)


def find_tools(deferred: dict[str, Tool], query: str, *, regex: bool = False, limit: int = 5) -> list[Tool]:
    """The tools of ``deferred`` (name -> tool) that ``query`` finds.

    Exact names (separated by commas or spaces, any case) find those tools; other text is
    keywords, each scored against names (higher) and descriptions, best first, ties in the
    catalogue's order; ``regex`` matches a case-insensitive regular expression against
    names and descriptions. At most ``limit`` tools for keywords and regexes. Raises
    ``re.error`` for an invalid regular expression.
    """
    if regex:
        pattern = re.compile(query, re.IGNORECASE)
        found = [t for t in deferred.values() if pattern.search(t.name) or pattern.search(t.description)]
        return found[:limit]
    terms = [w for w in re.split(r"[\s,]+", query.strip().lower()) if w]
    if not terms:
        return []
    lower = {n.lower(): n for n in deferred}
    exact = [lower.get(w) for w in terms]
    if all(exact):
        return [deferred[n] for n in dict.fromkeys(n for n in exact if n)]
    scored: list[tuple[int, int, Tool]] = []
    for index, tool in enumerate(deferred.values()):
        name = tool.name.lower()
        parts = set(re.split(r"[^a-z0-9]+", name))
        description = tool.description.lower()
        score = 0
        for term in terms:
            if term in parts:
                score += 3
            elif term in name:
                score += 2
            if term in description:
                score += 1
        if score:
            scored.append((-score, index, tool))
    scored.sort(key=lambda s: (s[0], s[1]))
    return [t for _, _, t in scored[:limit]]


class Catalogue:
    """One run's tool search: the deferred tools (read from the run's tools at its
    start), the ``tool_search`` tool listing them, and the activations the transcript
    records (read incrementally as it grows)."""

    __slots__ = ("_first", "_last", "_scanned", "active", "deferred", "max_results", "threshold", "tool")

    def __init__(self, search: ToolSearch) -> None:
        self.threshold = search.threshold
        self.max_results = search.max_results
        self.deferred: dict[str, Tool] | None = None  # catalogue order; None until the run's start
        self.tool: Tool | None = None
        self.active: dict[str, None] = {}
        self._scanned = 0  # the transcript prefix already read
        self._first: Message | None = None
        self._last: Message | None = None

    def view(self, tools: Sequence[Tool], messages: Sequence[Message]) -> Sequence[Tool]:
        """The tools sent now: those not deferred, ``tool_search``, then the activated ones
        in order of activation (new ones come last, so a provider's prompt cache keeps the
        earlier ones). The first call (at the run's start) reads the catalogue."""
        if self.deferred is None:
            self._start(tools)
        deferred = self.deferred
        assert deferred is not None
        if not deferred or self.tool is None:
            return tools
        seen = self._scanned
        if not seen or len(messages) < seen or messages[0] is not self._first or messages[seen - 1] is not self._last:
            self.active = {}
            seen = 0
        for name in activated_tools(messages[seen:]):
            if name in deferred:
                self.active.setdefault(name, None)
        self._scanned = len(messages)
        if messages:
            self._first, self._last = messages[0], messages[-1]
        present = {t.name for t in tools}  # (a prepare_next_turn may have replaced them)
        return [
            *(t for t in tools if t.name not in deferred),
            self.tool,
            *(deferred[n] for n in self.active if n in present),
        ]

    def _start(self, tools: Sequence[Tool]) -> None:
        if any(t.name == TOOL_SEARCH for t in tools):
            raise ValueError(f"The agent already has a tool named {TOOL_SEARCH!r}; ToolSearch adds its own")
        over = len(tools) > self.threshold
        deferred = [t for t in tools if t.deferred is True or (t.deferred is None and over)]
        self.deferred = {t.name: t for t in deferred}
        if not deferred:
            return
        listing = ", ".join(self.deferred)
        self.tool = Tool(
            TOOL_SEARCH,
            f"{_TOOL_DESCRIPTION}\n\nDeferred tools: {listing}",
            _PARAMETERS,
            self._execute,
            read_only=True,
            reports_progress=False,
            deferred=False,
        )

    def keep_activations(self, manager: ContextManager) -> ContextManager:
        """``manager``, whose committed rewrites keep the activations they would drop."""
        return _KeepActivations(manager)

    async def _execute(self, args: dict[str, Any], ctx: ToolContext[Any]) -> ToolResult:
        deferred = self.deferred or {}
        query = str(args.get("query", ""))
        regex = bool(args.get("regex", False))
        limit = args.get("limit")
        example = next(iter(deferred), "name")
        how = (
            f'Search by exact names from the deferred tools listed in this tool\'s description (e.g. "{example}"), '
            f"by keywords from a tool's name or description, or by a regular expression with regex true "
            f'(e.g. "^{re.escape(example[:4])}").'
        )
        if not query.strip():
            return ToolResult.error(f"{TOOL_SEARCH} needs a non-empty query. {how}")
        try:
            found = find_tools(
                deferred, query, regex=regex, limit=limit if isinstance(limit, int) and limit > 0 else self.max_results
            )
        except re.error as exc:
            return ToolResult.error(f'Invalid regular expression "{query}": {exc}. {how}')
        if not found:
            what = (
                f'the regular expression "{query}" in its name or description'
                if regex
                else f'the keywords "{query}" in its name or description'
            )
            return ToolResult.error(f"No deferred tool matches {what}. {how}")
        lines = [f"Loaded {len(found)} tool{'s' if len(found) != 1 else ''}; call {'them' if len(found) != 1 else 'it'} from your next step on:"]
        for t in found:
            desc = _first_line(t.description)
            lines.append(f"- {t.name}: {desc}" if desc else f"- {t.name}")
        return ToolResult(content="\n".join(lines), details={"query": query, "activated": [t.name for t in found]})


def keep_activations(before: Sequence[Message], projection: Projection) -> Projection:
    """``projection`` with a :class:`ToolActivations` marker when its committed
    transcript lost activations that ``before`` had."""
    commit = projection.commit
    assert commit is not None
    names = activated_tools(before)
    if not names:
        return projection
    kept = set(activated_tools(commit))
    if all(n in kept for n in names):
        return projection
    at = 0
    while at < len(commit):
        head = commit[at]
        if not (isinstance(head, CustomMessage) and head.resets_usage_anchor):
            break
        at += 1  # after the summary, which stays first
    new = [*commit[:at], ToolActivations(names=names), *commit[at:]]
    return Projection(messages=new if projection.messages is commit else projection.messages, commit=new)


class _KeepActivations:
    """The agent's context manager, whose committed rewrites keep activations (see
    :func:`keep_activations`)."""

    __slots__ = ("inner",)

    def __init__(self, inner: ContextManager) -> None:
        self.inner = inner

    async def manage(self, messages: list[Message], request: ContextRequest) -> AsyncIterator[Any]:
        """The inner manager's items; a committed projection keeps the activations."""
        async for item in self.inner.manage(messages, request):
            if type(item) is Projection and item.commit is not None:
                item = keep_activations(messages, item)
            yield item

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)  # the Compactor's limits(), summary_calls, ...
