"""The Google Gemini API: ``models/{id}:streamGenerateContent`` and ``:generateContent``.

Streaming requests go to ``{base_url}/models/{id}:streamGenerateContent?alt=sse``, and
``stream=False`` requests to ``:generateContent``. The key travels in the
``x-goog-api-key`` header, never in the URL.

Where Gemini's data lives in ketch messages:

- ``thought: true`` parts become :class:`ThinkingContent`, other text parts
  :class:`TextContent`; consecutive streamed parts of one kind form one block;
- a ``thoughtSignature`` is kept on the block built from the part that carried it
  (``TextContent.signature``, ``ThinkingContent.signature``, ``ToolCall.signature``)
  and sent back on that part when the transcript returns to the same model. A stream
  may deliver the signature of an answer on a final part with empty text: it goes to
  the text block that part ends;
- a ``functionCall`` arrives whole: ``toolcall_start``, one ``toolcall_delta`` with
  the complete JSON arguments and ``toolcall_end``. The call's ``id`` is Gemini's when
  it sends one (and is then replayed in the call and its ``functionResponse``);
  otherwise it is ``{name}_{responseId}_{n}``, ``n`` counting the calls of the message
  from 0 (a random token stands in for a missing response id), so that ids stay
  unique across a conversation another provider may continue;
- a tool result becomes ``functionResponse {name, response: {output | error}}`` with
  the result's images as ``inlineData`` parts right after it.

Hosted tools (``StreamOptions.hosted_tools``, :data:`HOSTED_TOOLS`): web search is
``google_search`` (grounding), web fetch ``url_context``, code execution
``code_execution``. An ``executableCode`` part becomes a :class:`HostedToolCall` and a
``codeExecutionResult`` part a :class:`HostedToolResult`, each keeping its part as
``native`` (sent back to Gemini); a candidate's ``groundingMetadata`` becomes a
``web_search`` call (its queries) and result (its sources as citations), not sent back.

Tool schemas are rewritten into the subset of OpenAPI that Gemini's ``parameters``
accept (see :func:`gemini_schema`); ``json_schema=True`` sends them unchanged as
``parametersJsonSchema`` instead.
"""

from __future__ import annotations

import os
import re
from collections.abc import AsyncIterator
from collections.abc import Callable
from collections.abc import Container
from collections.abc import Iterator
from collections.abc import Mapping
from typing import Any
from typing import Unpack

import msgspec

from .._classify import classify_error_object
from .._classify import classify_response
from .._errors import AuthError
from .._errors import ContentFilterError
from .._errors import ModelError
from .._errors import ServerError
from .._errors import error_for_kind
from .._handoff import LEADING_USER_TEXT
from .._handoff import Preparer
from .._handoff import prepare_messages
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
from .._model import HostedTool
from .._model import Request
from .._model import StreamOptions
from .._model import ToolSpec
from .._registry import ModelInfo
from .._registry import clamp_thinking
from .._registry import thinking_budget_tokens
from .._retry import parse_retry_after
from .._stream import MessageBuilder
from .._stream import StreamEvent
from .base import IMAGE_OMITTED
from .base import HTTPModel
from .base import HTTPOptions
from .base import HTTPRequest
from .base import SSEEvents
from .base import hosted_tools

API = "gemini"
"""The ``api`` name of models served through the Gemini API."""

SKIP_SIGNATURE = "skip_thought_signature_validator"
"""The placeholder signature Gemini accepts on function calls it did not write."""

_encode = msgspec.json.encode


# -- schemas ----------------------------------------------------------------------------

_TYPES = {
    "string": "STRING",
    "number": "NUMBER",
    "integer": "INTEGER",
    "boolean": "BOOLEAN",
    "array": "ARRAY",
    "object": "OBJECT",
}
_COPIED = (
    "title",
    "description",
    "default",
    "example",
    "minItems",
    "maxItems",
    "minLength",
    "maxLength",
    "pattern",
    "minimum",
    "maximum",
    "minProperties",
    "maxProperties",
    "propertyOrdering",
)
_STRING_FORMATS = frozenset({"enum", "date-time"})


