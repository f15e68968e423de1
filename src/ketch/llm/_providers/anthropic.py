"""The Anthropic Messages API (``POST /v1/messages``).

Requests carry ``x-api-key`` and ``anthropic-version: 2023-06-01``. The transcript is
cleaned for the target model by :func:`ketch.llm._handoff.prepare_messages` first, so
reasoning from other models is dropped and tool-call ids fit Anthropic's
``[a-zA-Z0-9_-]{1,64}`` (:func:`normalize_tool_call_id`).

Where the provider's data lives in ketch messages:

- a ``thinking`` block is a :class:`ThinkingContent` whose ``signature`` is the
  block's signature, replayed verbatim; thinking without a signature cannot be
  verified by the API and is not sent;
- a ``redacted_thinking`` block is a :class:`ThinkingContent` with ``redacted=True``,
  empty ``thinking`` and the block's opaque ``data`` as ``signature``;
- ``tool_use`` is a :class:`ToolCall` (``input`` is its ``arguments``), and a
  :class:`ToolResultMessage` becomes a ``tool_result`` block (``is_error``, text and
  images) in a user turn; consecutive results share one user turn.

Server tools (``StreamOptions.hosted_tools``, :data:`HOSTED_TOOLS`): web search, web
fetch and code execution are sent as ``web_search_20250305``, ``web_fetch_20250910`` and
``code_execution_20250825`` tools (with the beta flags the last two need); a
``server_tool_use`` block is a :class:`HostedToolCall` and a ``*_tool_result`` block a
:class:`HostedToolResult`, each keeping the block as ``native``, sent back verbatim.
A response the API paused (``pause_turn``: a long server-tool turn) ends with stop reason
``pause``; sending the transcript back as it is (no new user message) continues it, which
the hosted-tools capabilities do (:class:`ketch.tools.HostedTools`, :class:`ketch.web.WebSearch`).

Prompt caching (on by default, ``cache_retention="short"``) marks the system prompt
(a :class:`~ketch.llm.SystemPrompt`'s blocks marked ``cache``, else its last block;
without a system prompt, the last tool) and the freshest message (``cache_last_message``) with
``cache_control: {"type": "ephemeral"}`` (``"long"`` adds ``"ttl": "1h"``). Per
request, ``StreamOptions.extra`` may set ``cache_retention`` and
``cache_last_message``; those keys are read here and never sent.

Thinking levels follow the model's registry info: ``budget`` models get
``thinking: {"type": "enabled", "budget_tokens": n}`` with ``max_tokens`` raised by
:func:`~ketch.llm._registry.thinking_budget_tokens`; ``adaptive`` models get
``thinking: {"type": "adaptive"}`` and ``output_config.effort``. Temperature is not
sent while thinking is on, and a forced tool choice turns thinking off (the API
rejects the combination).

Structured output (``StreamOptions.response_format``) uses the JSON-schema output
mode, ``output_config.format``, by default: the answer is JSON text and tools and
thinking are unaffected. Models without it can use ``structured_output="tool"``: the
schema becomes a tool the model is forced to call, and that call is reported as a
text block holding the JSON.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import AsyncIterator
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any
from typing import Literal
from typing import TypeAlias
from typing import Unpack
from typing import get_args

import msgspec

from .._classify import classify_error_object
from .._classify import error_details
from .._errors import ContentFilterError
from .._errors import ModelError
from .._errors import error_for_kind
from .._handoff import LEADING_USER_TEXT
from .._messages import AssistantMessage
from .._messages import AudioContent
from .._messages import Citation
from .._messages import DocumentContent
from .._messages import HostedToolCall
from .._messages import HostedToolResult
from .._messages import ImageContent
from .._messages import Message
from .._messages import StopReason
from .._messages import TextContent
from .._messages import ThinkingContent
from .._messages import ToolCall
from .._messages import ToolResultMessage
from .._messages import UserMessage
from .._model import HostedTool
from .._model import Request
from .._model import StreamOptions
from .._model import ToolSpec
from .._registry import ModelInfo
from .._registry import clamp_thinking
from .._registry import output_limit
from .._registry import thinking_budget_tokens
from .._stream import MessageBuilder
from .._stream import StreamEvent
from .._stream import parse_tool_arguments
from .base import IMAGE_OMITTED
from .base import HTTPModel
from .base import HTTPOptions
from .base import HTTPRequest
from .base import SSEEvents
from .base import feed_events
from .base import hosted_tools
from .base import no_audio

API = "anthropic-messages"
"""The ``api`` name of models served through the Messages API."""

ANTHROPIC_VERSION = "2023-06-01"
"""The ``anthropic-version`` header sent with every request."""

CacheRetention: TypeAlias = Literal["none", "short", "long"]
"""Prompt caching: off, the default 5-minute cache, or the 1-hour cache."""
_CACHE_RETENTIONS: tuple[CacheRetention, ...] = get_args(CacheRetention)

"""Sent in place of an image to a model that does not accept images."""

StructuredOutput: TypeAlias = Literal["json_schema", "tool"]
"""How ``response_format`` is sent: ``output_config.format`` or a forced tool."""

_MIN_THINKING_BUDGET = 1024
_INTERLEAVED_BETA = "interleaved-thinking-2025-05-14"
_OPTION_KEYS = frozenset({"cache_retention", "cache_last_message"})
_VALID_ID = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_INVALID_ID_CHARS = re.compile(r"[^a-zA-Z0-9_-]")


# -- provider-hosted tools ------------------------------------------------------------

def _server_tool(type: str, name: str) -> Callable[[HostedTool], dict[str, Any]]:
    return lambda tool: {**tool.options, "type": type, "name": name}


HOSTED_TOOLS: dict[str, Callable[[HostedTool], dict[str, Any]]] = {
    "web_search": _server_tool("web_search_20250305", "web_search"),
    "web_fetch": _server_tool("web_fetch_20250910", "web_fetch"),
    "code_execution": _server_tool("code_execution_20250825", "code_execution"),
}
"""The hosted tools Anthropic runs (server tools), by kind: their tool definitions."""

_HOSTED_BETAS = {"web_fetch_20250910": "web-fetch-2025-09-10", "code_execution_20250825": "code-execution-2025-08-25"}
_SERVER_TOOL_KINDS = {
    "web_search": "web_search",
    "web_fetch": "web_fetch",
    "code_execution": "code_execution",
    "bash_code_execution": "code_execution",
    "text_editor_code_execution": "code_execution",
}
_SUMMARY_LIMIT = 4000


_RESULT_KINDS = {
    "web_search_tool_result": "web_search",
    "web_fetch_tool_result": "web_fetch",
    "code_execution_tool_result": "code_execution",
    "bash_code_execution_tool_result": "code_execution",
    "text_editor_code_execution_tool_result": "code_execution",
}


def hosted_result(block: dict[str, Any]) -> HostedToolResult:
    """A server tool's ``*_tool_result`` block as a :class:`HostedToolResult` (the block
    kept as ``native``)."""
    kind = _RESULT_KINDS.get(str(block.get("type", "")), "code_execution")
    content = block.get("content")
    citations: list[Citation] = []
    lines: list[str] = []
    error = False
    if isinstance(content, list):  # web search results
        for item in content:
            if isinstance(item, dict) and isinstance(item.get("url"), str):
                title = item.get("title") if isinstance(item.get("title"), str) else None
                citations.append(Citation(url=item["url"], title=title))
                lines.append(f"{title} <{item['url']}>" if title else f"<{item['url']}>")
    elif isinstance(content, dict):
        ctype = str(content.get("type", ""))
        if ctype.endswith("_error"):
            error = True
            lines.append(f"error: {content.get('error_code', 'unknown')}")
        elif ctype == "web_fetch_result":
            url = content.get("url")
            doc: dict[str, Any] = content["content"] if isinstance(content.get("content"), dict) else {}
            title = doc.get("title") if isinstance(doc.get("title"), str) else None
            if isinstance(url, str):
                citations.append(Citation(url=url, title=title))
                lines.append(f"{title} <{url}>" if title else f"<{url}>")
            source: dict[str, Any] = doc["source"] if isinstance(doc.get("source"), dict) else {}
            if source.get("type") == "text" and isinstance(source.get("data"), str):
                lines.append(source["data"])
        else:
            for key in ("stdout", "stderr", "content"):
                value = content.get(key)
                if isinstance(value, str) and value:
                    lines.append(value)
            if isinstance(content.get("return_code"), int) and content["return_code"] != 0:
                lines.append(f"exit code {content['return_code']}")
    output = "\n".join(lines)
    if len(output) > _SUMMARY_LIMIT:
        output = output[:_SUMMARY_LIMIT] + "…"
    return HostedToolResult(
        call_id=str(block.get("tool_use_id", "")),
        kind=kind,
        output=output,
        citations=citations,
        is_error=error,
        native=block,
    )


def hosted_call(id: str, name: str, input: dict[str, Any]) -> HostedToolCall:
    """A ``server_tool_use`` block as a :class:`HostedToolCall`."""
    native = {"type": "server_tool_use", "id": id, "name": name, "input": input}
    return HostedToolCall(id=id, kind=_SERVER_TOOL_KINDS.get(name, name), name=name, input=input, native=native)


# -- ids and cache markers ------------------------------------------------------------


def normalize_tool_call_id(id: str) -> str:
    """``id`` made valid for Anthropic (``[a-zA-Z0-9_-]{1,64}``); valid ids are kept.

    Other characters become ``_``; an id longer than 64 characters keeps its first 55
    and a hash of the whole, so distinct long ids stay distinct. Idempotent.
    """
    if _VALID_ID.fullmatch(id):
        return id
    if not id:
        return "_"
    cleaned = _INVALID_ID_CHARS.sub("_", id)
    if len(cleaned) <= 64:
        return cleaned
    digest = hashlib.sha256(id.encode()).hexdigest()[:8]
    return f"{cleaned[:55]}_{digest}"


def cache_control(retention: CacheRetention) -> dict[str, str] | None:
    """The ``cache_control`` marker for ``retention`` (None when caching is off)."""
    if retention == "none":
        return None
    if retention == "long":
        return {"type": "ephemeral", "ttl": "1h"}
    return {"type": "ephemeral"}


# -- request ----------------------------------------------------------------------------


def _image_block(image: ImageContent) -> dict[str, Any]:
    if image.url is not None:
        return {"type": "image", "source": {"type": "url", "url": image.url}}
    return {"type": "image", "source": {"type": "base64", "media_type": image.mime_type, "data": image.data}}


def _document_block(document: DocumentContent) -> dict[str, Any]:
    if document.mime_type == "text/plain":
        text = base64.b64decode(document.data).decode("utf-8", errors="replace")
        source: dict[str, Any] = {"type": "text", "media_type": "text/plain", "data": text}
    else:
        source = {"type": "base64", "media_type": document.mime_type, "data": document.data}
    block: dict[str, Any] = {"type": "document", "source": source}
    if document.name:
        block["title"] = document.name
    return block


def _user_blocks(
    content: Sequence[TextContent | ImageContent | DocumentContent | AudioContent] | str, images: bool
) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content.strip() else []
    blocks: list[dict[str, Any]] = []
    for block in content:
        if type(block) is TextContent:
            if block.text.strip():
                blocks.append({"type": "text", "text": block.text})
        elif type(block) is ImageContent:
            blocks.append(_image_block(block) if images else {"type": "text", "text": IMAGE_OMITTED})
        elif type(block) is DocumentContent:
            blocks.append(_document_block(block))
        elif type(block) is AudioContent:
            raise no_audio(block, "the Anthropic Messages API")
    return blocks


def _assistant_blocks(message: AssistantMessage) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for block in message.content:
        if type(block) is TextContent:
            if block.text.strip():
                blocks.append({"type": "text", "text": block.text})
        elif type(block) is ThinkingContent:
            if not block.signature:
                continue
            if block.redacted:
                blocks.append({"type": "redacted_thinking", "data": block.signature})
            else:
                blocks.append({"type": "thinking", "thinking": block.thinking, "signature": block.signature})
        elif type(block) is ToolCall:
            blocks.append(
                {
                    "type": "tool_use",
                    "id": normalize_tool_call_id(block.id),
                    "name": block.name,
                    "input": block.args,
                }
            )
        elif type(block) is HostedToolCall or type(block) is HostedToolResult:
            if isinstance(block.native, dict):
                blocks.append(block.native)
    return blocks


def _tool_result_block(message: ToolResultMessage, images: bool) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": normalize_tool_call_id(message.tool_call_id)}
    content = message.content
    if content:
        if all(type(b) is TextContent for b in content):
            block["content"] = "".join(b.text for b in content if type(b) is TextContent)
        else:
            parts = _user_blocks(content, images)
            if parts:
                block["content"] = parts
    if message.is_error:
        block["is_error"] = True
    return block


def convert_messages(messages: list[Message], *, images: bool = True) -> list[dict[str, Any]]:
    """The ``messages`` array for a transcript already prepared for the model (see
    :func:`ketch.llm._handoff.prepare_messages`).

    Consecutive tool results share one user turn. Blank text, unsigned thinking and
    messages left without content are not sent; messages of other kinds are skipped.
    With ``images`` false, images become the text :data:`IMAGE_OMITTED`.
    """
    out: list[dict[str, Any]] = []
    results: list[dict[str, Any]] | None = None
    for message in messages:
        kind = type(message)
        if kind is ToolResultMessage:
            assert isinstance(message, ToolResultMessage)
            block = _tool_result_block(message, images)
            if results is None:
                results = [block]
                out.append({"role": "user", "content": results})
            else:
                results.append(block)
            continue
        if kind is UserMessage:
            assert isinstance(message, UserMessage)
            blocks = _user_blocks(message.content, images)
            role = "user"
        elif kind is AssistantMessage:
            assert isinstance(message, AssistantMessage)
            blocks = _assistant_blocks(message)
            role = "assistant"
        else:
            continue
        if blocks:
            results = None
            out.append({"role": role, "content": blocks})
    return out


def convert_tools(tools: list[ToolSpec]) -> list[dict[str, Any]]:
    """Tool definitions (``name``, ``description``, ``input_schema``)."""
    return [{"name": t.name, "description": t.description, "input_schema": t.parameters} for t in tools]


def convert_tool_choice(choice: str) -> dict[str, str]:
    """``auto`` → auto, ``required`` (or ``any``) → any, ``none`` → none; any other
    value forces the tool of that name."""
    if choice in ("auto", "none", "any"):
        return {"type": choice}
    if choice == "required":
        return {"type": "any"}
    return {"type": "tool", "name": choice}


def _mark_last_message(messages: list[dict[str, Any]], marker: dict[str, str]) -> None:
    # Copies what it marks: the items may be shared with earlier requests.
    if not messages:
        return
    content = messages[-1]["content"]
    for i in range(len(content) - 1, -1, -1):
        block = content[i]
        if block["type"] not in ("thinking", "redacted_thinking"):
            content = list(content)
            content[i] = {**block, "cache_control": marker}
            messages[-1] = {**messages[-1], "content": content}
            return


def _thinking_settings(
    info: ModelInfo, level: str, max_tokens: int | None
) -> tuple[dict[str, Any] | None, str | None, int]:
    """``(thinking param, adaptive effort, max_tokens)`` for ``level``."""
    base = output_limit(info, max_tokens)
    if level == "off" or not info.thinking:
        return None, None, base
    if info.thinking_style == "adaptive":
        clamped, value = clamp_thinking(info, level)
        if clamped == "off":
            return None, None, base
        return {"type": "adaptive"}, None if value is None else str(value), base
    budget, limit = thinking_budget_tokens(info, level, max_tokens)
    if budget < _MIN_THINKING_BUDGET:
        return None, None, base
    return {"type": "enabled", "budget_tokens": budget}, None, limit


def build_request(
    info: ModelInfo,
    request: Request,
    options: StreamOptions,
    *,
    cache_retention: CacheRetention = "short",
    cache_last_message: bool = True,
    structured_output: StructuredOutput = "json_schema",
    stream: bool = True,
    images: bool = True,
    converted: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The JSON body of one request for ``info``'s model.

    ``context.messages`` must already be prepared for the model (see
    :func:`ketch.llm._handoff.prepare_messages`). ``converted``, when given, is the
    ``messages`` array already converted (a list of its own; its items are not
    changed), and ``context.messages`` is not read. ``options.extra`` is not applied
    here (:class:`~ketch.llm._providers.base.HTTPModel` merges it into the body).
    """
    marker = cache_control(cache_retention)
    messages = convert_messages(request.messages, images=images) if converted is None else converted
    if messages and messages[0]["role"] == "assistant":
        messages.insert(0, {"role": "user", "content": [{"type": "text", "text": LEADING_USER_TEXT}]})
    specs, hosted = hosted_tools(request, options, info.provider, API, HOSTED_TOOLS)
    tools = convert_tools(specs) + hosted
    choice = options.tool_choice if tools else None
    fmt = options.response_format
    format_tool: str | None = None
    output_config: dict[str, Any] = {}
    if fmt is not None:
        schema = fmt.get("schema", fmt)
        if structured_output == "tool":
            format_tool = str(fmt.get("name") or "response")
            tool: dict[str, Any] = {"name": format_tool}
            tool["description"] = str(fmt.get("description") or "Respond with JSON matching this schema.")
            tool["input_schema"] = schema
            tools.append(tool)
            choice = format_tool
        else:
            output_config["format"] = {"type": "json_schema", "schema": schema}

    forced = choice is not None and choice not in ("auto", "none")
    thinking, effort, max_tokens = _thinking_settings(info, "off" if forced else options.thinking, options.max_tokens)
    if effort is not None:
        output_config["effort"] = effort

    body: dict[str, Any] = {"model": info.id, "max_tokens": max_tokens, "stream": stream}
    if request.system_blocks is not None and request.system_prompt:
        blocks = [b for b in request.system_blocks if b.text]
        marked = any(b.cache for b in blocks)
        body["system"] = [
            {"type": "text", "text": b.text, "cache_control": dict(marker)}
            if marker is not None and (b.cache or (not marked and i == len(blocks) - 1))
            else {"type": "text", "text": b.text}
            for i, b in enumerate(blocks)
        ]
    elif request.system_prompt:
        system: dict[str, Any] = {"type": "text", "text": request.system_prompt}
        if marker is not None:
            system["cache_control"] = dict(marker)
        body["system"] = [system]
    elif tools and marker is not None:
        tools[-1]["cache_control"] = dict(marker)
    if marker is not None and cache_last_message:
        _mark_last_message(messages, marker)
    body["messages"] = messages
    if tools:
        body["tools"] = tools
        if choice is not None:
            body["tool_choice"] = convert_tool_choice(choice)
    if thinking is not None:
        body["thinking"] = thinking
    elif options.temperature is not None:
        body["temperature"] = options.temperature
    if options.stop_sequences:
        body["stop_sequences"] = list(options.stop_sequences)
    if output_config:
        body["output_config"] = output_config
    return body


