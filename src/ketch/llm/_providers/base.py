"""The HTTP machinery every provider adapter shares.

:class:`HTTPModel` implements :meth:`ketch.llm._model.Model.stream` once: key
resolution, request hooks, the shared aiohttp session, streaming and non-streaming
responses, idle and total timeouts, error classification, retries with backoff, and
the stream-protocol guarantees (kept by the streaming generator itself, as
:func:`~ketch.llm.guard_stream` keeps them for other producers). An adapter
subclasses it and implements three methods:

- :meth:`HTTPModel.build_request` — URL, headers and JSON body for a context;
- :meth:`HTTPModel.parse_stream` — SSE events to builder events, ending with
  ``builder.done(...)`` when the provider's terminal marker arrives;
- :meth:`HTTPModel.parse_response` — a complete JSON response to builder events.

and may override :meth:`HTTPModel.classify` for provider-specific error bodies.
"""

from __future__ import annotations

import asyncio
import inspect
import os
from collections.abc import AsyncIterator
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence
from typing import TYPE_CHECKING
from typing import Any
from typing import Literal
from typing import TypeAlias
from typing import TypedDict
from typing import TypeVar

import msgspec

from .._classify import classify_error_body
from .._classify import classify_exception
from .._classify import classify_response
from .._errors import AuthError
from .._errors import ContextOverflowError
from .._errors import InvalidRequestError
from .._errors import ModelError
from .._errors import NetworkError
from .._errors import ServerError
from .._errors import exception_text
from .._http import DEFAULT_MAX_EVENT_BYTES
from .._http import Deadline
from .._http import SSEBatch
from .._http import TimedContent
from .._http import get_session
from .._http import iter_sse
from .._http import json_unescaped
from .._http import proxy_for
from .._http import read_limited
from .._http import redact_headers
from .._http import redact_text
from .._http import redact_url
from .._http import secrets_from_env
from .._http import url_secrets
from .._messages import AudioContent
from .._messages import DocumentContent
from .._messages import ImageContent
from .._messages import Message
from .._messages import TextContent
from .._model import HostedTool
from .._model import Request
from .._model import StreamOptions
from .._model import ToolSpec
from .._registry import ModelInfo
from .._registry import default_info
from .._registry import get_provider
from .._registry import list_providers
from .._registry import lookup
from .._retry import RetryPolicy
from .._signal import Aborted
from .._signal import AbortSignal
from .._stream import MessageBuilder
from .._stream import Retry
from .._stream import StreamDone
from .._stream import StreamEvent
from .._stream import is_closable
from .wire_cache import WireCache
from .wire_cache import encode_body

if TYPE_CHECKING:
    import aiohttp


DEFAULT_IDLE_TIMEOUT = 90.0
"""Seconds a streamed request may wait for its next bytes (the headers included)."""

T = TypeVar("T")

SSEEvents: TypeAlias = AsyncIterator[SSEBatch]
"""Server-Sent Events from :func:`ketch.llm._http.iter_sse`, one batch per read."""


async def feed_events(events: SSEEvents, feed: Callable[[bytes], list[StreamEvent]]) -> AsyncIterator[StreamEvent]:
    """The stream events ``feed`` (a provider's stream-state parser) makes of each event's
    data, in order: the ``parse_stream`` of a provider whose state needs nothing else."""
    async for batch in events:
        for data in batch.data:
            for event in feed(data):
                yield event


class HTTPRequest(msgspec.Struct, kw_only=True):
    """One request as an adapter builds it. ``headers`` hold the adapter's own headers
    (auth included); the base adds content negotiation and user headers."""

    url: str
    body: dict[str, Any]
    headers: dict[str, str] = msgspec.field(default_factory=dict)
    stream: bool = True


class HTTPExchange(msgspec.Struct, kw_only=True):
    """What an observer sees, once per request (``phase="request"``) and once per
    response (``phase="response"``). Headers are redacted; ``error`` holds the body of a
    failed response (redacted)."""

    phase: Literal["request", "response"]
    attempt: int
    method: str
    url: str
    headers: dict[str, str]
    body: Any = None
    status: int | None = None
    response_headers: dict[str, str] | None = None
    error: str | None = None


