"""Recorded-format fixtures for the Anthropic Messages API, written from its public
documentation: byte-exact server-sent event streams (``event:`` line, ``data:`` line,
blank line), a complete non-streaming message and HTTP error bodies.

Shapes follow the documented stream: ``message_start`` carries the message with empty
content and the input usage (with ``cache_creation`` and ``service_tier``), every
content block is ``content_block_start`` / ``content_block_delta``… /
``content_block_stop``, ``ping`` events appear anywhere, ``message_delta`` carries the
stop reason and cumulative usage, ``message_stop`` ends the stream. Tool input starts
with an empty ``partial_json`` fragment. Text is raw UTF-8, as the API sends it.
"""

from __future__ import annotations

from loopback import split_events


def events(stream: bytes) -> list[bytes]:
    """``stream`` split into one chunk per event (each ending with its blank line)."""
    return split_events(stream)


def chunks(stream: bytes, size: int) -> list[bytes]:
    """``stream`` split every ``size`` bytes (cuts lines and UTF-8 characters apart)."""
    return [stream[i : i + size] for i in range(0, len(stream), size)]


# A plain text answer.
TEXT = (
    b'event: message_start\n'
    b'data: {"type":"message_start","message":{"id":"msg_01XFDUDYJgAACzvnptvVoYEL","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":25,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"cache_creation":{"ephemeral_5m_input_tokens":0,"ephemeral_1h_input_tokens":0},"output_tokens":1,"service_tier":"standard"}}}\n\n'
    b'event: content_block_start\n'
    b'data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n'
    b'event: ping\n'
    b'data: {"type": "ping"}\n\n'
    b'event: content_block_delta\n'
    b'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello from the caf\xc3\xa9"}}\n\n'
    b'event: content_block_delta\n'
    b'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" \xe2\x98\x95."}}\n\n'
    b'event: content_block_stop\n'
    b'data: {"type":"content_block_stop","index":0}\n\n'
    b'event: message_delta\n'
    b'data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":12}}\n\n'
    b'event: message_stop\n'
    b'data: {"type":"message_stop"}\n\n'
)

THINKING_SIGNATURE = (
    "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds1eR2B6M4gT6"
    "aGp2Z1l1xs0Q3m9Ra2vZcXr8VnqTbW+tZXBvcmFyeS1zaWduYXR1cmU="
)

# Extended thinking (two thinking deltas, the signature just before the block stops),
# then the answer.
THINKING_TEXT = (
    b'event: message_start\n'
    b'data: {"type":"message_start","message":{"id":"msg_01EcyWo6m4hyW8KHs2y2pei5","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":85,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"cache_creation":{"ephemeral_5m_input_tokens":0,"ephemeral_1h_input_tokens":0},"output_tokens":4,"service_tier":"standard"}}}\n\n'
    b'event: content_block_start\n'
    b'data: {"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}\n\n'
    b'event: content_block_delta\n'
    b'data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"I need to find the GCD of 1071 and 462.\\n\\n"}}\n\n'
    b'event: ping\n'
    b'data: {"type": "ping"}\n\n'
    b'event: content_block_delta\n'
    b'data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"1071 = 2\xc3\x97462 + 147, 462 = 3\xc3\x97147 + 21, 147 = 7\xc3\x9721."}}\n\n'
    b'event: content_block_delta\n'
    b'data: {"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"' + THINKING_SIGNATURE.encode() + b'"}}\n\n'
    b'event: content_block_stop\n'
    b'data: {"type":"content_block_stop","index":0}\n\n'
    b'event: content_block_start\n'
    b'data: {"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}\n\n'
    b'event: content_block_delta\n'
    b'data: {"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"The greatest common divisor"}}\n\n'
    b'event: content_block_delta\n'
    b'data: {"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":" of 1071 and 462 is **21**."}}\n\n'
    b'event: content_block_stop\n'
    b'data: {"type":"content_block_stop","index":1}\n\n'
    b'event: message_delta\n'
    b'data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":196}}\n\n'
    b'event: message_stop\n'
    b'data: {"type":"message_stop"}\n\n'
)

REDACTED_DATA = (
    "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpPkNRj2YfWXGmKDxH4mPnZ5sQ7vB4URj"
    "Zqu5VnZ9r5dGl5cGVkLXRoaW5raW5n"
)

