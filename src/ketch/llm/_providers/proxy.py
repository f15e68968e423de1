"""A model behind a ketch proxy server: the client holds a proxy token, never a provider key.

The client POSTs the request (msgspec JSON: the model's name, the
:class:`~ketch.llm.Request` and the options a provider may see) to ``{url}/stream`` with
``Authorization: Bearer <token>``. The server (:func:`ketch.server.proxy_app`, mounted by
``ketch serve`` at ``/proxy``) checks the token, the model allow-list and the token's
budget, calls the real model with its own keys and streams the events back as
Server-Sent Events of compact frames: the block events without the growing ``partial``
message (``{"type": "text_delta", "index": 0, "delta": "Hel"}``), ``retry`` as it is,
and a terminal ``done`` or ``error`` frame carrying the final message, whose content,
usage and cost are authoritative. This adapter rebuilds the events with a
:class:`~ketch.llm.MessageBuilder`, so its stream is like any other model's.

Failures before the stream come back as HTTP errors with a JSON body
``{"error": {"kind": <ErrorKind>, "message": ...}}`` and keep their kind (a wrong token is
``auth``, a model off the allow-list ``invalid_request``, an exhausted budget ``auth``,
none of them retried). A failure of the upstream model arrives as an ``error`` frame
with its kind; the server already retried it, so the client does not.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from collections.abc import Iterator
from collections.abc import Mapping
from typing import Any
from typing import Unpack

import msgspec

from .._classify import clip_body
from .._errors import ErrorKind
from .._errors import ModelError
from .._errors import error_for_kind
from .._messages import AssistantMessage
from .._messages import HostedToolCall
from .._messages import HostedToolResult
from .._model import DEFAULT_CONTEXT_WINDOW
from .._model import Request
from .._model import StreamOptions
from .._registry import lookup
from .._stream import MessageBuilder
from .._stream import Retry
from .._stream import StreamDone
from .._stream import StreamEvent
from .base import HTTPModel
from .base import HTTPOptions
from .base import HTTPRequest
from .base import SSEEvents

PROXY_API = "ketch-proxy"

# The options a client may set for the upstream call (never keys, headers or raw fields).
FORWARDED_OPTIONS = (
    "temperature",
    "max_tokens",
    "thinking",
    "tool_choice",
    "response_format",
    "session_id",
    "cache_key",
    "hosted_tools",
)


class _UpstreamError(ModelError):
    """An upstream failure the server reported in the stream: already retried there."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind  # type: ignore[assignment]

    @property
    def retryable(self) -> bool:
        """Never: the server retried the upstream call as its policy allows."""
        return False


