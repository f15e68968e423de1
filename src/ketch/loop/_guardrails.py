"""Guardrails: checks on a run's input, its final output, and each tool call and result.

A guardrail is a function (plain or ``async def``) of one argument that returns a
:class:`GuardrailResult` (or None, which passes):

- ``input`` guardrails get an :class:`InputCheck` (the run's prompts) before the first
  model call, or, with ``parallel=True``, while the first call streams: the call's
  events are held back until every parallel guardrail passed, and a call a guardrail
  stopped is cancelled and discarded (nothing of it is committed or emitted);
- ``output`` guardrails get an :class:`OutputCheck` (the assistant message the run
  would end with) when the model stops without tool calls;
- ``tool_call`` guardrails get the :class:`~ketch.loop.ToolCallInfo` of a validated call
  before it runs (before ``before_tool_call``), ``tool_result`` guardrails a
  :class:`ToolResultCheck` (the call and its result) after it ran.

Each answers pass, reject or trip. A reject tells the model ``message`` so it can
correct itself: an input or output reject is committed as a user message and the model
is called (again); a tool-call reject is the call's error result (the call does not
run); a tool-result reject replaces the result with an error. A guardrail that rejects
more than its ``max_rejections`` times in one run trips instead. A trip ends the run
with ``end_reason == "guardrail"``, ``RunSummary.guardrail`` (:class:`GuardrailTrip`:
name, kind, message, info) and the error ``Guardrail "<name>" tripped: <message>``; a
tripped tool guardrail's call gets an error result, and the run ends after the batch.
A guardrail that raises trips (fails closed), with the exception's text as message.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING
from typing import Any
from typing import Literal
from typing import TypeAlias
from typing import overload

import msgspec

from ..llm._errors import exception_text
from ..llm._messages import AssistantMessage
from ..llm._messages import Message
from ..llm._messages import TextContent
from ..llm._messages import UserMessage
from ..llm._signal import AbortSignal
from ..llm._stream import StreamEvent
from ..llm._stream import is_closable
from ._next import Continue
from ._next import End
from ._next import GuardrailKind as GuardrailKind
from ._next import GuardrailTrip as GuardrailTrip
from ._next import Next
from ._next import Turn
from ._tool import ToolResult

if TYPE_CHECKING:
    from ._hooks import Conversation
    from ._hooks import ToolCallInfo
    from ._output import OutputRun



class GuardrailResult(msgspec.Struct, kw_only=True, frozen=True):
    """A guardrail's answer. Build with :meth:`passed`, :meth:`reject` or :meth:`trip`."""

    action: Literal["pass", "reject", "trip"] = "pass"
    message: str | None = None
    info: Any = None

    @classmethod
    def passed(cls) -> GuardrailResult:
        """Nothing wrong (the same as returning None)."""
        return cls()

    @classmethod
    def reject(cls, message: str, *, info: Any = None) -> GuardrailResult:
        """Tell the model ``message`` so it can correct itself; the run goes on."""
        return cls(action="reject", message=message, info=info)

    @classmethod
    def trip(cls, message: str | None = None, *, info: Any = None) -> GuardrailResult:
        """End the run (``end_reason == "guardrail"``); ``info`` is kept on the summary
        (keep it JSON-encodable: it travels in the ``agent_end`` event)."""
        return cls(action="trip", message=message, info=info)


@dataclass(frozen=True, slots=True)
class InputCheck:
    """What an input guardrail checks: the run's new ``prompts`` (not yet committed when
    the guardrail runs before the call), the conversation and the run's ``deps``."""

    prompts: list[Message]
    conversation: Conversation
    deps: Any = None

    @property
    def text(self) -> str:
        """The text of the prompts, joined with blank lines."""
        return "\n\n".join(t for t in (_text_of(m) for m in self.prompts) if t)


@dataclass(frozen=True, slots=True)
class OutputCheck:
    """What an output guardrail checks: the assistant ``message`` the run would end with,
    and with ``LoopConfig.output_type`` the typed ``output`` it carries (already parsed
    and accepted by the output validators; None without an output type)."""

    message: AssistantMessage
    conversation: Conversation
    deps: Any = None
    output: Any = None

    @property
    def text(self) -> str:
        """The message's text."""
        return self.message.text


