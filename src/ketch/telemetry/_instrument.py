"""Spans and metrics of runs, model calls and tool calls, per the OpenTelemetry GenAI
semantic conventions.

Attached through the seams the loop already has: an :class:`~ketch.Agent`'s events
(``Agent.subscribe``) give the ``invoke_agent`` and ``chat`` spans, a tool middleware
gives the ``execute_tool`` spans (it runs inside the tool's own task, so its span is the
current one there and whatever the tool runs, a nested agent included, is its child).
For a bare :class:`~ketch.loop.LoopConfig`, a model wrapper gives the ``chat`` spans.
Nothing is added to the loop itself: an uninstrumented run does exactly what it did.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from collections.abc import Awaitable
from collections.abc import Callable
from typing import TYPE_CHECKING
from typing import Any
from typing import Protocol
from typing import runtime_checkable

from ..llm import AssistantMessage
from ..llm import Model
from ..llm import Request
from ..llm import StreamEvent
from ..llm import StreamOptions
from ..llm import Usage
from ..loop import AgentEvent
from ..loop import LoopConfig
from ..loop import ToolCallInfo
from ..loop import ToolResult
from . import _content

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.metrics import Histogram
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import Span
    from opentelemetry.trace import Tracer
    from opentelemetry.trace import TracerProvider

    from .. import Agent

SCHEMA_URL = "https://opentelemetry.io/schemas/1.37.0"

PROVIDER_NAMES: dict[str, str] = {
    "google": "gcp.gemini",
    "gemini": "gcp.gemini",
    "vertex": "gcp.vertex_ai",
    "azure": "azure.ai.openai",
    "bedrock": "aws.bedrock",
    "mistral": "mistral_ai",
    "xai": "x_ai",
}
"""ketch provider names whose conventional ``gen_ai.provider.name`` differs."""


@runtime_checkable
class _Identified(Protocol):
    """An agent's session that has an id (:class:`ketch.sessions.Session` has): the
    spans' ``gen_ai.conversation.id``."""

    @property
    def id(self) -> str:
        """The session's id."""
        ...

_TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)
_DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)


def provider_name(provider: str) -> str:
    """The conventions' ``gen_ai.provider.name`` for a ketch provider name."""
    return PROVIDER_NAMES.get(provider, provider)


def _input_tokens(usage: Usage) -> int:
    # The conventions count cached input in the input tokens; ketch's ``input`` does not.
    return usage.input + usage.cache_read + usage.cache_write


class _Chat:
    """One model call being recorded."""

    __slots__ = ("attributes", "provider", "span", "started")

    def __init__(self, span: Span, provider: str, attributes: dict[str, Any]) -> None:
        self.span = span
        self.provider = provider
        self.attributes = attributes
        self.started = time.monotonic()