Observer: TypeAlias = Callable[[HTTPExchange], "Awaitable[None] | None"]
"""Sees every request and response (for logging and tests)."""

Rewrite: TypeAlias = Callable[[dict[str, Any]], "dict[str, Any] | Awaitable[dict[str, Any] | None] | None"]
"""Sees the JSON body before it is sent; may mutate it or return a replacement."""

_DEFAULT_OPTIONS = StreamOptions()
_DRAIN_SECONDS = 0.25

IMAGE_OMITTED = "(image omitted: this model does not accept images)"
"""Sent in place of an image to a model that does not accept images (every adapter)."""


def image_url(image: ImageContent) -> str:
    """The image's URL, or its data as a ``data:`` URL."""
    return image.url if image.url is not None else f"data:{image.mime_type};base64,{image.data}"


def content_parts(
    blocks: Sequence[TextContent | ImageContent | DocumentContent | AudioContent],
    images: bool,
    text_type: str,
    image_part: Callable[[ImageContent], dict[str, Any]],
    document_part: Callable[[DocumentContent], dict[str, Any]] | None = None,
    audio_part: Callable[[AudioContent], dict[str, Any]] | None = None,
    where: str = "this model",
) -> list[dict[str, Any]]:
    """The typed parts of an OpenAI user message (Chat Completions or Responses).

    Text becomes ``{"type": text_type, "text": ...}``, an image ``image_part(image)``,
    or with ``images`` false the text :data:`IMAGE_OMITTED`, a document
    ``document_part(document)`` (None: a plain-text one becomes text, see
    :func:`document_text`, and a PDF raises :func:`no_documents`) and a recording
    ``audio_part(audio)`` (None: :func:`no_audio` raises). ``where`` names the model
    or provider in those errors.
    """
    parts: list[dict[str, Any]] = []
    for block in blocks:
        if type(block) is TextContent:
            parts.append({"type": text_type, "text": block.text})
        elif type(block) is ImageContent:
            parts.append(image_part(block) if images else {"type": text_type, "text": IMAGE_OMITTED})
        elif type(block) is DocumentContent:
            if document_part is not None:
                parts.append(document_part(block))
            elif block.mime_type == "text/plain":
                parts.append({"type": text_type, "text": document_text(block)})
            else:
                raise no_documents(block, where)
        elif type(block) is AudioContent:
            if audio_part is None:
                raise no_audio(block, where)
            parts.append(audio_part(block))
    return parts


def document_name(document: DocumentContent) -> str:
    """The document's file name (a default one by its type when it has none)."""
    return document.name or ("document.pdf" if document.mime_type == "application/pdf" else "document.txt")


def document_text(document: DocumentContent) -> str:
    """A plain-text document as text, for the models that take no documents: its
    content between ``<document name="...">`` and ``</document>`` lines."""
    import base64

    text = base64.b64decode(document.data).decode("utf-8", errors="replace")
    return f'<document name="{document_name(document)}">\n{text}\n</document>'


def no_documents(document: DocumentContent, where: str = "this model") -> InvalidRequestError:
    """The error for a document sent to a model that does not take documents."""
    return InvalidRequestError(
        f"{where} does not accept documents ({document.mime_type} {document_name(document)!r}); "
        "send its text as a TextContent, or use an Anthropic, Gemini or OpenAI model"
    )


def hosted_tools(
    request: Request,
    options: StreamOptions,
    provider: str,
    api: str,
    supported: Mapping[str, Callable[[HostedTool], dict[str, Any]]],
) -> tuple[list[ToolSpec], list[dict[str, Any]]]:
    """The function tools to send and the hosted tools in the provider's form
    (``supported`` maps each kind the adapter sends to its builder). A kind the adapter
    does not send is an :class:`InvalidRequestError` naming it and the provider, unless
    the hosted tool has a ``fallback`` function tool, which is then sent instead; a
    fallback is withheld where its hosted tool is sent."""
    hosted = options.hosted_tools
    if not hosted:
        return request.tools, []
    out: list[dict[str, Any]] = []
    withheld: set[str] = set()
    for tool in hosted:
        make = supported.get(tool.kind)
        if make is None:
            if tool.fallback is not None:
                continue
            allowed = ", ".join(supported) or "none"
            raise InvalidRequestError(
                f"hosted tool {tool.kind!r} is not supported by provider {provider!r} ({api}); supported: {allowed}"
            )
        out.append(make(tool))
        if tool.fallback is not None:
            withheld.add(tool.fallback)
    tools = [t for t in request.tools if t.name not in withheld] if withheld else request.tools
    return tools, out


