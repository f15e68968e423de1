"""Typed output: a run that ends with a validated value of ``output_type``.

``LoopConfig.output_type`` (and ``Agent(output_type=...)``) asks the run for a value of
a type: a pydantic model, dataclass, ``TypedDict``, ``msgspec.Struct``, a primitive
(``int``, ``bool``, ``list[str]`` …) or a union. Types whose JSON schema is not an
object are wrapped as ``{"response": <value>}``. ``str`` alone means the final text,
unless a mode is forced.

How the model is asked (``output_mode``):

- ``native``: the provider's own structured output (``StreamOptions.response_format``);
  the answer is JSON text.
- ``tool``: an output tool (:data:`OUTPUT_TOOL_NAME`) whose arguments are the answer;
  ``tool_choice`` becomes ``required`` unless set.
- ``prompted``: the schema and an instruction appended to the system prompt; the
  answer is JSON text.
- ``auto`` (default): ``native`` for a model whose ``native_output`` is true
  (:class:`~ketch.llm.SupportsNativeOutput`), else ``tool``.

The answer is validated, then passed to each output validator in order (sync or async;
a validator rejects by raising or returning :class:`RejectOutput`). A problem goes back
to the model (a user message in the text modes, the output call's error result in
``tool`` mode) ending with :data:`RETRY_SUFFIX`, at most ``output_retries`` times per
run; after that the run ends with ``end_reason == "output_invalid"``. The accepted
value is ``RunResult.output``.

:class:`PartialOutput` turns a run's events into validated partial values while the
JSON streams (``RunStream.stream_output()``, ``Agent.stream_output()``).
"""

from __future__ import annotations

import asyncio
import inspect
import sys
from collections.abc import AsyncGenerator
from collections.abc import AsyncIterator
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Sequence
from typing import Any
from typing import Literal
from typing import NamedTuple
from typing import TypeAlias
from typing import get_args

import jiter
import msgspec

from .._schema._types import is_pydantic_model
from .._schema._types import output_name
from ..llm._errors import exception_text
from ..llm._messages import AssistantMessage
from ..llm._messages import Message
from ..llm._messages import TextContent
from ..llm._messages import ToolCall
from ..llm._messages import ToolResultMessage
from ..llm._messages import UserMessage
from ..llm._model import Model
from ..llm._model import StreamOptions
from ..llm._model import SupportsNativeOutput
from ..llm._model import ToolSpec
from ..llm._stream import StreamedText
from ..llm._stream import TextDelta
from ..llm._stream import ToolCallDelta
from ..llm._stream import ToolCallStart
from ..llm._structured import StructuredOutputError
from ..llm._structured import parse_structured
from ..llm._structured import response_format_for
from ..llm._structured import validate_structured
from ._events import AgentEvent
from ._events import MessageStart
from ._events import MessageUpdate
from ._events import Retry
from ._next import Continue
from ._next import End
from ._next import Next
from ._next import Turn

OutputMode: TypeAlias = Literal["auto", "native", "tool", "prompted"]
"""How typed output is asked for (see the module documentation)."""
OUTPUT_MODES: tuple[OutputMode, ...] = get_args(OutputMode)

OutputValidator: TypeAlias = Callable[[Any], Any]
"""``fn(output)``, sync or async: returns None to accept, or raises or returns
:class:`RejectOutput` to send its message back to the model."""

OUTPUT_TOOL_NAME = "final_result"
"""The name of the output tool in ``tool`` mode."""
OUTPUT_TOOL_DESCRIPTION = "Give the final answer: call this tool with the answer as its arguments. It ends the run."
PROMPTED_INSTRUCTIONS = (
    "Answer with one JSON object that follows this JSON schema, and nothing else "
    "(no Markdown fence, no text before or after it):\n{schema}"
)
"""Appended to the system prompt in ``prompted`` mode (``{schema}`` is the JSON schema)."""
RETRY_SUFFIX = "\n\nFix the errors and try again."
"""Ends every retry message sent to the model after a rejected answer."""
FINAL_RESULT_TEXT = "Final result accepted."
"""The result of an accepted output tool call."""
NOT_EXECUTED_TEXT = "Tool not executed: the same response called the final_result tool."
"""The result of the other calls of a response that called the output tool."""
TEXT_NOT_ACCEPTED = "Plain text is not accepted as the answer: call the final_result tool with the answer as its arguments."
"""The problem reported in ``tool`` mode when the model answered with text."""