class _Schemas:
    """Rewrites one root schema; ``$ref``s resolve against the root's definitions."""

    __slots__ = ("defs", "expanding")

    def __init__(self, root: dict[str, Any]) -> None:
        defs: dict[str, Any] = {}
        for key in ("definitions", "$defs"):
            found = root.get(key)
            if isinstance(found, dict):
                defs.update(found)
        self.defs = defs
        self.expanding: list[str] = []

    def convert(self, schema: Any) -> dict[str, Any]:
        if not isinstance(schema, dict):
            return {}
        ref = schema.get("$ref")
        if isinstance(ref, str):
            return self._ref(ref, schema)
        if "allOf" in schema:
            return self.convert(_merge_all_of(schema))
        out: dict[str, Any] = {}
        nullable = schema.get("nullable") is True
        branches = schema.get("anyOf", schema.get("oneOf"))
        if isinstance(branches, list):
            kept = [b for b in branches if not (isinstance(b, dict) and b.get("type") == "null")]
            nullable = nullable or len(kept) < len(branches)
            converted = [self.convert(b) for b in kept]
            if len(converted) == 1:
                out.update(converted[0])
            elif converted:
                out["anyOf"] = converted
        kind = schema.get("type")
        if isinstance(kind, list):
            names = [t for t in kind if isinstance(t, str) and t != "null"]
            nullable = nullable or "null" in kind
            if len(names) == 1:
                kind = names[0]
            else:
                kind = None
                if names:
                    out["anyOf"] = [{"type": _TYPES.get(t, t.upper())} for t in names]
        elif kind == "null":
            kind = None
            nullable = True
        if kind is None and "anyOf" not in out:
            if isinstance(schema.get("properties"), dict):
                kind = "object"
            elif "items" in schema or "prefixItems" in schema:
                kind = "array"
        gtype = _TYPES.get(kind) if isinstance(kind, str) else None
        if gtype is not None:
            out["type"] = gtype
        for key in _COPIED:
            if key in schema:
                out[key] = schema[key]
        self._values(schema, out)
        if nullable:
            out["nullable"] = True
        fmt = schema.get("format")
        if fmt in _STRING_FORMATS and "format" not in out and out.get("type", "STRING") == "STRING":
            out["format"] = fmt
        if out.get("type") == "OBJECT":
            self._object(schema, out)
        elif out.get("type") == "ARRAY":
            self._array(schema, out)
        return out

    def _ref(self, ref: str, schema: dict[str, Any]) -> dict[str, Any]:
        name = ref.rsplit("/", 1)[-1]
        target = self.defs.get(name)
        siblings = {k: v for k, v in schema.items() if k != "$ref"}
        if not isinstance(target, dict) or name in self.expanding:
            # A recursive (or unknown) reference stops as an open object.
            out: dict[str, Any] = {"type": "OBJECT"}
            if isinstance(siblings.get("description"), str):
                out["description"] = siblings["description"]
            return out
        self.expanding.append(name)
        try:
            return self.convert({**target, **siblings})
        finally:
            self.expanding.pop()

    def _values(self, schema: dict[str, Any], out: dict[str, Any]) -> None:
        values: list[Any] | None = None
        if "const" in schema:
            values = [schema["const"]]
        elif isinstance(schema.get("enum"), list):
            values = list(schema["enum"])
        if values is None:
            return
        if None in values:
            values = [v for v in values if v is not None]
            out["nullable"] = True
        if values and all(isinstance(v, str) for v in values):
            out["enum"] = values
            out.setdefault("type", "STRING")
            if out["type"] == "STRING":
                out["format"] = "enum"
        elif values:
            if "type" not in out:
                if all(isinstance(v, bool) for v in values):
                    out["type"] = "BOOLEAN"
                elif all(isinstance(v, int) and not isinstance(v, bool) for v in values):
                    out["type"] = "INTEGER"
                elif all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
                    out["type"] = "NUMBER"
            allowed = "one of: " + ", ".join(_encode(v).decode() for v in values)
            text = out.get("description")
            out["description"] = f"{text} ({allowed})" if isinstance(text, str) and text else allowed

    def _object(self, schema: dict[str, Any], out: dict[str, Any]) -> None:
        props = schema.get("properties")
        if isinstance(props, dict) and props:
            out["properties"] = {name: self.convert(sub) for name, sub in props.items()}
            required = schema.get("required")
            if isinstance(required, list):
                names = [n for n in required if isinstance(n, str) and n in props]
                if names:
                    out["required"] = names
        out.pop("minItems", None)
        out.pop("maxItems", None)

    def _array(self, schema: dict[str, Any], out: dict[str, Any]) -> None:
        items = schema.get("items")
        if isinstance(items, list):
            items = {"anyOf": items} if len(items) > 1 else (items[0] if items else None)
        elif items is None and isinstance(schema.get("prefixItems"), list):
            prefix = schema["prefixItems"]
            items = {"anyOf": prefix} if len(prefix) > 1 else (prefix[0] if prefix else None)
        if isinstance(items, dict):
            out["items"] = self.convert(items)


def _merge_all_of(schema: dict[str, Any]) -> dict[str, Any]:
    merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
    for part in schema.get("allOf") or ():
        if not isinstance(part, dict):
            continue
        for key, value in part.items():
            if key == "properties" and isinstance(value, dict):
                merged["properties"] = {**value, **(merged.get("properties") or {})}
            elif key == "required" and isinstance(value, list):
                merged["required"] = list(dict.fromkeys([*(merged.get("required") or []), *value]))
            else:
                merged.setdefault(key, value)
    return merged