# A redacted thinking block (opaque data, no deltas), readable thinking, then text.
REDACTED_THINKING = (
    b'event: message_start\n'
    b'data: {"type":"message_start","message":{"id":"msg_01Rdc7bVw8qWm1Rz3nfu2kQx","type":"message","role":"assistant","model":"claude-3-7-sonnet-20250219","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":102,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":3}}}\n\n'
    b'event: content_block_start\n'
    b'data: {"type":"content_block_start","index":0,"content_block":{"type":"redacted_thinking","data":"' + REDACTED_DATA.encode() + b'"}}\n\n'
    b'event: content_block_stop\n'
    b'data: {"type":"content_block_stop","index":0}\n\n'
    b'event: content_block_start\n'
    b'data: {"type":"content_block_start","index":1,"content_block":{"type":"thinking","thinking":"","signature":""}}\n\n'
    b'event: content_block_delta\n'
    b'data: {"type":"content_block_delta","index":1,"delta":{"type":"thinking_delta","thinking":"Some of my reasoning was flagged."}}\n\n'
    b'event: content_block_delta\n'
    b'data: {"type":"content_block_delta","index":1,"delta":{"type":"signature_delta","signature":"ErUBCkYIBRgCIkDz"}}\n\n'
    b'event: content_block_stop\n'
    b'data: {"type":"content_block_stop","index":1}\n\n'
    b'event: content_block_start\n'
    b'data: {"type":"content_block_start","index":2,"content_block":{"type":"text","text":""}}\n\n'
    b'event: content_block_delta\n'
    b'data: {"type":"content_block_delta","index":2,"delta":{"type":"text_delta","text":"I can help with the safe part."}}\n\n'
    b'event: content_block_stop\n'
    b'data: {"type":"content_block_stop","index":2}\n\n'
    b'event: message_delta\n'
    b'data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":60}}\n\n'
    b'event: message_stop\n'
    b'data: {"type":"message_stop"}\n\n'
)

# Text, then two tool calls in parallel whose input arrives in fragments.
PARALLEL_TOOLS = (
    b'event: message_start\n'
    b'data: {"type":"message_start","message":{"id":"msg_014p7gG3wDgGV9EUtLvnow3U","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":472,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"cache_creation":{"ephemeral_5m_input_tokens":0,"ephemeral_1h_input_tokens":0},"output_tokens":2,"service_tier":"standard"}}}\n\n'
    b'event: content_block_start\n'
    b'data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n'
    b'event: ping\n'
    b'data: {"type": "ping"}\n\n'
    b'event: content_block_delta\n'
    b'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"I\'ll check both cities."}}\n\n'
    b'event: content_block_stop\n'
    b'data: {"type":"content_block_stop","index":0}\n\n'
    b'event: content_block_start\n'
    b'data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_01T1x1fJ34qAmk2tNTrN7Up6","name":"get_weather","input":{}}}\n\n'
    b'event: content_block_delta\n'
    b'data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}\n\n'
    b'event: content_block_delta\n'
    b'data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\\"city\\": \\"San Fra"}}\n\n'
    b'event: content_block_delta\n'
    b'data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"ncisco, CA\\", \\"unit\\": \\"fahrenheit\\"}"}}\n\n'
    b'event: content_block_stop\n'
    b'data: {"type":"content_block_stop","index":1}\n\n'
    b'event: content_block_start\n'
    b'data: {"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_01VGKkxjCn1dcfpX3Bbpx6jo","name":"get_weather","input":{}}}\n\n'
    b'event: content_block_delta\n'
    b'data: {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":""}}\n\n'
    b'event: content_block_delta\n'
    b'data: {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\\"city\\": "}}\n\n'
    b'event: content_block_delta\n'
    b'data: {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"\\"M\xc3\xbcnchen\\"}"}}\n\n'
    b'event: content_block_stop\n'
    b'data: {"type":"content_block_stop","index":2}\n\n'
    b'event: message_delta\n'
    b'data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":89}}\n\n'
    b'event: message_stop\n'
    b'data: {"type":"message_stop"}\n\n'
)

# Prompt caching at work: message_start reports cache reads and writes; the final
# message_delta repeats the cumulative usage, with a changed input count.
CACHED_USAGE = (
    b'event: message_start\n'
    b'data: {"type":"message_start","message":{"id":"msg_01Cache7x3kPq2Lz8mYtRw4Vn","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":12,"cache_creation_input_tokens":2048,"cache_read_input_tokens":50000,"cache_creation":{"ephemeral_5m_input_tokens":2048,"ephemeral_1h_input_tokens":0},"output_tokens":1,"service_tier":"standard"}}}\n\n'
    b'event: content_block_start\n'
    b'data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n'
    b'event: content_block_delta\n'
    b'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Done."}}\n\n'
    b'event: content_block_stop\n'
    b'data: {"type":"content_block_stop","index":0}\n\n'
    b'event: message_delta\n'
    b'data: {"type":"message_delta","delta":{"stop_reason":"max_tokens","stop_sequence":null},"usage":{"input_tokens":15,"cache_creation_input_tokens":2048,"cache_read_input_tokens":50000,"output_tokens":1000,"server_tool_use":null}}\n\n'
    b'event: message_stop\n'
    b'data: {"type":"message_stop"}\n\n'
)

# A stream that fails after some text with an in-stream error event.
OVERLOADED_MID_STREAM = (
    b'event: message_start\n'
    b'data: {"type":"message_start","message":{"id":"msg_01Ovl4dSt9cQm2Hn5Jp8Rk3X","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":30,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}}}\n\n'
    b'event: content_block_start\n'
    b'data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n'
    b'event: content_block_delta\n'
    b'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Let me"}}\n\n'
    b'event: error\n'
    b'data: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\n'
)