class ProxyModel(HTTPModel):
    """A model served through a ketch proxy (see :func:`proxy`).

    ``provider`` is ``"proxy"`` and ``id`` the model name asked for (``""``: the
    server's default); messages it returns carry the real provider and model. The
    context window is the local registry's for that name, unless set.
    """

    api = PROXY_API
    hosted_kinds = None  # the server's provider decides (it refuses what it does not run)

    def __init__(self, url: str, token: str, *, model: str | None = None, **options: Unpack[HTTPOptions]) -> None:
        rest: dict[str, Any] = {k: v for k, v in options.items() if k not in ("base_url", "api_key")}
        rest.setdefault("requires_key", True)
        rest.setdefault("env_keys", ())
        super().__init__(model or "", provider="proxy", base_url=url, api_key=token, **rest)
        self.model_name = model

    def __repr__(self) -> str:
        return f"ProxyModel(url={self.base_url!r}, model={self.model_name!r})"

    @property
    def context_window(self) -> int:
        """The user's setting, else the registry's window for the model's name, else
        :data:`~ketch.llm.DEFAULT_CONTEXT_WINDOW`."""
        if self._window_override:
            return self._window_override
        from .._resolve import parse_spec  # the server names its model the way get_model does

        try:
            provider, model_id = parse_spec(self.model_name or "")
        except ValueError:
            return DEFAULT_CONTEXT_WINDOW
        info = lookup(provider, model_id)
        return info.context_window if info is not None else DEFAULT_CONTEXT_WINDOW

    def stream(self, request: Request, options: StreamOptions | None = None) -> AsyncIterator[StreamEvent]:
        """Stream one response through the proxy. ``options.extra`` (raw provider request
        fields) is not sent: the server decides what reaches the provider."""
        if options is not None and options.extra:
            options = msgspec.structs.replace(options, extra=None)
        return super().stream(request, options)

    def build_request(self, request: Request, options: StreamOptions, api_key: str | None) -> HTTPRequest:
        """POST ``{url}/stream`` with the request and the forwarded options."""
        forwarded = {name: getattr(options, name) for name in FORWARDED_OPTIONS}
        body: dict[str, Any] = {
            "model": self.model_name,
            "request": request,
            "options": {k: v for k, v in forwarded.items() if v is not None},
        }
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        return HTTPRequest(url=f"{self.base_url}/stream", body=body, headers=headers)

    def classify(self, status: int, body: bytes, headers: Mapping[str, str]) -> ModelError:
        """The proxy's error body keeps its kind; anything else is classified as usual."""
        try:
            obj = msgspec.json.decode(body)
            error = obj["error"]
            kind, message = str(error["kind"]), str(error["message"])
        except (msgspec.DecodeError, LookupError, TypeError):
            return super().classify(status, body, headers)
        cls = error_for_kind(kind)
        err = cls(f"HTTP {status}: {message}", status=status, body=clip_body(body.decode("utf-8", "replace")))
        return err

    async def parse_stream(
        self, events: SSEEvents, builder: MessageBuilder, request: HTTPRequest
    ) -> AsyncIterator[StreamEvent]:
        """Rebuild the stream from the server's frames."""
        decode = _decoder.decode
        index: dict[int, int] = {}  # the server's block index -> ours
        restart = False
        async for batch in events:
            for data in batch.data:
                frame = decode(data)
                kind = frame.get("type")
                if kind == "text_delta":
                    yield builder.text_delta(frame["delta"], index[frame["index"]])
                elif kind == "toolcall_delta":
                    yield builder.tool_call_delta(frame["delta"], index[frame["index"]])
                elif kind == "thinking_delta":
                    yield builder.thinking_delta(frame["delta"], index[frame["index"]])
                elif kind == "text_start":
                    ev = builder.text_start()
                    index[frame["index"]] = ev.index
                    yield ev
                elif kind == "text_end":
                    yield builder.text_end(index[frame["index"]])
                elif kind == "thinking_start":
                    ev2 = builder.thinking_start(redacted=bool(frame.get("redacted")), signature=frame.get("signature"))
                    index[frame["index"]] = ev2.index
                    yield ev2
                elif kind == "thinking_end":
                    yield builder.thinking_end(index[frame["index"]])
                elif kind == "toolcall_start":
                    ev3 = builder.tool_call_start(frame["id"], frame["name"], signature=frame.get("signature"))
                    index[frame["index"]] = ev3.index
                    yield ev3
                elif kind == "toolcall_end":
                    yield builder.tool_call_end(index[frame["index"]], args=frame.get("args"))
                elif kind == "hosted_tool":
                    block = msgspec.convert(frame["block"], HostedToolCall | HostedToolResult)
                    ev4 = builder.hosted(block)
                    index[frame["index"]] = ev4.index
                    yield ev4
                elif kind == "start":
                    if restart:
                        restart = False
                        yield builder.start()
                elif kind == "retry":
                    retry = msgspec.convert(frame, Retry)
                    if retry.discard_partial:
                        builder.reset()
                        index.clear()
                        restart = True
                    yield retry
                elif kind == "done":
                    final = msgspec.convert(frame["message"], AssistantMessage)
                    yield StreamDone(reason=final.stop_reason, message=_adopt(builder, final))
                    return
                elif kind == "error":
                    final = msgspec.convert(frame["message"], AssistantMessage)
                    m = builder.message
                    m.usage = final.usage
                    m.provider, m.api, m.model = final.provider, final.api, final.model
                    error_kind: ErrorKind | str = final.error_kind or "unknown"
                    raise _UpstreamError(final.error_message or "the upstream model failed", error_kind)
                # Unknown frame types are ignored (a newer server may send more).

    def parse_response(self, data: bytes, builder: MessageBuilder, request: HTTPRequest) -> Iterator[StreamEvent]:
        """The proxy always streams; a JSON body is an error object (handled by the base)."""
        raise ModelError("The proxy sent a JSON body instead of a stream")


_decoder = msgspec.json.Decoder(dict[str, Any])


def _adopt(builder: MessageBuilder, final: AssistantMessage) -> AssistantMessage:
    """The builder's message (the object consumers already hold) with the server's final
    content, usage, cost and identity."""
    m = builder.message
    for name in AssistantMessage.__struct_fields__:
        if name != "timestamp":
            setattr(m, name, getattr(final, name))
    return m


def proxy(url: str, token: str, *, model: str | None = None, **options: Unpack[HTTPOptions]) -> ProxyModel:
    """A model served by a ketch proxy at ``url`` (where the server mounts it, e.g.
    ``http://127.0.0.1:8765/proxy``), authenticated with ``token``.

    ``model`` is the ``"provider:model"`` name the server should call (it must be on the
    server's allow-list; None: the server's default). The provider key stays on the
    server: the client holds only ``token``, which is redacted from errors like any key.
    ``options`` are the HTTP options of every model (``idle_timeout``, ``retry``,
    ``observer`` ...).
    """
    return ProxyModel(url, token, model=model, **options)