def gemini_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """``schema`` (JSON Schema) rewritten for Gemini's OpenAPI-subset ``Schema``.

    Types become Gemini's upper-case names; ``["T", "null"]`` types, ``null`` branches
    of ``anyOf``/``oneOf`` and ``None`` in enums become ``nullable``; ``oneOf`` becomes
    ``anyOf``; ``allOf`` is merged; ``$ref``s are inlined (a recursive one ends as an
    open object); ``const`` and string enums become ``enum`` (other enums are described
    in ``description``); string formats other than ``enum``/``date-time`` and every
    key Gemini does not know (``additionalProperties``, ``$defs``, ``$schema``,
    ``examples``, ``exclusiveMinimum`` …) are dropped; ``required`` keeps only declared
    properties. The input is not modified.
    """
    root = dict(schema)
    return _Schemas(root).convert(root)


# -- request ----------------------------------------------------------------------------

_DATA_URL = re.compile(r"data:([^;,]+)?(?:;[^,]*)?;base64,(.*)", re.DOTALL)
_GEMINI_MAJOR = re.compile(r"gemini-(\d+)")


def _image_part(image: ImageContent) -> dict[str, Any]:
    if image.data is not None:
        return {"inlineData": {"mimeType": image.mime_type, "data": image.data}}
    url = image.url or ""
    found = _DATA_URL.fullmatch(url)
    if found is not None:
        return {"inlineData": {"mimeType": found.group(1) or image.mime_type, "data": found.group(2)}}
    return {"fileData": {"mimeType": image.mime_type, "fileUri": url}}


def _user_parts(
    content: list[TextContent | ImageContent | DocumentContent | AudioContent] | str, images: bool
) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"text": content}] if content else []
    parts: list[dict[str, Any]] = []
    for block in content:
        if type(block) is TextContent:
            if block.text:
                parts.append({"text": block.text})
        elif type(block) is ImageContent:
            parts.append(_image_part(block) if images else {"text": IMAGE_OMITTED})
        elif type(block) is DocumentContent or type(block) is AudioContent:
            parts.append({"inlineData": {"mimeType": block.mime_type, "data": block.data}})
    return parts


_GENERATED_TAIL = re.compile(r"[A-Za-z0-9_-]+_\d+")


def _is_generated_id(call: ToolCall) -> bool:
    prefix = call.name + "_"
    return call.id.startswith(prefix) and _GENERATED_TAIL.fullmatch(call.id, len(prefix)) is not None


def _model_parts(
    message: AssistantMessage, call_ids: set[str], placeholder: bool
) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    first_call: dict[str, Any] | None = None
    native = message.api == API
    for block in message.content:
        part: dict[str, Any]
        if type(block) is TextContent:
            if not block.text and not block.signature:
                continue
            part = {"text": block.text}
        elif type(block) is ThinkingContent:
            if not block.thinking and not block.signature:
                continue
            part = {"text": block.thinking, "thought": True}
        elif type(block) is HostedToolCall or type(block) is HostedToolResult:
            if not isinstance(block.native, dict):
                continue
            part = dict(block.native)
        elif type(block) is ToolCall:
            call: dict[str, Any] = {"name": block.name, "args": block.args}
            if native and not _is_generated_id(block):
                call["id"] = block.id
                call_ids.add(block.id)
            part = {"functionCall": call}
            if first_call is None:
                first_call = part
        else:
            continue
        signature = getattr(block, "signature", None)
        if signature:
            part["thoughtSignature"] = signature
        parts.append(part)
    if placeholder and first_call is not None and "thoughtSignature" not in first_call:
        first_call["thoughtSignature"] = SKIP_SIGNATURE
    return parts


def _result_parts(
    message: ToolResultMessage, call_ids: set[str], known: Container[str], images: bool
) -> list[dict[str, Any]]:
    text = "\n".join(b.text for b in message.content if type(b) is TextContent)
    response: dict[str, Any] = {"name": message.tool_name, "response": {"error" if message.is_error else "output": text}}
    if message.tool_call_id in call_ids or message.tool_call_id in known:
        response["id"] = message.tool_call_id
    parts: list[dict[str, Any]] = [{"functionResponse": response}]
    for block in message.content:
        if type(block) is ImageContent:
            parts.append(_image_part(block) if images else {"text": IMAGE_OMITTED})
        elif type(block) is DocumentContent:
            parts.append({"inlineData": {"mimeType": block.mime_type, "data": block.data}})
    return parts


def convert_messages(
    messages: list[Message], *, signature_placeholder: bool = False, images: bool = True
) -> list[dict[str, Any]]:
    """The ``contents`` for a transcript already prepared for the target model.

    User messages and tool results are ``user`` turns, assistant messages ``model``
    turns; consecutive turns of one role are merged into one. Empty text and empty
    turns are left out; other message kinds are skipped. ``signature_placeholder``
    gives the first function call of a model turn that has no signature the
    :data:`SKIP_SIGNATURE` placeholder (Gemini 3 rejects unsigned calls). With ``images``
    false, images become the text :data:`~ketch.llm._providers.base.IMAGE_OMITTED`.
    """
    return _contents(messages, signature_placeholder, (), images)[0]


