"""White-box test (the adapters' observer type is private): keys never leave through a
redirect, custom credential headers, JSON-escaped echoes or a URL's password."""

from __future__ import annotations

from typing import Any

from loopback import LoopbackServer
from loopback import Reply
from loopback import body_reply

from ketch.llm import AssistantMessage
from ketch.llm import Request
from ketch.llm import StreamError
from ketch.llm import StreamOptions
from ketch.llm import UserMessage
from ketch.llm._providers.anthropic import AnthropicModel
from ketch.llm._providers.base import HTTPExchange
from ketch.llm._providers.openai_chat import OpenAIChatModel

KEY = "sk-test-LEAKCHECK-0123456789abcdef"
HEADER_KEY = "pk-portkey-LEAKCHECK-9876543210"
HELLO = Request(messages=[UserMessage(content="Hi")])


async def _error(model: Any, options: StreamOptions | None = None) -> AssistantMessage:
    events = [e async for e in model.stream(HELLO, options)]
    last = events[-1]
    assert isinstance(last, StreamError), events
    return last.error


async def test_a_redirect_is_not_followed_with_the_key(loopback: LoopbackServer) -> None:
    async with LoopbackServer() as elsewhere:
        loopback.queue(Reply(status=307, headers={"location": f"{elsewhere.url}/v1/messages"}))
        model = AnthropicModel("claude-sonnet-4-5", base_url=loopback.url, api_key=KEY)
        error = await _error(model)
        assert error.error_message == (
            f"The server redirected the request (HTTP 307) to {elsewhere.url}/v1/messages; ketch does "
            "not follow redirects, which would send the key there too: set the provider's base URL "
            "to the new address"
        )
        assert (error.error_kind, len(loopback.requests), elsewhere.requests) == ("invalid_request", 1, [])


async def test_custom_credential_headers_and_escaped_echoes_are_redacted(loopback: LoopbackServer) -> None:
    seen: list[HTTPExchange] = []
    # the key as some servers escape it ("-" as \u002d), and the header's value plainly
    echo = '{"error": {"message": "bad key sk\\u002dtest\\u002DLEAKCHECK\\u002d0123456789abcdef, header %s"}}'
    echo %= HEADER_KEY
    loopback.queue(body_reply(400, echo.encode()))
    model = OpenAIChatModel(
        "gpt-4o", base_url=loopback.url, api_key=KEY, headers={"x-portkey-api-key": HEADER_KEY}, observer=seen.append
    )
    error = await _error(model)
    assert error.error_message == "HTTP 400: bad key ***, header ***"
    shown = repr(seen) + repr(error)
    assert KEY not in shown and HEADER_KEY not in shown and "LEAKCHECK" not in shown
    assert seen[0].headers["x-portkey-api-key"] == "***"


async def test_a_password_in_the_base_url_stays_out_of_reprs_and_errors() -> None:
    model = OpenAIChatModel("gpt-4o", base_url="http://user:pw-LEAKCHECK-42@127.0.0.1:1/v1", api_key=KEY)
    assert repr(model) == "OpenAIChatModel(provider='openai', id='gpt-4o', base_url='http://***@127.0.0.1:1/v1')"
    error = await _error(model)
    assert "pw-LEAKCHECK" not in error.error_message
