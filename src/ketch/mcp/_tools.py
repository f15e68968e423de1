"""MCP tools and results as ketch values: names, scheduling flags, result content."""

from __future__ import annotations

import json
import re
from typing import Any

from ketch.llm import DocumentContent
from ketch.llm import ImageContent
from ketch.llm import TextContent
from ketch.loop import ToolResult

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def tool_name(server: str, tool: str) -> str:
    """The ketch name of an MCP tool: ``mcp__<server>__<tool>``, characters providers
    reject in tool names replaced by ``_``."""
    return f"mcp__{_UNSAFE.sub('_', server)}__{_UNSAFE.sub('_', tool)}"


def server_rule(server: str) -> str:
    """The permission rule naming every tool of ``server``: ``mcp__<server>``."""
    return f"mcp__{_UNSAFE.sub('_', server)}"


def flags(annotations: Any, *, trusted: bool = False) -> tuple[bool, bool]:
    """``(read_only, sequential)`` from a tool's annotations.

    ``readOnlyHint`` makes the tool concurrency-safe, and read-only (permission modes run
    it unasked) only when the server is ``trusted``; otherwise a tool that is destructive
    (the default) or not idempotent (the default) runs alone.
    """
    if annotations is None:
        return False, True
    if getattr(annotations, "read_only_hint", None):
        return trusted, False
    destructive = getattr(annotations, "destructive_hint", None)
    idempotent = getattr(annotations, "idempotent_hint", None)
    sequential = destructive is not False or idempotent is not True
    return False, sequential


def _resource_text(resource: Any) -> TextContent | ImageContent:
    uri = str(getattr(resource, "uri", ""))
    mime = getattr(resource, "mime_type", None)
    text = getattr(resource, "text", None)
    if text is not None:
        return TextContent(text=f"[resource {uri}]\n{text}")
    blob = getattr(resource, "blob", None)
    if blob is not None and mime and mime.startswith("image/"):
        return ImageContent(data=blob, mime_type=mime)
    size = len(blob or "") * 3 // 4
    return TextContent(text=f"[resource {uri}: {mime or 'binary'}, {size} bytes, not shown]")


def convert_content(blocks: Any) -> list[TextContent | ImageContent | DocumentContent]:
    """MCP content blocks as ketch blocks: text and images as they are, resources as
    text (an embedded image resource as an image), audio as a note."""
    out: list[TextContent | ImageContent | DocumentContent] = []
    for block in blocks or ():
        kind = getattr(block, "type", None)
        if kind == "text":
            out.append(TextContent(text=block.text))
        elif kind == "image":
            out.append(ImageContent(data=block.data, mime_type=block.mime_type))
        elif kind == "audio":
            out.append(TextContent(text=f"[audio: {block.mime_type}, {len(block.data) * 3 // 4} bytes, not shown]"))
        elif kind == "resource_link":
            described = f"{block.name}: {block.uri}"
            if getattr(block, "mime_type", None):
                described += f" ({block.mime_type})"
            if getattr(block, "description", None):
                described += f" - {block.description}"
            out.append(TextContent(text=f"[resource link] {described}"))
        elif kind == "resource":
            out.append(_resource_text(block.resource))
        else:  # a block type this version does not know: keep its JSON
            value = dump(block)
            out.append(TextContent(text=json.dumps(value if value is not block else str(block))))
    return out


def dump(value: Any) -> Any:
    """An MCP SDK (pydantic) object as the JSON-ready dict it is on the wire; other values
    as they are."""
    model_dump = getattr(value, "model_dump", None)
    if callable(model_dump):
        return model_dump(by_alias=True, mode="json", exclude_none=True)
    return value


def convert_result(result: Any) -> ToolResult:
    """A ``CallToolResult`` as a :class:`ToolResult`.

    ``isError`` becomes an error result. ``structuredContent`` goes to ``details``
    (``{"structured_content": ...}``) and, when the server sent no content blocks, to
    the model as JSON text.
    """
    content = convert_content(result.content)
    structured = getattr(result, "structured_content", None)
    details: dict[str, Any] | None = None
    if structured is not None:
        details = {"structured_content": structured}
        if not content:
            content = [TextContent(text=json.dumps(structured, ensure_ascii=False))]
    return ToolResult(content=content, details=details, is_error=bool(result.is_error))
