"""Cooperative cancellation: :class:`AbortSignal` and the :class:`Aborted` exception.

A signal is shared by everything that belongs to one run (model streams, tools,
hooks). Aborting it cancels whatever awaits inside :meth:`AbortSignal.scope` and turns
that cancellation into :class:`Aborted`, so callers can keep partial work and report an
``aborted`` outcome instead of unwinding the whole task. Cancellation that does not come
from the signal (the caller cancelling the task) is never swallowed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import TracebackType


class Aborted(Exception):
    """Raised inside :meth:`AbortSignal.scope` when the signal was aborted."""

    def __init__(self, reason: str = "aborted") -> None:
        super().__init__(reason)
        self.reason = reason


class AbortSignal:
    """A one-shot abort flag with callbacks and task-cancelling scopes."""

    __slots__ = ("_callbacks", "_event", "_reason", "aborted")

    def __init__(self) -> None:
        self.aborted = False
        """True once :meth:`abort` was called (read-only for callers)."""
        self._reason: str | None = None
        self._callbacks: list[Callable[[], None]] = []
        self._event: asyncio.Event | None = None

    @property
    def reason(self) -> str | None:
        """The reason given to :meth:`abort`, or None."""
        return self._reason

    def abort(self, reason: str = "aborted") -> None:
        """Abort: run callbacks once, wake waiters. Later calls do nothing."""
        if self._reason is not None:
            return
        self._reason = reason
        self.aborted = True
        if self._event is not None:
            self._event.set()
        callbacks, self._callbacks = self._callbacks, []
        for cb in callbacks:
            cb()

    def add_callback(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` on abort (at once if already aborted); returns a remover."""
        if self._reason is not None:
            callback()
            return _noop
        self._callbacks.append(callback)

        def remove() -> None:
            try:
                self._callbacks.remove(callback)
            except ValueError:
                pass

        return remove

    async def wait(self) -> None:
        """Wait until the signal is aborted."""
        if self._reason is not None:
            return
        if self._event is None:
            self._event = asyncio.Event()
        await self._event.wait()

    def raise_if_aborted(self) -> None:
        """Raise :class:`Aborted` if the signal was aborted."""
        if self._reason is not None:
            raise Aborted(self._reason)

    def scope(self) -> AbortScope:
        """An async context manager that turns an abort into :class:`Aborted` inside it."""
        return AbortScope(self)

    def __repr__(self) -> str:
        return f"AbortSignal(aborted={self.aborted})"


def _noop() -> None:
    return None


def _current_task_or_none() -> asyncio.Task[object] | None:
    try:
        return asyncio.current_task()
    except RuntimeError:
        return None


class AbortScope:
    """Cancels the entering task when the signal aborts; raises :class:`Aborted` on exit.

    Works like ``asyncio.timeout``: the cancellation it causes is undone with
    ``Task.uncancel`` so an outer cancellation still propagates.
    """

    __slots__ = ("_cancelled", "_remove", "_signal", "_task")

    def __init__(self, signal: AbortSignal) -> None:
        self._signal = signal
        self._task: asyncio.Task[object] | None = None
        self._cancelled = False
        self._remove: Callable[[], None] = _noop

    async def __aenter__(self) -> AbortScope:
        self._signal.raise_if_aborted()
        self._task = asyncio.current_task()
        self._remove = self._signal.add_callback(self._on_abort)
        return self

    def _on_abort(self) -> None:
        task = self._task
        # A task aborting its own signal is not waiting: it sees the flag at its next check.
        if task is not None and not self._cancelled and task is not _current_task_or_none():
            self._cancelled = True
            task.cancel()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        self._remove()
        task, self._task = self._task, None
        if self._cancelled and task is not None:
            if task.uncancel() == 0 and (exc_type is None or issubclass(exc_type, asyncio.CancelledError)):
                raise Aborted(self._signal.reason or "aborted")
        return False


class AbortWaiter:
    """Cancels one task on abort, but only while it is marked as waiting.

    Cheaper than entering :meth:`AbortSignal.scope` around every await on a hot path:
    set ``active`` around the await, and on ``CancelledError`` ask
    :meth:`caused_cancel` whether the abort caused it (then the cancellation is undone
    and the caller reports an abort) or it came from outside (re-raise it).
    """

    __slots__ = ("_remove", "_task", "active", "cancelled")

    def __init__(self, signal: AbortSignal | None) -> None:
        self._task = asyncio.current_task()
        self.active = False
        self.cancelled = False
        self._remove = signal.add_callback(self._on_abort) if signal is not None else _noop

    def _on_abort(self) -> None:
        task = self._task
        if self.active and not self.cancelled and task is not None and task is not _current_task_or_none():
            self.cancelled = True
            task.cancel()

    def caused_cancel(self) -> bool:
        """After a ``CancelledError``: True when the abort caused it (and it was undone)."""
        if self.cancelled and self._task is not None and self._task.uncancel() == 0:
            self.cancelled = False
            return True
        return False

    def close(self) -> None:
        """Stop watching the signal."""
        self._remove()
        self._remove = _noop


async def take_pending_cancel(undo: Callable[[], bool]) -> None:
    """After a wait completed although this task's cancellation had been requested for
    it (a limit or an abort fired just as it finished, or the awaited code swallowed
    the cancellation): settle that request now, so it cannot hit a later await or stay
    counted. ``undo`` withdraws the request and says whether it was the only one; a
    cancellation that also came from elsewhere is re-raised."""
    try:
        await asyncio.sleep(0)
    except asyncio.CancelledError:
        if not undo():
            raise
    else:
        undo()