def _contents(
    messages: list[Message], placeholder: bool, known: Container[str], images: bool
) -> tuple[list[dict[str, Any]], set[str], int]:
    """:func:`convert_messages` of ``messages``, which follow messages whose native call
    ids are ``known``; also the native call ids met, and the first message of the last
    turn."""
    contents: list[dict[str, Any]] = []
    call_ids: set[str] = set()
    start = 0
    for i, message in enumerate(messages):
        kind = type(message)
        if kind is UserMessage:
            assert isinstance(message, UserMessage)
            role, parts = "user", _user_parts(message.content, images)
        elif kind is AssistantMessage:
            assert isinstance(message, AssistantMessage)
            role, parts = "model", _model_parts(message, call_ids, placeholder)
        elif kind is ToolResultMessage:
            assert isinstance(message, ToolResultMessage)
            role, parts = "user", _result_parts(message, call_ids, known, images)
        else:
            continue
        if not parts:
            continue
        if contents and contents[-1]["role"] == role:
            contents[-1]["parts"].extend(parts)
        else:
            contents.append({"role": role, "parts": parts})
            start = i
    return contents, call_ids, start


class _Fold:
    """:func:`convert_messages` a part of a transcript at a time, for
    :class:`~ketch.llm._providers.wire_cache.WireCache`. The last turn of a part is held
    back (the next message may join it), and results refer to calls made before."""

    __slots__ = ("_call_ids", "_images", "_placeholder")

    def __init__(self, placeholder: bool, images: bool) -> None:
        self._placeholder = placeholder
        self._images = images
        self._call_ids: set[str] = set()  # native call ids of the committed messages

    def commit(self, messages: list[Message]) -> tuple[list[dict[str, Any]], int]:
        contents, call_ids, start = _contents(messages, self._placeholder, self._call_ids, self._images)
        # The ids of the turn held back count as known already: only results that
        # follow that turn look them up, in any conversion.
        self._call_ids |= call_ids
        if not contents:
            return contents, len(messages)
        del contents[-1]
        return contents, start

    def peek(self, messages: list[Message]) -> list[dict[str, Any]]:
        return _contents(messages, self._placeholder, self._call_ids, self._images)[0]


def convert_tools(tools: list[ToolSpec], *, json_schema: bool = False) -> list[dict[str, Any]]:
    """One ``functionDeclarations`` tool. Parameters go through :func:`gemini_schema`
    (left out when they declare no properties), or unchanged as
    ``parametersJsonSchema`` with ``json_schema``."""
    declarations: list[dict[str, Any]] = []
    for tool in tools:
        declaration: dict[str, Any] = {"name": tool.name, "description": tool.description}
        if json_schema:
            declaration["parametersJsonSchema"] = tool.parameters
        else:
            parameters = gemini_schema(tool.parameters)
            if parameters.get("properties"):
                declaration["parameters"] = parameters
        declarations.append(declaration)
    return [{"functionDeclarations": declarations}]


def convert_tool_choice(choice: str) -> dict[str, Any]:
    """``toolConfig`` for a tool choice: ``auto`` → AUTO, ``none`` → NONE,
    ``required`` → ANY, a tool name → ANY restricted to that function."""
    if choice == "auto":
        config: dict[str, Any] = {"mode": "AUTO"}
    elif choice == "none":
        config = {"mode": "NONE"}
    elif choice == "required":
        config = {"mode": "ANY"}
    else:
        config = {"mode": "ANY", "allowedFunctionNames": [choice]}
    return {"functionCallingConfig": config}


def thinking_config(
    info: ModelInfo,
    level: str,
    max_tokens: int | None = None,
    *,
    budgets: Mapping[str, int] | None = None,
) -> tuple[dict[str, Any] | None, int | None]:
    """``(thinkingConfig or None, maxOutputTokens or None)`` for a thinking level.

    The level is clamped to the model's map (:func:`~ketch.llm._registry.clamp_thinking`).
    A string value is a Gemini 3 ``thinkingLevel``; a budget goes through
    :func:`~ketch.llm._registry.thinking_budget_tokens`, and as thinking counts against
    the output limit, an explicit ``max_tokens`` grows by the budget. Thoughts are
    requested (``includeThoughts``) whenever thinking is on. ``off`` sends the model's
    ``off`` value (a budget of 0 where thinking can be turned off), or nothing.
    """
    clamped, value = clamp_thinking(info, level)
    if clamped == "off":
        if value is None:
            return None, max_tokens
        return {"thinkingLevel" if isinstance(value, str) else "thinkingBudget": value}, max_tokens
    if isinstance(value, str):
        return {"thinkingLevel": value, "includeThoughts": True}, max_tokens
    budget, limit = thinking_budget_tokens(info, clamped, max_tokens, budgets=budgets)
    return {"thinkingBudget": budget, "includeThoughts": True}, (limit if max_tokens else None)