class Instrumentation:
    """What :func:`instrument` attached: the tracer and meters, and the state of the
    run being traced. :meth:`uninstrument` takes it off again.

    ``agent_name`` names the ``invoke_agent`` span (``gen_ai.agent.name``);
    ``capture_content`` adds messages, system instructions, tool arguments and tool
    results to the spans (off by default: they may hold anything the user or a tool
    wrote).
    """

    def __init__(
        self,
        *,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        capture_content: bool = False,
        agent_name: str = "agent",
    ) -> None:
        from opentelemetry import metrics
        from opentelemetry import trace

        package = "ketch"
        self.capture_content = capture_content
        self.agent_name = agent_name
        self.tracer: Tracer = trace.get_tracer(package, tracer_provider=tracer_provider, schema_url=SCHEMA_URL)
        meter = metrics.get_meter(package, meter_provider=meter_provider, schema_url=SCHEMA_URL)
        self.token_usage: Histogram = meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Number of input and output tokens used",
            explicit_bucket_boundaries_advisory=_TOKEN_BUCKETS,
        )
        self.operation_duration: Histogram = meter.create_histogram(
            "gen_ai.client.operation.duration",
            unit="s",
            description="GenAI operation duration",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        )
        self._detach: list[Callable[[], None]] = []
        # The run being traced (an Agent runs one run at a time).
        self._agent: Agent[Any] | None = None
        self._run_span: Span | None = None
        self._run_context: Context | None = None
        self._run_token: object | None = None
        self._turn = 0
        self._chat: _Chat | None = None
        self._last_error_kind: str | None = None
        self._tool_started: dict[str, int] = {}
        self._tool_traced: set[str] = set()

    # -- attaching ----------------------------------------------------------------------
    def uninstrument(self) -> None:
        """Detach from the agent or config (spans of a run in progress are ended)."""
        for undo in reversed(self._detach):
            undo()
        self._detach.clear()
        if self._chat is not None:
            self._chat.span.end()
            self._chat = None
        self._end_run_span()

    def _attach_agent(self, agent: Agent[Any]) -> None:
        self._agent = agent
        config = agent.config
        middleware = self.tool_middleware
        config.middlewares = [*config.middlewares, middleware]
        unsubscribe = agent.subscribe(self._on_event)

        def undo() -> None:
            unsubscribe()
            config.middlewares = [m for m in config.middlewares if m is not middleware]

        self._detach.append(undo)

    def _attach_config(self, config: LoopConfig[Any]) -> None:
        middleware = self.tool_middleware
        model = config.model
        config.middlewares = [*config.middlewares, middleware]
        config.model = self.wrap_model(model)

        def undo() -> None:
            config.middlewares = [m for m in config.middlewares if m is not middleware]
            if isinstance(config.model, TracedModel) and config.model.instrumentation is self:
                config.model = config.model.model

        self._detach.append(undo)

    # -- the agent's events ---------------------------------------------------------------
    def _on_event(self, event: AgentEvent) -> None:
        """Record one event of an instrumented agent's run (an ``Agent.subscribe`` listener)."""
        if event.type == "message_update":
            return
        match event.type:
            case "message_start":
                message = event.message
                if type(message) is AssistantMessage:
                    self._start_chat(message.provider or self._model().provider, message.model or self._model().id)
            case "message_end":
                message = event.message
                if type(message) is AssistantMessage and self._chat is not None:
                    self._end_chat(self._chat, message)
                    self._chat = None
            case "turn_start":
                self._turn = event.turn
            case "tool_execution_start":
                self._tool_started[event.tool_call_id] = time.time_ns()
            case "tool_execution_end":
                self._tool_ended(event)
            case "agent_start":
                self._start_run()
            case "agent_end":
                self._end_run(event)

    def _model(self) -> Model:
        assert self._agent is not None
        return self._agent.model

    def _start_run(self) -> None:
        from opentelemetry import context
        from opentelemetry import trace

        self._end_run_span()  # a run that never ended (its consumer stopped reading)
        agent = self._agent
        assert agent is not None
        model = agent.model
        provider = provider_name(model.provider)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.provider.name": provider,
            "gen_ai.system": provider,
            "gen_ai.agent.name": self.agent_name,
            "gen_ai.request.model": model.id,
        }
        session = agent.session
        if isinstance(session, _Identified) and isinstance(session.id, str):
            attributes["gen_ai.conversation.id"] = session.id
        if self.capture_content and agent.system_prompt:
            attributes["gen_ai.system_instructions"] = _content.system_instructions(agent.system_prompt)
        span = self.tracer.start_span(
            f"invoke_agent {self.agent_name}", kind=trace.SpanKind.INTERNAL, attributes=attributes
        )
        self._run_span = span
        self._run_context = trace.set_span_in_context(span)
        # Current in the run's task from here on, so tool tasks and nested agents inherit it.
        self._run_token = context.attach(self._run_context)
        self._turn = 0
        self._last_error_kind = None
        self._tool_started.clear()
        self._tool_traced.clear()

    def _end_run(self, event: Any) -> None:
        span = self._run_span
        if span is None:
            return
        if self._chat is not None:  # the call's message never ended (a cancelled run)
            self._chat.span.end()
            self._chat = None
        summary = event.summary
        usage = summary.usage
        span.set_attributes(
            {
                "gen_ai.usage.input_tokens": _input_tokens(usage),
                "gen_ai.usage.output_tokens": usage.output,
                "gen_ai.usage.cache_read.input_tokens": usage.cache_read,
                "gen_ai.usage.cache_creation.input_tokens": usage.cache_write,
                "ketch.usage.cost": usage.cost.total,
                "ketch.turns": summary.turns,
                "ketch.tool_calls": summary.tool_calls,
                "ketch.end_reason": summary.end_reason,
            }
        )
        if summary.end_reason == "error":
            self._set_error(span, self._last_error_kind or "error")
        self._end_run_span()

    def _end_run_span(self) -> None:
        span, token = self._run_span, self._run_token
        self._run_span = self._run_context = self._run_token = None
        if token is not None:
            from opentelemetry import context

            try:
                context.detach(token)  # type: ignore[arg-type]
            except Exception:  # detached in another context: nothing to undo here
                pass
        if span is not None:
            span.end()

    # -- model calls ----------------------------------------------------------------------
    def _start_chat(self, provider: str, model_id: str, request: Request | None = None) -> None:
        chat = self._open_chat(provider, model_id, self._options(), request, parent=self._run_context)
        if self.capture_content and request is None and self._agent is not None:
            chat.span.set_attribute("gen_ai.input.messages", _content.input_messages(self._agent.messages))
        if self._chat is not None:
            self._chat.span.end()
        self._chat = chat

    def _options(self) -> StreamOptions | None:
        return self._agent.config.options if self._agent is not None else None

    def _open_chat(
        self,
        provider: str,
        model_id: str,
        options: StreamOptions | None,
        request: Request | None = None,
        parent: Context | None = None,
    ) -> _Chat:
        """Open the ``chat {model}`` span of one model call (its parent: ``parent``, else
        the current span)."""
        from opentelemetry import trace

        name = provider_name(provider)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": name,
            "gen_ai.system": name,
            "gen_ai.request.model": model_id,
        }
        span_attributes = dict(attributes)
        if self._turn:
            span_attributes["ketch.turn"] = self._turn
        if options is not None:
            if options.max_tokens is not None:
                span_attributes["gen_ai.request.max_tokens"] = options.max_tokens
            if options.temperature is not None:
                span_attributes["gen_ai.request.temperature"] = options.temperature
        if self.capture_content and request is not None:
            span_attributes["gen_ai.input.messages"] = _content.input_messages(request.messages)
            if request.system_prompt:
                span_attributes["gen_ai.system_instructions"] = _content.system_instructions(request.system_prompt)
        span = self.tracer.start_span(
            f"chat {model_id}", context=parent, kind=trace.SpanKind.CLIENT, attributes=span_attributes
        )
        return _Chat(span, name, attributes)

    def _end_chat(self, chat: _Chat, message: AssistantMessage | None) -> None:
        """Close a model call's span with its response (None: the call never finished)."""
        span = chat.span
        metric = chat.attributes
        error: str | None = None
        if message is not None:
            usage = message.usage
            if message.model:
                metric["gen_ai.response.model"] = message.model
            attributes: dict[str, Any] = {
                "gen_ai.response.finish_reasons": [_content.finish_reason(message.stop_reason, message.error_kind)],
                "gen_ai.usage.input_tokens": _input_tokens(usage),
                "gen_ai.usage.output_tokens": usage.output,
                "gen_ai.usage.cache_read.input_tokens": usage.cache_read,
                "gen_ai.usage.cache_creation.input_tokens": usage.cache_write,
                "ketch.usage.cost": usage.cost.total,
            }
            if message.model:
                attributes["gen_ai.response.model"] = message.model
            if message.response_id:
                attributes["gen_ai.response.id"] = message.response_id
            if self.capture_content:
                attributes["gen_ai.output.messages"] = _content.output_messages(message)
            span.set_attributes(attributes)
            if message.stop_reason == "error":
                error = message.error_kind or "unknown"
                self._last_error_kind = error
                self._set_error(span, error)
            self.token_usage.record(_input_tokens(usage), {**metric, "gen_ai.token.type": "input"})
            self.token_usage.record(usage.output, {**metric, "gen_ai.token.type": "output"})
        else:
            error = "cancelled"
            self._set_error(span, error)
        if error is not None:
            metric = {**metric, "error.type": error}
        self.operation_duration.record(time.monotonic() - chat.started, metric)
        span.end()

    @staticmethod
    def _set_error(span: Span, error_type: str) -> None:
        from opentelemetry.trace import Status
        from opentelemetry.trace import StatusCode

        span.set_attribute("error.type", error_type)
        span.set_status(Status(StatusCode.ERROR, error_type))

    def wrap_model(self, model: Model) -> TracedModel:
        """``model`` with each call a ``chat`` span under the current span (for models
        called outside an instrumented agent: ``ketch.temporal.build_worker(...,
        wrap_model=...)``)."""
        return TracedModel(model, self)

    # -- tool calls -----------------------------------------------------------------------
    async def tool_middleware(
        self, call: ToolCallInfo, next: Callable[[dict[str, Any]], Awaitable[ToolResult]]
    ) -> ToolResult:
        """The ``execute_tool {name}`` span around one tool execution, current while the
        tool runs (a tool middleware: :attr:`LoopConfig.middlewares`, or the
        ``middlewares`` of :func:`ketch.temporal.build_worker`)."""
        from opentelemetry import trace

        tool_call = call.tool_call
        self._tool_traced.add(tool_call.id)
        attributes = self._tool_attributes(tool_call.name, tool_call.id, call.tool.description)
        if self.capture_content:
            attributes["gen_ai.tool.call.arguments"] = _content.to_json(call.args)
        with self.tracer.start_as_current_span(
            f"execute_tool {tool_call.name}",
            kind=trace.SpanKind.INTERNAL,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                result = await next(call.args)
            except BaseException as exc:
                self._set_error(span, "cancelled" if _is_cancel(exc) else type(exc).__qualname__)
                raise
            self._tool_result(span, result)
            return result

    def _tool_attributes(self, name: str, call_id: str, description: str | None) -> dict[str, Any]:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": call_id,
            "gen_ai.tool.type": "function",
        }
        if description:
            attributes["gen_ai.tool.description"] = description
        if self._turn:
            attributes["ketch.turn"] = self._turn
        return attributes

    def _tool_result(self, span: Span, result: ToolResult) -> None:
        if self.capture_content:
            span.set_attribute("gen_ai.tool.call.result", result.text)
        if result.is_error:
            self._set_error(span, "tool_error")

    def _tool_ended(self, event: Any) -> None:
        """A call that never reached execution (unknown tool, invalid arguments, blocked,
        denied) gets its span here, from the events."""
        call_id = event.tool_call_id
        started = self._tool_started.pop(call_id, None)
        if call_id in self._tool_traced:
            self._tool_traced.discard(call_id)
            return
        from opentelemetry import trace

        tool = None
        if self._agent is not None:
            tool = next((t for t in self._agent.tools if t.name == event.tool_name), None)
        attributes = self._tool_attributes(event.tool_name, call_id, tool.description if tool is not None else None)
        span = self.tracer.start_span(
            f"execute_tool {event.tool_name}",
            context=self._run_context,
            kind=trace.SpanKind.INTERNAL,
            attributes=attributes,
            start_time=started,
        )
        self._tool_result(span, event.result)
        span.end()


