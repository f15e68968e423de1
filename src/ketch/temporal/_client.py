"""The client side: start a durable run and talk to it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import traceback
import uuid
from collections.abc import AsyncIterator
from collections.abc import Coroutine
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any
from typing import NoReturn

import msgspec
from temporalio.client import Client
from temporalio.client import WorkflowHandle

from ..llm import Message
from ..llm import UserMessage
from ..llm import message_from_dict
from ..llm import message_to_dict
from ..loop import Decision
from ..loop import RunSummary
from ._events import EventHub
from ._events import subscribe
from ._spec import WORKFLOW_NAME
from ._spec import DurableAgent
from ._spec import DurableResult
from ._spec import RunInput


def _message(value: str | Message) -> dict[str, Any]:
    return message_to_dict(UserMessage(content=value) if isinstance(value, str) else value)


class RunHandle:
    """A durable run: signals (``steer``, ``follow_up``, ``abort``, ``decide``),
    queries (``state``, ``transcript``), its result and its events."""

    def __init__(
        self, handle: WorkflowHandle[Any, Any], events: EventHub | str | None = None, output_type: Any = None
    ) -> None:
        self.workflow = handle
        """The underlying :class:`temporalio.client.WorkflowHandle`."""
        self._events = events
        self.output_type = output_type
        """The agent's ``output_type``: :meth:`result` validates the run's output as one."""

    @property
    def id(self) -> str:
        """The workflow id (also the run's id on the event hub)."""
        return self.workflow.id

    async def steer(self, message: str | Message) -> None:
        """Deliver ``message`` before the run's next model call (after running tools finish)."""
        await self.workflow.signal("steer", _message(message))

    async def follow_up(self, message: str | Message) -> None:
        """Deliver ``message`` when the agent would otherwise stop."""
        await self.workflow.signal("follow_up", _message(message))

    async def abort(self) -> None:
        """Abort the run: running model and tool activities are cancelled; it ends with
        ``end_reason == "aborted"``."""
        await self.workflow.signal("abort")

    async def decide(self, decisions: Mapping[str, Decision]) -> None:
        """Resume a run paused for approval: tool call id -> ``approve()``, ``deny()`` or
        ``edit(args)`` (from :mod:`ketch.loop`)."""
        await self.workflow.signal("decide", {k: msgspec.to_builtins(v) for k, v in decisions.items()})

    async def state(self) -> dict[str, Any]:
        """``{"status": "running" | "awaiting_approval" | "done", "pending": [...],
        "messages": n, "steering": n, "follow_ups": n}``."""
        return await self.workflow.query("state")  # type: ignore[no-any-return]

    async def transcript(self) -> list[Message]:
        """The run's transcript so far."""
        data = await self.workflow.query("transcript")
        return [message_from_dict(m) for m in data]

    async def result(self) -> DurableResult:
        """Wait for the run's end."""
        data = await self.workflow.result()
        output = data.get("output")
        if output is not None and self.output_type is not None:
            from ..llm import parse_structured

            output = parse_structured(msgspec.json.encode(output).decode(), self.output_type)
        return DurableResult(
            messages=[message_from_dict(m) for m in data["messages"]],
            summary=msgspec.convert(data["summary"], RunSummary),
            transcript=[message_from_dict(m) for m in data["transcript"]],
            generations=data.get("generations", 1),
            output=output,
        )

    async def events(self, after: int = 0) -> AsyncIterator[tuple[int, dict[str, Any]]]:
        """``(id, event)`` pairs of the run's live events after ``after`` (resume from the
        last id seen), until ``agent_end``; needs the run started with ``events=``."""
        source = self._events
        if source is None:
            raise ValueError("this run was started without events=; pass an EventHub or its URL to start_run")
        if isinstance(source, EventHub):
            async for item in source.events(self.id, after):
                yield item
        else:
            async for item in subscribe(source, self.id, after):
                yield item


async def start_run(
    client: Client,
    agent: DurableAgent,
    prompt: str | Message | Sequence[Message],
    *,
    task_queue: str,
    id: str | None = None,
    transcript: Sequence[Message] = (),
    events: EventHub | str | None = None,
    **start_options: Any,
) -> RunHandle:
    """Start ``agent`` on ``prompt`` as a workflow on ``task_queue``.

    ``transcript`` continues an earlier conversation; ``events`` is an
    :class:`EventHub` (or its URL) the workers publish the run's events to.
    ``start_options`` go to :meth:`temporalio.client.Client.start_workflow`.
    """
    if isinstance(prompt, (str, Message)):
        prompts = [_message(prompt)]
    else:
        prompts = [message_to_dict(m) for m in prompt]
    url = events.url if isinstance(events, EventHub) else events
    inp = RunInput(
        agent=agent.spec,
        prompts=prompts,
        transcript=[message_to_dict(m) for m in transcript],
        events_url=url,
        run_start=len(transcript),
    )
    handle = await client.start_workflow(
        WORKFLOW_NAME,
        msgspec.to_builtins(inp),
        id=id or f"ketch-{agent.name}-{uuid.uuid4().hex[:16]}",
        task_queue=task_queue,
        **start_options,
    )
    return RunHandle(handle, events, agent.output_type)


def run_handle(
    client: Client, run_id: str, *, events: EventHub | str | None = None, output_type: Any = None
) -> RunHandle:
    """The handle of a run started earlier (by its id); ``output_type`` validates its
    output (else :attr:`DurableResult.output` holds JSON values)."""
    return RunHandle(client.get_workflow_handle(run_id), events, output_type)


DEFAULT_ADDRESS = "127.0.0.1:7233"


async def connect(address: str | None = None, *, namespace: str | None = None, **options: Any) -> Client:
    """A Temporal client for ``address`` (default ``$TEMPORAL_ADDRESS``, else
    ``127.0.0.1:7233``) and ``namespace`` (default ``$TEMPORAL_NAMESPACE``, else
    ``default``), as ``ketch worker`` connects; ``options`` go to
    :meth:`temporalio.client.Client.connect`. In a script, run the coroutine that uses
    it with :func:`run_client`."""
    return await Client.connect(
        address or os.environ.get("TEMPORAL_ADDRESS") or DEFAULT_ADDRESS,
        namespace=namespace or os.environ.get("TEMPORAL_NAMESPACE") or "default",
        **options,
    )


def run_client(main: Coroutine[Any, Any, Any]) -> NoReturn:
    """Run ``main`` as :func:`asyncio.run` does, then end the process at once: exit code
    0, or 1 after printing the traceback when it raised (130 on Ctrl-C).

    For scripts that talk to Temporal (a client that starts a run or sends ``steer``
    and exits, a worker): temporalio's Rust threads can outlive the event loop and abort
    the interpreter while it shuts down ("Fatal Python error: PyGILState_Release",
    temporalio/sdk-python#300), turning a clean exit into SIGABRT. Output is flushed and
    logging shut down first; nothing registered with :mod:`atexit` runs.
    """
    code = 0
    try:
        asyncio.run(main)
    except KeyboardInterrupt:
        code = 130
    except BaseException:
        traceback.print_exc()
        code = 1
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


async def export_session(result: DurableResult, store: Any, *, cwd: str) -> str:
    """Write a finished run's transcript to a :class:`~ketch.sessions.SessionStore` in the
    session format of in-process runs (message entries, then a run summary); returns
    the new session's id (open it with ``Session.open(store, id)``)."""
    from ..sessions import new_entry

    writer = await store.create(cwd=cwd)
    try:
        for m in result.transcript:
            await writer.append(new_entry("message", {"message": m}, parent_id=writer.entries[-1].id))
        summary = result.summary
        await writer.append(new_entry("run_summary", {
            "end_reason": summary.end_reason,
            "usage": msgspec.to_builtins(summary.usage),
            "cost": summary.cost,
            "duration": summary.duration,
            "turns": summary.turns,
        }, parent_id=writer.entries[-1].id))
    finally:
        await writer.close()
    return writer.id  # type: ignore[no-any-return]