def _placeholder(info: ModelInfo) -> bool:
    # Unsigned function calls get the SKIP_SIGNATURE placeholder from Gemini 3 on.
    major = _GEMINI_MAJOR.search(info.id)
    return major is not None and int(major.group(1)) >= 3


def build_request(
    request: Request,
    options: StreamOptions,
    *,
    info: ModelInfo,
    messages: list[Message] | None = None,
    budgets: Mapping[str, int] | None = None,
    json_schema: bool = False,
    contents: list[dict[str, Any]] | None = None,
    images: bool = True,
) -> dict[str, Any]:
    """The JSON body of one request for the model ``info`` describes.

    ``messages`` replaces ``context.messages`` (the adapter passes the transcript
    prepared by :func:`~ketch.llm._handoff.prepare_messages`). ``contents``, when given,
    is the ``contents`` array already converted, and no messages are read. ``images``
    false sends a note in place of each image (the model does not accept images).
    """
    if contents is None:
        contents = convert_messages(
            request.messages if messages is None else messages, signature_placeholder=_placeholder(info), images=images
        )
    if contents and contents[0].get("role") == "model":
        contents.insert(0, {"role": "user", "parts": [{"text": LEADING_USER_TEXT}]})
    body: dict[str, Any] = {"contents": contents}
    if request.system_prompt:
        body["systemInstruction"] = {"parts": [{"text": request.system_prompt}]}
    specs, hosted = hosted_tools(request, options, info.provider, API, HOSTED_TOOLS)
    if specs or hosted:
        body["tools"] = (convert_tools(specs, json_schema=json_schema) if specs else []) + hosted
        if options.tool_choice is not None:
            body["toolConfig"] = convert_tool_choice(options.tool_choice)
    config: dict[str, Any] = {}
    if options.temperature is not None:
        config["temperature"] = options.temperature
    if options.stop_sequences:
        config["stopSequences"] = list(options.stop_sequences)
    thinking, max_output = thinking_config(info, options.thinking, options.max_tokens, budgets=budgets)
    if max_output is not None:
        config["maxOutputTokens"] = max_output
    if thinking is not None:
        config["thinkingConfig"] = thinking
    fmt = options.response_format
    if fmt is not None:
        config["responseMimeType"] = "application/json"
        schema = fmt.get("schema")
        if isinstance(schema, dict):
            if json_schema:
                config["responseJsonSchema"] = schema
            else:
                config["responseSchema"] = gemini_schema(schema)
    if config:
        body["generationConfig"] = config
    return body


# -- errors -----------------------------------------------------------------------------

_AUTH_REASONS = frozenset(
    {"API_KEY_INVALID", "API_KEY_EXPIRED", "API_KEY_SERVICE_BLOCKED", "API_KEY_HTTP_REFERRER_BLOCKED"}
)
_DURATION = re.compile(r"(\d+(?:\.\d+)?)s")


class _ErrorDetail(msgspec.Struct, rename="camel"):
    reason: str = ""
    retry_delay: str = ""


class _ErrorBody(msgspec.Struct):
    code: int = 0
    message: str = ""
    status: str = ""
    details: list[_ErrorDetail] = []


class _ErrorEnvelope(msgspec.Struct):
    error: _ErrorBody | None = None


_error_decoder = msgspec.json.Decoder(_ErrorEnvelope | list[_ErrorEnvelope])


def _error_body(body: bytes | str) -> _ErrorBody | None:
    try:
        decoded: _ErrorEnvelope | list[_ErrorEnvelope] = _error_decoder.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    if isinstance(decoded, list):
        return decoded[0].error if decoded else None
    return decoded.error


def _refine(error: ModelError, detail: _ErrorBody | None, *, header_wait: bool) -> ModelError:
    if detail is None:
        return error
    for item in detail.details:
        if item.reason in _AUTH_REASONS:
            return AuthError(error.message, status=error.status, body=error.body)
    if not header_wait and error.retryable:
        for item in detail.details:
            found = _DURATION.fullmatch(item.retry_delay) if item.retry_delay else None
            if found is not None:
                error.retry_after = float(found.group(1))
                break
    return error


def classify_error(status: int, body: bytes | str, headers: Mapping[str, str] | None = None) -> ModelError:
    """The error for a failed Gemini response.

    The shared classification (status, ``status`` code such as ``RESOURCE_EXHAUSTED``
    or ``UNAVAILABLE``, context-overflow wording), refined with the body's details: a
    ``RetryInfo.retryDelay`` is the wait to honour (unless a ``Retry-After`` header
    says otherwise), and an ``ErrorInfo`` reason such as ``API_KEY_INVALID`` makes a
    400 an authentication error.
    """
    error = classify_response(status, body, headers)
    return _refine(error, _error_body(body), header_wait=parse_retry_after(headers) is not None)


