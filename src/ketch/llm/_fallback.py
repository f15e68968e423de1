"""A chain of models tried in order: :class:`FallbackModel`.

The first model streams; when it fails with a kind that another model might not
share (rate limits, overload, timeouts, network and server errors:
:data:`~ketch.llm._errors.FAILOVER_KINDS`), the chain moves on. Between two models the
stream carries a :class:`~ketch.llm._stream.Retry` with ``delay`` 0 and
``discard_partial`` true when the failed model had already streamed something; the
next model then streams with its own :class:`~ketch.llm._stream.StreamStart`. A model's
``StreamStart`` is held back until it streams anything else, so a model that fails
before its first token leaves no trace but the retry event.

Other failures (auth, invalid requests, context overflow, content filters), aborts and
the last model's result end the stream. The final message is the answering model's own,
so its ``provider`` and ``model`` say who answered; :attr:`FallbackModel.last_model`
says it too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from collections.abc import Iterable
from collections.abc import Sequence

import msgspec

from ._errors import FAILOVER_KINDS
from ._errors import exception_text
from ._model import Model
from ._model import PreparesMessages
from ._model import Request
from ._model import StreamOptions
from ._stream import MessageBuilder
from ._stream import Retry
from ._stream import StreamDone
from ._stream import StreamError
from ._stream import StreamEvent
from ._stream import StreamStart
from ._stream import is_closable

_NO_OPTIONS = StreamOptions()


class FallbackModel:
    """Streams from the first of ``models`` that does not fail over.

    ``provider``, ``api`` and ``id`` are the primary's. ``StreamOptions.api_key`` is
    given only to models of the primary's provider, so one provider's key is never sent
    to another. ``failover_kinds`` overrides which error kinds move to the next model.
    """

    def __init__(self, models: Sequence[Model], *, failover_kinds: Iterable[str] = FAILOVER_KINDS) -> None:
        if not models:
            raise ValueError("FallbackModel needs at least one model")
        self.models: tuple[Model, ...] = tuple(models)
        self.failover_kinds = frozenset(failover_kinds)
        self.last_model: Model | None = None
        """The model that produced the last final message (None before the first)."""
        self._window_override: int | None = None

    @property
    def provider(self) -> str:
        """The primary model's provider."""
        return self.models[0].provider

    @property
    def api(self) -> str:
        """The primary model's API."""
        return self.models[0].api

    @property
    def id(self) -> str:
        """The primary model's id."""
        return self.models[0].id

    @property
    def prepares_messages(self) -> bool:
        """True when every model of the chain prepares its requests' messages itself
        (see :class:`~ketch.llm.PreparesMessages`)."""
        return all(isinstance(m, PreparesMessages) and m.prepares_messages for m in self.models)

    @property
    def context_window(self) -> int:
        """The user's setting, else the smallest window of the chain (a request must fit
        whichever model ends up serving it)."""
        return self._window_override or min(m.context_window for m in self.models)

    def set_context_window(self, window: int | None) -> None:
        """Override :attr:`context_window` (None: the chain's smallest again)."""
        self._window_override = window

    def __repr__(self) -> str:
        chain = ", ".join(f"{m.provider}:{m.id}" for m in self.models)
        return f"FallbackModel([{chain}])"

    async def stream(self, request: Request, options: StreamOptions | None = None) -> AsyncIterator[StreamEvent]:
        """Stream one assistant response, moving down the chain on failover errors."""
        opts = options if options is not None else _NO_OPTIONS
        signal = opts.signal
        models = self.models
        last_index = len(models) - 1
        primary = models[0].provider
        keyless: StreamOptions | None = None
        for index, model in enumerate(models):
            model_opts = opts
            if opts.api_key is not None and model.provider != primary:
                if keyless is None:
                    keyless = msgspec.structs.replace(opts, api_key=None)
                model_opts = keyless
            is_last = index == last_index
            held: StreamStart | None = None
            shown = False
            terminal: StreamDone | StreamError | None = None
            inner = model.stream(request, model_opts)
            try:
                async for event in inner:
                    if type(event) is StreamDone or type(event) is StreamError:
                        terminal = event
                        break
                    if type(event) is StreamStart and not shown and not is_last:
                        held = event
                        continue
                    if held is not None:
                        yield held
                        held = None
                    shown = True
                    yield event
            except Exception as exc:
                builder = MessageBuilder(provider=model.provider, api=model.api, model=model.id)
                if not shown:
                    held = builder.start()
                terminal = builder.error(exception_text(exc))
            finally:
                if is_closable(inner):
                    try:
                        await inner.aclose()
                    except Exception:
                        pass
            if terminal is None:
                builder = MessageBuilder(provider=model.provider, api=model.api, model=model.id)
                if not shown:
                    held = builder.start()
                terminal = builder.error("stream ended without a terminal event", kind="network")
            if (
                not is_last
                and type(terminal) is StreamError
                and terminal.reason == "error"
                and terminal.error.error_kind in self.failover_kinds
                and not (signal is not None and signal.aborted)
            ):
                failed = terminal.error
                yield Retry(
                    attempt=index + 1,
                    max_attempts=len(models),
                    delay=0.0,
                    error_kind=failed.error_kind or "unknown",
                    error_message=failed.error_message or "",
                    discard_partial=shown,
                )
                continue
            if held is not None:
                yield held
            self.last_model = model
            yield terminal
            return
