"""White-box test: imports ketch implementation modules (private) directly.

MCP content blocks as ketch blocks, the one conversion for tool results and for the
messages of a server's sampling request."""

from __future__ import annotations

import mcp_types as types

from ketch.llm import ImageContent
from ketch.llm import TextContent
from ketch.mcp._tools import convert_content


def test_every_kind_of_block_becomes_text_or_an_image() -> None:
    blocks = [
        types.TextContent(type="text", text="hello"),
        types.ImageContent(type="image", data="iVBO", mime_type="image/png"),
        types.AudioContent(type="audio", data="AAAAAAAA", mime_type="audio/wav"),
        types.ResourceLink(type="resource_link", name="notes", uri="file:///notes.md", mime_type="text/markdown"),
        types.EmbeddedResource(
            type="resource", resource=types.TextResourceContents(uri="file:///a.txt", text="inside", mime_type="text/plain")
        ),
        types.EmbeddedResource(
            type="resource", resource=types.BlobResourceContents(uri="file:///b.bin", blob="AAAA", mime_type="application/zip")
        ),
        types.EmbeddedResource(
            type="resource", resource=types.BlobResourceContents(uri="file:///c.png", blob="iVBO", mime_type="image/png")
        ),
    ]
    assert convert_content(blocks) == [
        TextContent(text="hello"),
        ImageContent(data="iVBO", mime_type="image/png"),
        TextContent(text="[audio: audio/wav, 6 bytes, not shown]"),
        TextContent(text="[resource link] notes: file:///notes.md (text/markdown)"),
        TextContent(text="[resource file:///a.txt]\ninside"),
        TextContent(text="[resource file:///b.bin: application/zip, 3 bytes, not shown]"),
        ImageContent(data="iVBO", mime_type="image/png"),
    ]