# -- stop reasons and errors ----------------------------------------------------------

_STOP_REASONS: dict[str, StopReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop_sequence",
    "pause_turn": "pause",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_use",
}


def map_stop_reason(reason: str | None) -> StopReason:
    """The ketch stop reason for Anthropic's ``stop_reason``.

    ``refusal`` (and ``sensitive``) raise :class:`ContentFilterError`; an unknown
    reason counts as ``stop``.
    """
    if reason in ("refusal", "sensitive"):
        raise ContentFilterError(f"The model declined to respond (stop reason: {reason})")
    return _STOP_REASONS.get(reason or "", "stop")


# Anthropic error types the shared classifier does not know, and what they mean.
_CODE_KINDS: dict[str, str] = {
    "billing_error": "auth",
    "timeout_error": "timeout",
    "invalid_request_error": "invalid_request",
    "not_found_error": "invalid_request",
}


def refine_error(error: ModelError, code: str) -> ModelError:
    """``error`` corrected for Anthropic's error ``type``: ``billing_error`` is an
    account problem (auth, not retried), ``timeout_error`` a (retryable) timeout,
    ``invalid_request_error`` and ``not_found_error`` invalid requests. A recognised
    context overflow stays one."""
    kind = _CODE_KINDS.get(code)
    if kind is None or error.kind == kind or error.kind == "context_overflow":
        return error
    return error_for_kind(kind)(error.message, status=error.status, retry_after=error.retry_after, body=error.body)