def no_hosted_tools(options: StreamOptions | None, provider: str, api: str) -> None:
    """Raise :class:`InvalidRequestError` when ``options`` asks for a hosted tool that
    has no fallback (for models that run none)."""
    for tool in (options.hosted_tools if options is not None else None) or ():
        if tool.fallback is None:
            raise InvalidRequestError(
                f"hosted tool {tool.kind!r} is not supported by provider {provider!r} ({api}); supported: none"
            )


def audio_name(audio: AudioContent) -> str:
    """The recording's file name (``audio`` and its type's extension when it has none)."""
    return audio.name or "audio." + audio.mime_type.removeprefix("audio/")


def no_audio(audio: AudioContent, where: str = "this model", allowed: str = "") -> InvalidRequestError:
    """The error for a recording sent to a model (or of a type) that does not take it;
    ``allowed`` lists the types it does take (empty: none)."""
    what = f"audio of type {audio.mime_type}" if allowed else "audio"
    tail = f"it takes {allowed}" if allowed else "send a transcript as a TextContent, or use a Gemini or OpenAI Chat model"
    return InvalidRequestError(f"{where} does not accept {what} ({audio_name(audio)!r}); {tail}")


class HTTPOptions(TypedDict, total=False):
    """The connection and request options every HTTP model accepts (see :class:`HTTPModel`)."""

    base_url: str | None
    api_key: str | None
    env_keys: tuple[str, ...] | None
    requires_key: bool | None
    info: ModelInfo | None
    headers: Mapping[str, str] | None
    retry: RetryPolicy | None
    idle_timeout: float | None
    timeout: float | None
    connect_timeout: float | None
    max_event_bytes: int | None
    observer: Observer | None
    rewrite: Rewrite | None