@dataclass(frozen=True, slots=True)
class ToolResultCheck:
    """What a tool-result guardrail checks: the ``call`` and the ``result`` it produced."""

    call: ToolCallInfo
    result: ToolResult


GuardrailFn: TypeAlias = Callable[[Any], "GuardrailResult | Awaitable[GuardrailResult | None] | None"]


@dataclass(frozen=True, slots=True)
class Guardrail:
    """One guardrail: its ``kind``, the ``check`` function, a ``name`` (for the trip
    record; default the function's name), ``parallel`` (input guardrails: run while the
    first call streams) and ``max_rejections`` (rejects allowed per run before a reject
    trips). Build with :func:`input_guardrail`, :func:`output_guardrail` or
    :func:`tool_guardrail`; pass as ``Agent(..., guardrails=[...])``."""

    kind: GuardrailKind
    check: GuardrailFn
    name: str = ""
    parallel: bool = False
    max_rejections: int = 3

    def __post_init__(self) -> None:
        if self.kind not in ("input", "output", "tool_call", "tool_result"):
            raise ValueError(f"Guardrail kind must be input, output, tool_call or tool_result, got {self.kind!r}")
        if self.parallel and self.kind != "input":
            raise ValueError(f"Only input guardrails can run in parallel, not {self.kind} guardrail {self.name!r}")
        if isinstance(self.max_rejections, bool) or not isinstance(self.max_rejections, int) or self.max_rejections < 0:
            raise ValueError(f"Guardrail max_rejections must be an integer >= 0, got {self.max_rejections!r}")
        if not self.name:
            object.__setattr__(self, "name", getattr(self.check, "__name__", "guardrail"))


def _make(kind: GuardrailKind, fn: GuardrailFn | None, **kw: Any) -> Any:
    if fn is None:
        return lambda f: Guardrail(kind, f, **kw)
    return Guardrail(kind, fn, **kw)


@overload
def input_guardrail(fn: GuardrailFn, /) -> Guardrail: ...
@overload
def input_guardrail(
    *, name: str = "", parallel: bool = False, max_rejections: int = 3
) -> Callable[[GuardrailFn], Guardrail]: ...
def input_guardrail(
    fn: GuardrailFn | None = None, /, *, name: str = "", parallel: bool = False, max_rejections: int = 3
) -> Any:
    """An input guardrail (``fn(check: InputCheck)``); usable as a decorator, with or without arguments."""
    return _make("input", fn, name=name, parallel=parallel, max_rejections=max_rejections)


@overload
def output_guardrail(fn: GuardrailFn, /) -> Guardrail: ...
@overload
def output_guardrail(*, name: str = "", max_rejections: int = 3) -> Callable[[GuardrailFn], Guardrail]: ...
def output_guardrail(fn: GuardrailFn | None = None, /, *, name: str = "", max_rejections: int = 3) -> Any:
    """An output guardrail (``fn(check: OutputCheck)``); usable as a decorator."""
    return _make("output", fn, name=name, max_rejections=max_rejections)


@overload
def tool_guardrail(fn: GuardrailFn, /) -> Guardrail: ...
@overload
def tool_guardrail(
    *, on: Literal["call", "result"] = "call", name: str = "", max_rejections: int = 3
) -> Callable[[GuardrailFn], Guardrail]: ...
def tool_guardrail(
    fn: GuardrailFn | None = None,
    /,
    *,
    on: Literal["call", "result"] = "call",
    name: str = "",
    max_rejections: int = 3,
) -> Any:
    """A tool guardrail: ``on="call"`` checks a call before it runs (``fn(call:
    ToolCallInfo)``), ``on="result"`` its result (``fn(check: ToolResultCheck)``)."""
    if on not in ("call", "result"):
        raise ValueError(f"tool_guardrail(on=...) must be 'call' or 'result', got {on!r}")
    return _make("tool_call" if on == "call" else "tool_result", fn, name=name, max_rejections=max_rejections)


