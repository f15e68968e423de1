"""OpenAI Chat Completions, and every server that speaks it.

:class:`OpenAIChatModel` talks to ``POST {base_url}/chat/completions``. Servers that
copy the protocol differ in small ways; those differences are data in :class:`Compat`
and :data:`PRESETS` holds them for the common providers (DeepSeek, Groq, OpenRouter,
Together, Mistral, xAI, Ollama, vLLM, LM Studio, llama.cpp, llama-cpp-python), whose
base URLs and key variables the registry holds::

    model = OpenAIChatModel("llama-3.3-70b-versatile", provider="groq")
    local = OpenAIChatModel("qwen3:8b", provider="ollama", base_url="http://gpu:11434/v1")
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from collections.abc import Iterator
from collections.abc import Mapping
from typing import Any
from typing import Literal
from typing import Unpack

import msgspec

from .._classify import classify_error_object
from .._errors import ContentFilterError
from .._handoff import mistral_tool_id
from .._handoff import openai_chat_tool_id
from .._messages import AssistantMessage
from .._messages import AudioContent
from .._messages import DocumentContent
from .._messages import ImageContent
from .._messages import Message
from .._messages import TextContent
from .._messages import ThinkingContent
from .._messages import ToolCall
from .._messages import ToolResultMessage
from .._messages import UserMessage
from .._model import Request
from .._model import StreamOptions
from .._model import ThinkingLevel
from .._registry import clamp_thinking
from .._stream import MessageBuilder
from .._stream import StreamEvent
from .base import IMAGE_OMITTED
from .base import HTTPModel
from .base import HTTPOptions
from .base import HTTPRequest
from .base import SSEEvents
from .base import content_parts
from .base import document_name
from .base import document_text
from .base import image_url
from .base import no_audio
from .base import no_documents
from .base import no_hosted_tools


def _new_call_id() -> str:
    """An id for a tool call the server sent without one: unique, so no two calls of a
    run share one (a durable run keys its exactly-once records by call)."""
    return f"call_{uuid.uuid4().hex[:24]}"

class Compat(msgspec.Struct, kw_only=True, frozen=True):
    """How one endpoint departs from OpenAI's own Chat Completions.

    - ``max_tokens_field``: the name of the output-limit field.
    - ``reasoning_fields``: delta/message fields that carry reasoning text, in order of
      preference.
    - ``stream_usage``: whether ``stream_options.include_usage`` is accepted.
    - ``system_role``: role of the system prompt; ``auto`` means ``developer`` for
      reasoning models (``ModelInfo.thinking`` non-empty) and ``system`` otherwise.
    - ``reasoning_param``: how a thinking level is sent: ``reasoning_effort``, an
      OpenRouter-style ``reasoning`` object, or not at all.
    - ``reasoning_in_output``: whether ``completion_tokens`` already counts reasoning
      tokens (when not, they are added to ``output``).
    - ``tool_call_content``: content of an assistant message that only holds tool
      calls (``""`` is accepted everywhere; ``null`` is OpenAI's canonical form).
    - ``tool_call_id``: id rule: ``openai`` (``[A-Za-z0-9_-]``, at most 40 chars) or
      ``mistral`` (exactly 9 letters/digits).
    - ``tool_result_name``: whether tool messages carry the tool ``name``.
    - ``stream_tool_choice_auto``: whether the server can stream when tools are offered
      with ``tool_choice`` auto; if not, such requests are sent unstreamed (the caller
      still receives stream events).
    - ``streaming``: whether the endpoint streams at all (if not, every request is sent
      unstreamed).
    - ``replay_reasoning_field``: send this model's own earlier reasoning back under this
      assistant-message field (None: drop it).
    - ``native_output``: whether ``response_format`` (``json_schema``) is accepted; typed
      output uses an output tool instead when not.
    """

    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_completion_tokens"
    reasoning_fields: tuple[str, ...] = ("reasoning_content", "reasoning", "reasoning_text")
    stream_usage: bool = True
    system_role: Literal["system", "developer", "auto"] = "system"
    reasoning_param: Literal["reasoning_effort", "openrouter", "none"] = "reasoning_effort"
    reasoning_in_output: bool = True
    tool_call_content: Literal["empty", "null"] = "empty"
    tool_call_id: Literal["openai", "mistral"] = "openai"
    tool_result_name: bool = False
    stream_tool_choice_auto: bool = True
    streaming: bool = True
    replay_reasoning_field: str | None = None
    native_output: bool = True


_NONE = Compat()
_LOCAL = Compat(max_tokens_field="max_tokens")
_REASONING_FIRST = Compat(max_tokens_field="max_tokens", reasoning_fields=("reasoning", "reasoning_content"))

PRESETS: dict[str, Compat] = {
    "openai": Compat(system_role="auto", tool_call_content="null"),
    "deepseek": Compat(max_tokens_field="max_tokens", reasoning_param="none", native_output=False),
    "groq": Compat(reasoning_fields=("reasoning", "reasoning_content")),
    "openrouter": Compat(
        max_tokens_field="max_tokens",
        reasoning_fields=("reasoning", "reasoning_content"),
        reasoning_param="openrouter",
    ),
    "together": _REASONING_FIRST,
    "mistral": Compat(
        max_tokens_field="max_tokens",
        stream_usage=False,
        reasoning_param="none",
        tool_call_id="mistral",
        tool_result_name=True,
    ),
    "xai": Compat(max_tokens_field="max_tokens", reasoning_in_output=False),
    "ollama": _REASONING_FIRST,
    "vllm": _REASONING_FIRST,
    "lmstudio": _LOCAL,
    "llamacpp": _LOCAL,
    "llama-cpp-python": Compat(max_tokens_field="max_tokens", stream_usage=False, stream_tool_choice_auto=False),
}
"""The quirks of known OpenAI-compatible providers, by provider name. Their base URLs and
key variables are the registry's (:func:`~ketch.llm.get_provider`)."""


# -- wire types (decoded with msgspec; unknown fields are ignored) ---------------------
# gc=False: decoded trees of plain values cannot form cycles, so the collector skips them.
class _Fn(msgspec.Struct, gc=False):
    name: str | None = None
    arguments: str | None = None


class _ToolDelta(msgspec.Struct, gc=False):
    index: int | None = None
    id: str | None = None
    function: _Fn | None = None


class _Delta(msgspec.Struct, gc=False):
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    reasoning_text: str | None = None
    refusal: str | None = None
    tool_calls: list[_ToolDelta] | None = None


class _Choice(msgspec.Struct, gc=False):
    delta: _Delta | None = None
    message: _Delta | None = None
    finish_reason: str | None = None


class _PromptDetails(msgspec.Struct, gc=False):
    cached_tokens: int | None = None
    cache_write_tokens: int | None = None


class _CompletionDetails(msgspec.Struct, gc=False):
    reasoning_tokens: int | None = None


class _Usage(msgspec.Struct, gc=False):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    prompt_tokens_details: _PromptDetails | None = None
    completion_tokens_details: _CompletionDetails | None = None
    prompt_cache_hit_tokens: int | None = None


class _XGroq(msgspec.Struct, gc=False):
    usage: _Usage | None = None


class _Chunk(msgspec.Struct, gc=False):
    id: str | None = None
    choices: list[_Choice] | None = None
    usage: _Usage | None = None
    error: Any = None
    x_groq: _XGroq | None = None


_decode_chunk = msgspec.json.Decoder(_Chunk).decode


class OpenAIChatModel(HTTPModel):
    """A model behind an OpenAI Chat Completions endpoint.

    ``compat`` describes the endpoint's quirks: by default those :data:`PRESETS` holds
    for ``provider``, else none (:meth:`compat_for`). All other arguments are those of
    :class:`~ketch.llm._providers.base.HTTPModel`.
    """

    api = "openai-chat"

    def __init__(
        self,
        id: str,
        *,
        provider: str = "openai",
        compat: Compat | None = None,
        **options: Unpack[HTTPOptions],
    ) -> None:
        super().__init__(id, provider=provider, **options)
        self.compat = compat if compat is not None else self.compat_for(provider)

    @classmethod
    def compat_for(cls, provider: str, flags: Mapping[str, Any] | None = None) -> Compat:
        """The quirks of ``provider``'s endpoint: its :data:`PRESETS` entry (none for a
        provider without one), with ``flags`` (compat field -> value) applied."""
        base = PRESETS.get(provider, _NONE)
        if not flags:
            return base
        try:
            return msgspec.structs.replace(base, **flags)
        except TypeError:
            known = ", ".join(Compat.__struct_fields__)
            raise ValueError(f"Unknown compat flag(s) {sorted(flags)} for api {cls.api!r}; known: {known}") from None

    @property
    def native_output(self) -> bool:
        """Whether this endpoint accepts ``response_format`` (``Compat.native_output``)."""
        return self.compat.native_output

    # -- request ---------------------------------------------------------------------
    def build_request(self, request: Request, options: StreamOptions, api_key: str | None) -> HTTPRequest:
        """The Chat Completions request for ``request`` (hosted tools are refused: Chat
        Completions runs none; a hosted tool's ``fallback`` function tool is sent)."""
        no_hosted_tools(options, self.provider, self.api)
        compat = self.compat
        body: dict[str, Any] = {"model": self.id, "messages": self.convert_messages(request)}
        if options.max_tokens is not None:
            body[compat.max_tokens_field] = options.max_tokens
        if options.temperature is not None:
            body["temperature"] = options.temperature
        if options.stop_sequences:
            body["stop"] = list(options.stop_sequences)
        choice = options.tool_choice
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
                }
                for t in request.tools
            ]
            # Explicit even for "auto": some servers read a missing tool_choice as "none".
            body["tool_choice"] = (
                choice or "auto"
                if choice in (None, "auto", "none", "required")
                else {"type": "function", "function": {"name": choice}}
            )
        stream = compat.streaming and (
            compat.stream_tool_choice_auto or not request.tools or choice not in (None, "auto")
        )
        body["stream"] = stream
        if stream and compat.stream_usage:
            body["stream_options"] = {"include_usage": True}
        if options.response_format is not None:
            rf = options.response_format
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {
                    "name": rf.get("name", "response"),
                    "schema": rf.get("schema", rf),
                    "strict": rf.get("strict", True),
                },
            }
        self._add_reasoning(body, options.thinking)
        if options.session_id and self.provider == "openai":
            body["prompt_cache_key"] = options.cache_key or options.session_id
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        return HTTPRequest(url=f"{self.base_url}/chat/completions", body=body, headers=headers, stream=stream)

    def _add_reasoning(self, body: dict[str, Any], level: ThinkingLevel) -> None:
        mode = self.compat.reasoning_param
        if mode == "none" or not self.info.thinking:
            return
        _, value = clamp_thinking(self.info, level)
        if value is None:
            return
        if mode == "openrouter":
            body["reasoning"] = {"max_tokens": value} if isinstance(value, int) else {"effort": value}
        elif isinstance(value, str):
            body["reasoning_effort"] = value

    def convert_messages(self, request: Request) -> list[dict[str, Any]]:
        """The ``messages`` array for ``request`` (system prompt first). The list is
        new; its items may be shared with earlier requests and must not be changed."""
        compat = self.compat
        normalize_id = mistral_tool_id if compat.tool_call_id == "mistral" else openai_chat_tool_id
        out, _images = self._wire_items(request.messages, self._convert, normalize_id, compat)
        if request.system_prompt:
            role = compat.system_role
            if role == "auto":
                role = "developer" if self.info.thinking else "system"
            out.insert(0, {"role": role, "content": request.system_prompt})
        return out

    def _convert(self, messages: list[Message], images_ok: bool) -> list[dict[str, Any]]:
        """Prepared messages to Chat Completions messages."""
        compat = self.compat
        out: list[dict[str, Any]] = []
        # OpenAI wants tool messages right after the calls; images (and OpenAI's own
        # files) from tool results follow the whole run of tool messages in one user message.
        pending_images: list[dict[str, Any]] = []
        for message in messages:
            if type(message) is ToolResultMessage:
                text = "".join(b.text for b in message.content if type(b) is TextContent)
                images = [b for b in message.content if type(b) is ImageContent]
                if images and images_ok:
                    pending_images.extend(_image_part(b) for b in images)
                    text = text or "(see the attached image)"
                elif images:
                    text = text or IMAGE_OMITTED
                for document in message.content:
                    if type(document) is not DocumentContent:
                        continue
                    if self.provider == "openai":
                        pending_images.append(_file_part(document))
                    elif document.mime_type == "text/plain":
                        text += "\n" + document_text(document)
                    else:
                        raise no_documents(document, f"provider {self.provider!r}")
                tool_msg: dict[str, Any] = {"role": "tool", "tool_call_id": message.tool_call_id, "content": text}
                if compat.tool_result_name:
                    tool_msg["name"] = message.tool_name
                out.append(tool_msg)
                continue
            if pending_images:
                out.append(_images_message(pending_images))
                pending_images = []
            if type(message) is UserMessage:
                out.append({"role": "user", "content": _user_content(message.content, images_ok, self.provider)})
            elif type(message) is AssistantMessage:
                converted = self._assistant(message)
                if converted is not None:
                    out.append(converted)
        if pending_images:
            out.append(_images_message(pending_images))
        return out

    def _assistant(self, message: AssistantMessage) -> dict[str, Any] | None:
        text = "".join(b.text for b in message.content if type(b) is TextContent)
        calls = message.tool_calls
        out: dict[str, Any] = {"role": "assistant"}
        if calls:
            out["content"] = text if text or self.compat.tool_call_content == "empty" else None
            out["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": _arguments_text(c)}}
                for c in calls
            ]
        elif text:
            out["content"] = text
        else:
            return None
        field = self.compat.replay_reasoning_field
        if field and message.provider == self.provider and message.model == self.id:
            reasoning = "".join(b.thinking for b in message.content if type(b) is ThinkingContent)
            if reasoning:
                out[field] = reasoning
        return out

    # -- responses -------------------------------------------------------------------
    async def parse_stream(
        self, events: SSEEvents, builder: MessageBuilder, request: HTTPRequest
    ) -> AsyncIterator[StreamEvent]:
        """Chat Completions chunks to stream events; ``[DONE]`` (or the end of the
        body after a ``finish_reason``) finishes the message."""
        reasoning_fields = self.compat.reasoning_fields
        text_i = -1
        think_i = -1
        tools: dict[int, int] = {}  # OpenAI tool-call index -> content index
        open_tools: list[int] = []
        finish: str | None = None
        response_id: str | None = None
        async for batch in events:
            for data in batch.data:
                if data == b"[DONE]":
                    break
                chunk = _decode_chunk(data)
                if chunk.error is not None:
                    raise classify_error_object({"error": chunk.error})
                if response_id is None and chunk.id:
                    builder.message.response_id = response_id = chunk.id
                usage = chunk.usage
                if usage is None and chunk.x_groq is not None:
                    usage = chunk.x_groq.usage
                if usage is not None:
                    self._set_usage(builder, usage)
                choices = chunk.choices
                if not choices:
                    continue
                choice = choices[0]
                delta = choice.delta
                if delta is not None:
                    has_reasoning = (
                        delta.reasoning_content is not None
                        or delta.reasoning is not None
                        or delta.reasoning_text is not None
                    )
                    for name in reasoning_fields if has_reasoning else ():
                        reasoning = getattr(delta, name)
                        if reasoning:
                            if think_i < 0:
                                if text_i >= 0:
                                    yield builder.text_end(text_i)
                                    text_i = -1
                                t_ev = builder.thinking_start()
                                think_i = t_ev.index
                                yield t_ev
                            yield builder.thinking_delta(reasoning, think_i)
                            break
                    content = delta.content or delta.refusal
                    if content:
                        if text_i < 0:
                            if think_i >= 0:
                                yield builder.thinking_end(think_i)
                                think_i = -1
                            x_ev = builder.text_start()
                            text_i = x_ev.index
                            yield x_ev
                        yield builder.text_delta(content, text_i)
                    if delta.tool_calls:
                        for td in delta.tool_calls:
                            if td.index is not None:
                                key = td.index
                            else:  # servers that omit the index: a new id opens a new call
                                key = len(tools) if td.id is not None else len(tools) - 1
                            index = tools.get(key)
                            if index is not None and td.id:
                                block = builder.message.content[index]
                                if type(block) is ToolCall and td.id != block.id:
                                    index = None  # a new call reusing an index
                            if index is None:
                                if text_i >= 0:
                                    yield builder.text_end(text_i)
                                    text_i = -1
                                if think_i >= 0:
                                    yield builder.thinking_end(think_i)
                                    think_i = -1
                                fn = td.function
                                c_ev = builder.tool_call_start(
                                    td.id or _new_call_id(),
                                    (fn.name if fn is not None else None) or "",
                                )
                                index = c_ev.index
                                tools[key] = index
                                open_tools.append(index)
                                yield c_ev
                            fn = td.function
                            if fn is not None and fn.arguments:
                                yield builder.tool_call_delta(fn.arguments, index)
                if choice.finish_reason:
                    finish = choice.finish_reason
            else:
                continue
            break  # [DONE]
        else:
            if finish is None:
                return  # no terminal marker: the base reports a truncated stream
        for ev in _close_blocks(builder, text_i, think_i, open_tools):
            yield ev
        yield builder.done(_stop_reason(finish))

    def parse_response(self, data: bytes, builder: MessageBuilder, request: HTTPRequest) -> Iterator[StreamEvent]:
        """A complete Chat Completions response to stream events."""
        chunk = _decode_chunk(data)
        if chunk.error is not None:
            raise classify_error_object({"error": chunk.error})
        builder.message.response_id = chunk.id
        usage = chunk.usage or (chunk.x_groq.usage if chunk.x_groq is not None else None)
        if usage is not None:
            self._set_usage(builder, usage)
        choice = chunk.choices[0] if chunk.choices else _Choice()
        message = choice.message or choice.delta or _Delta()
        for name in self.compat.reasoning_fields:
            reasoning = getattr(message, name)
            if reasoning:
                ev = builder.thinking_start()
                yield ev
                yield builder.thinking_delta(reasoning, ev.index)
                yield builder.thinking_end(ev.index)
                break
        content = message.content or message.refusal
        if content:
            ev2 = builder.text_start()
            yield ev2
            yield builder.text_delta(content, ev2.index)
            yield builder.text_end(ev2.index)
        for call in message.tool_calls or ():
            fn = call.function or _Fn()
            ev3 = builder.tool_call_start(call.id or _new_call_id(), fn.name or "")
            yield ev3
            if fn.arguments:
                yield builder.tool_call_delta(fn.arguments, ev3.index)
            yield builder.tool_call_end(ev3.index)
        yield builder.done(_stop_reason(choice.finish_reason))

    def _set_usage(self, builder: MessageBuilder, usage: _Usage) -> None:
        prompt = usage.prompt_tokens or 0
        details = usage.prompt_tokens_details
        cached = (details.cached_tokens if details is not None else None) or usage.prompt_cache_hit_tokens or 0
        written = (details.cache_write_tokens if details is not None else None) or 0
        output = usage.completion_tokens or 0
        if not self.compat.reasoning_in_output and usage.completion_tokens_details is not None:
            output += usage.completion_tokens_details.reasoning_tokens or 0
        builder.set_usage(
            input=max(0, prompt - cached - written), output=output, cache_read=cached, cache_write=written
        )