# The model declines: a refusal stop reason after partial text.
REFUSAL = (
    b'event: message_start\n'
    b'data: {"type":"message_start","message":{"id":"msg_01Rfs2Lq9wXc7Vb3Nm5Kj8Hd","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":40,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}}}\n\n'
    b'event: content_block_start\n'
    b'data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n'
    b'event: content_block_delta\n'
    b'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"I can\'t"}}\n\n'
    b'event: content_block_stop\n'
    b'data: {"type":"content_block_stop","index":0}\n\n'
    b'event: message_delta\n'
    b'data: {"type":"message_delta","delta":{"stop_reason":"refusal","stop_sequence":null},"usage":{"output_tokens":3}}\n\n'
    b'event: message_stop\n'
    b'data: {"type":"message_stop"}\n\n'
)

# Structured output through a forced tool (``structured_output="tool"``).
FORMAT_TOOL = (
    b'event: message_start\n'
    b'data: {"type":"message_start","message":{"id":"msg_01Fmt8Qw2Er4Ty6Ui8Op0As2","type":"message","role":"assistant","model":"claude-3-7-sonnet-20250219","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":60,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}}}\n\n'
    b'event: content_block_start\n'
    b'data: {"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_01Fmt5Gh7Jk9Lz1Xc3Vb5Nm7","name":"contact","input":{}}}\n\n'
    b'event: content_block_delta\n'
    b'data: {"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":""}}\n\n'
    b'event: content_block_delta\n'
    b'data: {"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\\"name\\": \\"Jane"}}\n\n'
    b'event: content_block_delta\n'
    b'data: {"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":" Doe\\"}"}}\n\n'
    b'event: content_block_stop\n'
    b'data: {"type":"content_block_stop","index":0}\n\n'
    b'event: message_delta\n'
    b'data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":20}}\n\n'
    b'event: message_stop\n'
    b'data: {"type":"message_stop"}\n\n'
)

# A complete (non-streaming) message with thinking, text and a tool call.
MESSAGE_JSON = (
    b'{"id":"msg_01NsTr3am8Kq2Wx4Ez6Rc8Tv","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929",'
    b'"content":[{"type":"thinking","thinking":"The user wants the weather.","signature":"EqQBCgIYAhIMsig"},'
    b'{"type":"text","text":"Checking Paris."},'
    b'{"type":"tool_use","id":"toolu_01A09q90qw90lq917835lq9","name":"get_weather","input":{"city":"Paris"}}],'
    b'"stop_reason":"tool_use","stop_sequence":null,'
    b'"usage":{"input_tokens":400,"cache_creation_input_tokens":100,"cache_read_input_tokens":300,'
    b'"cache_creation":{"ephemeral_5m_input_tokens":100,"ephemeral_1h_input_tokens":0},"output_tokens":50,'
    b'"service_tier":"standard"}}'
)

# HTTP error bodies, as documented: {"type": "error", "error": {...}, "request_id": ...}.
RATE_LIMIT = (
    b'{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed the rate limit '
    b'for your organization of 50,000 input tokens per minute."},"request_id":"req_011CSHoEeqs5C35K2UUqR7Fy"}'
)
OVERLOADED = b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"req_011CSHoZ2mRtY7uW9xB4nA6q"}'
AUTHENTICATION = (
    b'{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"},'
    b'"request_id":"req_011CSHp3Kd8sLm2Qw5Er7Ty9"}'
)
PERMISSION = (
    b'{"type":"error","error":{"type":"permission_error","message":"Your API key does not have permission '
    b'to use the specified resource."},"request_id":"req_011CSHp9Xv2Bn4Mq6Wr8Et1Y"}'
)
BILLING = (
    b'{"type":"error","error":{"type":"billing_error","message":"Your credit balance is too low to access '
    b'the Anthropic API."},"request_id":"req_011CSHq1Aa3Ss5Dd7Ff9Gg2H"}'
)
PROMPT_TOO_LONG = (
    b'{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: '
    b'208431 tokens > 200000 maximum"},"request_id":"req_011CSHq7Jj9Kk1Ll3Zz5Xx7C"}'
)
INVALID_REQUEST = (
    b'{"type":"error","error":{"type":"invalid_request_error","message":"messages: roles must alternate '
    b'between \\"user\\" and \\"assistant\\", but found multiple \\"user\\" roles in a row"},'
    b'"request_id":"req_011CSHqDVv2Bb4Nn6Mm8Qq1W"}'
)
REQUEST_TOO_LARGE = (
    b'{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum allowed '
    b'number of bytes."},"request_id":"req_011CSHqKEe3Rr5Tt7Yy9Uu2I"}'
)
NOT_FOUND = (
    b'{"type":"error","error":{"type":"not_found_error","message":"model: claude-nonexistent"},'
    b'"request_id":"req_011CSHqQOo4Pp6Aa8Ss1Dd3F"}'
)
API_ERROR = (
    b'{"type":"error","error":{"type":"api_error","message":"Internal server error"},'
    b'"request_id":"req_011CSHqWGg5Hh7Jj9Kk2Ll4Z"}'
)
TIMEOUT = (
    b'{"type":"error","error":{"type":"timeout_error","message":"Request timed out"},'
    b'"request_id":"req_011CSHqcXx6Cc8Vv1Bb3Nn5M"}'
)
