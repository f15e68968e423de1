"""The worker side: activities for each agent's model and tools, and :func:`build_worker`."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
import os
from collections.abc import AsyncIterator
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING
from typing import Any

import aiohttp
import msgspec
from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxRestrictions

from ..llm import AbortSignal
from ..llm import AssistantMessage
from ..llm import Model
from ..llm import Request
from ..llm import RetriesRequests
from ..llm import Retry
from ..llm import StreamOptions
from ..llm import ToolCall
from ..llm import ToolSpec
from ..llm import exception_text
from ..llm import message_from_dict
from ..llm import message_to_dict
from ..loop import Conversation
from ..loop import MessageStart
from ..loop import Tool
from ..loop import ToolCallInfo
from ..loop import ToolContext
from ..loop import ToolExecutionUpdate
from ..loop import ToolResult
from ..loop import to_tool_result
from . import _pure
from ._events import Publisher
from ._spec import PUBLISH_ACTIVITY
from ._spec import DurableAgent
from ._spec import jsonable
from ._spec import model_activity
from ._spec import tool_activity
from ._workflow import PASSTHROUGH
from ._workflow import AgentWorkflow

if TYPE_CHECKING:
    from ..tools import Journal

log = logging.getLogger("ketch.temporal")

NON_RETRYABLE_KINDS = frozenset({"auth", "invalid_request", "content_filter", "context_overflow"})
"""Model error kinds Temporal does not retry: the run sees the error message at once."""



Next = Callable[[dict[str, Any]], Awaitable[ToolResult]]
ToolMiddleware = Callable[[ToolCallInfo, Next], Awaitable[ToolResult]]
"""``async def mw(call, next) -> ToolResult``, as in ``LoopConfig.middlewares``."""


def sandbox_runner() -> SandboxedWorkflowRunner:
    """The workflow runner durable agents use: Temporal's sandbox, sharing
    :data:`PASSTHROUGH` with the worker. Importing :mod:`ketch.temporal`'s workflow adds
    those modules to Temporal's defaults too, so ``Replayer(workflows=[AgentWorkflow])``
    works without it."""
    return SandboxedWorkflowRunner(restrictions=SandboxRestrictions.default.with_passthrough_modules(*PASSTHROUGH))


def _no_provider_retries(model: Model) -> Model:
    """Turn the provider layer's own retries off (Temporal retries the activity)."""
    if isinstance(model, RetriesRequests):
        model.retry = msgspec.structs.replace(model.retry, max_attempts=1)
    return model


class _Shared:
    """What a worker's activities share: the HTTP session for publishing, the store."""

    def __init__(self, store: Any) -> None:
        self._session: aiohttp.ClientSession | None = None
        self.store = store

    def publisher(self, payload: dict[str, Any]) -> Publisher:
        url = payload.get("events_url")
        if url and self._session is None:
            self._session = aiohttp.ClientSession()
        pub = Publisher(self._session, url, payload.get("run_id", ""))
        for item in payload.get("outbox") or ():
            pub.add(item)
        return pub

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def _live(event: Any) -> Any:
    """A block event as the hub publishes it live: without the partial message (which
    would make the events of one answer quadratic in its size)."""
    fields = {name: getattr(event, name) for name in event.__struct_fields__ if name != "partial"}
    return jsonable({"type": event.type, **fields})


@contextlib.asynccontextmanager
async def _heartbeating(interval: float) -> AsyncIterator[None]:
    """Heartbeat every ``interval`` seconds while the body runs (a dead worker is noticed
    by the heartbeat timeout; a cancellation reaches the activity through them)."""

    async def beat() -> None:
        while True:
            activity.heartbeat()
            await asyncio.sleep(interval)

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()


