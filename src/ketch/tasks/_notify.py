"""Completion notifications: a finished background task tells the agent that started it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from collections.abc import Coroutine
from typing import TYPE_CHECKING
from typing import Any
from typing import Literal
from typing import Protocol
from typing import TypeAlias

from ..llm import UserMessage
from ._info import TaskInfo
from ._info import task_facts

if TYPE_CHECKING:
    from ._registry import TaskRegistry

log = logging.getLogger("ketch.tasks")

Delivery: TypeAlias = Literal["steered", "started", "queued"]


class Notified(Protocol):
    """What a :class:`TaskNotifier` uses of the agent it tells (a :class:`ketch.Agent`)."""

    @property
    def is_running(self) -> bool: ...
    def steer(self, message: UserMessage, /) -> object: ...
    def follow_up(self, message: UserMessage, /) -> object: ...
    def prompt(self, message: UserMessage, /) -> Coroutine[Any, Any, object]: ...


def notification_text(info: TaskInfo) -> str:
    """The message a finished task sends: a ``<task-notification>`` block with its id,
    kind, status, description and result (or error)."""
    lines = [
        "<task-notification>",
        f"<task-id>{info.id}</task-id>",
        f"<kind>{info.kind}</kind>",
        f"<status>{info.status}</status>",
    ]
    lines += task_facts(info, "<description>{}</description>", "<exit-code>{}</exit-code>", "<error>{}</error>")
    if info.result:
        lines.append(f"<result>\n{info.result}\n</result>")
    lines.append("</task-notification>")
    return "\n".join(lines)


class TaskNotifier:
    """Delivers a notification to ``agent`` for each task of ``registry`` that ends
    (made by :func:`notify_agent`).

    A running agent gets it as steering (the model reads it at its next turn). An idle
    agent gets it as a follow-up (read when its next run would stop), or, with
    ``start_run=True``, as the prompt of a new run started at once (then a
    notification arriving while that run starts is steering for it). ``deliveries``
    records ``(task id, how)`` in order; :meth:`wait` waits for the runs it started.
    """

    def __init__(
        self,
        registry: TaskRegistry,
        agent: Notified,
        *,
        start_run: bool = False,
        kinds: frozenset[str] | None = None,
    ) -> None:
        self.agent = agent
        self.start_run = start_run
        self.kinds = kinds
        self.deliveries: list[tuple[str, Delivery]] = []
        self._runs: set[asyncio.Task[Any]] = set()
        self._unsubscribe: Callable[[], None] = registry.subscribe(self._on_finish)

    def _on_finish(self, info: TaskInfo) -> None:
        if self.kinds is not None and info.kind not in self.kinds:
            return
        self.deliveries.append((info.id, self.deliver(UserMessage(content=notification_text(info)))))

    def deliver(self, message: UserMessage) -> Delivery:
        """Hand ``message`` to the agent: steering, a new run, or a follow-up."""
        agent = self.agent
        if agent.is_running or any(not t.done() for t in self._runs):
            agent.steer(message)
            return "steered"
        if self.start_run:
            task = asyncio.get_running_loop().create_task(agent.prompt(message))
            self._runs.add(task)
            task.add_done_callback(self._run_done)
            return "started"
        agent.follow_up(message)
        return "queued"

    def _run_done(self, task: asyncio.Task[Any]) -> None:
        self._runs.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("A run started by a task notification failed", exc_info=task.exception())

    async def wait(self) -> None:
        """Wait for the runs started by notifications (and those they lead to)."""
        while self._runs:
            await asyncio.wait(set(self._runs))

    def close(self) -> None:
        """Stop delivering."""
        self._unsubscribe()


def notify_agent(
    registry: TaskRegistry, agent: Notified, *, start_run: bool = False, kinds: frozenset[str] | None = None
) -> TaskNotifier:
    """Tell ``agent`` about every task of ``registry`` that ends (only ``kinds`` when
    given); see :class:`TaskNotifier`."""
    return TaskNotifier(registry, agent, start_run=start_run, kinds=kinds)
