"""The model proxy's server side: an aiohttp sub-application that calls the real model
with the server's keys for clients that hold only a proxy token.

``proxy_app(models=[...], budgets={token: usd})`` returns the application; ``ketch serve``
mounts it at ``/proxy`` (``root.add_subapp("/proxy", proxy_app(...))``) and a client
reaches it with ``ketch.llm.proxy("http://host:port/proxy", token, model=...)``.

Routes (every one needs ``Authorization: Bearer <token>``, a token of ``budgets``;
otherwise 401):

- ``POST /stream``: the body is msgspec JSON ``{"model": name | null, "request":
  Request, "options": {...}}``; the answer is a Server-Sent-Events stream of frames (see
  :mod:`ketch.llm._providers.proxy` for their shape). Only the options a provider may
  see are taken (temperature, max_tokens, thinking, tool_choice, response_format,
  session_id, cache_key); keys, headers and raw request fields from a client are never
  used. A model not on the allow-list gets 403, a token whose spend reached its budget
  429, a malformed body 400, a body over ``max_request_bytes`` 413; each with
  ``{"error": {"kind": <ErrorKind>, "message": ...}}``.
- ``GET /models``: the allowed models, OpenAI-shaped (``{"object": "list", "data":
  [{"id", "object": "model", "created", "owned_by", "context_window"}], "default"}``:
  an OpenAI client's ``models.list()`` reads them), and the default.
- ``GET /usage``: the calling token's spend and budget in US dollars.

A token's spend is the cost of its calls as the model reports it (ketch's adapters price
usage from the model registry), counted when each call ends, failed ones included; a
call starts only while the spend is under the budget. Error texts sent to clients have
the values of key-like environment variables (``*_API_KEY``, ``*_TOKEN`` …) and of
``secrets`` redacted; the provider keys themselves never leave the server.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from typing import Any

import msgspec
from aiohttp import web

from ..llm import AbortSignal
from ..llm import AssistantMessage
from ..llm import AsyncClosable
from ..llm import HostedTool
from ..llm import Model
from ..llm import Request
from ..llm import StreamError
from ..llm import StreamEvent
from ..llm import StreamOptions
from ..llm import ThinkingContent
from ..llm import ThinkingLevel
from ..llm import ToolCall
from ..llm import ToolResultMessage
from ..llm import ToolSpec
from ..llm import UserMessage
from ..llm import encode_json
from ..llm import redact_text
from ..sandbox import is_secret_name

DEFAULT_MAX_REQUEST_BYTES = 64 * 1024 * 1024
"""The largest request body the proxy reads (a long transcript is large): 64 MiB."""


class _Options(msgspec.Struct, kw_only=True):
    """The options a client may set (the client's ``FORWARDED_OPTIONS``), each a ``StreamOptions`` field."""

    temperature: float | None = None
    max_tokens: int | None = None
    thinking: ThinkingLevel = "off"
    tool_choice: str | None = None
    response_format: dict[str, Any] | None = None
    session_id: str | None = None
    cache_key: str | None = None
    hosted_tools: tuple[HostedTool, ...] | None = None


class _WireRequest(msgspec.Struct, kw_only=True):
    system_prompt: str = ""
    messages: list[UserMessage | AssistantMessage | ToolResultMessage] = msgspec.field(default_factory=list)
    tools: list[ToolSpec] = msgspec.field(default_factory=list)


class _Call(msgspec.Struct, kw_only=True):
    model: str | None = None
    request: _WireRequest
    options: _Options = msgspec.field(default_factory=_Options)


_call_decoder = msgspec.json.Decoder(_Call)
_encoder = msgspec.json.Encoder()


class ProxyError(Exception):
    """A request the proxy refuses: HTTP ``status`` with an error ``kind`` and ``message``."""

    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.message = message


class _Proxy:
    def __init__(
        self,
        models: Iterable[str],
        budgets: Mapping[str, float | None],
        resolve: Callable[[str], Model],
        default_model: str | None,
        max_request_bytes: int,
        secrets: Iterable[str],
    ) -> None:
        self.models = list(dict.fromkeys(models))
        if not self.models:
            raise ValueError("proxy_app needs at least one allowed model")
        if not budgets:
            raise ValueError("proxy_app needs at least one token in budgets")
        for token, budget in budgets.items():
            if not token:
                raise ValueError("proxy_app: a token may not be empty")
            if budget is not None and (isinstance(budget, bool) or budget < 0):
                raise ValueError(f"proxy_app: the budget of a token must be a non-negative number or None, got {budget!r}")
        self.default = default_model or self.models[0]
        if self.default not in self.models:
            raise ValueError(f"proxy_app: default_model {self.default!r} is not among the allowed models")
        self.budgets = dict(budgets)
        self.spent: dict[str, float] = dict.fromkeys(budgets, 0.0)
        self._tokens = [(t.encode(), t) for t in budgets]
        self.resolve = resolve
        self._resolved: dict[str, Model] = {}
        self.max_request_bytes = max_request_bytes
        self._extra_secrets = tuple(s for s in secrets if s)

    # -- checks -------------------------------------------------------------------------
    def token(self, request: web.Request) -> str:
        header = request.headers.get("authorization", "")
        scheme, _, given = header.partition(" ")
        if scheme.lower() == "bearer" and given.strip():
            candidate = given.strip().encode()
            found: str | None = None
            for raw, token in self._tokens:  # compare with every token, in constant time each
                if hmac.compare_digest(raw, candidate):
                    found = token
            if found is not None:
                return found
        raise ProxyError(401, "auth", "Missing or invalid proxy token (Authorization: Bearer <token>)")

    def model(self, name: str | None) -> tuple[str, Model]:
        name = name or self.default
        if name not in self.models:
            allowed = ", ".join(self.models)
            raise ProxyError(403, "invalid_request", f"Model {name!r} is not allowed by this proxy; allowed: {allowed}")
        model = self._resolved.get(name)
        if model is None:
            try:
                model = self._resolved[name] = self.resolve(name)
            except Exception as exc:
                raise ProxyError(502, "server", f"The proxy cannot reach model {name!r}: {self.redact(str(exc))}") from None
        return name, model

    def check_budget(self, token: str) -> None:
        budget = self.budgets.get(token)
        spent = self.spent.get(token, 0.0)
        if budget is not None and spent >= budget:
            raise ProxyError(
                429, "auth", f"Budget exhausted for this token: spent ${spent:.6f} of ${budget:.6f}"
            )

    def redact(self, text: str) -> str:
        return redact_text(text, self.secrets())

    def secrets(self) -> tuple[str, ...]:
        """The values of the variables the sandbox never passes on (``is_secret_name``)
        and the proxy's own secrets, longest first."""
        return tuple(sorted({*env_secrets(), *self._extra_secrets}, key=len, reverse=True))

    # -- handlers -------------------------------------------------------------------------
    async def read_body(self, request: web.Request) -> bytes:
        limit = self.max_request_bytes
        if request.content_length is not None and request.content_length > limit:
            raise ProxyError(413, "invalid_request", f"Request body over the proxy's limit of {limit} bytes")
        chunks: list[bytes] = []
        size = 0
        while True:
            chunk = await request.content.readany()
            if not chunk:
                break
            size += len(chunk)
            if size > limit:
                raise ProxyError(413, "invalid_request", f"Request body over the proxy's limit of {limit} bytes")
            chunks.append(chunk)
        return b"".join(chunks)

    async def stream(self, request: web.Request) -> web.StreamResponse:
        try:
            token = self.token(request)
            body = await self.read_body(request)
            try:
                call = _call_decoder.decode(body)
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                raise ProxyError(400, "invalid_request", f"Malformed proxy request: {exc}") from None
            _, model = self.model(call.model)
            self.check_budget(token)
        except ProxyError as exc:
            return _error(exc)
        wire = call.request
        signal = AbortSignal()
        options = StreamOptions(**msgspec.structs.asdict(call.options), signal=signal)
        upstream = Request(system_prompt=wire.system_prompt, messages=list(wire.messages), tools=wire.tools)
        response = web.StreamResponse(
            headers={"content-type": "text/event-stream", "cache-control": "no-cache", "x-accel-buffering": "no"}
        )
        await response.prepare(request)
        final: AssistantMessage | None = None
        events = model.stream(upstream, options)
        try:
            async for event in events:
                match event.type:
                    case "done":
                        final = event.message
                    case "error":
                        final = event.error
                        event = StreamError(reason=event.reason, error=self._redacted(final))
                    case "retry":  # its message is the failed attempt's error
                        event = msgspec.structs.replace(event, error_message=self.redact(event.error_message))
                frame = _frame(event)
                if frame is None:
                    continue
                try:
                    await response.write(frame)
                except (ConnectionError, RuntimeError):
                    signal.abort()  # the client went away: stop the upstream call
                    break
                if final is not None:
                    break
        finally:
            if isinstance(events, AsyncClosable):
                await events.aclose()
            if final is not None:
                self.spent[token] = self.spent.get(token, 0.0) + final.usage.cost.total
        try:
            await response.write_eof()
        except (ConnectionError, RuntimeError):
            pass
        return response

    def _redacted(self, message: AssistantMessage) -> AssistantMessage:
        text = message.error_message
        if text is None:
            return message
        shown = self.redact(text)
        return message if shown == text else msgspec.structs.replace(message, error_message=shown)

    async def list_models(self, request: web.Request) -> web.Response:
        try:
            self.token(request)
            listed = []
            for name in self.models:
                _, model = self.model(name)
                listed.append({"id": name, "object": "model", "created": 0, "owned_by": "ketch-proxy", "context_window": model.context_window})
        except ProxyError as exc:
            return _error(exc)
        return web.json_response({"object": "list", "data": listed, "default": self.default})

    async def usage(self, request: web.Request) -> web.Response:
        try:
            token = self.token(request)
        except ProxyError as exc:
            return _error(exc)
        return web.json_response({"spent_usd": self.spent.get(token, 0.0), "budget_usd": self.budgets.get(token)})


def _error(exc: ProxyError) -> web.Response:
    headers = {"www-authenticate": "Bearer"} if exc.status == 401 else None
    return web.json_response({"error": {"kind": exc.kind, "message": exc.message}}, status=exc.status, headers=headers)


def env_secrets() -> list[str]:
    """The values of the variables the sandbox never passes on (``is_secret_name``)."""
    return [v for k, v in os.environ.items() if is_secret_name(k) and len(v) >= 8]


def _frame(event: StreamEvent) -> bytes | None:
    """One event as an SSE frame without the growing ``partial`` message."""
    obj: Any
    match event.type:
        case "text_delta" | "thinking_delta" | "toolcall_delta":
            obj = {"type": event.type, "index": event.index, "delta": event.delta}
        case "text_start" | "text_end" | "thinking_end":
            obj = {"type": event.type, "index": event.index}
        case "thinking_start":
            block = event.partial.content[event.index]
            obj = {"type": "thinking_start", "index": event.index}
            if isinstance(block, ThinkingContent):
                if block.redacted:
                    obj["redacted"] = True
                if block.signature:
                    obj["signature"] = block.signature
        case "toolcall_start":
            call = event.partial.content[event.index]
            assert isinstance(call, ToolCall)
            obj = {"type": "toolcall_start", "index": event.index, "id": call.id, "name": call.name}
            if call.signature:
                obj["signature"] = call.signature
        case "toolcall_end":
            obj = {"type": "toolcall_end", "index": event.index, "args": event.tool_call.args}
        case "hosted_tool":
            obj = {"type": "hosted_tool", "index": event.index, "block": event.block}
        case "start":
            obj = {"type": "start"}
        case "retry":
            obj = event
        case "done":
            obj = {"type": "done", "message": event.message}
        case "error":
            obj = {"type": "error", "message": event.error}
        case _:
            return None
    data = encode_json(obj, _encoder)
    return b"data: " + data + b"\n\n"


def proxy_app(
    *,
    models: Iterable[str],
    budgets: Mapping[str, float | None],
    resolve: Callable[[str], Model] | None = None,
    default_model: str | None = None,
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
    secrets: Iterable[str] = (),
) -> web.Application:
    """The proxy as an aiohttp application, to mount under a server (``/proxy``).

    ``models``: the allow-list of ``"provider:model"`` names clients may use (the first
    is the default unless ``default_model`` says otherwise). ``budgets``: each client
    token and its budget in US dollars (None: unlimited). ``resolve`` turns a name into
    the model to call (default :func:`ketch.llm.get_model`, which finds the server's keys
    in its environment); each name is resolved once. ``secrets``: more strings to redact
    from error texts. Raises ``ValueError`` for an empty allow-list, no tokens, an empty
    token or a negative budget.
    """
    if resolve is None:
        from ..llm import get_model

        resolve = get_model
    proxy = _Proxy(models, budgets, resolve, default_model, max_request_bytes, secrets)
    app = web.Application()
    app.router.add_post("/stream", proxy.stream)
    app.router.add_get("/models", proxy.list_models)
    app.router.add_get("/usage", proxy.usage)
    return app