def _model_activity(agent: DurableAgent, model: Model, shared: _Shared) -> Callable[..., Awaitable[Any]]:
    beat = agent.spec.activities.heartbeat_timeout / 3

    @activity.defn(name=model_activity(agent.name))
    async def call_model(payload: dict[str, Any]) -> dict[str, Any]:
        info = activity.info()
        pub = shared.publisher(payload)
        if info.attempt > 1:
            pub.add({"event": jsonable(Retry(
                attempt=info.attempt - 1, max_attempts=agent.spec.activities.max_attempts, delay=0.0,
                error_kind="retry", error_message="the previous attempt did not finish; its output is void",
                discard_partial=True,
            ))})
        request = Request(
            system_prompt=payload["system_prompt"],
            messages=[message_from_dict(m) for m in payload["messages"]],
            tools=[msgspec.convert(t, ToolSpec) for t in payload["tools"]],
        )
        signal = AbortSignal()
        if "options" in payload:
            options = msgspec.convert(payload["options"], StreamOptions)
        else:  # a run started before the agent wrapper
            options = StreamOptions(
                thinking=payload["thinking"], max_tokens=payload["max_tokens"], temperature=payload["temperature"]
            )
        own = agent.agent.config
        api_key = own.options.api_key
        if own.get_api_key is not None:
            found = own.get_api_key(model.provider)
            api_key = (await found if inspect.isawaitable(found) else found) or api_key
        options = msgspec.structs.replace(options, signal=signal, api_key=api_key, headers=own.options.headers)
        final: AssistantMessage | None = None
        retry_after: float | None = None
        try:
            async with _heartbeating(beat):
                async for ev in model.stream(request, options):
                    match ev.type:
                        case "start":
                            pub.add({"event": jsonable(MessageStart(message=ev.partial))})
                        case "done":
                            final = ev.message
                        case "error":
                            final = ev.error
                            retry_after = ev.retry_after
                        case "retry":
                            pub.add({"event": jsonable(ev)})
                        case _:
                            pub.add({"event": {"type": "message_update", "event": _live(ev)}})
        except asyncio.CancelledError:
            signal.abort()
            raise
        finally:
            await pub.close()
        if final is None:
            raise ApplicationError("The stream ended without a terminal event", type="network")
        if final.stop_reason == "error":
            error_kind = final.error_kind or "unknown"
            text = final.error_message or "model error"
            raise ApplicationError(
                text, text, type=error_kind, non_retryable=error_kind in NON_RETRYABLE_KINDS,
                next_retry_delay=timedelta(seconds=retry_after) if retry_after is not None else None,
            )
        return message_to_dict(final)

    return call_model


def _wrapped(
    middlewares: Sequence[ToolMiddleware], tool: Tool, call_id: str, args: dict[str, Any], signal: AbortSignal, run: Next
) -> Next:
    """``run`` inside ``middlewares`` (outermost first). An activity has the call, not the
    run: the middlewares see an empty assistant message and conversation."""
    if not middlewares:
        return run
    info = ToolCallInfo(ToolCall(id=call_id, name=tool.name, args=args), tool, args, AssistantMessage(), Conversation(), signal)
    for mw in reversed(middlewares):

        async def step(a: dict[str, Any], mw: ToolMiddleware = mw, inner: Next = run) -> ToolResult:
            current = info if a is info.args else ToolCallInfo(info.tool_call, tool, a, info.assistant_message, info.conversation, signal)
            return to_tool_result(await mw(current, inner))

        run = step
    return run


def _tool_activity(
    agent: DurableAgent, tool: Tool, shared: _Shared, middlewares: Sequence[ToolMiddleware] = ()
) -> Callable[..., Awaitable[Any]]:
    beat = agent.spec.activities.heartbeat_timeout / 3

    @activity.defn(name=tool_activity(agent.name, tool.name))
    async def call_tool(payload: dict[str, Any]) -> dict[str, Any]:
        pub = shared.publisher(payload)
        args = payload["args"]
        call_id = payload["call_id"]

        async def report(partial: Any) -> None:
            pub.add({"event": jsonable(ToolExecutionUpdate(
                tool_call_id=call_id, tool_name=tool.name, args=args, partial=partial
            ))})

        signal = AbortSignal()
        ctx: ToolContext[Any] = ToolContext(
            call_id=call_id, tool_name=tool.name, signal=signal, report=report, deps=agent.deps,
            idempotency_key=payload["idempotency_key"],
        )
        async def execute(a: dict[str, Any]) -> ToolResult:
            return to_tool_result(await tool.execute(a, ctx))

        try:
            async with _heartbeating(beat):
                result = await _wrapped(middlewares, tool, call_id, args, signal, execute)(args)
        except asyncio.CancelledError:
            signal.abort()
            raise
        except Exception as exc:
            result = ToolResult.error(exception_text(exc))
        finally:
            await pub.close()
        return jsonable(result)  # type: ignore[no-any-return]

    return call_tool


def _common_activities(shared: _Shared) -> list[Callable[..., Awaitable[Any]]]:
    @activity.defn(name=PUBLISH_ACTIVITY)
    async def publish(payload: dict[str, Any]) -> None:
        pub = shared.publisher(payload)
        await pub.close()

    @activity.defn(name="ketch.store")
    async def store(payload: dict[str, Any]) -> str:
        writer = await shared.store().create(cwd=os.getcwd())
        try:
            digest = await writer.put_blob(json.dumps(payload["transcript"]).encode())
        finally:
            await writer.close()
        return f"{writer.id}:{digest}"

    @activity.defn(name="ketch.load")
    async def load(ref: str) -> list[dict[str, Any]]:
        session_id, digest = ref.split(":", 1)
        data = await shared.store().get_blob(session_id, digest)
        return json.loads(data)  # type: ignore[no-any-return]

    return [publish, store, load]