class HTTPModel:
    """A model reached over HTTP. Subclasses implement the wire protocol (and prepare
    the request's messages for it: :class:`~ketch.llm.PreparesMessages`).

    ``base_url``, ``env_keys`` and ``requires_key`` default to those the registry holds
    for ``provider`` (their one home; see :func:`~ketch.llm.register_provider`); a
    provider the registry does not know needs ``base_url`` and reads no key variable.
    ``api_key`` wins over ``StreamOptions.api_key``, which wins over the environment
    variables in ``env_keys``. ``info`` (default: the registry's entry for
    ``provider``/``id``, when there is one) gives pricing (cost is computed on every usage
    update) and, when it holds real data about the model (registered, named or with
    explicit limits), the context window that usage is checked against and the input
    modalities. ``idle_timeout`` (default :data:`DEFAULT_IDLE_TIMEOUT`, 90 s) bounds
    every wait for bytes of a streamed response, the first one (the response headers)
    included; a request that failed on it is retried at most once. ``timeout`` bounds
    one whole attempt; ``connect_timeout`` the connection set-up. ``max_event_bytes``
    (default 16 MiB) bounds one Server-Sent Event, one line of it and one
    non-streamed body. ``observer`` and ``rewrite`` are the request hooks (see
    :data:`Observer`, :data:`Rewrite`).

    A request sent on a pooled keep-alive connection that the server had closed fails
    before any response byte; it is sent again at once on a new connection, silently
    (no retry event, no wait), once per request. Keys are redacted from errors and
    exchanges: the request's own key and the values of ``env_keys``, of every registered
    provider's key variables and of the conventional ones
    (:data:`~ketch.llm._http.CONVENTIONAL_KEY_ENV`).
    """

    api: str = ""
    hosted_kinds: frozenset[str] | None = frozenset()
    """The :attr:`HostedTool.kind <ketch.llm.HostedTool.kind>` values this API runs (see
    :func:`ketch.llm.hosted_kinds`)."""
    prepares_messages: bool = True

    def __init__(
        self,
        id: str,
        *,
        provider: str,
        base_url: str | None = None,
        api_key: str | None = None,
        env_keys: tuple[str, ...] | None = None,
        requires_key: bool | None = None,
        info: ModelInfo | None = None,
        headers: Mapping[str, str] | None = None,
        retry: RetryPolicy | None = None,
        idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT,
        timeout: float | None = 600.0,
        connect_timeout: float | None = 30.0,
        max_event_bytes: int | None = DEFAULT_MAX_EVENT_BYTES,
        observer: Observer | None = None,
        rewrite: Rewrite | None = None,
    ) -> None:
        self.id = id
        self.provider = provider
        known = get_provider(provider)
        url = base_url or (known.base_url if known is not None else "")
        if not url:
            raise ValueError(
                f"No base_url for provider {provider!r}: pass base_url, or register the provider"
                " (ketch.llm.register_provider)"
            )
        self.base_url = url.rstrip("/")
        self._api_key = api_key
        if env_keys is None:
            env_keys = known.api_key_env if known is not None else ()
        self.env_keys = env_keys
        self.requires_key = requires_key if requires_key is not None else known is None or known.requires_key
        if info is None:
            info = lookup(provider, id)
        self.info = info if info is not None else default_info(provider, self.api, id, self.base_url)
        # Limits are enforced only from real data, never from the defaults of an unknown model.
        self._known_info = info is not None and _describes_model(info)
        self._window = info.context_window if info is not None and self._known_info else None
        self._window_override: int | None = None
        self.headers = dict(headers) if headers else {}
        self.retry = retry if retry is not None else RetryPolicy()
        self.idle_timeout = idle_timeout
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.max_event_bytes = max_event_bytes
        self.observer = observer
        self.rewrite = rewrite
        self._client_timeout: aiohttp.ClientTimeout | None = None
        self._wire_cache = WireCache()

    @property
    def native_output(self) -> bool:
        """Whether the provider's own structured output (``response_format``) works for
        this model: the registry's ``compat["native_output"]``, true when not set
        (:class:`~ketch.llm.SupportsNativeOutput`)."""
        return bool(self.info.compat.get("native_output", True))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(provider={self.provider!r}, id={self.id!r}, base_url={redact_url(self.base_url)!r})"

    @property
    def context_window(self) -> int:
        """The context window in tokens: the user's setting, else the registry's (the
        default for a model the registry does not list)."""
        return self._window_override or self.info.context_window

    def _takes_images(self) -> bool:
        """Whether images may be sent: a known model says so; an unknown one may well."""
        return not self._known_info or "image" in self.info.input_modalities

    def _wire_items(
        self,
        messages: Sequence[Message],
        convert: Callable[[list[Message], bool], list[dict[str, Any]]],
        normalize_id: Callable[[str], str],
        settings: object = None,
    ) -> tuple[list[dict[str, Any]], bool]:
        """The transcript in the adapter's wire form, and whether images are sent:
        ``convert(prepared messages, images)``, kept in this model's cache (see
        :class:`~ketch.llm._providers.wire_cache.WireCache`) under ``settings`` (what
        else the items depend on) and the image setting."""
        images = self._takes_images()
        items = self._wire_cache.items_for(
            self, messages, (settings, images), lambda prepared: convert(prepared, images), normalize_id
        )
        return items, images

    def set_context_window(self, window: int | None) -> None:
        """Override :attr:`context_window` (None: the registry's again)."""
        self._window_override = window

    # -- what adapters implement -----------------------------------------------------
    def build_request(self, request: Request, options: StreamOptions, api_key: str | None) -> HTTPRequest:
        """The request for ``request``. ``api_key`` is the resolved key (None when the
        endpoint needs none)."""
        raise NotImplementedError

    def parse_stream(
        self, events: SSEEvents, builder: MessageBuilder, request: HTTPRequest
    ) -> AsyncIterator[StreamEvent]:
        """Turn SSE events into builder events; yield ``builder.done(...)`` at the
        provider's terminal marker. Raise a :class:`ModelError` for in-stream errors.
        Ending without a done event is reported as a truncated stream."""
        raise NotImplementedError

    def parse_response(self, data: bytes, builder: MessageBuilder, request: HTTPRequest) -> Iterator[StreamEvent]:
        """Turn a complete (non-streamed) JSON response into builder events ending
        with ``builder.done(...)``."""
        raise NotImplementedError

    def classify(self, status: int, body: bytes, headers: Mapping[str, str]) -> ModelError:
        """The error for a failed response; override for provider-specific bodies."""
        return classify_response(status, body, headers)

    # -- the Model interface ---------------------------------------------------------
    def stream(self, request: Request, options: StreamOptions | None = None) -> AsyncIterator[StreamEvent]:
        """Stream one assistant response (never raises for request or runtime failures)."""
        opts = options if options is not None else _DEFAULT_OPTIONS
        builder = MessageBuilder(
            provider=self.provider, api=self.api, model=self.id, pricing=self.info.pricing.apply
        )
        return self._produce(request, opts, builder)

    def resolve_api_key(self, options: StreamOptions | None = None) -> str | None:
        """The key a request would use: explicit, then per-request, then environment."""
        key = self._api_key or (options.api_key if options is not None else None)
        if not key:
            for name in self.env_keys:
                key = os.environ.get(name)
                if key:
                    break
        return key or None

    # -- internals -------------------------------------------------------------------
    def _connect_timeout(self) -> aiohttp.ClientTimeout:
        # aiohttp keeps only the connect limit: the idle and total limits are a
        # Deadline's, which costs one timer per attempt instead of one per chunk.
        if self._client_timeout is None:
            import aiohttp

            self._client_timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.connect_timeout)
        return self._client_timeout

    async def _prepare(
        self, context: Request, options: StreamOptions
    ) -> tuple[HTTPRequest, list[bytes | memoryview], dict[str, str], _Secrets]:
        key = self.resolve_api_key(options)
        if key is None and self.requires_key:
            where = " or ".join(self.env_keys) if self.env_keys else "an environment variable"
            raise AuthError(f"No API key for provider {self.provider!r}: pass api_key or set {where}")
        request = self.build_request(context, options, key)
        if options.extra:
            request.body.update(options.extra)
        if self.rewrite is not None:
            replaced = self.rewrite(request.body)
            if inspect.isawaitable(replaced):
                replaced = await replaced
            if replaced is not None:
                request.body = replaced
        headers = {
            "content-type": "application/json",
            "accept": "text/event-stream" if request.stream else "application/json",
            **request.headers,
            **self.headers,
        }
        if options.headers:
            headers.update(options.headers)
        return request, encode_body(request.body), headers, _Secrets(key, self.env_keys, headers, request.url)

    async def _observe(
        self,
        phase: Literal["request", "response"],
        attempt: int,
        request: HTTPRequest,
        headers: Mapping[str, str],
        secrets: tuple[str, ...],
        response: aiohttp.ClientResponse | None = None,
        error_body: bytes | None = None,
    ) -> None:
        assert self.observer is not None
        exchange = HTTPExchange(
            phase=phase,
            attempt=attempt,
            method="POST",
            url=redact_text(request.url, secrets),
            headers=redact_headers(headers, secrets),
            body=request.body,
        )
        if response is not None:
            exchange.status = response.status
            exchange.response_headers = redact_headers(response.headers, secrets)
            if error_body is not None:
                exchange.error = redact_text(error_body.decode("utf-8", "replace"), secrets)
        result = self.observer(exchange)
        if inspect.isawaitable(result):
            await result

    async def _produce(
        self, context: Request, options: StreamOptions, builder: MessageBuilder
    ) -> AsyncIterator[StreamEvent]:
        # This generator keeps the stream protocol itself (what guard_stream does for
        # other producers), so events reach the consumer in one hand-off: one start,
        # exactly one terminal event, failures and aborts as error events keeping the
        # partial content. Every wait goes through a Deadline, which also ends it when
        # the signal aborts; an abort between waits is seen at the next event. The steps
        # that yield nothing are methods of their own (_send, _checked_body, _whole_body,
        # _retry); the events themselves are yielded here only.
        signal = options.signal
        started = True
        yield builder.start()
        try:
            if signal is not None and signal.aborted:
                raise Aborted()
            if self.rewrite is None:
                request, payload, headers, secrets = await self._prepare(context, options)
            else:
                request, payload, headers, secrets = await _abortable(self._prepare(context, options), signal)
            policy = self.retry
            limit = self.max_event_bytes
            attempt = 0
            resent = False  # the one silent resend after a stale pooled connection
            idle_failures = 0
            while True:
                attempt += 1
                try:
                    if self.observer is not None:
                        await _abortable(
                            self._observe("request", attempt, request, headers, secrets.values()), signal
                        )
                    session = await get_session()
                    deadline = Deadline(self.idle_timeout if request.stream else None, self.timeout, signal)
                    try:
                        response = await deadline.wait(self._send(session, request, payload, headers))
                    except BaseException as exc:
                        deadline.close()
                        if not resent and _stale_connection(exc):
                            # The server closed a kept-alive connection before answering:
                            # send again at once on a new one, as if nothing happened.
                            resent = True
                            attempt -= 1
                            continue
                        raise
                    finished = False
                    try:
                        content, first, sse = await self._checked_body(
                            response, deadline, request, headers, secrets, attempt, limit
                        )
                        if sse:
                            events = iter_sse(content, first=first, max_event=limit)
                            parsed = self.parse_stream(events, builder, request)
                            try:
                                async for event in parsed:
                                    if type(event) is StreamDone:
                                        self._check_window(builder)
                                        await _drain(response)
                                        finished = True
                                        yield event
                                        return
                                    yield event
                                    if deadline.error is not None:
                                        raise deadline.error  # aborted while the consumer held the event
                            except _MALFORMED as exc:
                                raise _malformed(exc) from None
                            finally:
                                await _aclose(parsed)
                                await _aclose(events)
                            if not finished:
                                raise NetworkError("The stream ended before the response was complete")
                        else:
                            for event in await self._whole_body(content, limit, first, builder, request):
                                if type(event) is StreamDone:
                                    self._check_window(builder)
                                    finished = True
                                yield event
                        return
                    except BaseException:
                        if not finished:
                            response.close()  # drop the connection at once; never reuse it
                        raise
                    finally:
                        deadline.close()
                        response.release()
                except Aborted:
                    raise
                except Exception as exc:
                    error, delay, idle_failures = self._retry(exc, policy, attempt, idle_failures, secrets)
                    discard = bool(builder.message.content)
                    yield Retry(
                        attempt=attempt,
                        max_attempts=policy.max_attempts,
                        delay=delay,
                        error_kind=error.kind,
                        error_message=error.message,
                        discard_partial=discard,
                    )
                    if discard:
                        builder.reset()
                        started = False
                    await _abortable(asyncio.sleep(delay), signal)
                    if discard:
                        started = True
                        yield builder.start()
        except Aborted:
            if not started:
                yield builder.start()
            yield builder.aborted()
        except Exception as exc:
            message, kind = (exc.message, exc.kind) if isinstance(exc, ModelError) else (exception_text(exc), "unknown")
            if not started:
                yield builder.start()
            failure = builder.error(message, kind=kind)
            if isinstance(exc, ModelError) and exc.retry_after is not None:
                failure.retry_after = exc.retry_after
            yield failure

    def _send(
        self, session: aiohttp.ClientSession, request: HTTPRequest, payload: list[bytes | memoryview], headers: dict[str, str]
    ) -> Awaitable[aiohttp.ClientResponse]:
        """The POST of one attempt (not yet awaited)."""
        return session.post(
            request.url,
            data=_data(payload),
            headers=headers,
            proxy=proxy_for(request.url),
            timeout=self._connect_timeout(),
            allow_redirects=False,  # a redirect would carry the key elsewhere
        )

    async def _checked_body(
        self,
        response: aiohttp.ClientResponse,
        deadline: Deadline,
        request: HTTPRequest,
        headers: Mapping[str, str],
        secrets: _Secrets,
        attempt: int,
        limit: int | None,
    ) -> tuple[TimedContent, bytes, bool]:
        """The body of a successful response, its first bytes read, and whether it is an
        event stream (else a whole JSON body); raises the classified error of a failed
        response (after the observer saw it), a redirect or an HTML page."""
        status = response.status
        if 300 <= status < 400:
            raise _redirected(status, response.headers.get("location", ""), secrets.values())
        failed = not 200 <= status < 300
        content = TimedContent(response.content, deadline)
        error_body = await read_limited(content, limit) if failed else None
        if error_body is not None:
            # Redacted before anything clips it.
            text = json_unescaped(error_body.decode("utf-8", "replace"))  # "sk\/…" too
            error_body = redact_text(text, secrets.values()).encode()
        if self.observer is not None:
            await deadline.wait(
                self._observe("response", attempt, request, headers, secrets.values(), response, error_body)
            )
        if error_body is not None:
            raise self.classify(status, error_body, response.headers)
        content_type = response.headers.get("content-type", "")
        if content_type.startswith("text/html"):
            raise _html_page(request.url, status, secrets.values())
        first = b""
        if request.stream and not content_type.startswith("application/json"):
            first = await content.readany()
            lead = first.lstrip()[:1]
            if lead == b"<":
                raise _html_page(request.url, status, secrets.values())
        else:
            lead = b"{"
        return content, first, lead != b"{" and lead != b"["

    async def _whole_body(
        self, content: TimedContent, limit: int | None, first: bytes, builder: MessageBuilder, request: HTTPRequest
    ) -> list[StreamEvent]:
        """The events of a whole JSON body (also the answer to a streaming request): an
        error object raises its error, a complete response becomes the message's events."""
        data = await read_limited(content, limit, first)
        in_body = _error_in_body(data)
        if in_body is not None:
            raise in_body
        try:
            return list(self.parse_response(data, builder, request))
        except _MALFORMED as exc:
            raise _malformed(exc) from None

    def _retry(
        self, exc: Exception, policy: RetryPolicy, attempt: int, idle_failures: int, secrets: _Secrets
    ) -> tuple[ModelError, float, int]:
        """A failed attempt's classified error, the delay before the next attempt and the
        count of idle-stream failures so far; raises the error when it is not retried
        (not retryable, silent twice for the whole idle limit, or out of attempts)."""
        error = _scrub(classify_exception(exc, idle_timeout=self.idle_timeout), secrets.values())
        if not error.retryable:
            raise error from None
        if error.kind == "stream_idle":
            idle_failures += 1
            if idle_failures > 1:  # silent twice for the whole limit: give up
                raise error from None
        delay = policy.delay(attempt, error.retry_after)
        if delay is None:
            if error.retry_after is not None and attempt < policy.max_attempts:
                error.message = (
                    f"{error.message} (the server asked to retry after {error.retry_after:g}s, "
                    f"more than the {policy.max_delay:g}s limit)"
                )
                error.args = (error.message,)
            raise error from None
        return error, delay, idle_failures

    def _check_window(self, builder: MessageBuilder) -> None:
        window = self._window
        if window:
            u = builder.message.usage
            used = u.input + u.cache_read + u.cache_write
            if used > window:
                raise ContextOverflowError(
                    f"The request used {used} input tokens, more than the {window}-token context window"
                )


