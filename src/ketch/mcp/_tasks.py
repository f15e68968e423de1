"""Task-augmented tool calls (MCP 2025-11-25 tasks): create, follow, fetch, cancel.

A tool whose ``execution.taskSupport`` is ``required`` can only be called as a task; one
that says ``optional`` is called as a task too (see :class:`~ketch.mcp.MCPManager`:
``task_wait``), on a server that declares ``tasks.requests.tools.call``. The call sends
``tools/call`` with ``task``; the server answers with the task at once; ketch then asks
for the result (``tasks/result``, which the server holds until the task ends, and over
which it sends the requests it has for the user, such as an elicitation) while it polls
``tasks/get`` for the status message it reports as progress. An abandoned call (abort,
steering interrupt, timeout) sends ``tasks/cancel``.

The SDK (2.3) knows the 2025-11-25 task types but sends no task requests; the one it
would refuse -- ``tools/call`` answered by a task instead of a tool result -- is sent
here through the session's dispatcher, stamped as the session stamps its own requests.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from collections.abc import Callable
from typing import Any

TASK_TTL_MS = 3_600_000
"""How long a server is asked to keep a task (and its result): an hour."""

POLL_DEFAULT = 1.0
"""Seconds between ``tasks/get`` polls when the server suggests no interval."""

POLL_RANGE = (0.05, 10.0)
"""The poll interval a server suggests is kept within these seconds."""

TERMINAL = frozenset({"completed", "failed", "cancelled"})


async def send_raw(session: Any, method: str, params: dict[str, Any], on_progress: Any = None) -> dict[str, Any]:
    """Send ``method`` through ``session`` and return the raw result (no result validation)."""
    data: dict[str, Any] = {"method": method, "params": params}
    opts: dict[str, Any] = {}
    session._stamp(data, opts)
    if on_progress is not None:
        opts["on_progress"] = on_progress
    raw: dict[str, Any] = await session._dispatcher.send_raw_request(method, data.get("params"), opts)
    return raw


async def get(session: Any, task_id: str) -> Any:
    """The task's state (``tasks/get``)."""
    import mcp_types as types

    return await session.send_request(
        types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id)), types.GetTaskResult
    )


async def result(session: Any, task_id: str) -> Any:
    """The task's tool result (``tasks/result``; the server holds it until the task ends)."""
    import mcp_types as types

    return await session.send_request(
        types.GetTaskPayloadRequest(params=types.GetTaskPayloadRequestParams(task_id=task_id)), types.CallToolResult
    )


async def cancel(session: Any, task_id: str) -> None:
    """Ask the server to cancel the task (``tasks/cancel``); failures are ignored (it may be over)."""
    import mcp_types as types

    with contextlib.suppress(Exception):
        async with asyncio.timeout(5.0):
            await session.send_request(
                types.CancelTaskRequest(params=types.CancelTaskRequestParams(task_id=task_id)), types.CancelTaskResult
            )


def _interval(task: Any) -> float:
    poll = getattr(task, "poll_interval", None)
    seconds = poll / 1000.0 if isinstance(poll, (int, float)) and poll > 0 else POLL_DEFAULT
    return min(max(seconds, POLL_RANGE[0]), POLL_RANGE[1])


class Detached(Exception):
    """The wait ran out; the task goes on (``task`` is its last known state)."""

    def __init__(self, task: Any) -> None:
        super().__init__(task.task_id)
        self.task = task


async def follow(
    session: Any,
    task: Any,
    *,
    wait: float | None,
    report: Callable[[Any], Awaitable[None]],
) -> Any:
    """The tool result of ``task``: ``tasks/result`` while ``tasks/get`` is polled (each new
    status reported). Raises :class:`Detached` after ``wait`` seconds (None: no limit);
    cancelling it cancels the task on the server."""
    last: list[Any] = [task]
    seen: list[tuple[str, str | None]] = [(task.status, task.status_message)]

    async def poll() -> None:
        while True:
            await asyncio.sleep(_interval(last[0]))
            try:
                state = await get(session, task.task_id)
            except Exception:
                continue
            last[0] = state
            key = (state.status, state.status_message)
            if key != seen[-1]:
                seen.append(key)
                await report(state)
            if state.status in TERMINAL:
                return

    poller = asyncio.ensure_future(poll())
    fetch = asyncio.ensure_future(result(session, task.task_id))
    try:
        async with asyncio.timeout(wait):
            return await asyncio.shield(fetch)
    except TimeoutError:
        fetch.cancel()
        with contextlib.suppress(BaseException):
            await fetch
        raise Detached(last[0]) from None
    except asyncio.CancelledError:
        fetch.cancel()
        await asyncio.shield(cancel(session, task.task_id))
        raise
    finally:
        poller.cancel()
        with contextlib.suppress(BaseException):
            await poller


async def create(session: Any, name: str, arguments: dict[str, Any], *, ttl_ms: int = TASK_TTL_MS) -> Any:
    """Call the tool ``name`` as a task (``tools/call`` with ``task``): the server's
    ``Task``, or the ``CallToolResult`` of a server that ran the call at once."""
    import mcp_types as types

    params = {"name": name, "arguments": arguments, "task": {"ttl": ttl_ms}}
    raw = await send_raw(session, "tools/call", params)
    if "task" not in raw:
        return types.CallToolResult.model_validate(raw, by_name=False)
    return types.CreateTaskResult.model_validate(raw, by_name=False).task