_NOTHING: Any = object()
_NUMBER_END = frozenset("0123456789-+.eE")


class RejectOutput(Exception):
    """An output validator's rejection: ``message`` goes back to the model, which tries
    again (within ``output_retries``). Raise it, or return it."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


# -- the schema of one output type ----------------------------------------------------


def _uses_pydantic(type_: Any) -> bool:
    return is_pydantic_model(type_) or any(_uses_pydantic(arg) for arg in get_args(type_))


class OutputSchema:
    """The JSON schema of one output type and its parsers (text, tool arguments, partial JSON).

    ``format`` is the ``response_format`` sent in ``native`` mode (and the output tool's
    parameters); ``wrapper`` is the ``{"response": T}`` type for a type whose schema is not
    an object (None otherwise). ``format`` is None for plain text (``str`` in ``auto``).
    """

    __slots__ = ("format", "name", "type", "wrapper")

    def __init__(self, type_: Any, *, text: bool = False) -> None:
        self.type = type_
        self.wrapper: Any = None
        self.format: dict[str, Any] | None = None
        self.name = output_name(type_)
        if text:
            return
        try:
            self.format = response_format_for(type_)
            return
        except TypeError:
            pass
        if _uses_pydantic(type_):
            pydantic = sys.modules["pydantic"]
            self.wrapper = pydantic.create_model(self.name, response=(type_, ...))
        else:
            self.wrapper = msgspec.defstruct(self.name, [("response", type_)], kw_only=True)
        try:
            self.format = response_format_for(self.wrapper)
        except TypeError as exc:
            raise TypeError(
                f"output_type must be a pydantic model, dataclass, TypedDict, msgspec Struct, primitive "
                f"or a union of them that has a JSON schema, got {type_!r} ({exc})"
            ) from None

    def parse_text(self, text: str) -> Any:
        """The value in a JSON answer; raises :class:`StructuredOutputError`."""
        if self.format is None:
            return text
        if self.wrapper is None:
            return parse_structured(text, self.type)
        try:
            return parse_structured(text, self.wrapper).response
        except StructuredOutputError as exc:
            try:  # the bare value, without the {"response": ...} around it
                return parse_structured(text, self.type)
            except (StructuredOutputError, TypeError):
                raise exc from None

    def parse_call(self, call: ToolCall) -> Any:
        """The value in an output tool call's arguments; raises :class:`StructuredOutputError`."""
        if call.parse_error is not None:
            raise StructuredOutputError(
                f"Structured output for {self.name} is not valid JSON: {call.parse_error}",
                text=call.raw_arguments or "",
            )
        return self.validate(call.args)

    def validate(self, data: Any) -> Any:
        """``data`` (decoded JSON) as the output type; raises :class:`StructuredOutputError`."""
        if self.wrapper is None:
            return validate_structured(data, self.type)
        return validate_structured(data, self.wrapper).response

    def partial(self, data: Any) -> Any:
        """``data`` as the output type, or :data:`_NOTHING` when it does not validate yet."""
        try:
            return self.validate(data)
        except (StructuredOutputError, TypeError, ValueError):
            return _NOTHING


_schemas: dict[Any, OutputSchema] = {}


def output_schema(type_: Any, *, text: bool = False) -> OutputSchema:
    """The (cached) :class:`OutputSchema` of ``type_``; raises ``TypeError`` for a type
    without a JSON schema."""
    key = (type_, text)
    try:
        found = _schemas.get(key)
    except TypeError:  # an unhashable type annotation
        return OutputSchema(type_, text=text)
    if found is None:
        found = _schemas[key] = OutputSchema(type_, text=text)
    return found