def _stream_error(detail: _ErrorBody) -> ModelError:
    error = classify_error_object({"error": msgspec.to_builtins(detail)})
    return _refine(error, detail, header_wait=False)


# -- responses --------------------------------------------------------------------------


HOSTED_TOOLS: dict[str, Callable[[HostedTool], dict[str, Any]]] = {
    "web_search": lambda tool: {"google_search": dict(tool.options)},
    "web_fetch": lambda tool: {"url_context": dict(tool.options)},
    "code_execution": lambda tool: {"code_execution": dict(tool.options)},
}
"""The hosted tools Gemini runs, by kind: their tool entries."""


def grounding_blocks(metadata: dict[str, Any], id: str) -> list[HostedToolCall | HostedToolResult]:
    """A candidate's ``groundingMetadata`` as a ``web_search`` call (its queries) and
    result (its web sources as citations); nothing when it names neither."""
    queries = [q for q in metadata.get("webSearchQueries") or () if isinstance(q, str)]
    citations: list[Citation] = []
    for chunk in metadata.get("groundingChunks") or ():
        web = chunk.get("web") if isinstance(chunk, dict) else None
        if isinstance(web, dict) and isinstance(web.get("uri"), str):
            title = web.get("title") if isinstance(web.get("title"), str) else None
            citations.append(Citation(url=web["uri"], title=title))
    if not queries and not citations:
        return []
    output = "\n".join(f"searched: {q}" for q in queries)
    return [
        HostedToolCall(id=id, kind="web_search", name="google_search", input={"queries": queries}),
        HostedToolResult(call_id=id, kind="web_search", output=output, citations=citations),
    ]


class _FunctionCall(msgspec.Struct):
    name: str = ""
    args: dict[str, Any] | None = None
    id: str | None = None


class _Part(msgspec.Struct, rename="camel"):
    text: str | None = None
    thought: bool = False
    thought_signature: str | None = None
    function_call: _FunctionCall | None = None
    executable_code: dict[str, Any] | None = None
    code_execution_result: dict[str, Any] | None = None


class _Content(msgspec.Struct):
    parts: list[_Part] = []


class _Candidate(msgspec.Struct, rename="camel"):
    content: _Content | None = None
    finish_reason: str | None = None
    finish_message: str | None = None
    grounding_metadata: dict[str, Any] | None = None


class _UsageMetadata(msgspec.Struct, rename="camel"):
    prompt_token_count: int = 0
    candidates_token_count: int = 0
    thoughts_token_count: int = 0
    cached_content_token_count: int = 0
    tool_use_prompt_token_count: int = 0


class _PromptFeedback(msgspec.Struct, rename="camel"):
    block_reason: str | None = None
    block_reason_message: str | None = None


class _Response(msgspec.Struct, rename="camel"):
    candidates: list[_Candidate] = []
    usage_metadata: _UsageMetadata | None = None
    prompt_feedback: _PromptFeedback | None = None
    response_id: str | None = None
    error: _ErrorBody | None = None


_chunk_decoder = msgspec.json.Decoder(_Response)
_body_decoder = msgspec.json.Decoder(_Response | list[_Response])

_FILTERED = {
    "SAFETY": "flagged by the safety filters",
    "RECITATION": "flagged for reciting training data",
    "PROHIBITED_CONTENT": "flagged for prohibited content",
    "BLOCKLIST": "stopped by a blocklisted term",
    "SPII": "flagged for sensitive personal information",
    "IMAGE_SAFETY": "flagged by the image safety filters",
    "IMAGE_PROHIBITED_CONTENT": "flagged for prohibited image content",
    "IMAGE_RECITATION": "flagged for reciting training images",
}
_REJECTED = frozenset(
    {"LANGUAGE", "UNEXPECTED_TOOL_CALL", "TOO_MANY_TOOL_CALLS", "MISSING_THOUGHT_SIGNATURE"}
)


def _finish_error(reason: str, detail: str | None) -> ModelError:
    suffix = f": {detail}" if detail else ""
    described = _FILTERED.get(reason)
    if described is not None:
        return ContentFilterError(f"The response was {described} ({reason}){suffix}")
    kind = "invalid_request" if reason in _REJECTED else "unknown"
    return error_for_kind(kind)(f"The response ended with finish reason {reason}{suffix}")


def _set_usage(builder: MessageBuilder, usage: _UsageMetadata) -> None:
    cached = usage.cached_content_token_count
    prompt = usage.prompt_token_count + usage.tool_use_prompt_token_count
    builder.set_usage(
        input=max(0, prompt - cached),
        output=usage.candidates_token_count + usage.thoughts_token_count,
        cache_read=cached,
    )