# What a parser raises on data of an unexpected shape (msgspec's errors are ValueErrors).
_MALFORMED = (LookupError, TypeError, ValueError, AttributeError, AssertionError)


def _malformed(exc: BaseException) -> ModelError:
    """A parser's failure on the provider's data, as a classified error."""
    if isinstance(exc, ModelError):
        return exc
    classified = classify_exception(exc)
    if classified.kind != "unknown":
        return classified
    return ServerError(f"The provider sent a malformed response: {exception_text(exc)}")


def _error_in_body(data: bytes) -> ModelError | None:
    """The error a JSON body holds in place of a response (``{"error": …}``), if any."""
    if b'"error"' not in data:
        return None
    try:
        obj = msgspec.json.decode(data)
    except msgspec.DecodeError:
        return None
    return classify_error_body(obj)


def _html_page(url: str, status: int, secrets: tuple[str, ...]) -> ModelError:
    from urllib.parse import urlsplit
    from urllib.parse import urlunsplit

    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port is not None else host
    shown = redact_text(urlunsplit((parts.scheme, netloc, parts.path, "", "")), secrets)
    return InvalidRequestError(
        f"The server at {shown} returned an HTML page (HTTP {status}), not a model stream: "
        "check the provider's base URL"
    )


def _redirected(status: int, location: str, secrets: tuple[str, ...]) -> ModelError:
    shown = redact_text(redact_url(location), secrets) or "no address"
    return InvalidRequestError(
        f"The server redirected the request (HTTP {status}) to {shown}; ketch does not follow "
        "redirects, which would send the key there too: set the provider's base URL to the new address"
    )


