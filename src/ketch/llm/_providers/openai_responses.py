"""The OpenAI Responses API (``POST /v1/responses``), stateless.

Every request carries the whole transcript with ``store: false``; nothing depends on
``previous_response_id``. Reasoning is replayed from its encrypted content, which is
requested with ``include: ["reasoning.encrypted_content"]`` for reasoning models.

Where the provider's identifiers live in ketch messages:

- a ``reasoning`` output item becomes a :class:`ThinkingContent` whose ``thinking`` is
  the summary parts joined by a blank line and whose ``signature`` is the JSON object
  ``{"id": "rs_…", "encrypted_content": "…"}``; it is replayed as a reasoning item with
  that id, that encrypted content and the thinking text as its single summary part;
- a ``message`` output item becomes a :class:`TextContent` whose ``signature`` is
  ``{"id": "msg_…"}`` (plus ``"phase"`` when the model labelled it), replayed as an
  output message with that id;
- a ``function_call`` item becomes a :class:`ToolCall` whose ``id`` is the item's
  ``call_id`` (what tool results answer) and whose ``signature`` is the item id
  (``fc_…``), replayed as the function call item's ``id``.

Text without such a signature is replayed as ``{"type": "message", "role": "assistant",
"content": text}`` (the type is optional for OpenAI; llama-server needs it). Streamed
events find their item by ``item_id``, then ``output_index``, then by order, so servers
that omit either still work.

Hosted tools (``StreamOptions.hosted_tools``, :data:`HOSTED_TOOLS`): web search, file
search, code execution (``code_interpreter``) and remote MCP (``mcp``, with
``require_approval: "never"`` unless the options say otherwise). Their output items
(``web_search_call``, ``file_search_call``, ``code_interpreter_call``, ``mcp_call``,
``mcp_list_tools``) become a :class:`HostedToolCall` keeping the item as ``native``
(replayed verbatim as an input item) and a :class:`HostedToolResult` summarising it;
``url_citation`` annotations of the answer's text join the latest web search result's
citations.

Messages are first passed through :func:`~ketch.llm._handoff.prepare_messages`, so
another model's thinking and signatures never reach this one. Blocks whose signature
is still not in these forms are replayed without provider ids; thinking without a
reasoning signature, and a reasoning item that no output follows in its message (a
response cut short while reasoning), are not replayed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any
from typing import Unpack

import msgspec

from .._classify import classify_error_object
from .._errors import ContentFilterError
from .._errors import ModelError
from .._errors import OverloadedError
from .._errors import error_for_kind
from .._handoff import openai_responses_tool_id
from .._messages import AssistantMessage
from .._messages import AudioContent
from .._messages import Citation
from .._messages import DocumentContent
from .._messages import HostedToolCall
from .._messages import HostedToolResult
from .._messages import ImageContent
from .._messages import Message
from .._messages import TextContent
from .._messages import ThinkingContent
from .._messages import ToolCall
from .._messages import ToolResultMessage
from .._messages import UserMessage
from .._model import TOOL_CHOICE_MODES
from .._model import HostedTool
from .._model import Request
from .._model import StreamOptions
from .._model import ToolSpec
from .._registry import clamp_thinking
from .._stream import MessageBuilder
from .._stream import StreamDone
from .._stream import StreamEvent
from .._stream import TextStart
from .._stream import ThinkingStart
from .._stream import ToolCallStart
from .base import HTTPModel
from .base import HTTPOptions
from .base import HTTPRequest
from .base import SSEEvents
from .base import content_parts
from .base import document_name
from .base import feed_events
from .base import hosted_tools
from .base import image_url

API = "openai-responses"
"""The ``api`` name of models served through the Responses API."""

_SUMMARY_SEPARATOR = "\n\n"
_encode = msgspec.json.encode


# -- signatures -------------------------------------------------------------------------


def reasoning_signature(item_id: str, encrypted_content: str | None) -> str:
    """The :attr:`ThinkingContent.signature` kept for a reasoning item."""
    data: dict[str, str] = {"id": item_id}
    if encrypted_content is not None:
        data["encrypted_content"] = encrypted_content
    return _encode(data).decode()


def text_signature(item_id: str, phase: str | None = None) -> str:
    """The :attr:`TextContent.signature` kept for an output message item."""
    data: dict[str, str] = {"id": item_id}
    if phase:
        data["phase"] = phase
    return _encode(data).decode()


def _signature_object(signature: str | None, prefix: str) -> dict[str, Any] | None:
    if not signature or not signature.startswith("{"):
        return None
    try:
        data = msgspec.json.decode(signature)
    except msgspec.DecodeError:
        return None
    if not isinstance(data, dict):
        return None
    item_id = data.get("id")
    if not isinstance(item_id, str) or not item_id.startswith(prefix):
        return None
    return data


# -- request ----------------------------------------------------------------------------




def _input_image(image: ImageContent) -> dict[str, Any]:
    return {"type": "input_image", "image_url": image_url(image), "detail": "auto"}


def _input_file(document: DocumentContent) -> dict[str, Any]:
    return {
        "type": "input_file",
        "filename": document_name(document),
        "file_data": f"data:{document.mime_type};base64,{document.data}",
    }


def _input_parts(
    blocks: Sequence[TextContent | ImageContent | DocumentContent | AudioContent], images: bool
) -> list[dict[str, Any]]:
    # The Responses API takes no audio input (OpenAI sends recordings through Chat Completions).
    return content_parts(blocks, images, "input_text", _input_image, _input_file, where="the OpenAI Responses API")


def _assistant_items(message: AssistantMessage, out: list[dict[str, Any]]) -> None:
    # A reasoning item must be followed by the output it led to; one that ended the
    # response (cut short by the output limit) is not replayed.
    last_output = -1
    for i, block in enumerate(message.content):
        if type(block) is ToolCall or (type(block) is TextContent and block.text):
            last_output = i
    for i, block in enumerate(message.content):
        if type(block) is TextContent:
            if not block.text:
                continue
            ids = _signature_object(block.signature, "msg_")
            if ids is None:
                # "type" is optional for OpenAI but servers such as llama-server need it.
                out.append({"type": "message", "role": "assistant", "content": block.text})
                continue
            item: dict[str, Any] = {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": block.text, "annotations": []}],
                "status": "completed",
                "id": ids["id"],
            }
            phase = ids.get("phase")
            if isinstance(phase, str):
                item["phase"] = phase
            out.append(item)
        elif type(block) is ThinkingContent:
            ids = _signature_object(block.signature, "rs_")
            if ids is None or i > last_output:
                continue
            reasoning: dict[str, Any] = {
                "type": "reasoning",
                "id": ids["id"],
                "summary": [{"type": "summary_text", "text": block.thinking}] if block.thinking else [],
            }
            encrypted = ids.get("encrypted_content")
            if isinstance(encrypted, str):
                reasoning["encrypted_content"] = encrypted
            out.append(reasoning)
        elif type(block) is ToolCall:
            arguments = block.raw_arguments if block.raw_arguments is not None else _encode(block.args).decode()
            call: dict[str, Any] = {
                "type": "function_call",
                "call_id": block.id,
                "name": block.name,
                "arguments": arguments,
            }
            if block.signature and block.signature.startswith("fc_"):
                call["id"] = block.signature
            out.append(call)
        elif type(block) is HostedToolCall:
            if isinstance(block.native, dict):
                out.append(block.native)


def _tool_output(message: ToolResultMessage, images: bool) -> str | list[dict[str, Any]]:
    if all(type(b) is TextContent for b in message.content):
        return "".join(b.text for b in message.content if type(b) is TextContent)
    return _input_parts(message.content, images)


def convert_messages(messages: list[Message], *, images: bool = True) -> list[dict[str, Any]]:
    """The ``input`` items for a transcript. Messages of other kinds are skipped.

    The messages are converted as they are: cross-model clean-up is
    :func:`ketch.llm._handoff.prepare_messages`'s job. With ``images`` false, images
    become the text :data:`~ketch.llm._providers.base.IMAGE_OMITTED`.
    """
    out: list[dict[str, Any]] = []
    for message in messages:
        kind = type(message)
        if kind is UserMessage:
            assert isinstance(message, UserMessage)
            content = message.content
            if isinstance(content, list):
                parts = _input_parts(content, images)
            else:
                parts = [{"type": "input_text", "text": content}]
            if parts:
                out.append({"role": "user", "content": parts})
        elif kind is AssistantMessage:
            assert isinstance(message, AssistantMessage)
            _assistant_items(message, out)
        elif kind is ToolResultMessage:
            assert isinstance(message, ToolResultMessage)
            out.append(
                {
                    "type": "function_call_output",
                    "call_id": message.tool_call_id,
                    "output": _tool_output(message, images),
                }
            )
    return out


def convert_tools(tools: list[ToolSpec]) -> list[dict[str, Any]]:
    """Function tools. ``strict`` is sent as false: ketch schemas are not strict-mode schemas."""
    return [
        {
            "type": "function",
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
            "strict": False,
        }
        for tool in tools
    ]


def convert_tool_choice(choice: str) -> str | dict[str, str]:
    """``auto``/``none``/``required`` as they are; any other value forces that tool."""
    if choice in TOOL_CHOICE_MODES:
        return choice
    return {"type": "function", "name": choice}


def build_request(
    model_id: str,
    request: Request,
    options: StreamOptions,
    *,
    effort: str | None = None,
    reasoning: bool = False,
    stream: bool = True,
    images: bool = True,
    prompt_cache: bool = True,
    converted: list[dict[str, Any]] | None = None,
    provider: str = "openai",
) -> dict[str, Any]:
    """The JSON body of one request for ``request`` (its messages already prepared).

    ``effort`` is the provider's reasoning effort (already clamped for the model), or
    None to send none. ``reasoning`` says the model reasons, so its encrypted reasoning
    is requested for replay. ``images`` false replaces images with a note;
    ``prompt_cache`` false never sends ``prompt_cache_key``. ``converted``, when given,
    is the ``input`` array already converted, and ``context.messages`` is not read. A ``response_format``
    without ``strict`` is sent as strict. (``options.extra`` is merged in by
    :class:`~ketch.llm._providers.base.HTTPModel`.)
    """
    body: dict[str, Any] = {"model": model_id}
    if request.system_prompt:
        body["instructions"] = request.system_prompt
    body["input"] = convert_messages(request.messages, images=images) if converted is None else converted
    body["store"] = False
    body["stream"] = stream
    specs, hosted = hosted_tools(request, options, provider, API, HOSTED_TOOLS)
    if specs or hosted:
        body["tools"] = convert_tools(specs) + hosted
        if options.tool_choice is not None:
            body["tool_choice"] = convert_tool_choice(options.tool_choice)
    if options.max_tokens is not None:
        body["max_output_tokens"] = options.max_tokens
    if options.temperature is not None:
        body["temperature"] = options.temperature
    if effort is not None:
        body["reasoning"] = {"effort": effort, "summary": "auto"} if effort != "none" else {"effort": effort}
    if reasoning:
        body["include"] = ["reasoning.encrypted_content"]
    fmt = options.response_format
    if fmt is not None:
        text_format: dict[str, Any] = {
            "type": "json_schema",
            "name": fmt.get("name", "response"),
            "schema": fmt.get("schema", fmt),
            "strict": bool(fmt.get("strict", True)),
        }
        if fmt.get("description"):
            text_format["description"] = fmt["description"]
        body["text"] = {"format": text_format}
    cache_key = options.cache_key or options.session_id
    if cache_key and prompt_cache:
        body["prompt_cache_key"] = cache_key
    return body


# -- errors ---------------------------------------------------------------------------

# Codes the shared classifier does not know; the rest go through classify_error_object.
_CODE_KINDS: dict[str, str] = {
    "insufficient_quota": "auth",
    "server_is_overloaded": "overloaded",
    "slow_down": "overloaded",
    "invalid_prompt": "invalid_request",
    "bio_policy": "content_filter",
    "vector_store_timeout": "timeout",
}
_INVALID_INPUT_PREFIXES = (
    "invalid_image",
    "invalid_base64_image",
    "image_",
    "unsupported_image",
    "empty_image",
    "failed_to_download_image",
)


def classify_failure(code: str | int | None, message: str | None) -> ModelError:
    """The classified error of a ``response.failed`` response or an ``error`` event.

    A numeric code is read as an HTTP status. Without a code the failure counts as a
    (retryable) server error; an unrecognised code counts as an invalid request.
    """
    text = message or (f"The response failed ({code})" if code else "The response failed")
    if isinstance(code, int):
        return classify_error_object({"code": code, "message": text})
    kind = _CODE_KINDS.get(code) if code else None
    if kind is None and code and code.startswith(_INVALID_INPUT_PREFIXES):
        kind = "invalid_request"
    if kind is not None:
        return error_for_kind(kind)(text)
    return classify_error_object(
        {"code": code, "message": text}, default_kind="invalid_request" if code else "server"
    )


# -- responses --------------------------------------------------------------------------


# Decoding targets: only the fields the adapter reads; everything else is skipped.
# Fields that compatible servers are known to send as null accept None.


# -- provider-hosted tools ------------------------------------------------------------

HOSTED_TOOLS: dict[str, Callable[[HostedTool], dict[str, Any]]] = {
    "web_search": lambda tool: {**tool.options, "type": "web_search"},
    "file_search": lambda tool: {**tool.options, "type": "file_search"},
    "code_execution": lambda tool: {"container": {"type": "auto"}, **tool.options, "type": "code_interpreter"},
    "mcp": lambda tool: {"require_approval": "never", **tool.options, "type": "mcp"},
}
"""The hosted tools the Responses API runs, by kind: their tool definitions."""

_HOSTED_ITEMS = {
    "web_search_call": "web_search",
    "file_search_call": "file_search",
    "code_interpreter_call": "code_execution",
    "mcp_call": "mcp",
    "mcp_list_tools": "mcp",
}
_SUMMARY_LIMIT = 4000


def _clip(text: str) -> str:
    return text if len(text) <= _SUMMARY_LIMIT else text[:_SUMMARY_LIMIT] + "…"


def hosted_blocks(item: dict[str, Any]) -> list[HostedToolCall | HostedToolResult]:
    """A hosted tool's output item as a :class:`HostedToolCall` (the item kept as
    ``native``) and, unless it only lists tools, a :class:`HostedToolResult`."""
    itype = str(item.get("type", ""))
    kind = _HOSTED_ITEMS[itype]
    id = str(item.get("id", ""))
    inputs: dict[str, Any] = {}
    lines: list[str] = []
    citations: list[Citation] = []
    error = item.get("status") == "failed"
    if itype == "web_search_call":
        action = item.get("action")
        if isinstance(action, dict):
            inputs = {k: v for k, v in action.items() if k != "sources"}
            if isinstance(action.get("query"), str):
                lines.append(f"searched: {action['query']}")
            for source in action.get("sources") or ():
                if isinstance(source, dict) and isinstance(source.get("url"), str):
                    citations.append(Citation(url=source["url"]))
    elif itype == "file_search_call":
        inputs = {"queries": item.get("queries") or []}
        for found in item.get("results") or ():
            if isinstance(found, dict):
                lines.append(f"{found.get('filename') or found.get('file_id')}: {found.get('text') or ''}")
    elif itype == "code_interpreter_call":
        inputs = {"code": item.get("code") or ""}
        for output in item.get("outputs") or ():
            if isinstance(output, dict) and isinstance(output.get("logs"), str):
                lines.append(output["logs"])
            elif isinstance(output, dict) and isinstance(output.get("url"), str):
                lines.append(f"image: {output['url']}")
    elif itype == "mcp_call":
        inputs = {"server_label": item.get("server_label"), "name": item.get("name"), "arguments": item.get("arguments")}
        if item.get("error"):
            error = True
            lines.append(f"error: {item['error']}")
        elif isinstance(item.get("output"), str):
            lines.append(item["output"])
    else:  # mcp_list_tools
        inputs = {"server_label": item.get("server_label")}
    call = HostedToolCall(id=id, kind=kind, name=str(item.get("name") or itype), input=inputs, native=item)
    if itype == "mcp_list_tools":
        return [call]
    result = HostedToolResult(call_id=id, kind=kind, output=_clip("\n".join(lines)), citations=citations, is_error=error)
    return [call, result]


def _add_citations(builder: MessageBuilder, item: dict[str, Any]) -> None:
    """The ``url_citation`` annotations of a message item, added to the citations of the
    latest web search result of the message (when there is one)."""
    found: list[Citation] = []
    for part in item.get("content") or ():
        for note in (part.get("annotations") or ()) if isinstance(part, dict) else ():
            if isinstance(note, dict) and note.get("type") == "url_citation" and isinstance(note.get("url"), str):
                title = note.get("title") if isinstance(note.get("title"), str) else None
                found.append(Citation(url=note["url"], title=title))
    if not found:
        return
    for block in reversed(builder.message.content):
        if type(block) is HostedToolResult and block.kind == "web_search":
            known = {c.url for c in block.citations}
            for citation in found:
                if citation.url not in known:
                    known.add(citation.url)
                    block.citations.append(citation)
            return


class _Part(msgspec.Struct):
    type: str = ""
    text: str = ""
    refusal: str = ""


class _Item(msgspec.Struct):
    type: str = ""
    id: str = ""
    call_id: str = ""
    name: str = ""
    arguments: str | None = None
    encrypted_content: str | None = None
    summary: list[_Part] | None = None
    content: list[_Part] | None = None
    phase: str | None = None


class _ErrorBody(msgspec.Struct):
    code: str | int | None = None
    message: str | None = None


class _Incomplete(msgspec.Struct):
    reason: str | None = None


class _TokenDetails(msgspec.Struct):
    cached_tokens: int | None = None


class _Usage(msgspec.Struct):
    input_tokens: int = 0
    output_tokens: int = 0
    input_tokens_details: _TokenDetails | None = None


class _Response(msgspec.Struct):
    id: str = ""
    status: str | None = None
    error: _ErrorBody | None = None
    incomplete_details: _Incomplete | None = None
    usage: _Usage | None = None


class _FullResponse(_Response):
    output: list[_Item] = []


class _Event(msgspec.Struct):
    type: str = ""
    delta: str = ""
    output_index: int | None = None
    item_id: str | None = None
    summary_index: int = 0
    item: _Item | None = None
    response: _Response | None = None
    code: str | int | None = None
    message: str | None = None
    error: _ErrorBody | None = None


_event_decoder = msgspec.json.Decoder(_Event)
_response_decoder = msgspec.json.Decoder(_FullResponse)


def _set_usage(builder: MessageBuilder, usage: _Usage | None) -> None:
    if usage is None:
        return
    details = usage.input_tokens_details
    cached = (details.cached_tokens or 0) if details is not None else 0
    builder.set_usage(input=max(0, usage.input_tokens - cached), output=usage.output_tokens, cache_read=cached)


def _finish(builder: MessageBuilder, response: _Response, kind: str, limit: int | None = None) -> StreamDone:
    """The terminal event for ``response.completed``/``incomplete``/``failed``. A
    response that reports ``completed`` with as many output tokens as the request's
    ``max_output_tokens`` (``limit``) was cut there (llama.cpp's server says so): its
    stop reason is ``length``."""
    if response.id:
        builder.message.response_id = response.id
    _set_usage(builder, response.usage)
    if kind == "response.failed" or response.status == "failed":
        error = response.error
        raise classify_failure(error.code if error else None, error.message if error else None)
    if kind == "response.incomplete" or response.status == "incomplete":
        reason = response.incomplete_details.reason if response.incomplete_details else None
        if reason == "max_output_tokens":
            return builder.done("length")
        if reason == "content_filter":
            raise ContentFilterError("The response was stopped by the content filter")
        raise ModelError(f"The response is incomplete ({reason or 'no reason given'})")
    if limit is not None and response.usage is not None and response.usage.output_tokens >= limit:
        return builder.done("length")
    return builder.done()


# The block type each output item type streams into.
_BLOCK_OF_ITEM: dict[str, type] = {"message": TextContent, "reasoning": ThinkingContent, "function_call": ToolCall}


class ResponsesStreamState:
    """Turns decoded streaming events into stream events on a :class:`MessageBuilder`.

    :meth:`feed` takes one SSE ``data`` payload and returns the stream events it
    produces (often none or one); ``response.completed`` (and ``response.incomplete``
    for ``max_output_tokens``) ends them with a :class:`StreamDone`. Failures
    (``response.failed``, ``error``, other incomplete reasons) raise the classified
    :class:`ModelError`.

    An event finds its output item by the item's id (``item_id``), else by its
    ``output_index``, else (a server that sends neither) by order: a delta goes to the
    latest item still open, an ``output_item.done`` to the oldest open item of its type.
    Events that do not fit the item they name raise a classified
    :class:`~ketch.llm._errors.ServerError`, never an assertion.
    """

    __slots__ = ("_builder", "_by_id", "_by_output", "_limit", "_open", "_streamed")

    def __init__(self, builder: MessageBuilder, limit: int | None = None) -> None:
        self._builder = builder
        self._limit = limit  # the request's max_output_tokens
        # item id / output_index -> content index in the message
        self._by_id: dict[str, int] = {}
        self._by_output: dict[int, int] = {}
        # content indexes of the items added and not yet done, in the order they came
        self._open: list[int] = []
        # content indexes of tool calls whose arguments arrived as deltas
        self._streamed: set[int] = set()

    def _find(self, event: _Event, block: type) -> int | None:
        """The content index the delta ``event`` belongs to (a block of type ``block``)."""
        if event.item_id:
            index = self._by_id.get(event.item_id)
            if index is not None:
                return index
        if event.output_index is not None:
            index = self._by_output.get(event.output_index)
            if index is not None:
                return index
        if self._open:
            index = self._open[-1]
            if type(self._builder.message.content[index]) is block:
                return index
        return None

    def _register(self, event: _Event, item_id: str, index: int) -> None:
        if item_id:
            self._by_id[item_id] = index
        if event.output_index is not None:
            self._by_output[event.output_index] = index
        self._open.append(index)

    def _take(self, event: _Event, item: _Item) -> int | None:
        """The content index of the item ``event`` finishes, forgotten from then on."""
        index = self._by_id.get(item.id) if item.id else None
        if index is None and event.output_index is not None:
            index = self._by_output.get(event.output_index)
        if index is None:
            wanted = _BLOCK_OF_ITEM.get(item.type)
            content = self._builder.message.content
            index = next((i for i in self._open if type(content[i]) is wanted), None)
            if index is None:
                return None
        self._forget(event, item, index)
        return index

    def _forget(self, event: _Event, item: _Item, index: int) -> None:
        if item.id and self._by_id.get(item.id) == index:
            del self._by_id[item.id]
        if event.output_index is not None and self._by_output.get(event.output_index) == index:
            del self._by_output[event.output_index]
        if index in self._open:
            self._open.remove(index)

    def feed(self, data: bytes) -> list[StreamEvent]:
        """Handle one event payload; return the stream events it yields."""
        event = _event_decoder.decode(data)
        kind = event.type
        b = self._builder
        if kind == "response.output_text.delta" or kind == "response.refusal.delta":
            index = self._find(event, TextContent)
            if index is None:
                start = b.text_start()
                self._register(event, event.item_id or "", start.index)
                return [start, b.text_delta(event.delta, start.index)]
            return [b.text_delta(event.delta, index)]
        if kind == "response.function_call_arguments.delta":
            index = self._find(event, ToolCall)
            if index is None:
                return []
            self._streamed.add(index)
            return [b.tool_call_delta(event.delta, index)]
        if kind == "response.reasoning_summary_text.delta" or kind == "response.reasoning_text.delta":
            index = self._find(event, ThinkingContent)
            return [] if index is None else [b.thinking_delta(event.delta, index)]
        if kind == "response.reasoning_summary_part.added":
            index = self._find(event, ThinkingContent)
            if index is None or event.summary_index == 0:
                return []
            return [b.thinking_delta(_SUMMARY_SEPARATOR, index)]
        if kind == "response.output_item.added":
            return self._item_added(event)
        if kind == "response.output_item.done":
            item = event.item
            if item is not None and item.type in _HOSTED_ITEMS:
                raw = msgspec.json.decode(data)["item"]  # kept whole: replayed verbatim
                return [b.hosted(block) for block in hosted_blocks(raw)]
            if item is not None and item.type == "message" and b"url_citation" in data:
                _add_citations(b, msgspec.json.decode(data)["item"])
            return self._item_done(event)
        if kind == "response.created" or kind == "response.in_progress":
            if event.response is not None and event.response.id:
                b.message.response_id = event.response.id
            return []
        if kind in ("response.completed", "response.incomplete", "response.failed"):
            if event.response is None:
                raise error_for_kind("server")(f"{kind} without a response")
            return [_finish(b, event.response, kind, self._limit)]
        if kind == "error":
            code, message = event.code, event.message
            if event.error is not None:
                code = code or event.error.code
                message = message or event.error.message
            raise classify_failure(code, message)
        return []

    def _item_added(self, event: _Event) -> list[StreamEvent]:
        item = event.item
        if item is None:
            return []
        b = self._builder
        start: TextStart | ThinkingStart | ToolCallStart
        if item.type == "message":
            start = b.text_start()
        elif item.type == "reasoning":
            start = b.thinking_start()
        elif item.type == "function_call":
            start = b.tool_call_start(item.call_id, item.name, signature=item.id or None)
            self._register(event, item.id, start.index)
            if item.arguments:
                self._streamed.add(start.index)
                return [start, b.tool_call_delta(item.arguments, start.index)]
            return [start]
        else:
            return []
        self._register(event, item.id, start.index)
        return [start]

    def _item_done(self, event: _Event) -> list[StreamEvent]:
        item = event.item
        if item is None:
            return []
        index = self._take(event, item)
        if index is None:
            added = self._item_added(event)
            if not added:
                return []
            index = len(self._builder.message.content) - 1  # the block just started
            self._forget(event, item, index)
            out = added
        else:
            out = []
        b = self._builder
        block = b.message.content[index]
        if item.type == "message":
            if type(block) is TextContent and not block.text:
                text = _message_text(item)
                if text:
                    out.append(b.text_delta(text, index))
            out.append(b.text_end(index, signature=text_signature(item.id, item.phase) if item.id else None))
        elif item.type == "reasoning":
            if type(block) is ThinkingContent and not block.thinking:
                text = _SUMMARY_SEPARATOR.join(p.text for p in item.summary or () if p.text)
                if not text and item.content:
                    text = "".join(p.text for p in item.content)
                if text:
                    out.append(b.thinking_delta(text, index))
            signature = reasoning_signature(item.id, item.encrypted_content) if item.id else None
            out.append(b.thinking_end(index, signature=signature))
        elif item.type == "function_call":
            if item.arguments and index not in self._streamed:
                out.append(b.tool_call_delta(item.arguments, index))
            self._streamed.discard(index)
            out.append(b.tool_call_end(index))
        return out


def _message_text(item: _Item) -> str:
    if not item.content:
        return ""
    return "".join(p.text or p.refusal for p in item.content)


def parse_response(body: bytes, builder: MessageBuilder, limit: int | None = None) -> list[StreamEvent]:
    """The stream events for a complete (non-streaming) response body (``limit``: the
    request's ``max_output_tokens``).

    Raises the classified :class:`ModelError` for a failed response.
    """
    response = _response_decoder.decode(body)
    state = ResponsesStreamState(builder, limit)
    events: list[StreamEvent] = []
    raw: list[dict[str, Any]] | None = None
    for index, item in enumerate(response.output):
        if item.type in _HOSTED_ITEMS or (item.type == "message" and b"url_citation" in body):
            raw = raw if raw is not None else msgspec.json.decode(body)["output"]
            if item.type in _HOSTED_ITEMS:
                events.extend(builder.hosted(block) for block in hosted_blocks(raw[index]))
                continue
            _add_citations(builder, raw[index])
        events.extend(state._item_done(_Event(type="response.output_item.done", output_index=index, item=item)))
    events.append(_finish(builder, response, "response.completed", limit))
    return events


# -- the model --------------------------------------------------------------------------


class OpenAIResponsesModel(HTTPModel):
    """A model served through the OpenAI Responses API (or a compatible server).

    Requests are stateless (``store: false``). The key comes from ``api_key``, then
    ``StreamOptions.api_key``, then ``OPENAI_API_KEY``. ``stream=False`` asks for one
    JSON response instead of server-sent events. Without ``info`` the registry's entry
    for ``provider``/``id`` is used when there is one. Thinking levels become
    ``reasoning.effort`` through :func:`~ketch.llm._registry.clamp_thinking`; a model
    whose info lists no thinking levels is sent no reasoning options. The other
    arguments are those of :class:`~ketch.llm._providers.base.HTTPModel`.
    """

    api = API
    hosted_kinds = frozenset(HOSTED_TOOLS)

    def __init__(
        self,
        id: str,
        *,
        provider: str = "openai",
        stream: bool = True,
        **options: Unpack[HTTPOptions],
    ) -> None:
        super().__init__(id, provider=provider, **options)
        self.streaming = stream

    def reasoning_effort(self, options: StreamOptions) -> str | None:
        """The ``reasoning.effort`` sent for ``options.thinking`` (None: send none)."""
        _level, value = clamp_thinking(self.info, options.thinking)
        return None if value is None else str(value)

    def build_request(self, request: Request, options: StreamOptions, api_key: str | None) -> HTTPRequest:
        """``POST {base_url}/responses`` with the whole transcript."""
        converted, images = self._wire_items(
            request.messages, lambda messages, images: convert_messages(messages, images=images), openai_responses_tool_id
        )
        body = build_request(
            self.id,
            Request(system_prompt=request.system_prompt, messages=[], tools=request.tools),
            options,
            effort=self.reasoning_effort(options),
            reasoning=self.info.reasoning or bool(self.info.thinking),
            stream=self.streaming,
            images=images,
            prompt_cache=self.provider == "openai",
            converted=converted,
            provider=self.provider,
        )
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        return HTTPRequest(url=f"{self.base_url}/responses", body=body, headers=headers, stream=self.streaming)

    def parse_stream(
        self, events: SSEEvents, builder: MessageBuilder, request: HTTPRequest
    ) -> AsyncIterator[StreamEvent]:
        """Stream events from the Responses API's server-sent events."""
        return feed_events(events, ResponsesStreamState(builder, _limit(request)).feed)

    def parse_response(self, data: bytes, builder: MessageBuilder, request: HTTPRequest) -> Iterator[StreamEvent]:
        """Stream events for a complete response object."""
        return iter(parse_response(data, builder, _limit(request)))

    def classify(self, status: int, body: bytes, headers: Mapping[str, str]) -> ModelError:
        """Shared classification, except that a 503 means overloaded whatever the body."""
        error = super().classify(status, body, headers)
        if status == 503 and error.kind == "server":
            return OverloadedError(error.message, status=status, retry_after=error.retry_after, body=error.body)
        return error


def _limit(request: HTTPRequest) -> int | None:
    """The ``max_output_tokens`` a request asked for (None: no limit)."""
    limit = request.body.get("max_output_tokens")
    return limit if isinstance(limit, int) and not isinstance(limit, bool) else None
