"""The background task registry: one place for work that outlives the tool call that
started it (background shell commands, background subagents)."""

from __future__ import annotations

import asyncio
import builtins
import inspect
import itertools
import logging
import time
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Coroutine
from typing import Any
from typing import TypeAlias

from .._proc import signal_group
from ..llm import exception_text
from ..loop import Tool
from ._info import TaskFailed
from ._info import TaskInfo
from ._info import TaskNotFoundError
from ._info import TaskOutput
from ._info import TaskStatus
from ._tools import task_tools

log = logging.getLogger("ketch.tasks")

FinishListener: TypeAlias = Callable[["TaskInfo"], "Awaitable[None] | None"]

DEFAULT_MAX_OUTPUT = 200_000
"""Characters of output a task keeps (the newest); older output is dropped and counted."""

TASK_TOOLS: tuple[str, ...] = ("task_list", "task_output", "task_wait", "task_stop")
"""The names of the tools :meth:`TaskRegistry.tools` gives the model, in order."""


class _Entry:
    __slots__ = ("_stop", "buffer", "changed", "done", "info", "max_output", "start", "task")

    def __init__(self, info: TaskInfo, max_output: int, stop: Callable[[], Any] | None) -> None:
        self.info = info
        self.buffer: list[str] = []
        self.start = 0  # absolute offset of the first kept character
        self.max_output = max_output
        self.task: asyncio.Task[Any] | None = None
        self.done = asyncio.Event()
        self.changed = asyncio.Event()
        self._stop = stop

    @property
    def kept(self) -> int:
        return self.info.output_chars - self.start

    def write(self, text: str) -> None:
        if not text:
            return
        self.buffer.append(text)
        self.info.output_chars += len(text)
        self.changed.set()
        excess = self.kept - self.max_output
        if excess <= 0:
            return
        joined = "".join(self.buffer)[excess:]
        self.buffer = [joined]
        self.start += excess
        self.info.dropped_chars = self.start


