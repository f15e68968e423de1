"""A ``ketch`` child process driven over its stdin/stdout control protocol.

Standard library only: nothing here imports the rest of ketch.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from collections.abc import Mapping
from collections.abc import Sequence
from types import TracebackType
from typing import Any

_END: Any = object()  # the end of the process's output, in the queues
_STDERR_TAIL = 8192
_LINE_LIMIT = 1 << 30


class ProcessError(Exception):
    """What went wrong in the ``ketch`` process: a command it answered with an error line
    (:attr:`line` is that line), or the process exited or could not start
    (:attr:`returncode`, :attr:`stderr`: the end of what it wrote on stderr)."""

    def __init__(
        self, message: str, *, line: dict[str, Any] | None = None, returncode: int | None = None, stderr: str = ""
    ) -> None:
        super().__init__(message)
        self.line = line
        self.returncode = returncode
        self.stderr = stderr


class Process:
    """``ketch run --input-format stream-json -o stream-json *args`` as a child process.

    ``cwd`` and ``env`` are the child's (default: this process's); ``command`` is how to
    start ketch (default: this Python, ``-m ketch``; e.g. ``["ketch"]`` for the command
    on ``PATH``). Start it with ``await process.start()`` or ``async with Process(...)``.

    Every command method sends one line and returns its ``ack`` line (a dict); an
    ``error`` line in answer, or the process ending, raises :class:`ProcessError`.
    Output lines (``init``, agent events, ``ack``, ``error``, ``result``) are decoded
    dicts: :meth:`events` yields every one of them in order (they are kept until read;
    pass ``keep_events=False`` when you only use :meth:`result`), :meth:`result` returns
    the next run's ``result`` line.
    """

    def __init__(
        self,
        *args: str,
        cwd: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        command: Sequence[str] | None = None,
        keep_events: bool = True,
    ) -> None:
        self.args = list(args)
        self.cwd = cwd
        self.env = dict(env) if env is not None else None
        self.command = list(command) if command is not None else [sys.executable, "-m", "ketch"]
        self.keep_events = keep_events
        self.init: dict[str, Any] | None = None
        """The ``init`` line (model, tools, permission mode, session id …) once started."""
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._stderr_task: asyncio.Task[None] | None = None
        self._stderr = bytearray()
        self._events: asyncio.Queue[Any] = asyncio.Queue()
        self._results: asyncio.Queue[Any] = asyncio.Queue()
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._init: asyncio.Future[dict[str, Any]] | None = None
        self._next_id = 0
        self._ended: ProcessError | None = None

    # -- lifecycle ----------------------------------------------------------------------
    @property
    def pid(self) -> int | None:
        """The child's process id (None before :meth:`start`)."""
        return self._proc.pid if self._proc is not None else None

    @property
    def returncode(self) -> int | None:
        """The child's exit code once it has exited, else None."""
        return self._proc.returncode if self._proc is not None else None

    @property
    def stderr(self) -> str:
        """The end of what the child wrote on stderr (its last 8 KiB)."""
        return self._stderr.decode("utf-8", "replace")

    async def start(self) -> dict[str, Any]:
        """Spawn the process and wait for its ``init`` line (returned). Raises
        :class:`ProcessError` when it cannot start or exits first (a usage error, say)."""
        if self._proc is not None:
            raise ProcessError("this Process was already started")
        argv = [*self.command, "run", "--input-format", "stream-json", "-o", "stream-json", *self.args]
        try:
            self._proc = await asyncio.create_subprocess_exec(
                *argv,
                cwd=self.cwd,
                env=self.env,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                limit=_LINE_LIMIT,
            )
        except OSError as exc:
            raise ProcessError(f"cannot start {argv[0]}: {exc.strerror or exc}") from None
        self._init = asyncio.get_running_loop().create_future()
        self._stderr_task = asyncio.create_task(self._drain_stderr())
        self._reader = asyncio.create_task(self._read())
        try:
            self.init = await self._init
        except BaseException:
            await self.kill()
            raise
        return self.init

    async def close(self) -> int:
        """End the input (the session finishes its active run), wait for the process to
        exit and return its exit code. If the wait is cancelled (``asyncio.timeout``, say)
        the process is stopped with :meth:`kill`."""
        proc = self._proc
        if proc is None:
            return 0
        if proc.stdin is not None and not proc.stdin.is_closing():
            proc.stdin.close()
        try:
            await self._finish()
        except BaseException:
            await self.kill()
            raise
        assert proc.returncode is not None
        return proc.returncode

    async def kill(self, grace: float = 5.0) -> int | None:
        """Stop the process: SIGTERM (ketch aborts its run and ends the processes its
        tools started), then SIGKILL after ``grace`` seconds. Returns the exit code."""
        proc = self._proc
        if proc is None:
            return None
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(asyncio.shield(proc.wait()), grace)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
        await asyncio.shield(self._finish())
        return proc.returncode

    async def _finish(self) -> None:
        assert self._proc is not None
        await self._proc.wait()
        for task in (self._reader, self._stderr_task):
            if task is not None:
                await task

    async def __aenter__(self) -> Process:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            await self.close()
        else:
            await self.kill()

    # -- output ---------------------------------------------------------------------------
    async def _drain_stderr(self) -> None:
        assert self._proc is not None and self._proc.stderr is not None
        while chunk := await self._proc.stderr.read(65536):
            self._stderr += chunk
            del self._stderr[:-_STDERR_TAIL]

    async def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        stdout = self._proc.stdout
        try:
            while line := await stdout.readline():
                try:
                    obj = json.loads(line)
                except ValueError:
                    continue
                if isinstance(obj, dict):
                    self._dispatch(obj)
        finally:
            code = await self._proc.wait()
            if self._stderr_task is not None:
                await self._stderr_task
            tail = self.stderr.strip()
            error = ProcessError(
                f"ketch exited with code {code}" + (f": {tail.splitlines()[-1]}" if tail else ""),
                returncode=code,
                stderr=tail,
            )
            self._ended = error
            for future in [*self._pending.values(), self._init]:
                if future is not None and not future.done():
                    future.set_exception(error)
            self._pending.clear()
            self._events.put_nowait(_END)
            self._results.put_nowait(_END)

    def _dispatch(self, obj: dict[str, Any]) -> None:
        kind = obj.get("type")
        if kind == "init" and self._init is not None and not self._init.done():
            self._init.set_result(obj)
        elif kind in ("ack", "error"):
            future = self._pending.pop(obj["id"], None) if isinstance(obj.get("id"), int) else None
            if future is not None and not future.done():
                if kind == "ack":
                    future.set_result(obj)
                else:
                    future.set_exception(ProcessError(str(obj.get("error")), line=obj))
        elif kind == "result":
            self._results.put_nowait(obj)
        if self.keep_events:
            self._events.put_nowait(obj)

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        """Every output line, in order, until the process exits."""
        while True:
            item = await self._events.get()
            if item is _END:
                self._events.put_nowait(_END)
                return
            yield item

    async def result(self) -> dict[str, Any]:
        """The next ``result`` line (each run ends with one; they are kept in order).
        Raises :class:`ProcessError` when the process exits first."""
        item = await self._results.get()
        if item is _END:
            self._results.put_nowait(_END)
            assert self._ended is not None
            raise self._ended
        return item  # type: ignore[no-any-return]

    # -- commands -------------------------------------------------------------------------
    async def send(self, command: dict[str, Any]) -> dict[str, Any]:
        """Send one command object (an ``id`` is added) and return its ``ack`` line."""
        proc = self._proc
        if proc is None or proc.stdin is None:
            raise ProcessError("the Process is not started: await start() or use async with")
        if self._ended is not None:
            raise self._ended
        if proc.stdin.is_closing():
            raise ProcessError("the Process is closing: no more commands")
        self._next_id += 1
        ident = self._next_id
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[ident] = future
        try:
            proc.stdin.write(json.dumps({**command, "id": ident}).encode() + b"\n")
            await proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the process is gone: the reader fails the future with the exit code
        return await future

    async def prompt(self, text: str) -> dict[str, Any]:
        """Send a user message: it starts a run when none is active, else it steers the
        active one (the ack's ``as`` says which)."""
        return await self.send({"type": "user", "text": text})

    async def steer(self, text: str) -> dict[str, Any]:
        """The same line as :meth:`prompt`; the name for a message to a running agent."""
        return await self.send({"type": "user", "text": text})

    async def follow_up(self, text: str) -> dict[str, Any]:
        """Queue ``text`` to run when the agent would otherwise stop (or run it now)."""
        return await self.send({"type": "follow_up", "text": text})

    async def interrupt(self) -> dict[str, Any]:
        """Abort the active run (its result says ``aborted``) and drop queued messages."""
        return await self.send({"type": "interrupt"})

    async def set_model(self, model: str) -> dict[str, Any]:
        """Use ``model`` (``provider:id``) from the next run on."""
        return await self.send({"type": "control", "subtype": "set_model", "model": model})

    async def set_permission_mode(self, mode: str) -> dict[str, Any]:
        """Switch the permission mode (``default``, ``accept_edits``, ``plan``, ``bypass``) now."""
        return await self.send({"type": "control", "subtype": "set_permission_mode", "mode": mode})

    async def set_thinking(self, level: str) -> dict[str, Any]:
        """Use the thinking level ``level`` from the next run on."""
        return await self.send({"type": "control", "subtype": "set_thinking", "level": level})

    async def approve(self, call_id: str) -> dict[str, Any]:
        """Approve a call the paused run waits on (a result's ``pending_approvals``)."""
        return await self.send({"type": "approve", "call_id": call_id})

    async def deny(self, call_id: str, reason: str | None = None) -> dict[str, Any]:
        """Deny a call the paused run waits on; ``reason`` is what the model is told."""
        command: dict[str, Any] = {"type": "deny", "call_id": call_id}
        if reason is not None:
            command["reason"] = reason
        return await self.send(command)

    async def edit(self, call_id: str, args: Mapping[str, Any]) -> dict[str, Any]:
        """Run a call the paused run waits on with ``args`` instead of the model's."""
        return await self.send({"type": "edit", "call_id": call_id, "args": dict(args)})

    def __repr__(self) -> str:
        state = "not started" if self._proc is None else f"exited {self.returncode}" if self.returncode is not None else "running"
        return f"Process(pid={self.pid}, {state})"
