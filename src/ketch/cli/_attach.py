"""``@path`` mentions in the command's prompts (interactive and ``ketch run``).

Each mention of a file in the workspace is attached to the prompt by its type: a text
file as the read tool shows it (appended to the prompt's text), an image as an image
part, a PDF as a document part and a recording (WAV, MP3, AIFF, AAC, OGG, FLAC) as an
audio part, when the model takes documents or audio (:func:`ketch.llm.takes_documents`,
:func:`ketch.llm.takes_audio`). A PDF or recording is read as a regular file inside the
workspace only (no link out, no FIFO or device) and at most :data:`MAX_ATTACHMENT_BYTES`.
Every mention goes through the ``Read`` permission rules first. A mention that cannot be
attached gets one line saying why, and the prompt goes without it; an ``@name`` that
names nothing in the workspace is left as it is.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any
from typing import Literal

from ..llm import exception_text

if TYPE_CHECKING:
    from ._factory import Built

MAX_ATTACHMENT_BYTES = 10 * 1024 * 1024
"""The largest PDF or recording an ``@path`` mention attaches."""

_MENTION = re.compile(r"(?:^|(?<=\s))@([^\s@]+)")
_MENTION_TRAILING = ",.;:!?)]}'\""

_AUDIO_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"ID3", "audio/mp3"),
    (b"\xff\xfb", "audio/mp3"),
    (b"\xff\xf3", "audio/mp3"),
    (b"\xff\xf2", "audio/mp3"),
    (b"OggS", "audio/ogg"),
    (b"fLaC", "audio/flac"),
    (b"\xff\xf1", "audio/aac"),
    (b"\xff\xf9", "audio/aac"),
)


def mentions(text: str) -> list[str]:
    """The ``@path`` mentions of a prompt, in order, each once (trailing punctuation off)."""
    found: dict[str, None] = {}
    for match in _MENTION.finditer(text):
        path = match.group(1).rstrip(_MENTION_TRAILING)
        if path:
            found[path] = None
    return list(found)


def mention_kind(root: Path, path: str) -> Literal["file", "folder"] | None:
    """What an ``@path`` names: a folder, a file (or anything else that exists, and any
    path outside the workspace: the read tool says why it refuses it), or None when
    nothing of that name exists in the workspace (an ``@name`` that is no path)."""
    local = os.path.join(root, os.path.expanduser(path))
    if os.path.isdir(local):
        return "folder"
    if os.path.lexists(local) or path.startswith(("/", "~")):
        return "file"
    return None


def sniff_media(head: bytes) -> tuple[Literal["document", "audio"], str] | None:
    """``("document", "application/pdf")`` for a PDF, ``("audio", mime)`` for a
    recording, from a file's first bytes; None for anything else."""
    if head.startswith(b"%PDF-"):
        return "document", "application/pdf"
    if len(head) >= 12 and head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return "audio", "audio/wav"
    if len(head) >= 12 and head[:4] == b"FORM" and head[8:12] in (b"AIFF", b"AIFC"):
        return "audio", "audio/aiff"
    for magic, mime in _AUDIO_MAGIC:
        if head.startswith(magic):
            return "audio", mime
    return None


def _head(root: Path, path: str) -> bytes | None:
    """The first bytes of the regular file ``path`` names inside ``root``; None when it
    is outside, not a regular file or not readable (the read tool then says why)."""
    local = os.path.realpath(os.path.join(root, os.path.expanduser(path)))
    real_root = os.path.realpath(root)
    if os.path.commonpath([local, real_root]) != real_root:
        return None
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(local, flags)
    except OSError:
        return None
    try:
        import stat

        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, 16)
    except OSError:
        return None
    finally:
        os.close(fd)


