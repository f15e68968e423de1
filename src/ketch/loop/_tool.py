"""What a tool is to the loop: :class:`Tool`, :class:`ToolContext`, :class:`ToolResult`.

A tool is a name, a description, a JSON schema for its arguments and an async
``execute(args, ctx)``. Optional behaviour is declared with plain fields:

- ``sequential``: the tool is not concurrency-safe; it runs alone, and nothing after it
  in the batch starts before it ends. A callable decides per call from the arguments.
  This is scheduling only; it says nothing about what the call changes.
- ``read_only``: the call changes nothing (no files, no processes, no remote state), so
  a permission policy may let it run without asking. A callable decides per call from
  the arguments. Default False: a tool that does not say is assumed to change things.
- ``requires_approval``: the call must be approved before it runs. When a turn has
  such a call, the run pauses with ``end_reason == "approval_required"`` and a
  :class:`~ketch.loop.RunState`; resuming it with a decision per call continues the run.
  A callable decides per call from the arguments.
- ``interrupt``: ``"cancel"`` lets steering cancel a running call (in the loop's
  ``"interrupt"`` steering mode); ``"block"`` (default) lets it finish.
- ``timeout``: seconds before the call is cancelled and reported as timed out.
- ``prepare_arguments``: rewrites raw arguments before schema validation.
- ``reports_progress``: whether ``execute`` may call ``ctx.report``. A call that
  cannot, alone in its batch, runs in the loop's own task: nothing has to stream while
  it runs, so no task is started for it. An abort cancels it as it would a task, but
  the run waits for it to return (``tool_abort_grace`` applies to tasks). ``@tool``
  functions without a :class:`ToolContext` parameter declare False.
- ``validate``: ``validate(args, ctx)`` (plain or async) checks arguments that fit
  the schema but are wrong in context (an edit of a file the model has not read): a
  string it returns is the call's error result, and the call does not run. It runs
  after schema validation, before everything else.
- ``preview``: ``preview(args, ctx)`` (plain or async) returns what the call would do
  (a diff, a command line), emitted as a ``tool_execution_update`` whose ``partial`` is
  a :class:`ToolPreview`, before the permission gate and execution; None emits nothing,
  and a preview that raises is logged and skipped.
- ``deferred``: for tool search (:class:`ketch.tools.ToolSearch`), whether the tool's
  definition is sent to the model only after a ``tool_search`` call activated it.
  ``None`` (default): deferred when the agent has more tools than the tool search's
  threshold; ``True``: always deferred; ``False``: never. The loop itself ignores it.

Build one directly for dynamic tools, subclass it and override :meth:`Tool.execute`,
or use the ``@tool`` decorator from :mod:`ketch.tools`.

There is no ``idempotent`` declaration: the loop runs a tool only once the assistant
message asking for it is complete, so when a request fails after tool-call deltas
streamed (a cut connection, an idle stream) and the adapter retries it (a ``retry``
event with ``discard_partial``), no call of the discarded response has run, and
retrying never replays a side effect. A model error that ends the turn ends the run
(``error``) before any of its calls run.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Sequence
from typing import Any
from typing import Generic
from typing import Literal
from typing import TypeAlias
from typing import TypeVar

import msgspec

from ..llm._messages import AssistantMessage
from ..llm._messages import DocumentContent
from ..llm._messages import ImageContent
from ..llm._messages import Message
from ..llm._messages import TextContent
from ..llm._messages import Usage
from ..llm._messages import encode_json
from ..llm._model import ToolSpec
from ..llm._signal import AbortSignal

ResultContent: TypeAlias = list[TextContent | ImageContent | DocumentContent]

Deps = TypeVar("Deps")
"""The type of the application's dependencies (``LoopConfig.deps``, ``ToolContext.deps``)."""


