"""A scripted model from a JSON file, so the command can be tested without a network.

Not shown in ``--help``; select it with ``--model scripted:<path>`` or the environment
variable ``KETCH_TEST_SCRIPT=<path>`` (which wins over every other model setting). The
file holds a JSON list; each item is one model reply, either a string (a text reply) or
an object with the fields of :class:`ketch.testing.Reply`::

    [
      {"blocks": [{"type": "thinking", "thinking": "Let me look."},
                  {"type": "tool_call", "id": "c1", "name": "ls", "args": {"path": "."}}]},
      {"blocks": [{"type": "text", "text": "Done."}],
       "usage": {"input": 10, "output": 2, "total_tokens": 12, "cost": {"total": 0.5}}},
      {"hang": true},
      {"error": "upstream broke", "error_kind": "server"}
    ]

Replies are taken in order by every request, including the summary request of a context
compaction (its system prompt is :data:`ketch.context._summary.SUMMARY_SYSTEM_PROMPT`): put
the summary reply (``"<summary>…</summary>"``) where the compaction happens, e.g. after the
replies of the turns before it. ``--context-window`` makes a short script compact.

With ``KETCH_TEST_REQUESTS=<path>`` every request the scripted model gets is appended
to that file as one JSON line: ``{"system_prompt": ..., "messages": [...], "tools":
[names]}``, so a test through the command can assert what the model was sent.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgspec

from ..llm import Cost
from ..llm import TextContent
from ..llm import ThinkingContent
from ..llm import ToolCall
from ..llm import Usage
from ..testing import Reply
from ..testing import ScriptedModel

SCRIPT_ENV = "KETCH_TEST_SCRIPT"
REQUESTS_ENV = "KETCH_TEST_REQUESTS"


class _LoggedScriptedModel(ScriptedModel):
    """A :class:`ScriptedModel` that also appends each request to a JSON-lines file."""

    def __init__(self, replies: list[str | Reply], log: str) -> None:
        super().__init__(replies, provider="scripted", api="scripted", id="scripted-model")
        self._log = log

    def _record(self, request: Any, options: Any) -> None:
        super()._record(request, options)
        line = {
            "system_prompt": request.system_prompt,
            "messages": list(request.messages),
            "tools": [t.name for t in request.tools],
        }
        with open(self._log, "ab") as f:
            f.write(msgspec.json.encode(line) + b"\n")


def load_scripted_model(path: str) -> ScriptedModel:
    """A :class:`ScriptedModel` playing the replies in the JSON file at ``path``.

    Raises ``ValueError`` with a readable message when the file is missing or invalid.
    """
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read model script {path}: {exc.strerror or exc}") from None
    try:
        raw = msgspec.json.decode(data)
        if isinstance(raw, list):
            for n, item in enumerate(raw, 1):
                if isinstance(item, dict):
                    _known_keys(item, Reply, f"reply {n}")
        replies = msgspec.convert(raw, type=list[str | Reply])
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ValueError(f"invalid model script {path}: {exc}") from None
    log = os.environ.get(REQUESTS_ENV)
    if log:
        return _LoggedScriptedModel(replies, log)
    return ScriptedModel(replies, provider="scripted", api="scripted", id="scripted-model")


_BLOCKS: dict[str, type[msgspec.Struct]] = {"text": TextContent, "thinking": ThinkingContent, "tool_call": ToolCall}


def _known_keys(item: dict[str, Any], kind: type[msgspec.Struct], where: str) -> None:
    """Raise ``ValidationError`` naming the first key of ``item`` that ``kind`` (or a block
    or usage inside it) does not have: a misspelt key would otherwise be dropped (a tool
    call with ``"arguments"`` ran with no arguments)."""
    allowed = set(kind.__struct_fields__) | ({"type"} if kind in _BLOCKS.values() else set())
    for key in item:
        if key not in allowed:
            raise msgspec.ValidationError(f"{where}: unknown key {key!r}; allowed: {', '.join(sorted(allowed))}")
    blocks = item.get("blocks") if kind is Reply else None
    if isinstance(blocks, list):
        for m, block in enumerate(blocks, 1):
            if isinstance(block, dict) and block.get("type") in _BLOCKS:
                _known_keys(block, _BLOCKS[block["type"]], f"{where}, block {m} ({block['type']})")
    usage = item.get("usage") if kind is Reply else None
    if isinstance(usage, dict):
        _known_keys(usage, Usage, f"{where}, usage")
        if isinstance(usage.get("cost"), dict):
            _known_keys(usage["cost"], Cost, f"{where}, usage.cost")