class TaskRegistry:
    """Background work: register, list, read output incrementally, wait, stop.

    One registry per agent is the usual shape (the ``ketch`` command makes one per
    agent and hands it to ``bash`` and the ``subagent`` tool); nothing stops several
    agents from sharing one. Ids are ``<prefix>-<n>`` (``bash-1``, ``agent-2``).

    Output is kept per task up to ``max_output`` characters (the newest); what falls out
    is counted in :attr:`TaskInfo.dropped_chars` and reported by :meth:`output`.
    ``on_finish`` listeners (:meth:`subscribe`) run when a task ends, before
    :meth:`wait` returns. :meth:`tools` makes the model's ``task_list``,
    ``task_output``, ``task_wait`` and ``task_stop`` tools.
    """

    def __init__(self, *, max_output: int = DEFAULT_MAX_OUTPUT, stop_grace: float = 5.0) -> None:
        if max_output <= 0:
            raise ValueError(f"max_output must be a positive number of characters, got {max_output!r}")
        self.max_output = max_output
        self.stop_grace = stop_grace
        self._entries: dict[str, _Entry] = {}
        self._counters: dict[str, itertools.count[int]] = {}
        self._listeners: list[FinishListener] = []

    # -- registering ------------------------------------------------------------------
    def start(
        self,
        work: Callable[[Callable[[str], None]], Coroutine[Any, Any, Any]],
        *,
        kind: str,
        description: str = "",
        prefix: str | None = None,
        stop: Callable[[], Any] | None = None,
        pgid: int | None = None,
    ) -> TaskInfo:
        """Run ``work(write)`` as a background task and return its info at once.

        ``write(text)`` appends to the task's output. What ``work`` returns becomes the
        task's ``result`` (a string as it is, else ``str()``; an ``int`` for a ``shell``
        task is its exit code). ``stop`` asks the work to end (e.g. aborts a signal);
        without one, :meth:`stop` cancels the task. ``pgid`` is a process group that
        :meth:`stop` kills if it outlives the work.
        """
        entry = self._register(kind, description, prefix, stop, pgid)
        entry.task = asyncio.get_running_loop().create_task(self._run(entry, work))
        return entry.info

    def _register(
        self,
        kind: str,
        description: str,
        prefix: str | None,
        stop: Callable[[], Any] | None,
        pgid: int | None,
    ) -> _Entry:
        name = prefix or kind
        counter = self._counters.setdefault(name, itertools.count(1))
        info = TaskInfo(
            id=f"{name}-{next(counter)}", kind=kind, description=description, started=time.time(), pgid=pgid
        )
        entry = _Entry(info, self.max_output, stop)
        self._entries[info.id] = entry
        return entry

    def set_pgid(self, task_id: str, pgid: int | None) -> None:
        """Record the process group of a running task (known once its process started)."""
        self._entry(task_id).info.pgid = pgid

    async def _run(
        self, entry: _Entry, work: Callable[[Callable[[str], None]], Coroutine[Any, Any, Any]]
    ) -> None:
        info = entry.info
        try:
            result = await work(entry.write)
        except asyncio.CancelledError:
            if info.status == "running":
                info.status = "stopped"
            await self._finish(entry)
            raise
        except Exception as exc:
            if info.status == "running":
                info.status = "failed"
            if isinstance(exc, TaskFailed):
                info.error = str(exc)
            else:
                info.error = exception_text(exc) if str(exc) else type(exc).__name__
        else:
            if info.status == "running":
                info.status = "completed"
            if isinstance(result, int) and not isinstance(result, bool):
                info.exit_code = result
            elif result is not None:
                info.result = result if isinstance(result, str) else str(result)
        await self._finish(entry)

    async def _finish(self, entry: _Entry) -> None:
        entry.info.ended = time.time()
        for listener in list(self._listeners):
            try:
                out = listener(entry.info)
                if out is not None and inspect.isawaitable(out):
                    await out
            except Exception:
                log.exception("Task listener failed on %s", entry.info.id)
        entry.done.set()

    def subscribe(self, listener: FinishListener) -> Callable[[], None]:
        """Call ``listener(info)`` whenever a task ends; returns a function that unsubscribes."""
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    # -- reading ------------------------------------------------------------------------
    def _entry(self, task_id: str) -> _Entry:
        entry = self._entries.get(task_id)
        if entry is None:
            known = ", ".join(self._entries) or "none"
            raise TaskNotFoundError(f"No task {task_id!r} (known tasks: {known})")
        return entry

    def get(self, task_id: str) -> TaskInfo:
        """The task ``task_id`` (raises :class:`TaskNotFoundError`)."""
        return self._entry(task_id).info

    def list(self, *, status: TaskStatus | None = None) -> list[TaskInfo]:
        """Every task (or those with ``status``), oldest first."""
        return [e.info for e in self._entries.values() if status is None or e.info.status == status]

    def output(self, task_id: str, since: int = 0) -> TaskOutput:
        """The task's output from offset ``since`` (0: everything kept) and the offset to
        ask from next; raises :class:`TaskNotFoundError` or ``ValueError`` for a negative
        offset."""
        if since < 0:
            raise ValueError(f"since must be an offset >= 0, got {since}")
        entry = self._entry(task_id)
        info = entry.info
        total = info.output_chars
        since = min(since, total)
        dropped = max(0, entry.start - since)
        begin = max(since, entry.start) - entry.start
        text = "".join(entry.buffer)[begin:] if begin < entry.kept else ""
        if len(entry.buffer) > 1:
            entry.buffer = ["".join(entry.buffer)]
        return TaskOutput(id=info.id, text=text, next_offset=total, dropped=dropped, status=info.status)

    async def wait_output(self, task_id: str, since: int = 0, timeout: float | None = None) -> TaskOutput:  # noqa: ASYNC109
        """:meth:`output` once there is output after ``since`` or the task ended (or
        ``timeout`` seconds passed)."""
        entry = self._entry(task_id)
        try:
            async with asyncio.timeout(timeout):
                while entry.info.output_chars <= since and not entry.done.is_set():
                    entry.changed.clear()
                    done = asyncio.ensure_future(entry.done.wait())
                    changed = asyncio.ensure_future(entry.changed.wait())
                    try:
                        await asyncio.wait({done, changed}, return_when=asyncio.FIRST_COMPLETED)
                    finally:
                        done.cancel()
                        changed.cancel()
        except TimeoutError:
            pass
        return self.output(task_id, since)

    # -- waiting and stopping -------------------------------------------------------------
    async def wait(self, task_id: str, timeout: float | None = None) -> TaskInfo:  # noqa: ASYNC109
        """Wait until the task ends or ``timeout`` seconds pass; returns its info either way."""
        entry = self._entry(task_id)
        if not entry.done.is_set():
            try:
                async with asyncio.timeout(timeout):
                    await entry.done.wait()
            except TimeoutError:
                pass
        return entry.info

    async def stop(self, task_id: str) -> TaskInfo:
        """Stop the task: its ``stop`` function (or cancellation), cancellation after
        ``stop_grace`` seconds, then SIGKILL for its process group if any process of it
        is left. Returns its info (``status`` ``stopped`` unless it had ended already)."""
        entry = self._entry(task_id)
        info = entry.info
        task = entry.task
        if task is not None and not task.done():
            info.status = "stopped"
            if entry._stop is not None:
                try:
                    out = entry._stop()
                    if inspect.isawaitable(out):
                        await out
                except Exception:
                    log.exception("Stopping task %s failed", task_id)
                await asyncio.wait({task}, timeout=self.stop_grace)
            if not task.done():
                task.cancel()
            await asyncio.wait({task})
            if not entry.done.is_set():  # cancelled before it ever ran
                await self._finish(entry)
        await entry.done.wait()
        if info.pgid is not None:
            signal_group(info.pgid)
        return info

    async def stop_all(self) -> None:
        """Stop every running task."""
        running = [e.info.id for e in self._entries.values() if e.task is not None and not e.task.done()]
        await asyncio.gather(*(self.stop(i) for i in running))

    def forget(self, task_id: str) -> None:
        """Drop an ended task and its output (raises ``ValueError`` while it runs)."""
        entry = self._entry(task_id)
        if entry.task is not None and not entry.task.done():
            raise ValueError(f"Task {task_id} is still running; stop it first")
        del self._entries[task_id]

    def tools(self) -> builtins.list[Tool]:
        """The model's tools on this registry: ``task_list``, ``task_output``,
        ``task_wait`` and ``task_stop``."""
        return task_tools(self)

    def __repr__(self) -> str:
        running = sum(1 for e in self._entries.values() if e.info.status == "running")
        return f"TaskRegistry(tasks={len(self._entries)}, running={running})"