# -- responses --------------------------------------------------------------------------
# gc=False: decoded trees of plain values cannot form cycles, so the collector skips them.


class _Usage(msgspec.Struct, gc=False):
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    cache_read_input_tokens: int | None = None


# Optional strings accept null: servers that speak this API are not all strict.
class _Block(msgspec.Struct, gc=False):
    type: str | None = None
    text: str | None = None
    thinking: str | None = None
    signature: str | None = None
    data: str | None = None
    id: str | None = None
    name: str | None = None
    input: Any = None


class _Delta(msgspec.Struct, gc=False):
    type: str | None = None
    text: str | None = None
    thinking: str | None = None
    signature: str | None = None
    partial_json: str | None = None
    stop_reason: str | None = None


class _Message(msgspec.Struct, gc=False):
    id: str | None = None
    content: list[_Block] | None = None
    stop_reason: str | None = None
    usage: _Usage | None = None


class _Event(msgspec.Struct, gc=False):
    type: str | None = None
    index: int = 0
    message: _Message | None = None
    content_block: _Block | None = None
    delta: _Delta | None = None
    usage: _Usage | None = None
    error: Any = None


_event_decoder = msgspec.json.Decoder(_Event)
_message_decoder = msgspec.json.Decoder(_Message)

# What an Anthropic content block becomes: text, thinking, a tool call, or the text of
# the structured-output tool's call.
_TEXT, _THINKING, _TOOL, _FORMAT, _HOSTED = 0, 1, 2, 3, 4