def _is_cancel(exc: BaseException) -> bool:
    import asyncio

    return isinstance(exc, asyncio.CancelledError)


class TracedModel:
    """A model whose calls are ``chat`` spans (children of the current span): what
    :func:`instrument` puts in a :class:`~ketch.loop.LoopConfig`. Everything else is the
    wrapped ``model``'s."""

    def __init__(self, model: Model, instrumentation: Instrumentation) -> None:
        self.model = model
        self.instrumentation = instrumentation

    @property
    def provider(self) -> str:
        """The wrapped model's provider."""
        return self.model.provider

    @property
    def api(self) -> str:
        """The wrapped model's API."""
        return self.model.api

    @property
    def id(self) -> str:
        """The wrapped model's id."""
        return self.model.id

    @property
    def context_window(self) -> int:
        """The wrapped model's context window."""
        return self.model.context_window

    def __getattr__(self, name: str) -> Any:
        # prepares_messages, set_context_window, unload ...: the wrapped model's own.
        return getattr(self.model, name)

    def __repr__(self) -> str:
        return f"TracedModel({self.model!r})"

    def stream(self, request: Request, options: StreamOptions | None = None) -> AsyncIterator[StreamEvent]:
        """The wrapped model's stream, recorded as one ``chat`` span."""
        return self._traced(request, options)

    async def _traced(self, request: Request, options: StreamOptions | None) -> AsyncIterator[StreamEvent]:
        instr = self.instrumentation
        model = self.model
        chat = instr._open_chat(model.provider, model.id, options, request)
        final: AssistantMessage | None = None
        try:
            async for event in model.stream(request, options):
                if event.type == "done":
                    final = event.message
                elif event.type == "error":
                    final = event.error
                yield event
        finally:
            instr._end_chat(chat, final)


