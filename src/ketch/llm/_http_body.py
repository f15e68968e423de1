"""A request body sent as several pieces, one socket write each.

A long transcript's cached JSON is a piece of its own (see
:func:`ketch.llm._providers.wire_cache.encode_body`): sending the pieces one after the
other spares copying the whole body into one buffer, and aiohttp copying it again to
put the headers in front. Imported with the first such request (it imports aiohttp).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aiohttp.abc import AbstractStreamWriter
from aiohttp.payload import Payload

_JOIN_LIMIT = 1 << 16


class PiecesPayload(Payload):
    """A JSON body made of ``pieces``, sent in order with a ``Content-Length``."""

    _autoclose = True  # nothing to close: the pieces are in memory

    def __init__(self, pieces: Sequence[bytes | memoryview], **kwargs: Any) -> None:
        super().__init__(tuple(pieces), content_type="application/json", **kwargs)
        self._size = sum(len(piece) for piece in pieces)

    def decode(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        """The body as text."""
        return b"".join(self._value).decode(encoding, errors)

    async def write(self, writer: AbstractStreamWriter) -> None:
        """Write every piece."""
        await self.write_with_length(writer, None)

    async def write_with_length(self, writer: AbstractStreamWriter, content_length: int | None) -> None:
        """Write the pieces, at most ``content_length`` bytes of them (None: all)."""
        pieces = self._value
        if pieces and len(pieces[0]) >= _JOIN_LIMIT:
            # aiohttp joins the buffered headers with the first write; an empty one sends
            # them on their own, so a long first piece is not copied to go after them.
            await writer.write(b"")
        for piece in pieces:
            if content_length is not None:
                if content_length <= 0:
                    return
                if len(piece) > content_length:
                    piece = memoryview(piece)[:content_length]
                content_length -= len(piece)
            await writer.write(piece)