def check_output_config(output_type: Any, output_mode: Any, output_retries: Any) -> None:
    """Raise ``ValueError`` / ``TypeError`` (one line naming the bad value) for a typed-output
    setting that cannot work."""
    if output_mode not in OUTPUT_MODES:
        raise ValueError(f"output_mode must be one of {', '.join(OUTPUT_MODES)}; got {output_mode!r}")
    if isinstance(output_retries, bool) or not isinstance(output_retries, int) or output_retries < 0:
        raise ValueError(f"output_retries must be a non-negative integer, got {output_retries!r}")
    if output_type is not None:
        output_schema(output_type, text=output_type is str and output_mode == "auto")


def resolve_mode(output_type: Any, mode: OutputMode, model: Model) -> Literal["text", "native", "tool", "prompted"]:
    """The mode a run uses: ``text`` for ``str`` in ``auto``; ``auto`` becomes ``native``
    for a model with ``native_output``, else ``tool``."""
    if mode != "auto":
        return mode
    if output_type is str:
        return "text"
    if isinstance(model, SupportsNativeOutput) and model.native_output:
        return "native"
    return "tool"


# -- one run ------------------------------------------------------------------------------


class Verdict(NamedTuple):
    """What the check of an answer decided: ``results`` to commit (``tool`` mode), a
    ``retry`` message for the next turn, or the ``end`` of the run."""

    results: list[ToolResultMessage]
    retry: Message | None
    end: End | None


class _ValidatorFailed(Exception):
    pass