def instrument(
    target: Agent[Any] | LoopConfig[Any],
    *,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
    capture_content: bool = False,
    agent_name: str = "agent",
) -> Instrumentation:
    """Trace ``target``'s runs with OpenTelemetry (the ``otel`` extra).

    For an :class:`~ketch.Agent`: each run is an ``invoke_agent {agent_name}`` span, current
    in the run's task; each model call a ``chat {model}`` span and each tool call an
    ``execute_tool {tool}`` span under it (current while the tool runs, so an agent the
    tool runs, itself instrumented, nests under it). For a :class:`~ketch.loop.LoopConfig`
    (changed in place): the model is wrapped so that each call is a ``chat`` span, and tool
    calls are ``execute_tool`` spans, under whatever span is current when the loop runs.

    Metrics: ``gen_ai.client.token.usage`` (per call, ``gen_ai.token.type`` ``input`` and
    ``output``) and ``gen_ai.client.operation.duration`` (per call, seconds).
    ``tracer_provider`` / ``meter_provider`` default to OpenTelemetry's global ones.
    Message and tool content is recorded only with ``capture_content=True``. Returns the
    :class:`Instrumentation`; ``uninstrument()`` detaches it.
    """
    instr = Instrumentation(
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
        capture_content=capture_content,
        agent_name=agent_name,
    )
    if isinstance(target, LoopConfig):
        instr._attach_config(target)
    else:
        instr._attach_agent(target)
    return instr