def _load(root: Path, path: str, limit: int) -> bytes:
    """The bytes of the regular file ``path`` names inside ``root`` (``OSError`` saying
    why not: a link, outside the workspace, more than ``limit`` bytes)."""
    from .._paths import read_regular_bytes

    local = os.path.join(root, os.path.expanduser(path))
    size = os.lstat(local).st_size
    if size > limit:
        raise OSError(f"it is {_size(size)}, more than the {_size(limit)} limit for attachments")
    return read_regular_bytes(local, limit, str(root))


def _size(n: int) -> str:
    return f"{n} bytes" if n < 1024 else f"{n / 1024:.0f} KB" if n < 1024 * 1024 else f"{n / (1024 * 1024):.1f} MB"


async def attach_mentions(
    built: Built, text: str, note: Callable[[str, str], None], limit: int = MAX_ATTACHMENT_BYTES
) -> tuple[str, list[Any]]:
    """``text`` with the text files it mentions appended, and the parts (images,
    documents, recordings) to send with it; ``note(line, style)`` gets one line per
    mention attached or refused (style ``""``, ``"yellow"`` or ``"red"``)."""
    from ..llm import AbortSignal
    from ..llm import AudioContent
    from ..llm import DocumentContent
    from ..llm import ImageContent
    from ..llm import takes_audio
    from ..llm import takes_documents
    from ..loop import ToolContext
    from ..tools import ReadTool

    paths = mentions(text)
    if not paths:
        return text, []
    root = built.root
    tool = next((t for t in built.agent.tools if isinstance(t, ReadTool)), None)
    model = built.agent.model
    texts: list[str] = []
    parts: list[Any] = []
    for number, path in enumerate(paths, 1):
        kind = mention_kind(root, path)
        if kind is None:
            continue  # not a file: an @name of something else
        if tool is None:
            note(f"@{path}: not attached: this session has no read tool", "yellow")
            continue
        if kind == "folder":
            note(f"@{path}: not attached: it is a folder (mention the files in it)", "yellow")
            continue
        args = {"path": path}
        denied = built.permissions.deny_verdict(tool, args)
        if denied is not None:
            note(f"@{path}: not attached: {denied.reason}", "red")
            continue
        head = _head(root, path)
        media = sniff_media(head) if head is not None else None
        if media is not None:
            what, mime = media
            takes = takes_documents if what == "document" else takes_audio
            if not takes(model.provider, model.api):
                plural = "documents" if what == "document" else "audio"
                note(f"@{path}: not attached: the model {model.provider}/{model.id} does not take {plural}", "red")
                continue
            try:
                data = await asyncio.to_thread(_load, root, path, limit)
            except OSError as exc:
                note(f"@{path}: not attached: {exc.strerror or exc}", "red")
                continue
            name = os.path.basename(path)
            if what == "document":
                parts.append(DocumentContent.from_bytes(data, mime, name))
            else:
                parts.append(AudioContent.from_bytes(data, mime, name))
            note(f"↳ attached @{path} ({'PDF document' if what == 'document' else mime}, {_size(len(data))})", "")
            continue
        ctx: ToolContext[Any] = ToolContext(call_id=f"mention-{number}", tool_name="read", signal=AbortSignal())
        try:
            result = await tool.execute(args, ctx)
        except Exception as exc:  # a tool failure must not end the session
            note(f"@{path}: not attached: {exception_text(exc)}", "red")
            continue
        if result.is_error:
            note(f"@{path}: not attached: {result.text.splitlines()[0] if result.text else 'read failed'}", "red")
            continue
        images = [b for b in result.blocks if type(b) is ImageContent]
        if images:
            parts.extend(images)
            note(f"↳ attached @{path} (image, {images[0].mime_type})", "")
            continue
        lines = result.text.count("\n") + 1
        note(f"↳ attached @{path} ({lines} line{'s' if lines != 1 else ''})", "")
        texts.append(f'<file path="{path}">\n{result.text}\n</file>')
    if texts:
        text += "\n\nFiles the user attached (as the read tool shows them):\n" + "\n".join(texts)
    return text, parts
