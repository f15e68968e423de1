"""Exactly-once side effects for the built-in file tools under a durable runner.

A runner that may execute the same call again (``ketch.temporal`` retries an activity
whose worker died after the write, before its result was recorded) sets
``ToolContext.idempotency_key``. The ``write`` and ``edit`` tools record their result
under that key once they changed the file; a repeated call with the same key returns
the recorded result and changes nothing. The journal is a directory of small files
(``$KETCH_IDEMPOTENCY_DIR``, default ``<tmp>/ketch-idempotency``), one per key.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Awaitable
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from ..loop import ToolContext
from ..loop import ToolResult
from ._workspace import Workspace
from ._workspace import WorkspaceTool


def journal_dir() -> Path:
    """Where results are recorded by idempotency key."""
    return Path(os.environ.get("KETCH_IDEMPOTENCY_DIR") or Path(tempfile.gettempdir()) / "ketch-idempotency")


def _path(key: str) -> Path:
    return journal_dir() / (hashlib.sha256(key.encode()).hexdigest() + ".json")


def replayed(ctx: ToolContext[object]) -> ToolResult | None:
    """The result recorded for this call's key, if the call already ran."""
    key = ctx.idempotency_key
    if key is None:
        return None
    try:
        data = _path(key).read_bytes()
    except OSError:
        return None
    try:
        return msgspec.json.decode(data, type=ToolResult)
    except msgspec.DecodeError:
        return None


def remember(ctx: ToolContext[object], result: ToolResult) -> None:
    """Record ``result`` under this call's key (a successful change only)."""
    key = ctx.idempotency_key
    if key is None or result.is_error:
        return
    path = _path(key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(msgspec.json.encode(result))
        os.replace(tmp, path)
    except OSError:
        pass  # best effort: without the record a repeat runs again, as without a key


async def once(ctx: ToolContext[object], run: Callable[[], Awaitable[ToolResult]]) -> ToolResult:
    """``run()``'s result, recorded under the call's key; a call repeated with the same
    key gets the recorded result and ``run`` is not called."""
    done = replayed(ctx)
    if done is not None:
        return done
    result = await run()
    remember(ctx, result)
    return result


class FileChangeTool(WorkspaceTool):
    """Base of the tools that change files (``write``, ``edit``): sequential, and each call
    runs :meth:`_change` exactly once per ``ctx.idempotency_key``."""

    __slots__ = ()

    def __init__(self, workspace: Workspace, name: str, description: str, parameters: dict[str, Any], label: str) -> None:
        super().__init__(workspace, name, description, parameters, label=label, sequential=True)

    async def execute(self, args: dict[str, Any], ctx: ToolContext[Any]) -> ToolResult:
        """Run the change. A call repeated with the same ``ctx.idempotency_key`` returns the
        first one's result and changes nothing."""
        return await once(ctx, lambda: self._change(args, ctx))

    async def _change(self, args: dict[str, Any], ctx: ToolContext[Any]) -> ToolResult:
        """Change the files as ``args`` say; the result for the model."""
        raise NotImplementedError