class GeminiStreamState:
    """Turns ``GenerateContentResponse`` chunks into stream events on a builder.

    :meth:`feed` takes one SSE ``data`` payload and returns its events; the chunk with
    a finish reason ends with :class:`~ketch.llm._stream.StreamDone` (``STOP``,
    ``MAX_TOKENS``) and sets :attr:`finished`. Safety stops and blocked prompts raise
    :class:`~ketch.llm._errors.ContentFilterError`, error chunks their classified error.
    """

    __slots__ = ("_builder", "_grounded", "_index", "_kind", "_signature", "_token", "finished")

    def __init__(self, builder: MessageBuilder) -> None:
        self._builder = builder
        self._kind = ""  # "text" or "thinking" while a block is open
        self._index = -1
        self._signature: str | None = None
        self._token: str | None = None
        self._grounded = False
        self.finished = False

    def feed(self, data: bytes) -> list[StreamEvent]:
        """Handle one chunk; return the stream events it yields."""
        chunk = _chunk_decoder.decode(data)
        if chunk.error is not None:
            raise _stream_error(chunk.error)
        return self.handle(chunk)

    def handle(self, chunk: _Response) -> list[StreamEvent]:
        """Handle one decoded chunk (see :meth:`feed`)."""
        b = self._builder
        if chunk.response_id:
            b.message.response_id = chunk.response_id
        if chunk.usage_metadata is not None:
            _set_usage(b, chunk.usage_metadata)
        events: list[StreamEvent] = []
        feedback = chunk.prompt_feedback
        if feedback is not None and feedback.block_reason:
            suffix = f": {feedback.block_reason_message}" if feedback.block_reason_message else ""
            raise ContentFilterError(f"The prompt was blocked ({feedback.block_reason}){suffix}")
        if not chunk.candidates:
            return events
        candidate = chunk.candidates[0]
        if candidate.content is not None:
            for part in candidate.content.parts:
                self._part(part, events)
        if candidate.grounding_metadata and not self._grounded:
            found = grounding_blocks(candidate.grounding_metadata, f"google_search_{b.message.response_id or 0}")
            if found:
                self._grounded = True
                events.extend(self.close())
                events.extend(b.hosted(block) for block in found)
        reason = candidate.finish_reason
        if reason:
            if reason == "STOP":
                events.extend(self.close())
                events.append(b.done())
            elif reason == "MAX_TOKENS":
                events.extend(self.close())
                events.append(b.done("length"))
            else:
                raise _finish_error(reason, candidate.finish_message)
            self.finished = True
        return events

    def close(self) -> list[StreamEvent]:
        """End the open text or thinking block (with its signature), if any."""
        kind, index, signature = self._kind, self._index, self._signature
        self._kind, self._index, self._signature = "", -1, None
        if kind == "text":
            return [self._builder.text_end(index, signature=signature)]
        if kind == "thinking":
            return [self._builder.thinking_end(index, signature=signature)]
        return []

    def _new_call_id(self, name: str) -> str:
        token = self._builder.message.response_id
        if not token:
            if self._token is None:
                self._token = os.urandom(6).hex()
            token = self._token
        count = sum(1 for block in self._builder.message.content if type(block) is ToolCall)
        return f"{name}_{token}_{count}"

    def _part(self, part: _Part, out: list[StreamEvent]) -> None:
        b = self._builder
        signature = part.thought_signature or None
        if part.executable_code is not None:
            out.extend(self.close())
            code = part.executable_code
            count = sum(1 for block in b.message.content if type(block) is HostedToolCall)
            native: dict[str, Any] = {"executableCode": code}
            if signature is not None:
                native["thoughtSignature"] = signature
            out.append(
                b.hosted(
                    HostedToolCall(
                        id=f"code_execution_{count}",
                        kind="code_execution",
                        name="code_execution",
                        input={"language": code.get("language"), "code": code.get("code")},
                        native=native,
                    )
                )
            )
            return
        if part.code_execution_result is not None:
            out.extend(self.close())
            result = part.code_execution_result
            calls = [block for block in b.message.content if type(block) is HostedToolCall]
            out.append(
                b.hosted(
                    HostedToolResult(
                        call_id=calls[-1].id if calls else "",
                        kind="code_execution",
                        output=str(result.get("output") or ""),
                        is_error=result.get("outcome") not in (None, "OUTCOME_OK"),
                        native={"codeExecutionResult": result},
                    )
                )
            )
            return
        call = part.function_call
        if call is not None:
            out.extend(self.close())
            args = call.args if call.args is not None else {}
            call_id = call.id or self._new_call_id(call.name)
            start = b.tool_call_start(call_id, call.name, signature=signature)
            out.append(start)
            out.append(b.tool_call_delta(_encode(args).decode(), start.index))
            out.append(b.tool_call_end(start.index, args=args))
            return
        text = part.text
        if text is None:
            if signature is None:
                return  # a part kind ketch does not represent (inline data, code execution …)
            text = ""
        elif not text and signature is None:
            return
        kind = "thinking" if part.thought else "text"
        if self._kind != kind or self._signature is not None:
            # A signature ends its part: what follows is a new block.
            out.extend(self.close())
            opened = b.thinking_start() if kind == "thinking" else b.text_start()
            out.append(opened)
            self._kind, self._index = kind, opened.index
        if text:
            out.append(b.thinking_delta(text, self._index) if kind == "thinking" else b.text_delta(text, self._index))
        if signature is not None:
            self._signature = signature