class ToolResult(msgspec.Struct, kw_only=True):
    """What a tool produced.

    ``content`` goes to the model (a string becomes one text block); ``details`` stays
    with the application (UI, logs). ``terminate`` asks the loop to stop after this
    batch when every result in it asks the same. ``is_error`` marks a failure the model
    should see as one.

    ``usage`` is what the tool itself spent on models (a subagent's calls, a summary),
    keyed by who spent it (e.g. ``"main/researcher#1"``): the loop adds it to the run's
    usage (and so to its budget and usage limits checked from then on) and lists it in
    :attr:`RunSummary.tool_usage <ketch.loop.RunSummary.tool_usage>`.
    """

    content: ResultContent | str = msgspec.field(default_factory=list)
    details: Any = None
    terminate: bool = False
    is_error: bool = False
    usage: dict[str, Usage] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.content, str):
            self.content = [TextContent(text=self.content)]

    @property
    def blocks(self) -> ResultContent:
        """``content`` as a list of blocks."""
        content = self.content
        assert not isinstance(content, str)
        return content

    @property
    def text(self) -> str:
        """All text blocks joined."""
        return "".join(b.text for b in self.blocks if type(b) is TextContent)

    @classmethod
    def error(cls, message: str, *, details: Any = None) -> ToolResult:
        """An error result whose only content is ``message``."""
        return cls(content=[TextContent(text=message)], details=details, is_error=True)


class ToolProgress(msgspec.Struct, kw_only=True, tag="tool_progress", tag_field="type"):
    """A structured progress report (:meth:`ToolContext.progress`): a ``message``,
    ``progress`` out of ``total`` (either may be None), and any ``data``. On the wire
    (JSON) the event's ``partial`` has ``"type": "tool_progress"``."""

    message: str | None = None
    progress: float | None = None
    total: float | None = None
    data: Any = None


class ToolPreview(msgspec.Struct, kw_only=True, tag="tool_preview", tag_field="type"):
    """What a call would do (the tool's ``preview``), emitted before the permission gate
    and execution as a ``tool_execution_update``; ``preview`` is what the tool's
    function returned (a diff, a command). On the wire ``"type": "tool_preview"``."""

    preview: Any


class ToolContext(Generic[Deps]):
    """What a running tool may use besides its arguments.

    ``signal`` is aborted when the run is aborted or the call is cancelled;
    ``report(partial)`` emits a ``tool_execution_update`` event with a partial result
    or progress value; ``messages`` is the transcript as the model saw it; ``deps`` is
    the run's ``LoopConfig.deps`` (the application's dependencies: a database handle,
    the current user; ``None`` unless given). Annotate it as ``ToolContext[MyDeps]``.
    ``idempotency_key`` is set by a durable runner that may execute the same call again
    (``ketch.temporal``: workflow id + tool call id): a tool with side effects skips one
    it already performed under that key. ``None`` in-process.
    """

    __slots__ = (
        "_report", "assistant_message", "call_id", "deps", "idempotency_key", "messages", "signal", "tool_name"
    )

    def __init__(
        self,
        *,
        call_id: str,
        tool_name: str,
        signal: AbortSignal,
        report: Callable[[Any], Awaitable[None]] | None = None,
        messages: Sequence[Message] = (),
        assistant_message: AssistantMessage | None = None,
        deps: Deps = None,  # type: ignore[assignment]  # None unless the run has deps
        idempotency_key: str | None = None,
    ) -> None:
        self.call_id = call_id
        self.idempotency_key = idempotency_key
        self.tool_name = tool_name
        self.signal = signal
        self.messages = messages
        self.assistant_message = assistant_message
        self.deps = deps
        self._report = report

    async def report(self, partial: Any) -> None:
        """Report progress or a partial result (emitted as ``tool_execution_update``)."""
        if self._report is not None:
            await self._report(partial)

    async def progress(
        self, message: str | None = None, *, progress: float | None = None, total: float | None = None, data: Any = None
    ) -> None:
        """Report structured progress: a :class:`ToolProgress` as the update's ``partial``."""
        if self._report is not None:
            await self._report(ToolProgress(message=message, progress=progress, total=total, data=data))

    def __repr__(self) -> str:
        return f"ToolContext(call_id={self.call_id!r}, tool_name={self.tool_name!r})"


ExecuteFn: TypeAlias = Callable[[dict[str, Any], ToolContext[Any]], Awaitable[Any]]