def _set_usage(builder: MessageBuilder, usage: _Usage | None) -> None:
    if usage is None:
        return
    builder.set_usage(
        input=usage.input_tokens,
        output=usage.output_tokens,
        cache_read=usage.cache_read_input_tokens,
        cache_write=usage.cache_creation_input_tokens,
    )


class _Slot:
    """An open Anthropic content block: what it became, where, and its start input."""

    __slots__ = ("index", "initial", "kind", "streamed")

    def __init__(self, kind: int, index: int, initial: Any = None) -> None:
        self.kind = kind
        self.index = index
        self.initial = initial
        self.streamed = False


class AnthropicStreamState:
    """Turns Messages API stream events into stream events on a :class:`MessageBuilder`.

    :meth:`feed` takes one SSE ``data`` payload and returns the stream events it
    produces; ``message_stop`` ends them with a :class:`~ketch.llm._stream.StreamDone`.
    An ``error`` event or a ``refusal`` raises the classified :class:`ModelError`.
    ``format_tool`` names the tool whose call is structured output, reported as text.
    """

    __slots__ = ("_blocks", "_builder", "_format_tool", "_stop_reason")

    def __init__(self, builder: MessageBuilder, format_tool: str | None = None) -> None:
        self._builder = builder
        self._format_tool = format_tool
        self._blocks: dict[int, _Slot] = {}  # Anthropic index -> open block
        self._stop_reason: str | None = None

    def feed(self, data: bytes) -> list[StreamEvent]:
        """Handle one event payload; return the stream events it yields."""
        event = _event_decoder.decode(data)
        kind = event.type
        b = self._builder
        if kind == "content_block_delta":
            delta = event.delta
            slot = self._blocks.get(event.index)
            if delta is None or slot is None:
                return []
            what, index, dtype = slot.kind, slot.index, delta.type
            if dtype == "text_delta" and what == _TEXT:
                return [b.text_delta(delta.text or "", index)]
            if dtype == "thinking_delta" and what == _THINKING:
                return [b.thinking_delta(delta.thinking or "", index)]
            if dtype == "input_json_delta" and delta.partial_json:
                if what == _HOSTED:
                    slot.streamed = True
                    slot.initial.append(delta.partial_json)
                    return []
                if what == _TOOL:
                    slot.streamed = True
                    return [b.tool_call_delta(delta.partial_json, index)]
                if what == _FORMAT:
                    slot.streamed = True
                    return [b.text_delta(delta.partial_json, index)]
            elif dtype == "signature_delta" and what == _THINKING and delta.signature:
                b.thinking_signature(index, delta.signature)
            return []
        if kind == "content_block_start":
            block = event.content_block
            if block is not None and block.type in _RESULT_KINDS:
                raw = msgspec.json.decode(data)["content_block"]  # kept whole: sent back verbatim
                return [b.hosted(hosted_result(raw))]
            return self._start(event.index, block)
        if kind == "content_block_stop":
            return self._stop(event.index)
        if kind == "message_start":
            message = event.message
            if message is not None:
                if message.id:
                    b.message.response_id = message.id
                _set_usage(b, message.usage)
            return []
        if kind == "message_delta":
            if event.delta is not None and event.delta.stop_reason is not None:
                self._stop_reason = event.delta.stop_reason
            _set_usage(b, event.usage)
            return []
        if kind == "message_stop":
            return [b.done(_final_reason(self._stop_reason, self._format_tool, b))]
        if kind == "error":
            raise _stream_error(event.error)
        return []

    def _start(self, position: int, block: _Block | None) -> list[StreamEvent]:
        if block is None:
            return []
        b = self._builder
        btype = block.type
        if btype == "text":
            start = b.text_start()
            self._blocks[position] = _Slot(_TEXT, start.index)
            if block.text:
                return [start, b.text_delta(block.text, start.index)]
            return [start]
        if btype == "thinking":
            thinking = b.thinking_start(signature=block.signature or None)
            self._blocks[position] = _Slot(_THINKING, thinking.index)
            if block.thinking:
                return [thinking, b.thinking_delta(block.thinking, thinking.index)]
            return [thinking]
        if btype == "redacted_thinking":
            redacted = b.thinking_start(redacted=True, signature=block.data or None)
            self._blocks[position] = _Slot(_THINKING, redacted.index)
            return [redacted]
        if btype == "server_tool_use":
            self._blocks[position] = _Slot(_HOSTED, -1, [block.id or "", block.name or "", block.input])
            return []
        if btype == "tool_use":
            if self._format_tool is not None and block.name == self._format_tool:
                text = b.text_start()
                self._blocks[position] = _Slot(_FORMAT, text.index, block.input)
                return [text]
            call = b.tool_call_start(block.id or "", block.name or "")
            self._blocks[position] = _Slot(_TOOL, call.index, block.input)
            return [call]
        return []

    def _stop(self, position: int) -> list[StreamEvent]:
        slot = self._blocks.pop(position, None)
        if slot is None:
            return []
        b = self._builder
        what, index = slot.kind, slot.index
        if what == _HOSTED:
            id, name, given = slot.initial[:3]
            arguments = parse_tool_arguments("".join(slot.initial[3:]))[0] if slot.streamed else given
            return [b.hosted(hosted_call(id, name, arguments if isinstance(arguments, dict) else {}))]
        if what == _TEXT:
            return [b.text_end(index)]
        if what == _THINKING:
            return [b.thinking_end(index)]
        given = slot.initial if not slot.streamed and isinstance(slot.initial, dict) and slot.initial else None
        if what == _TOOL:
            return [b.tool_call_end(index, args=given)]
        if given is not None:
            return [b.text_delta(msgspec.json.encode(given).decode(), index), b.text_end(index)]
        return [b.text_end(index)]