def parse_response(body: bytes, builder: MessageBuilder) -> list[StreamEvent]:
    """The stream events for a complete ``generateContent`` response (or a JSON array
    of streamed chunks). A response without a finish reason still completes when it
    produced content."""
    decoded = _body_decoder.decode(body)
    chunks = decoded if isinstance(decoded, list) else [decoded]
    state = GeminiStreamState(builder)
    events: list[StreamEvent] = []
    for chunk in chunks:
        if chunk.error is not None:
            raise _stream_error(chunk.error)
        events.extend(state.handle(chunk))
        if state.finished:
            return events
    if not builder.message.content:
        raise ServerError("The response had no candidates")
    events.extend(state.close())
    events.append(builder.done())
    return events


# -- the model --------------------------------------------------------------------------


def _model_path(id: str) -> str:
    return id if id.startswith(("models/", "tunedModels/")) else f"models/{id}"


class GeminiModel(HTTPModel):
    """A model served through the Gemini API (Google AI Studio keys).

    The key comes from ``api_key``, then ``StreamOptions.api_key``, then
    ``GEMINI_API_KEY``, then ``GOOGLE_API_KEY``; it is sent as ``x-goog-api-key``.
    ``stream=False`` asks for one JSON response. Thinking levels map through the
    model's registry info (``thinking_budgets`` overrides its token budgets); a model
    whose info lists no thinking levels is sent no thinking options. ``json_schema``
    sends tool and response schemas as full JSON Schema (``parametersJsonSchema``,
    ``responseJsonSchema``) instead of the cleaned OpenAPI subset.
    """

    api = API
    hosted_kinds = frozenset(HOSTED_TOOLS)

    def __init__(
        self,
        id: str,
        *,
        provider: str = "google",
        stream: bool = True,
        thinking_budgets: Mapping[str, int] | None = None,
        json_schema: bool = False,
        **options: Unpack[HTTPOptions],
    ) -> None:
        super().__init__(id, provider=provider, **options)
        self.streaming = stream
        self.thinking_budgets = dict(thinking_budgets) if thinking_budgets else None
        self.json_schema = json_schema

    @property
    def native_output(self) -> bool:
        """False unless the registry's ``compat["native_output"]`` says otherwise: Gemini
        models before Gemini 3 refuse ``responseSchema`` together with function calling,
        so typed output uses a (forced) output tool by default; ``response_format`` itself
        works on every Gemini model."""
        return bool(self.info.compat.get("native_output", False))

    def build_request(self, request: Request, options: StreamOptions, api_key: str | None) -> HTTPRequest:
        """``POST {base_url}/models/{id}:streamGenerateContent?alt=sse`` (or
        ``:generateContent``) with the transcript prepared for this model."""
        images = self._takes_images()
        if self.rewrite is None:
            # A rewrite hook may change the body in place, so it gets freshly converted items.
            placeholder = _placeholder(self.info)
            contents: list[dict[str, Any]] | None = self._wire_cache.convert_folded(
                request.messages,
                (placeholder, images, self.provider, self.api, self.id),
                lambda: Preparer(provider=self.provider, api=self.api, model=self.id),
                lambda: _Fold(placeholder, images),
            )
            messages = None
        else:
            contents = None
            messages = prepare_messages(request.messages, provider=self.provider, api=self.api, model=self.id)
        body = build_request(
            request,
            options,
            info=self.info,
            messages=messages,
            budgets=self.thinking_budgets,
            json_schema=self.json_schema,
            contents=contents,
            images=images,
        )
        method = "streamGenerateContent?alt=sse" if self.streaming else "generateContent"
        headers = {"x-goog-api-key": api_key} if api_key else {}
        return HTTPRequest(
            url=f"{self.base_url}/{_model_path(self.id)}:{method}", body=body, headers=headers, stream=self.streaming
        )

    async def parse_stream(
        self, events: SSEEvents, builder: MessageBuilder, request: HTTPRequest
    ) -> AsyncIterator[StreamEvent]:
        """Stream events from Gemini's server-sent chunks; the chunk with a finish
        reason ends the message."""
        state = GeminiStreamState(builder)
        async for batch in events:
            for data in batch.data:
                for event in state.feed(data):
                    yield event
                if state.finished:
                    return

    def parse_response(self, data: bytes, builder: MessageBuilder, request: HTTPRequest) -> Iterator[StreamEvent]:
        """Stream events for a complete response."""
        return iter(parse_response(data, builder))

    def classify(self, status: int, body: bytes, headers: Mapping[str, str]) -> ModelError:
        """See :func:`classify_error`."""
        return classify_error(status, body, headers)