_SECRET_HEADER_WORDS = ("key", "token", "secret", "auth", "password", "cookie")


def _credentials(headers: Mapping[str, str], url: str) -> tuple[str, ...]:
    """The values of the request's headers whose names say they hold a credential (also
    custom ones such as ``x-portkey-api-key``), and the credentials in the URL (its user
    name and password, ``?api-key=`` and the like: :func:`~ketch.llm._http.url_secrets`)."""
    found = [v for n, v in headers.items() if v and any(w in n.lower() for w in _SECRET_HEADER_WORDS)]
    found = [v.split(" ", 1)[1] if v.lower().startswith(("bearer ", "basic ")) else v for v in found]
    kept = [v for v in found if len(v) >= 8]  # a short value ("true") is no credential
    return (*kept, *(v for v in url_secrets(url) if len(v) >= 4))


def _stale_connection(exc: BaseException) -> bool:
    """Whether ``exc`` is a connection the server closed before any response byte (a
    kept-alive connection closed while idle), not a failure to connect."""
    import aiohttp

    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return isinstance(exc.message, str)  # not a response cut off after its first bytes
    return isinstance(exc, aiohttp.ClientOSError) and not isinstance(exc, aiohttp.ClientConnectorError)


def _data(payload: list[bytes | memoryview]) -> Any:
    """What aiohttp sends: one short piece as it is; several, or a long one (for which
    aiohttp's bytes payload warns that it may block the event loop), as pieces."""
    if len(payload) == 1 and len(payload[0]) < _LARGE_BODY:
        return payload[0]
    from .._http_body import PiecesPayload

    return PiecesPayload(payload)