class Tool:
    """A tool the model can call. See the module docstring for the optional fields."""

    __slots__ = (
        "_execute",
        "deferred",
        "description",
        "interrupt",
        "label",
        "name",
        "parameters",
        "prepare_arguments",
        "preview",
        "read_only",
        "reports_progress",
        "requires_approval",
        "sequential",
        "strict",
        "timeout",
        "validate",
    )

    def __init__(
        self,
        name: str,
        description: str = "",
        parameters: dict[str, Any] | None = None,
        execute: ExecuteFn | None = None,
        *,
        label: str | None = None,
        sequential: bool | Callable[[dict[str, Any]], bool] = False,
        read_only: bool | Callable[[dict[str, Any]], bool] = False,
        requires_approval: bool | Callable[[dict[str, Any]], bool] = False,
        interrupt: Literal["block", "cancel"] = "block",
        timeout: float | None = None,
        prepare_arguments: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        strict: bool = False,
        reports_progress: bool = True,
        deferred: bool | None = None,
        validate: Callable[[dict[str, Any], ToolContext[Any]], Any] | None = None,
        preview: Callable[[dict[str, Any], ToolContext[Any]], Any] | None = None,
    ) -> None:
        if not name or not isinstance(name, str):
            raise ValueError("Tool name must be a non-empty string")
        self.name = name
        self.description = description
        self.parameters = parameters if parameters is not None else {"type": "object", "properties": {}}
        self._execute = execute
        self.label = label
        self.sequential = sequential
        self.read_only = read_only
        self.requires_approval = requires_approval
        self.interrupt = interrupt
        self.timeout = timeout
        self.prepare_arguments = prepare_arguments
        self.strict = strict
        self.reports_progress = reports_progress
        self.deferred = deferred
        self.validate = validate
        self.preview = preview

    async def execute(self, args: dict[str, Any], ctx: ToolContext[Any]) -> Any:
        """Run the tool. Return a string, JSON-serialisable value, image(s) or :class:`ToolResult`."""
        if self._execute is None:
            raise NotImplementedError(f"Tool {self.name!r} has no execute function")
        result = self._execute(args, ctx)
        if inspect.isawaitable(result):
            return await result
        return result

    def is_sequential(self, args: dict[str, Any]) -> bool:
        """Whether this call must run alone (not concurrency-safe)."""
        seq = self.sequential
        return seq(args) if callable(seq) else bool(seq)

    def is_read_only(self, args: dict[str, Any]) -> bool:
        """Whether this call changes nothing (``read_only``, decided for ``args``)."""
        ro = self.read_only
        return ro(args) if callable(ro) else bool(ro)

    def needs_approval(self, args: dict[str, Any]) -> bool:
        """Whether this call must be approved before it runs (``requires_approval``)."""
        ra = self.requires_approval
        return ra(args) if callable(ra) else bool(ra)

    @property
    def spec(self) -> ToolSpec:
        """The name, description and schema sent to the model."""
        return ToolSpec(name=self.name, description=self.description, parameters=self.parameters)

    def __repr__(self) -> str:
        return f"Tool(name={self.name!r})"


def _encode_other(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    raise TypeError(f"cannot encode {type(value).__name__}")


_json = msgspec.json.Encoder(enc_hook=_encode_other)


def to_tool_result(value: Any) -> ToolResult:
    """Normalise what a tool returned into a :class:`ToolResult`.

    Strings become text; images and lists of blocks are kept; ``None`` becomes empty
    content; anything else is encoded as JSON text.
    """
    if isinstance(value, ToolResult):
        return value
    if isinstance(value, str):
        return ToolResult(content=[TextContent(text=value)])
    if value is None:
        return ToolResult(content=[])
    if isinstance(value, (TextContent, ImageContent)):
        return ToolResult(content=[value])
    if isinstance(value, list) and value and all(isinstance(v, (TextContent, ImageContent)) for v in value):
        return ToolResult(content=list(value))
    try:
        text = encode_json(value, _json).decode()
    except (TypeError, msgspec.EncodeError):
        text = str(value)
    return ToolResult(content=[TextContent(text=text)], details=value)