def _warn_local_journal(agents: Sequence[DurableAgent]) -> None:
    """Warn when agents with the built-in file tools record their calls in a journal only
    this machine sees (a retry on another worker machine would not find the record)."""
    from ..tools import journal_warning

    names = [a.name for a in agents if any(getattr(t, "journaled", False) for t in a.tools)]
    if names:
        warning = journal_warning()
        if warning is not None:
            log.warning("durable agent %s: %s", ", ".join(names), warning)


class _Worker(Worker):
    """A Worker that also closes what its activities share when it shuts down."""

    def __init__(self, shared: _Shared, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._ketch_shared = shared

    async def shutdown(self) -> None:
        """Shut the worker down (see :meth:`temporalio.worker.Worker.shutdown`)."""
        try:
            await super().shutdown()
        finally:
            await self._ketch_shared.close()


def build_worker(
    client: Client,
    *,
    task_queue: str,
    agents: Sequence[DurableAgent],
    models: Mapping[str, Model] | None = None,
    store: Any = None,
    max_concurrent_activities: int = 100,
    sticky_timeout: float = 5.0,
    sandboxed: bool = True,
    wrap_model: Callable[[Model], Model] | None = None,
    middlewares: Sequence[ToolMiddleware] = (),
    journal: Journal | None = None,
    **worker_options: Any,
) -> Worker:
    """A Temporal worker that runs ``agents`` on ``task_queue``.

    Registers the durable agent workflow, each agent's model activity
    (``<agent>.model``) and one activity per tool (``<agent>.tool.<name>``); pure tools
    are registered for the workflow to run inline. ``models`` maps model names
    (``DurableAgent.model_name``: ``provider:id``) to the Model to call instead (a scripted model in tests,
    say); otherwise the agent's own. ``store`` is the :class:`~ketch.sessions.SessionStore`
    that keeps transcripts too large for the history (default: the default store,
    opened on first use). ``sticky_timeout``: seconds before a workflow cached by a
    worker that stopped answering moves to another. ``sandboxed=False`` runs the
    workflow without Temporal's sandbox (no per-run re-import of the workflow module:
    less CPU per run; determinism then rests on the replay tests alone).
    ``wrap_model`` is applied to each agent's model and ``middlewares`` wrap each tool
    activity's execution as ``LoopConfig.middlewares`` wrap an in-process one (the
    middleware sees the call; its assistant message and conversation are empty): with
    :mod:`ketch.telemetry`, ``wrap_model=instrumentation.wrap_model`` and
    ``middlewares=[instrumentation.tool_middleware]`` give the ``chat`` and
    ``execute_tool`` spans, under the activity spans of Temporal's ``TracingInterceptor``;
    an agent's own ``middlewares`` run inside these. ``journal`` is where the built-in
    ``write`` and ``edit`` tools of this process keep their exactly-once records
    (:func:`ketch.tools.use_journal`; default: the folder ``$KETCH_IDEMPOTENCY_DIR``):
    every worker that may retry a call must share it; the worker logs a warning when it
    is on this machine only (:func:`ketch.tools.journal_warning`).
    Run it with ``async with worker:`` or ``await worker.run()``.
    """
    names = [a.name for a in agents]
    if len(set(names)) != len(names):
        raise ValueError(f"agent names must be unique, got {names}")
    if journal is not None:
        from ..tools import use_journal

        use_journal(journal)
    opened: list[Any] = [store]

    def get_store() -> Any:
        if opened[0] is None:
            from ..sessions import default_store

            opened[0] = default_store()
        return opened[0]

    shared = _Shared(get_store)
    activities: list[Callable[..., Awaitable[Any]]] = _common_activities(shared)
    for agent in agents:
        model = _no_provider_retries((models or {}).get(agent.model_name, agent.model))
        activities.append(_model_activity(agent, wrap_model(model) if wrap_model is not None else model, shared))
        for tool in agent.tools:
            activities.append(_tool_activity(agent, tool, shared, (*middlewares, *agent.agent.config.middlewares)))
        _pure.register_agent(agent, worker=True)  # this worker's definition is the one its workflows run
    _warn_local_journal(agents)
    if sandboxed:
        worker_options.setdefault("workflow_runner", sandbox_runner())
    else:
        from temporalio.worker import UnsandboxedWorkflowRunner

        worker_options.setdefault("workflow_runner", UnsandboxedWorkflowRunner())
    return _Worker(
        shared,
        client,
        task_queue=task_queue,
        workflows=[AgentWorkflow],
        activities=activities,
        max_concurrent_activities=max_concurrent_activities,
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=sticky_timeout),
        **worker_options,
    )