# -- running them (used by the loop) ----------------------------------------------------------


class Guardrails:
    """A run's guardrails by kind, and how often each rejected (one per run). (A plain
    class: a dataclass would cost ``import ketch`` about 0.4 ms.)"""

    __slots__ = ("input", "output", "parallel", "rejections", "tool_call", "tool_result")

    def __init__(self) -> None:
        self.input: list[Guardrail] = []
        self.parallel: list[Guardrail] = []
        self.output: list[Guardrail] = []
        self.tool_call: list[Guardrail] = []
        self.tool_result: list[Guardrail] = []
        self.rejections: dict[int, int] = {}

    @classmethod
    def of(cls, guardrails: Sequence[Guardrail]) -> Guardrails | None:
        """Split ``guardrails`` by kind; None when there are none."""
        if not guardrails:
            return None
        g = cls()
        for rail in guardrails:
            if not isinstance(rail, Guardrail):
                raise TypeError(f"guardrails must be Guardrail objects, got {type(rail).__name__}")
            if rail.kind == "input":
                (g.parallel if rail.parallel else g.input).append(rail)
            else:
                getattr(g, rail.kind).append(rail)
        return g

    async def check(self, rails: Sequence[Guardrail], arg: Any) -> GuardrailTrip | str | None:
        """Run ``rails`` on ``arg`` concurrently: the first trip (in list order), else the
        rejects' messages joined (a str), else None."""
        if not rails:
            return None
        if len(rails) == 1:
            verdicts = [await _verdict(rails[0], arg)]
        else:
            verdicts = list(await asyncio.gather(*(_verdict(r, arg) for r in rails)))
        return self.settle(rails, verdicts)

    def settle(self, rails: Sequence[Guardrail], verdicts: Sequence[GuardrailResult]) -> GuardrailTrip | str | None:
        """The outcome of ``verdicts`` (one per rail), counting rejects."""
        rejects: list[str] = []
        for rail, verdict in zip(rails, verdicts, strict=True):
            if verdict.action == "reject":
                count = self.rejections.get(id(rail), 0) + 1
                self.rejections[id(rail)] = count
                if count > rail.max_rejections:
                    text = f"rejected {count} times (max_rejections={rail.max_rejections}): {verdict.message}"
                    verdict = GuardrailResult.trip(text, info=verdict.info)
            if verdict.action == "trip":
                return GuardrailTrip(name=rail.name, kind=rail.kind, message=verdict.message, info=verdict.info)
            if verdict.action == "reject":
                rejects.append(verdict.message or f'Guardrail "{rail.name}" rejected this')
        return "\n\n".join(rejects) if rejects else None


async def _verdict(rail: Guardrail, arg: Any) -> GuardrailResult:
    """``rail``'s answer for ``arg``; an exception or a wrong return value trips."""
    try:
        out = rail.check(arg)
        if inspect.isawaitable(out):
            out = await out
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        return GuardrailResult.trip(exception_text(exc))
    if out is None:
        return GuardrailResult()
    if not isinstance(out, GuardrailResult):
        return GuardrailResult.trip(f"guardrail returned {type(out).__name__}, expected GuardrailResult or None")
    return out


def reject_message(text: str) -> UserMessage:
    """The user message an input or output reject commits."""
    return UserMessage(content=text)


def tripped(trip: GuardrailTrip) -> End:
    """The end of a run a guardrail tripped: ``guardrail``, with the trip's text as the error."""
    return End("guardrail", trip.text, trip)


class InputGuard:
    """The input guardrails, before the first model call (a first-call check).

    A trip ends the run (nothing is sent; the prompts are kept); a reject's note is
    committed after the prompts. With parallel input guardrails it starts them
    (:class:`InputGate`) and hands the gate to ``keep``: the first call goes through it.
    """

    __slots__ = ("conversation", "deps", "guards", "keep", "signal")

    def __init__(
        self,
        guards: Guardrails,
        conversation: Conversation,
        deps: Any,
        signal: AbortSignal,
        keep: Callable[[InputGate], None],
    ) -> None:
        self.guards = guards
        self.conversation = conversation
        self.deps = deps
        self.signal = signal
        self.keep = keep

    async def __call__(self, prompts: list[Message]) -> Next | None:
        if not prompts:
            return None
        guards = self.guards
        check = InputCheck(prompts, self.conversation, self.deps)
        verdict = await guards.check(guards.input, check)
        if isinstance(verdict, GuardrailTrip):
            return tripped(verdict)
        if guards.parallel:
            self.keep(InputGate(guards, check, self.signal))
        return None if verdict is None else Continue([reject_message(verdict)])