def _final_reason(reason: str | None, format_tool: str | None, builder: MessageBuilder) -> StopReason:
    mapped = map_stop_reason(reason)
    if mapped == "tool_use" and format_tool is not None and not builder.message.tool_calls:
        return "stop"
    return mapped


def _stream_error(error: Any) -> ModelError:
    obj = {"error": error} if isinstance(error, dict) else {"error": {"message": str(error or "")}}
    code = error_details(obj)[1]
    return refine_error(classify_error_object(obj, default_kind="server"), code)


def parse_response(body: bytes, builder: MessageBuilder, format_tool: str | None = None) -> list[StreamEvent]:
    """The stream events for a complete (non-streaming) Message body.

    Raises :class:`ContentFilterError` for a refusal.
    """
    message = _message_decoder.decode(body)
    b = builder
    if message.id:
        b.message.response_id = message.id
    _set_usage(b, message.usage)
    events: list[StreamEvent] = []
    raw_blocks: list[dict[str, Any]] | None = None
    for position, block in enumerate(message.content or ()):
        btype = block.type
        if btype == "text" or (btype == "tool_use" and format_tool is not None and block.name == format_tool):
            text = (block.text or "") if btype == "text" else msgspec.json.encode(block.input or {}).decode()
            start = b.text_start()
            events.append(start)
            if text:
                events.append(b.text_delta(text, start.index))
            events.append(b.text_end(start.index))
        elif btype == "thinking" or btype == "redacted_thinking":
            redacted = btype == "redacted_thinking"
            signature = block.data if redacted else block.signature
            thinking = b.thinking_start(redacted=redacted, signature=signature or None)
            events.append(thinking)
            if block.thinking:
                events.append(b.thinking_delta(block.thinking, thinking.index))
            events.append(b.thinking_end(thinking.index))
        elif btype == "server_tool_use":
            events.append(b.hosted(hosted_call(block.id or "", block.name or "", block.input or {})))
        elif btype in _RESULT_KINDS:
            raws = raw_blocks if raw_blocks is not None else msgspec.json.decode(body)["content"]
            raw_blocks = raws
            events.append(b.hosted(hosted_result(raws[position])))
        elif btype == "tool_use":
            call = b.tool_call_start(block.id or "", block.name or "")
            events.append(call)
            arguments = block.input if isinstance(block.input, dict) else {}
            events.append(b.tool_call_end(call.index, args=arguments))
    events.append(b.done(_final_reason(message.stop_reason, format_tool, b)))
    return events