_LARGE_BODY = 1 << 20


async def _abortable(awaitable: Awaitable[T], signal: AbortSignal | None) -> T:
    """Await ``awaitable``; an abort of ``signal`` ends the wait with :class:`Aborted`."""
    deadline = Deadline(None, None, signal)
    try:
        return await deadline.wait(awaitable)
    finally:
        deadline.close()


async def _aclose(iterator: object) -> None:
    if is_closable(iterator):
        await iterator.aclose()


async def _drain(response: aiohttp.ClientResponse) -> None:
    # The terminal marker usually arrives just before the end of the body; reading that
    # end lets the connection go back to the pool instead of being closed.
    content = response.content
    if content.is_eof():
        return
    try:
        async with asyncio.timeout(_DRAIN_SECONDS):
            while await content.readany():
                pass
    except Exception:
        pass


def _describes_model(info: ModelInfo) -> bool:
    """Whether ``info`` holds real data (registered, named, or given limits) rather than
    the defaults the registry uses for a model it does not know."""
    defaults = default_info(info.provider, info.api, info.id)
    return (
        bool(info.name)
        or info.context_window != defaults.context_window
        or info.input_modalities != defaults.input_modalities
        or lookup(info.provider, info.id) is not None
    )


class _Secrets:
    """What is redacted from one request's errors and exchanges, gathered on first need
    (a request that succeeds unobserved never looks): the request's key, and the values
    of ``env_keys``, of every registered provider's key variables (configured names
    included) and of the conventional ones."""

    __slots__ = ("_env_keys", "_headers", "_key", "_url", "_values")

    def __init__(
        self, key: str | None, env_keys: tuple[str, ...], headers: Mapping[str, str] | None = None, url: str = ""
    ) -> None:
        self._key = key
        self._env_keys = env_keys
        self._headers = headers  # credential headers' values and the URL's password count too
        self._url = url
        self._values: tuple[str, ...] | None = None

    def values(self) -> tuple[str, ...]:
        """The secrets, longest first."""
        if self._values is None:
            found = secrets_from_env((*self._env_keys, *(n for p in list_providers() for n in p.api_key_env)))
            extra = _credentials(self._headers or {}, self._url)
            more = [v for v in (self._key, *extra) if v and v not in found]
            if more:
                found = tuple(sorted(set((*more, *found)), key=len, reverse=True))
            self._values = found
        return self._values


def _scrub(error: ModelError, secrets: tuple[str, ...]) -> ModelError:
    if secrets:
        message = redact_text(error.message, secrets)
        if message != error.message:
            error.message = message
            error.args = (message,)
        if error.body is not None:
            error.body = redact_text(error.body, secrets)
    return error
