"""Preparing a transcript for one model, whoever wrote it.

Every adapter calls :func:`prepare_messages` before encoding a request. A transcript
may hold assistant messages from other providers or models (after a model switch or a
fallback); their provider-specific parts mean nothing to the target model and are
removed, and the tool-call sequence is made valid for any provider:

- user messages pass unchanged;
- assistant messages that failed or were aborted are skipped;
- assistant messages from the target (same provider, api and model) pass unchanged,
  signed thinking included, even when its text is empty;
- assistant messages from another model lose their thinking (readable, redacted or
  empty), their empty text blocks and every signature, and their tool-call ids are
  normalised with ``normalize_id``; an id that then repeats one sent earlier (two long
  ids cut to the same prefix, or a server that numbers the calls of every response
  from 0) is replaced by a hash-derived one; a message left with no content is dropped;
- a tool result answers a call of the latest assistant message (its id remapped when
  that call's id was normalised); results without such a call are dropped;
- calls left without a result when the next user or assistant message (or the end)
  comes get a synthetic error result, :data:`MISSING_TOOL_RESULT`;
- provider-hosted tool blocks (:class:`HostedToolCall`, :class:`HostedToolResult`) pass
  unchanged to the provider and API that ran them (any of its models), which get their
  own blocks back verbatim; for any other target a hosted call is dropped and a hosted
  result becomes a text block summarising it (:func:`hosted_result_text`);
- custom messages are dropped.

Input messages are never mutated. Unchanged messages are passed through as the same
objects; only what changes is copied.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from collections.abc import Sequence

import msgspec

from ._messages import AssistantMessage
from ._messages import HostedToolCall
from ._messages import HostedToolResult
from ._messages import Message
from ._messages import TextContent
from ._messages import ThinkingContent
from ._messages import ToolCall
from ._messages import ToolResultMessage
from ._messages import UserMessage
from ._messages import hosted_result_text

MISSING_TOOL_RESULT = "No result provided"
"""The text of the synthetic error result given to a tool call that never got one."""

LEADING_USER_TEXT = "(The conversation continues.)"
"""The user turn put before a transcript that starts with an assistant turn, for the
providers whose APIs require the first turn to be the user's (Anthropic, Gemini); a
trimmed history can start that way."""

_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")
_ALNUM = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
_MISTRAL_ID = re.compile(r"[a-zA-Z0-9]{9}")


def anthropic_tool_id(id: str) -> str:
    """A tool-call id Anthropic accepts: ``[a-zA-Z0-9_-]``, at most 64 characters."""
    return _UNSAFE.sub("_", id)[:64]


def openai_responses_tool_id(id: str) -> str:
    """A ``call_id`` for the OpenAI Responses API: ``[a-zA-Z0-9_-]``, at most 64 characters."""
    return _UNSAFE.sub("_", id)[:64]


def openai_chat_tool_id(id: str) -> str:
    """A tool-call id for OpenAI Chat Completions: ``[a-zA-Z0-9_-]``, at most 40 characters."""
    return _UNSAFE.sub("_", id)[:40]


def mistral_tool_id(id: str) -> str:
    """A tool-call id Mistral accepts: exactly 9 letters or digits (derived from ``id``
    by hashing when it is not one already)."""
    if _MISTRAL_ID.fullmatch(id):
        return id
    n = int.from_bytes(hashlib.sha256(id.encode()).digest()[:8], "big")
    out = []
    for _ in range(9):
        n, r = divmod(n, 62)
        out.append(_ALNUM[r])
    return "".join(out)


def _is_same(m: AssistantMessage, provider: str, api: str, model: str) -> bool:
    return m.model == model and m.provider == provider and m.api == api


def _fresh_id(id: str, normalize_id: Callable[[str], str], used: set[str]) -> str:
    """An id derived from ``id`` that ``normalize_id`` keeps and no earlier call uses."""
    n = 0
    while True:
        candidate = normalize_id("call_" + hashlib.sha256(f"{id}#{n}".encode()).hexdigest()[:24])
        if candidate not in used:
            return candidate
        n += 1


def _foreign(
    m: AssistantMessage, normalize_id: Callable[[str], str] | None, used: set[str], native: bool = False
) -> tuple[AssistantMessage, dict[str, str] | None]:
    """A cross-model assistant message as the target may see it, and its id changes.
    ``native``: the target is the provider and API that wrote the message (its hosted
    tool blocks are kept)."""
    content: list[TextContent | ThinkingContent | ToolCall | HostedToolCall | HostedToolResult] = []
    renamed: dict[str, str] | None = None
    changed = False
    for block in m.content:
        cls = type(block)
        if cls is ThinkingContent:
            changed = True
        elif cls is TextContent:
            assert isinstance(block, TextContent)
            if not block.text:
                changed = True
            elif block.signature is not None:
                content.append(TextContent(text=block.text))
                changed = True
            else:
                content.append(block)
        elif cls is ToolCall:
            assert isinstance(block, ToolCall)
            new_id = block.id
            if normalize_id is not None:
                new_id = normalize_id(new_id)
                if new_id in used:
                    new_id = _fresh_id(block.id, normalize_id, used)
                used.add(new_id)
            if new_id != block.id:
                if renamed is None:
                    renamed = {}
                renamed[block.id] = new_id
            if new_id != block.id or block.signature is not None:
                content.append(msgspec.structs.replace(block, id=new_id, signature=None))
                changed = True
            else:
                content.append(block)
        elif native:
            content.append(block)
        elif cls is HostedToolResult:
            assert isinstance(block, HostedToolResult)
            content.append(TextContent(text=hosted_result_text(block)))
            changed = True
        elif cls is HostedToolCall:
            changed = True
        else:
            content.append(block)
    if not changed:
        return m, None
    return msgspec.structs.replace(m, content=content), renamed


class Preparer:
    """:func:`prepare_messages` as a fold, for transcripts that only grow.

    :meth:`feed` takes the messages added since the last call; :attr:`out` holds the
    prepared messages so far, except the synthetic results of calls still waiting for
    one, which :meth:`tail` gives (a later message may still answer those calls).
    ``out`` followed by ``tail()`` equals :func:`prepare_messages` of everything fed.
    """

    __slots__ = ("_api", "_model", "_normalize_id", "_pending", "_pending_time", "_provider", "_used", "out")

    def __init__(
        self, *, provider: str, api: str, model: str, normalize_id: Callable[[str], str] | None = None
    ) -> None:
        self.out: list[Message] = []
        self._provider = provider
        self._api = api
        self._model = model
        self._normalize_id = normalize_id
        # Calls of the latest assistant message still waiting for a result:
        # original id -> (id the target sees, tool name).
        self._pending: dict[str, tuple[str, str]] = {}
        self._pending_time = 0.0
        self._used: set[str] = set()  # tool-call ids sent so far (tracked when ids are normalised)

    def feed(self, messages: Sequence[Message], start: int = 0) -> None:
        """Prepare ``messages[start:]``, the messages that follow those fed before."""
        out = self.out
        append = out.append
        pending = self._pending
        used = self._used
        provider, api, model, normalize_id = self._provider, self._api, self._model, self._normalize_id
        for i in range(start, len(messages)):
            m = messages[i]
            if isinstance(m, ToolResultMessage):
                entry = pending.pop(m.tool_call_id, None)
                if entry is None:
                    continue
                append(m if entry[0] == m.tool_call_id else msgspec.structs.replace(m, tool_call_id=entry[0]))
            elif isinstance(m, AssistantMessage):
                if pending:
                    out.extend(self.tail())
                    pending.clear()
                if m.stop_reason == "error" or m.stop_reason == "aborted":
                    continue
                sent, renamed = m, None
                if not _is_same(m, provider, api, model):
                    sent, renamed = _foreign(m, normalize_id, used, m.provider == provider and m.api == api)
                    if not sent.content:
                        continue
                elif normalize_id is not None:
                    used.update(b.id for b in m.content if type(b) is ToolCall)
                append(sent)
                for block in m.content:
                    if type(block) is ToolCall:
                        pending[block.id] = (
                            renamed.get(block.id, block.id) if renamed else block.id,
                            block.name,
                        )
                self._pending_time = m.timestamp
            elif isinstance(m, UserMessage):
                if pending:
                    out.extend(self.tail())
                    pending.clear()
                append(m)

    def tail(self) -> list[Message]:
        """Synthetic error results for the calls still waiting for a result."""
        return [
            ToolResultMessage(
                tool_call_id=new_id,
                tool_name=name,
                content=[TextContent(text=MISSING_TOOL_RESULT)],
                is_error=True,
                timestamp=self._pending_time,
            )
            for new_id, name in self._pending.values()
        ]


def prepare_messages(
    messages: Sequence[Message],
    *,
    provider: str,
    api: str,
    model: str,
    normalize_id: Callable[[str], str] | None = None,
) -> list[Message]:
    """The messages ``model`` (served by ``provider`` over ``api``) should see.

    ``normalize_id`` rewrites tool-call ids from other models into a form the target
    accepts (:func:`anthropic_tool_id`, :func:`openai_responses_tool_id` …) and unique
    in the request; None keeps them. See the module documentation for every rule.
    """
    preparer = Preparer(provider=provider, api=api, model=model, normalize_id=normalize_id)
    preparer.feed(messages)
    out = preparer.out
    out.extend(preparer.tail())
    return out