class OutputRun:
    """Typed output for one run: what the requests carry, and the checks of the answers.

    Built by the loop when ``LoopConfig.output_type`` is set; raises ``ValueError`` /
    ``TypeError`` for a setting that cannot work (see :func:`check_output_config`).
    """

    __slots__ = ("mode", "prompt", "retries", "retries_left", "schema", "tool_name", "validators", "value")

    def __init__(
        self,
        output_type: Any,
        mode: OutputMode,
        retries: int,
        validators: Sequence[OutputValidator],
        model: Model,
        tool_names: Sequence[str],
    ) -> None:
        check_output_config(output_type, mode, retries)
        self.mode = resolve_mode(output_type, mode, model)
        self.schema = output_schema(output_type, text=self.mode == "text")
        self.retries = retries
        self.retries_left = retries
        self.validators = tuple(validators)
        self.value: Any = _NOTHING
        self.tool_name: str | None = None
        self.prompt = ""
        if self.mode == "tool":
            if OUTPUT_TOOL_NAME in tool_names:
                raise ValueError(
                    f"A tool is named {OUTPUT_TOOL_NAME!r}, the name of the output tool; rename it or use "
                    "output_mode='native' or 'prompted'"
                )
            self.tool_name = OUTPUT_TOOL_NAME
        elif self.mode == "prompted":
            schema = msgspec.json.encode(self.schema.format["schema"] if self.schema.format else {}).decode()
            self.prompt = PROMPTED_INSTRUCTIONS.format(schema=schema)

    @property
    def output(self) -> Any:
        """The accepted value (None when there is none)."""
        return None if self.value is _NOTHING else self.value

    def discard(self) -> None:
        """Forget the accepted value (an output guardrail rejected the answer)."""
        self.value = _NOTHING

    @property
    def has_output(self) -> bool:
        """Whether an answer was accepted."""
        return self.value is not _NOTHING

    def options(self, options: StreamOptions) -> StreamOptions:
        """``options`` for this mode's requests."""
        if self.mode == "native" and self.schema.format is not None:
            return msgspec.structs.replace(options, response_format=self.schema.format)
        if self.mode == "tool" and options.tool_choice in (None, "auto"):
            return msgspec.structs.replace(options, tool_choice="required")
        return options

    def system_prompt(self, system_prompt: str) -> str:
        """The system prompt with the ``prompted`` mode's instructions."""
        if not self.prompt:
            return system_prompt
        return f"{system_prompt}\n\n{self.prompt}" if system_prompt else self.prompt

    def tool_specs(self, specs: list[ToolSpec]) -> list[ToolSpec]:
        """``specs`` with the output tool in ``tool`` mode."""
        if self.tool_name is None or self.schema.format is None:
            return specs
        schema = self.schema.format["schema"]
        return [*specs, ToolSpec(name=self.tool_name, description=OUTPUT_TOOL_DESCRIPTION, parameters=schema)]

    def output_call(self, message: AssistantMessage) -> ToolCall | None:
        """In ``tool`` mode, the response's first call of the output tool (None when it made none)."""
        if self.tool_name is None:
            return None
        return next((c for c in message.tool_calls if c.name == self.tool_name), None)

    async def check_call(self, message: AssistantMessage, call: ToolCall) -> Verdict:
        """The verdict on a response that called the output tool (``call``: its first such
        call, which counts; every call of the response gets a result)."""
        calls = message.tool_calls
        self.value = _NOTHING
        problem: str | None
        try:
            value = self.schema.parse_call(call)
            problem = await self._validate(value)
        except StructuredOutputError as exc:
            problem = exc.message
        except _ValidatorFailed as exc:
            return Verdict(self._results(calls, call, str(exc)), None, End("error", str(exc)))
        results = self._results(calls, call, problem)
        if problem is None:
            self.value = value
            return Verdict(results, None, End("stop"))
        return Verdict(results, None, self._spend(problem))

    async def check_text(self, message: AssistantMessage) -> Verdict:
        """The verdict on a response without tool calls (the model would stop)."""
        self.value = _NOTHING
        problem: str | None
        if self.mode == "tool":
            problem = TEXT_NOT_ACCEPTED
        else:
            try:
                value = self.schema.parse_text(message.text)
                problem = await self._validate(value)
            except StructuredOutputError as exc:
                problem = exc.message
            except _ValidatorFailed as exc:
                return Verdict([], None, End("error", str(exc)))
            if problem is None:
                self.value = value
                return Verdict([], None, None)
        end = self._spend(problem)
        if end is not None:
            return Verdict([], None, end)
        return Verdict([], UserMessage(content=problem + RETRY_SUFFIX), None)

    def _spend(self, problem: str) -> End | None:
        """Use one retry for ``problem`` (None), or the end of the run when none is left."""
        if self.retries_left > 0:
            self.retries_left -= 1
            return None
        n = self.retries
        return End("output_invalid", f"Invalid output after {n} {'retry' if n == 1 else 'retries'}: {problem}")

    def _results(self, calls: list[ToolCall], output_call: ToolCall, problem: str | None) -> list[ToolResultMessage]:
        results = []
        for c in calls:
            if c is output_call:
                text = FINAL_RESULT_TEXT if problem is None else problem + RETRY_SUFFIX
                error = problem is not None
            else:
                text, error = NOT_EXECUTED_TEXT, True
            results.append(
                ToolResultMessage(
                    tool_call_id=c.id, tool_name=c.name, content=[TextContent(text=text)], is_error=error
                )
            )
        return results

    async def _validate(self, value: Any) -> str | None:
        """The first validator's rejection message, or None when all accept."""
        for fn in self.validators:
            try:
                out = fn(value)
                if inspect.isawaitable(out):
                    out = await out
            except RejectOutput as exc:
                return exc.message
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                name = getattr(fn, "__name__", repr(fn))
                raise _ValidatorFailed(f"Output validator {name} failed: {exception_text(exc)}") from exc
            if isinstance(out, RejectOutput):
                return out.message
        return None


# -- the loop's steps and checks -----------------------------------------------------------