# -- the model --------------------------------------------------------------------------


class AnthropicRequest(HTTPRequest, kw_only=True):
    """An :class:`HTTPRequest` that remembers the structured-output tool, if any."""

    format_tool: str | None = None


class _Options(StreamOptions, kw_only=True):
    """Options with the adapter's own ``extra`` keys taken out."""

    cache: dict[str, Any] = msgspec.field(default_factory=dict)


class AnthropicModel(HTTPModel):
    """A Claude model served through the Anthropic Messages API.

    The key comes from ``api_key``, then ``StreamOptions.api_key``, then
    ``ANTHROPIC_API_KEY``; it is sent as ``x-api-key`` and never shown. Without
    ``info`` the registry's entry for ``provider``/``id`` is used when there is one
    (pricing, output limit, thinking style, context window). ``cache_retention`` and
    ``cache_last_message`` set prompt caching (see the module documentation);
    ``structured_output`` how ``response_format`` is sent (default: the model's
    ``compat["structured_output"]``, else ``json_schema``); ``beta`` lists
    ``anthropic-beta`` flags to send. ``stream=False`` asks for one JSON response
    instead of server-sent events. The other arguments are those of
    :class:`~ketch.llm._providers.base.HTTPModel`.
    """

    api = API
    hosted_kinds = frozenset(HOSTED_TOOLS)

    def __init__(
        self,
        id: str,
        *,
        provider: str = "anthropic",
        cache_retention: CacheRetention = "short",
        cache_last_message: bool = True,
        structured_output: StructuredOutput | None = None,
        beta: tuple[str, ...] = (),
        stream: bool = True,
        **options: Unpack[HTTPOptions],
    ) -> None:
        super().__init__(id, provider=provider, **options)
        self.cache_retention: CacheRetention = cache_retention
        self.cache_last_message = cache_last_message
        mode = structured_output or self.info.compat.get("structured_output")
        self.structured_output: StructuredOutput = "tool" if mode == "tool" else "json_schema"
        self.beta = beta
        self.streaming = stream

    def stream(self, request: Request, options: StreamOptions | None = None) -> AsyncIterator[StreamEvent]:
        """Stream one assistant response (never raises for request or runtime failures)."""
        extra = options.extra if options is not None else None
        if options is not None and extra and not _OPTION_KEYS.isdisjoint(extra):
            fields = {name: getattr(options, name) for name in options.__struct_fields__}
            fields["extra"] = {k: v for k, v in extra.items() if k not in _OPTION_KEYS} or None
            cache = {k: v for k, v in extra.items() if k in _OPTION_KEYS}
            if type(options) is _Options:
                cache = {**options.cache, **cache}
                del fields["cache"]
            options = _Options(**fields, cache=cache)
        return super().stream(request, options)

    def build_request(self, request: Request, options: StreamOptions, api_key: str | None) -> HTTPRequest:
        """``POST {base_url}/messages`` with the prepared transcript."""
        converted, images = self._wire_items(
            request.messages, lambda messages, images: convert_messages(messages, images=images), normalize_tool_call_id
        )
        request = Request(
            system_prompt=request.system_prompt, messages=[], tools=request.tools, system_blocks=request.system_blocks
        )
        cache = options.cache if type(options) is _Options else {}
        retention = cache.get("cache_retention", self.cache_retention)
        body = build_request(
            self.info,
            request,
            options,
            cache_retention=retention if retention in _CACHE_RETENTIONS else self.cache_retention,
            cache_last_message=bool(cache.get("cache_last_message", self.cache_last_message)),
            structured_output=self.structured_output,
            stream=self.streaming,
            images=images,
            converted=converted,
        )
        headers = {"anthropic-version": ANTHROPIC_VERSION}
        if api_key:
            headers["x-api-key"] = api_key
        betas = list(self.beta)
        thinking = body.get("thinking")
        if (
            isinstance(thinking, dict)
            and thinking.get("type") == "enabled"
            and "tools" in body
            and not self.id.startswith("claude-3")
            and _INTERLEAVED_BETA not in betas
        ):
            betas.append(_INTERLEAVED_BETA)
        for tool in body.get("tools", ()):
            beta = _HOSTED_BETAS.get(tool.get("type", ""))
            if beta is not None and beta not in betas:
                betas.append(beta)
        if betas:
            headers["anthropic-beta"] = ",".join(betas)
        format_tool = None
        if self.structured_output == "tool" and options.response_format is not None:
            format_tool = str(options.response_format.get("name") or "response")
        return AnthropicRequest(
            url=f"{self.base_url}/messages",
            body=body,
            headers=headers,
            stream=self.streaming,
            format_tool=format_tool,
        )

    def parse_stream(
        self, events: SSEEvents, builder: MessageBuilder, request: HTTPRequest
    ) -> AsyncIterator[StreamEvent]:
        """Stream events from the Messages API's server-sent events."""
        return feed_events(events, AnthropicStreamState(builder, _format_tool(request)).feed)

    def parse_response(self, data: bytes, builder: MessageBuilder, request: HTTPRequest) -> Iterator[StreamEvent]:
        """Stream events for a complete Message object."""
        return iter(parse_response(data, builder, _format_tool(request)))

    def classify(self, status: int, body: bytes, headers: Mapping[str, str]) -> ModelError:
        """Shared classification corrected for Anthropic's error types (see
        :func:`refine_error`)."""
        return refine_error(super().classify(status, body, headers), error_details(body)[1])


def _format_tool(request: HTTPRequest) -> str | None:
    return request.format_tool if isinstance(request, AnthropicRequest) else None
