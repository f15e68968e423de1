"""Tool search: a large tool set sent to the model on demand.

An agent with many tools (MCP servers bring hundreds) pays for every definition in
every request, and models choose worse among too many. :class:`ToolSearch` attaches to
an :class:`~ketch.Agent` with one call and, when the agent has more tools than its
``threshold`` or tools declared ``deferred=True``, sends the model only the tools that
are not deferred plus a ``tool_search`` tool; the deferred tools are listed by name in
the system prompt. A ``tool_search`` call finds deferred tools by exact name, keywords
(matched against names and descriptions) or a regular expression, and activates the
matches: from the next model call on they are sent like any other tool.

Where activations live: in the transcript, so that everything that keeps a transcript
keeps them. A successful ``tool_search`` result records the names it activated in its
``details`` (the application's part of a tool result, never sent to the model), and
the active set is derived from the transcript. Sessions persist tool results with their
details, so an agent restored from a session gets the same tools back. Compaction
replaces older messages by a summary, which would drop those results: ToolSearch wraps
the agent's context manager, and a committed rewrite that loses activations gets a
:class:`ToolActivations` message right after its summary, a custom message the model
never sees (its ``to_llm`` is None) that sessions store like any other. Deriving the
set from the transcript (rather than keeping it in the ToolSearch object) also makes a
forked session agree with it, and a run paused for approval resume with the tools it
paused with (the results of a paused batch are committed only when it resumes). After
replacing ``agent.messages`` in place (a session's rewind), call :meth:`ToolSearch.sync`.

Nothing in the loop knows about tool search: ToolSearch sets the agent's tools and
system prompt, chains itself into ``prepare_next_turn`` (the tools change between the
turns of a run), listens for ``agent_end`` (a run that ended early still leaves its
activations for the next one) and wraps ``context_manager``.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import AsyncIterator
from collections.abc import Awaitable
from collections.abc import Iterable
from collections.abc import Sequence
from typing import TYPE_CHECKING
from typing import Any

import msgspec

from ..llm import CustomMessage
from ..llm import Message
from ..llm import ToolResultMessage
from ..loop import AgentEvent
from ..loop import ContextManager
from ..loop import ContextRequest
from ..loop import NextTurn
from ..loop import Projection
from ..loop import Tool
from ..loop import ToolContext
from ..loop import ToolResult
from ..loop import TurnInfo

if TYPE_CHECKING:
    from .. import Agent

TOOL_SEARCH = "tool_search"
"""The name of the search tool the model is given."""

DEFAULT_THRESHOLD = 30
"""More tools than this defers every tool not declared ``deferred=False``."""

_MAX_LIMIT = 50
_DESCRIPTION_CLIP = 200

_TOOL_DESCRIPTION = (
    "Load tools that are not loaded yet. The deferred tools are listed by name in the system prompt; "
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


class ToolSearch:
    """Deferred tools and the ``tool_search`` tool; attach with :meth:`attach`.

    ``threshold``: when the agent has more tools than this, every tool not declared
    ``deferred=False`` is deferred (tools declared ``deferred=True`` are deferred
    whatever the count). ``max_results``: how many tools a keyword or regex search loads
    unless the model asks for another ``limit``. ::

        agent = Agent(model, tools=[*core_tools, *mcp_tools], session=session,
                      context_manager=Compactor())
        ToolSearch(threshold=30).attach(agent)

    Attach after the agent has its tools, context manager and session: the tools it
    has then are the catalogue, and an agent restored from a session gets the tools its
    transcript activated. With nothing to defer, attaching changes nothing (the model
    gets no ``tool_search`` tool).
    """

    def __init__(self, *, threshold: int = DEFAULT_THRESHOLD, max_results: int = 5) -> None:
        if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 0:
            raise ValueError(f"ToolSearch threshold must be an integer >= 0, got {threshold!r}")
        if isinstance(max_results, bool) or not isinstance(max_results, int) or not 1 <= max_results <= _MAX_LIMIT:
            raise ValueError(f"ToolSearch max_results must be an integer from 1 to {_MAX_LIMIT}, got {max_results!r}")
        self.threshold = threshold
        self.max_results = max_results
        self.tool = Tool(
            TOOL_SEARCH,
            _TOOL_DESCRIPTION,
            _PARAMETERS,
            self._execute,
            read_only=True,
            reports_progress=False,
            deferred=False,
        )
        """The ``tool_search`` tool given to the model."""
        self._agent: Agent[Any] | None = None
        self._loaded: list[Tool] = []  # sent in every request
        self._deferred: dict[str, Tool] = {}  # catalogue order
        self._lower: dict[str, str] = {}  # lower-case name -> name, for exact-name queries
        self._active: dict[str, None] = {}
        self._scanned = 0  # the transcript prefix already read by sync()
        self._first: Message | None = None
        self._last: Message | None = None
        self._prepare: Any = None  # the agent's own prepare_next_turn, chained

    # -- what the model gets --------------------------------------------------------------
    @property
    def deferred(self) -> list[str]:
        """The names of the deferred tools, in the agent's order (empty when nothing is deferred)."""
        return list(self._deferred)

    @property
    def active(self) -> list[str]:
        """The deferred tools activated so far, in order of activation."""
        return list(self._active)

    def tools(self) -> list[Tool]:
        """The tools sent to the model now: those not deferred, ``tool_search``, then the
        activated ones in order of activation (new ones come last, so a provider's prompt
        cache keeps the earlier ones)."""
        return [*self._loaded, self.tool, *(self._deferred[n] for n in self._active)]

    def listing(self) -> str:
        """The text added to the system prompt: every deferred tool's name."""
        return (
            f"Deferred tools (not loaded: call {TOOL_SEARCH} with their names or with keywords "
            f"to load them before calling them): " + ", ".join(self._deferred)
        )

    # -- attaching ------------------------------------------------------------------------
    def attach(self, agent: Agent[Any]) -> None:
        """Bind to ``agent``: defer its tools as configured, add ``tool_search`` and the
        listing of deferred tools to its system prompt, and restore the activations its
        transcript records. Raises ``RuntimeError`` when already attached and
        ``ValueError`` when the agent already has a tool named ``tool_search``."""
        if self._agent is not None:
            raise RuntimeError("This ToolSearch is already attached to an agent; make one per agent")
        tools = list(agent.tools)
        if any(t.name == TOOL_SEARCH for t in tools):
            raise ValueError(f"The agent already has a tool named {TOOL_SEARCH!r}; ToolSearch adds its own")
        self._agent = agent
        over = len(tools) > self.threshold
        deferred = [t for t in tools if t.deferred is True or (t.deferred is None and over)]
        if not deferred:
            return
        names = {id(t) for t in deferred}
        self._loaded = [t for t in tools if id(t) not in names]
        self._deferred = {t.name: t for t in deferred}
        self._lower = {n.lower(): n for n in self._deferred}
        listing = self.listing()
        agent.system_prompt = f"{agent.system_prompt}\n\n{listing}" if agent.system_prompt else listing
        config = agent.config
        self._prepare = config.prepare_next_turn
        config.prepare_next_turn = self._prepare_next_turn
        if config.context_manager is not None:
            config.context_manager = _KeepActivations(config.context_manager, self)
        agent.subscribe(self._on_event)
        self.sync()

    def sync(self) -> None:
        """Set the agent's tools from the activations its transcript records. Done for
        you at :meth:`attach`, between turns and at the end of every run; call it after
        replacing ``agent.messages`` by hand."""
        agent = self._agent
        if agent is None or not self._deferred:
            return
        messages = agent.messages
        seen = self._scanned
        if not seen or len(messages) < seen or messages[0] is not self._first or messages[seen - 1] is not self._last:
            self._active = {}
            seen = 0
        for name in activated_tools(messages[seen:]):
            if name in self._deferred:
                self._active.setdefault(name, None)
        self._scanned = len(messages)
        if messages:
            self._first, self._last = messages[0], messages[-1]
        agent.tools = self.tools()

    def _on_event(self, event: AgentEvent) -> None:
        if event.type == "agent_end":
            self.sync()

    def _prepare_next_turn(self, info: TurnInfo) -> NextTurn | Awaitable[NextTurn | None] | None:
        out = self._prepare(info) if self._prepare is not None else None
        if inspect.isawaitable(out):
            return self._after_async(out, info)
        return self._after(out, info)

    async def _after_async(self, out: Awaitable[NextTurn | None], info: TurnInfo) -> NextTurn | None:
        return self._after(await out, info)

    def _after(self, out: NextTurn | None, info: TurnInfo) -> NextTurn | None:
        """The next turn gets the tools this turn's ``tool_search`` calls activated (a
        ``prepare_next_turn`` of the agent's own that replaces the tools wins)."""
        added = False
        for result in info.tool_results:
            if result.tool_name != TOOL_SEARCH or result.is_error:
                continue
            for name in _activated_in(result.details):
                if name in self._deferred and name not in self._active:
                    self._active[name] = None
                    added = True
        if not added:
            return out
        tools = self.tools()
        assert self._agent is not None
        self._agent.tools = tools  # the next run starts with them too
        if out is None:
            return NextTurn(tools=tools)
        if out.tools is None:
            return msgspec.structs.replace(out, tools=tools)
        return out

    def _keep(self, before: Sequence[Message], projection: Projection) -> Projection:
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

    # -- the tool -------------------------------------------------------------------------
    def search(self, query: str, *, regex: bool = False, limit: int | None = None) -> list[Tool]:
        """The deferred tools ``query`` finds (as ``tool_search`` would load them).

        Exact names (separated by commas or spaces, any case) find those tools; other
        text is keywords, each scored against names (higher) and descriptions, best
        first, ties in the agent's order; ``regex`` matches a case-insensitive regular
        expression against names and descriptions. At most ``limit`` (default
        ``max_results``) tools for keywords and regexes. Raises ``re.error`` for an
        invalid regular expression.
        """
        limit = limit or self.max_results
        if regex:
            pattern = re.compile(query, re.IGNORECASE)
            found = [t for t in self._deferred.values() if pattern.search(t.name) or pattern.search(t.description)]
            return found[:limit]
        terms = [w for w in re.split(r"[\s,]+", query.strip().lower()) if w]
        if not terms:
            return []
        exact = [self._lower.get(w) for w in terms]
        if all(exact):
            return [self._deferred[n] for n in dict.fromkeys(n for n in exact if n)]
        scored: list[tuple[int, int, Tool]] = []
        for index, tool in enumerate(self._deferred.values()):
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

    async def _execute(self, args: dict[str, Any], ctx: ToolContext[Any]) -> ToolResult:
        query = str(args.get("query", ""))
        regex = bool(args.get("regex", False))
        limit = args.get("limit")
        example = next(iter(self._deferred), "name")
        how = (
            f'Search by exact names from the deferred tools listed in the system prompt (e.g. "{example}"), '
            f"by keywords from a tool's name or description, or by a regular expression with regex true "
            f'(e.g. "^{re.escape(example[:4])}").'
        )
        if not query.strip():
            return ToolResult.error(f"{TOOL_SEARCH} needs a non-empty query. {how}")
        try:
            found = self.search(query, regex=regex, limit=limit if isinstance(limit, int) else None)
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


class _KeepActivations:
    """The agent's context manager, whose committed rewrites keep activations (see
    :meth:`ToolSearch._keep`)."""

    __slots__ = ("inner", "search")

    def __init__(self, inner: ContextManager, search: ToolSearch) -> None:
        self.inner = inner
        self.search = search

    async def manage(self, messages: list[Message], request: ContextRequest) -> AsyncIterator[Any]:
        """The inner manager's items; a committed projection keeps the activations."""
        async for item in self.inner.manage(messages, request):
            if type(item) is Projection and item.commit is not None:
                item = self.search._keep(messages, item)
            yield item

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)  # the Compactor's limits(), summary_calls, ...