class AnswerStep(msgspec.Struct):
    """The tool step of a response that called the output tool (``tool`` mode, ``call``
    its first such call): no tool runs; the answer is checked, and every call of the
    response gets a result (not counted as tool calls)."""

    output: OutputRun
    message: AssistantMessage
    calls: list[ToolCall]
    call: ToolCall
    verdict: Verdict | None = None

    async def events(self) -> AsyncGenerator[AgentEvent, None]:
        """Check the answer (output validators may await); the step has no events of its own."""
        self.verdict = await self.output.check_call(self.message, self.call)
        return
        yield  # an async generator, like every tool step's events()

    def result(self) -> Turn:
        verdict = self.verdict
        assert verdict is not None, "the answer has not been checked"
        return Turn(self.message, self.calls, verdict.results, end=verdict.end, answered=True)


class OutputAnswer:
    """After a turn that called the output tool (an after-turn check, first in the list):
    an accepted answer ends the run once the output guardrails (``guard``) passed it; an
    invalid one ends it when no retry is left, else the model is called again (with the
    steering messages polled now)."""

    __slots__ = ("guard", "poll_steering")

    def __init__(
        self,
        guard: Callable[[AssistantMessage], Awaitable[Next | None]] | None,
        poll_steering: Callable[[], Awaitable[list[Message]]],
    ) -> None:
        self.guard = guard
        self.poll_steering = poll_steering

    async def __call__(self, turn: Turn) -> Next | None:
        if not turn.answered:
            return None
        end = turn.end
        if end is not None and self.guard is not None and end == End("stop"):
            guarded = await self.guard(turn.message)
            if guarded is not None:
                return guarded
        return end if end is not None else Continue(await self.poll_steering())


class OutputText:
    """When the model would stop without tool calls (a stop check): the answer in its
    text is checked; a problem goes back to the model while retries are left."""

    __slots__ = ("output",)

    def __init__(self, output: OutputRun) -> None:
        self.output = output

    async def __call__(self, turn: Turn) -> Next | None:
        if turn.message.tool_calls:
            return None
        verdict = await self.output.check_text(turn.message)
        if verdict.end is not None:
            return verdict.end
        return None if verdict.retry is None else Continue([verdict.retry])


# -- partial values while the answer streams -------------------------------------------


def _partial_json(raw: str) -> Any:
    """The best-effort value of streamed JSON text, or :data:`_NOTHING` (nothing yet, or
    the text ends inside a number, whose digits may still grow)."""
    text = raw.strip()
    if text.startswith("```"):
        newline = text.find("\n")
        if newline < 0:
            return _NOTHING
        text = text[newline + 1 :].rstrip("`").strip()
    if not text or text[-1] in _NUMBER_END:
        return _NOTHING
    try:
        return jiter.from_json(text.encode(), partial_mode="trailing-strings")
    except ValueError:
        return _NOTHING


class PartialOutput:
    """Turns a run's events into validated partial values of the output type.

    :meth:`feed` takes each event and returns a new partial value, or :data:`NOTHING`
    when the event brought none (the answer's JSON so far is unchanged or does not yet
    validate). Only the answer counts: the text in the text modes, the output tool's
    arguments in ``tool`` mode; a new assistant message starts over. The answer is read
    again at a bounded rate (:class:`~ketch.llm._stream.StreamedText`: on every fragment
    while it is shorter than 1024 characters, then each time it has grown by a quarter),
    so a long answer streams in linear time.
    """

    __slots__ = ("_buffers", "_last", "_text", "mode", "schema", "tool_name")

    NOTHING: Any = _NOTHING
    """What :meth:`feed` returns when there is no new partial value."""

    def __init__(self, run: OutputRun) -> None:
        self.schema = run.schema
        self.mode = run.mode
        self.tool_name = run.tool_name
        self._buffers: dict[int, StreamedText] = {}
        self._text = StreamedText()
        self._last: Any = _NOTHING

    def feed(self, event: Any) -> Any:
        """The new partial value this event brings, or :data:`NOTHING`."""
        kind = type(event)
        if kind is MessageUpdate:
            update = event.event
            ukind = type(update)
            if self.tool_name is not None:
                if ukind is ToolCallStart:
                    block = event.message.content[update.index]
                    if type(block) is ToolCall and block.name == self.tool_name:
                        self._buffers[update.index] = StreamedText()
                    return _NOTHING
                buffer = self._buffers.get(update.index) if ukind is ToolCallDelta else None
                if buffer is None or not buffer.add(update.delta):
                    return _NOTHING
                raw = buffer.text()
            elif ukind is TextDelta:
                # From the deltas: the event's message may have grown since (a queued event).
                if not self._text.add(update.delta):
                    return _NOTHING
                raw = self._text.text()
                if self.mode == "text":
                    return raw
            else:
                return _NOTHING
            data = _partial_json(raw)
            if data is _NOTHING or (self._last is not _NOTHING and data == self._last):
                return _NOTHING
            self._last = data
            return self.schema.partial(data)
        if (kind is MessageStart and type(event.message) is AssistantMessage) or (
            kind is Retry and event.discard_partial
        ):
            self._buffers.clear()
            self._text = StreamedText()
            self._last = _NOTHING
        return _NOTHING