def _close_blocks(
    builder: MessageBuilder, text_i: int, think_i: int, open_tools: list[int]
) -> Iterator[StreamEvent]:
    if think_i >= 0:
        yield builder.thinking_end(think_i)
    if text_i >= 0:
        yield builder.text_end(text_i)
    for index in open_tools:
        yield builder.tool_call_end(index)


def _stop_reason(finish: str | None) -> Literal["length", "tool_use"] | None:
    if finish == "length":
        return "length"
    if finish in ("tool_calls", "function_call"):
        return "tool_use"
    if finish == "content_filter":
        raise ContentFilterError("The provider's content filter stopped the response")
    return None


def _images_message(parts: list[dict[str, Any]]) -> dict[str, Any]:
    what = "Images" if all(p["type"] == "image_url" for p in parts) else "Files"
    return {"role": "user", "content": [{"type": "text", "text": f"{what} returned by the tools above:"}, *parts]}


def _image_part(image: ImageContent) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": image_url(image)}}


def _file_part(document: DocumentContent) -> dict[str, Any]:
    return {
        "type": "file",
        "file": {"filename": document_name(document), "file_data": f"data:{document.mime_type};base64,{document.data}"},
    }


_AUDIO_FORMATS = {"audio/wav": "wav", "audio/mp3": "mp3"}


def _audio_part(audio: AudioContent) -> dict[str, Any]:
    audio_format = _AUDIO_FORMATS.get(audio.mime_type)
    if audio_format is None:
        raise no_audio(audio, "OpenAI Chat Completions", ", ".join(_AUDIO_FORMATS))
    return {"type": "input_audio", "input_audio": {"data": audio.data, "format": audio_format}}


def _user_content(
    content: list[TextContent | ImageContent | DocumentContent | AudioContent] | str, images_ok: bool, provider: str
) -> str | list[dict[str, Any]]:
    """A user message's content; documents and audio go natively to OpenAI only (another
    server of this API gets a plain-text document as text and refuses the rest)."""
    if isinstance(content, str):
        return content
    if len(content) == 1 and type(content[0]) is TextContent:
        return content[0].text
    if provider == "openai":
        return content_parts(content, images_ok, "text", _image_part, _file_part, _audio_part)
    return content_parts(content, images_ok, "text", _image_part, where=f"provider {provider!r}")


def _arguments_text(call: ToolCall) -> str:
    if call.raw_arguments is not None and call.parse_error is not None:
        return call.raw_arguments
    return msgspec.json.encode(call.args).decode()