class OutputGuard:
    """The output guardrails on the answer the run would end with (a stop check, for a
    response without tool calls; typed output's tool mode also runs :meth:`check` on the
    output tool's accepted answer).

    A reject forgets the typed output's accepted value and sends the model its note; a
    trip ends the run.
    """

    __slots__ = ("conversation", "deps", "guards", "output")

    def __init__(self, guards: Guardrails, conversation: Conversation, deps: Any, output: OutputRun | None) -> None:
        self.guards = guards
        self.conversation = conversation
        self.deps = deps
        self.output = output

    async def __call__(self, turn: Turn) -> Next | None:
        return None if turn.message.tool_calls else await self.check(turn.message)

    async def check(self, message: AssistantMessage) -> Next | None:
        """None when the guardrails pass ``message``; else the end of the run (a trip) or
        the reject's note to send before the next call."""
        output = self.output
        check = OutputCheck(message, self.conversation, self.deps, output.output if output is not None else None)
        verdict = await self.guards.check(self.guards.output, check)
        if verdict is None:
            return None
        if output is not None:
            output.discard()
        if isinstance(verdict, GuardrailTrip):
            return tripped(verdict)
        return Continue([reject_message(verdict)])


class InputGate:
    """Parallel input guardrails around the first model call. The call is made with
    :attr:`signal` (a child of the run's); :meth:`wrap` holds the stream's events back
    until the guardrails answered, then passes them on. A guardrail that trips or
    rejects aborts the call at once (``outcome`` is then the trip or the reject's text)
    and nothing of the stream is passed on."""

    __slots__ = ("_remove", "_task", "outcome", "signal")

    def __init__(self, guardrails: Guardrails, check: InputCheck, run_signal: AbortSignal) -> None:
        self.outcome: GuardrailTrip | str | None = None
        self.signal = AbortSignal()
        self._remove = run_signal.add_callback(self._run_aborted)
        self._task = asyncio.ensure_future(guardrails.check(guardrails.parallel, check))
        self._task.add_done_callback(self._answered)

    def _run_aborted(self) -> None:
        self.signal.abort()
        self._task.cancel()

    def _answered(self, task: asyncio.Future[GuardrailTrip | str | None]) -> None:
        if not task.cancelled() and task.exception() is None and task.result() is not None:
            self.signal.abort("guardrail")  # stop the call now: it is discarded

    async def verdict(self) -> GuardrailTrip | str | None:
        """Wait for the guardrails (an aborted run's count as passed)."""
        try:
            self.outcome = await self._task
        except asyncio.CancelledError:
            if not self._task.cancelled():
                raise
            self.outcome = None
        finally:
            self._remove()
        return self.outcome

    def cancel(self) -> None:
        """Stop the guardrails (the run ends without needing them)."""
        self._task.cancel()
        self._remove()

    async def wrap(self, stream: AsyncIterator[StreamEvent]) -> AsyncIterator[StreamEvent]:
        """``stream``, its events held back until the guardrails passed; nothing of it
        when they did not."""
        task = self._task
        try:
            if not task.done():
                held: list[StreamEvent] = []
                async for event in stream:
                    held.append(event)
                    if task.done():
                        break
                if await self.verdict() is not None:
                    return
                for event in held:
                    yield event
            elif await self.verdict() is not None:
                return
            async for event in stream:
                yield event
        finally:
            if is_closable(stream):
                await stream.aclose()


def _text_of(message: Message) -> str:
    content = getattr(message, "content", "")
    if isinstance(content, str):
        return content
    return "".join(b.text for b in content if type(b) is TextContent)