async def stream_partials(
    events: AsyncIterator[Any], partial: PartialOutput, final: Callable[[], Awaitable[Any]]
) -> AsyncIterator[Any]:
    """The partial values in ``events``, each one different from the one before, then the
    accepted output (``await final()``: :data:`PartialOutput.NOTHING` when there is none)
    when it differs from the last one yielded."""
    last: Any = _NOTHING
    async for event in events:
        value = partial.feed(event)
        if value is not _NOTHING and (last is _NOTHING or value != last):
            last = value
            yield value
    output = await final()
    if output is not _NOTHING and (last is _NOTHING or output != last):
        yield output


_END: Any = object()


class OutputStream:
    """Partial values of a stateful run's typed output (``Agent.stream_output()``).

    ``async for partial in stream`` starts the run and yields validated partial values as
    the answer streams, each different from the one before; the last one is
    ``RunResult.output`` when the run ended with an accepted answer. ``await
    stream.result()`` finishes the run (starting it if needed) and returns its result.
    ``await stream.aclose()`` (or leaving ``async with stream:``) aborts a run still
    going. A stream can be iterated once.
    """

    __slots__ = ("_abort", "_gen", "_partial", "_start", "_subscribe", "_task")

    def __init__(
        self,
        start: Callable[[], Awaitable[Any]],
        subscribe: Callable[[Callable[[Any], None]], Callable[[], None]],
        abort: Callable[[], None],
        partial: PartialOutput,
    ) -> None:
        self._start = start
        self._subscribe = subscribe
        self._abort = abort
        self._partial = partial
        self._task: asyncio.Future[Any] | None = None
        self._gen: AsyncGenerator[Any, None] | None = None

    def __aiter__(self) -> OutputStream:
        return self

    async def __anext__(self) -> Any:
        if self._gen is None:
            self._gen = self._iterate()
        return await self._gen.__anext__()

    async def __aenter__(self) -> OutputStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop iterating; a run still going is aborted (and waited for)."""
        if self._gen is None:
            self._gen = self._iterate()
        await self._gen.aclose()

    async def _iterate(self) -> AsyncGenerator[Any, None]:
        queue: asyncio.Queue[Any] = asyncio.Queue()
        unsubscribe = self._subscribe(queue.put_nowait)
        task = self._task = asyncio.ensure_future(self._start())
        task.add_done_callback(lambda _: queue.put_nowait(_END))

        async def events() -> AsyncIterator[Any]:
            while (event := await queue.get()) is not _END:
                yield event

        async def final() -> Any:
            result = await task
            return _NOTHING if result.output is None else result.output

        try:
            async for value in stream_partials(events(), self._partial, final):
                yield value
        finally:
            unsubscribe()
            if not task.done():
                self._abort()
                await asyncio.wait([task])

    async def result(self) -> Any:
        """The run's :class:`~ketch.loop.RunResult`: the remaining partial values are
        skipped (the run is started if it was not)."""
        if self._task is None or not self._task.done():
            async for _ in self:
                pass
        if self._task is None:
            raise RuntimeError("This output stream was closed before its run started")
        return await self._task
