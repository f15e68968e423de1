"""Lines in on stdin, JSON lines out on stdout: the plumbing of the commands other programs
drive (``ketch run --input-format stream-json``, ``ketch acp`` and the Claude Code
compatible mode).

It imports nothing of ketch's agent (no model, loop or tools), so a command can answer
its client's first request before the agent's modules have loaded.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
import threading
from collections import deque
from collections.abc import Callable
from typing import Any
from typing import BinaryIO

import msgspec

MAX_LINE = 16 * 1024 * 1024
"""The longest input line read (bytes); a longer one is cut there (the reader reports it)."""


class StdinLines:
    """The lines of stdin, read by a thread (works for pipes, files and terminals alike):
    ``await get()`` returns the next line without its newline, None at the end. The
    lines of one read are handed over together, so commands written together (a prompt
    and an interrupt, say) are handled one after the other before any run moves on."""

    def __init__(self, fd: int = 0) -> None:
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[list[bytes] | None] = asyncio.Queue()
        self._ready: deque[bytes] = deque()
        self._done = False
        self._fd = fd
        threading.Thread(target=self._read, name="ketch-stdin", daemon=True).start()

    def _put(self, item: list[bytes] | None) -> None:
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)
        except RuntimeError:  # the loop is closed: the command is exiting
            pass

    def _read(self) -> None:
        buffer = bytearray()
        searched = 0
        while True:
            try:
                chunk = os.read(self._fd, 65536)
            except InterruptedError:
                continue
            except OSError:
                chunk = b""
            if not chunk:
                if buffer:
                    self._put([bytes(buffer)])
                self._put(None)
                return
            buffer += chunk
            lines: list[bytes] = []
            while True:
                end = buffer.find(b"\n", searched)
                if end < 0:
                    searched = len(buffer)
                    if len(buffer) > MAX_LINE:  # keep the start (an error names it), drop the rest
                        del buffer[MAX_LINE:]
                        searched = len(buffer)
                    break
                lines.append(bytes(buffer[:end]))
                del buffer[: end + 1]
                searched = 0
            if lines:
                self._put(lines)

    async def get(self) -> bytes | None:
        """The next line, or None at the end of input."""
        while not self._ready:
            if self._done:
                return None
            batch = await self._queue.get()
            if batch is None:
                self._done = True
                return None
            self._ready.extend(batch)
        return self._ready.popleft()

    def end(self) -> None:
        """Make :meth:`get` return None (the session ends early)."""
        self._done = True
        self._ready.clear()
        self._queue.put_nowait(None)


def json_fallback(value: Any) -> Any:
    """The JSON form of a value msgspec cannot encode: a pydantic model's dump, a set as
    a list, anything else as its ``str``."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    if isinstance(value, (set, frozenset)):
        return list(value)
    return str(value)


_encoder = msgspec.json.Encoder(enc_hook=json_fallback)
_SURROGATE = re.compile("[\ud800-\udfff]")


def _scrub(value: Any) -> Any:
    """``value`` (builtins) with every lone surrogate in a string replaced by one U+FFFD
    (as :func:`ketch.llm.scrub_surrogates`, without importing it)."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {_scrub(k): _scrub(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    return value


def encode_line(obj: Any, buffer: bytearray) -> bytearray:
    """Encode ``obj`` as one JSON line into ``buffer`` (reused between calls); a lone
    surrogate, which JSON cannot carry, becomes U+FFFD."""
    try:
        _encoder.encode_into(obj, buffer)
    except UnicodeEncodeError:
        _encoder.encode_into(_scrub(msgspec.to_builtins(obj, enc_hook=json_fallback)), buffer)
    buffer.extend(b"\n")
    return buffer


class JsonLines:
    """Writes one JSON object per line to ``out`` (flushed at each line). When the reader
    has gone away (``BrokenPipeError``) :attr:`broken` becomes true, ``on_broken`` is
    called once and later lines are dropped. A lone surrogate (JSON cannot carry one) is
    written as U+FFFD."""

    __slots__ = ("_buffer", "_on_broken", "_out", "broken")

    def __init__(self, out: BinaryIO | None = None, on_broken: Callable[[], object] | None = None) -> None:
        self._out: BinaryIO = out if out is not None else sys.stdout.buffer
        self._buffer = bytearray()
        self._on_broken = on_broken
        self.broken = False

    def write(self, obj: Any) -> None:
        """Write ``obj`` as one line."""
        if self.broken:
            return
        encode_line(obj, self._buffer)
        try:
            self._out.write(self._buffer)
            self._out.flush()
        except BrokenPipeError:
            self.broken = True
            from ._args import silence_stdout

            silence_stdout()
            if self._on_broken is not None:
                self._on_broken()
