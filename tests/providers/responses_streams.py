"""Recorded-format fixtures for the OpenAI Responses API, written from its public
documentation: byte-exact server-sent event streams (``event:`` line, ``data:`` line,
blank line), a complete non-streaming response and HTTP error bodies.

Shapes follow the documented events (``sequence_number`` on every event, ``item_id``
and ``content_index`` on deltas, ``logprobs``/``obfuscation`` fields, full response
objects on ``response.*`` lifecycle events). Text is raw UTF-8, as the API sends it.
"""

from __future__ import annotations

from loopback import split_events


def events(stream: bytes) -> list[bytes]:
    """``stream`` split into one chunk per event (each ending with its blank line)."""
    return split_events(stream)


def chunks(stream: bytes, size: int) -> list[bytes]:
    """``stream`` split every ``size`` bytes (cuts lines and UTF-8 characters apart)."""
    return [stream[i : i + size] for i in range(0, len(stream), size)]


# A plain text answer from a non-reasoning model.
TEXT = (
    b'event: response.created\n'
    b'data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_68af0a1b2c3d4e5f","object":"response","created_at":1756315696,"status":"in_progress","background":false,"error":null,"incomplete_details":null,"instructions":null,"max_output_tokens":null,"model":"gpt-4.1-2025-04-14","output":[],"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":null,"summary":null},"store":false,"temperature":1.0,"text":{"format":{"type":"text"},"verbosity":"medium"},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":null,"user":null,"metadata":{}}}\n\n'
    b'event: response.in_progress\n'
    b'data: {"type":"response.in_progress","sequence_number":1,"response":{"id":"resp_68af0a1b2c3d4e5f","object":"response","created_at":1756315696,"status":"in_progress","background":false,"error":null,"incomplete_details":null,"instructions":null,"max_output_tokens":null,"model":"gpt-4.1-2025-04-14","output":[],"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":null,"summary":null},"store":false,"temperature":1.0,"text":{"format":{"type":"text"},"verbosity":"medium"},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":null,"user":null,"metadata":{}}}\n\n'
    b'event: response.output_item.added\n'
    b'data: {"type":"response.output_item.added","sequence_number":2,"output_index":0,"item":{"id":"msg_68af0a1b9a8b7c6d","type":"message","status":"in_progress","content":[],"role":"assistant"}}\n\n'
    b'event: response.content_part.added\n'
    b'data: {"type":"response.content_part.added","sequence_number":3,"item_id":"msg_68af0a1b9a8b7c6d","output_index":0,"content_index":0,"part":{"type":"output_text","annotations":[],"logprobs":[],"text":""}}\n\n'
    b'event: response.output_text.delta\n'
    b'data: {"type":"response.output_text.delta","sequence_number":4,"item_id":"msg_68af0a1b9a8b7c6d","output_index":0,"content_index":0,"delta":"Hello","logprobs":[],"obfuscation":"aZ3x"}\n\n'
    b'event: response.output_text.delta\n'
    b'data: {"type":"response.output_text.delta","sequence_number":5,"item_id":"msg_68af0a1b9a8b7c6d","output_index":0,"content_index":0,"delta":" from the caf\xc3\xa9","logprobs":[],"obfuscation":"aZ3x"}\n\n'
    b'event: response.output_text.delta\n'
    b'data: {"type":"response.output_text.delta","sequence_number":6,"item_id":"msg_68af0a1b9a8b7c6d","output_index":0,"content_index":0,"delta":" \xe2\x98\x95.","logprobs":[],"obfuscation":"aZ3x"}\n\n'
    b'event: response.output_text.done\n'
    b'data: {"type":"response.output_text.done","sequence_number":7,"item_id":"msg_68af0a1b9a8b7c6d","output_index":0,"content_index":0,"text":"Hello from the caf\xc3\xa9 \xe2\x98\x95.","logprobs":[]}\n\n'
    b'event: response.content_part.done\n'
    b'data: {"type":"response.content_part.done","sequence_number":8,"item_id":"msg_68af0a1b9a8b7c6d","output_index":0,"content_index":0,"part":{"type":"output_text","annotations":[],"logprobs":[],"text":"Hello from the caf\xc3\xa9 \xe2\x98\x95."}}\n\n'
    b'event: response.output_item.done\n'
    b'data: {"type":"response.output_item.done","sequence_number":9,"output_index":0,"item":{"id":"msg_68af0a1b9a8b7c6d","type":"message","status":"completed","content":[{"type":"output_text","annotations":[],"logprobs":[],"text":"Hello from the caf\xc3\xa9 \xe2\x98\x95."}],"role":"assistant"}}\n\n'
    b'event: response.completed\n'
    b'data: {"type":"response.completed","sequence_number":10,"response":{"id":"resp_68af0a1b2c3d4e5f","object":"response","created_at":1756315696,"status":"completed","background":false,"error":null,"incomplete_details":null,"instructions":null,"max_output_tokens":null,"model":"gpt-4.1-2025-04-14","output":[{"id":"msg_68af0a1b9a8b7c6d","type":"message","status":"completed","content":[{"type":"output_text","annotations":[],"logprobs":[],"text":"Hello from the caf\xc3\xa9 \xe2\x98\x95."}],"role":"assistant"}],"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":null,"summary":null},"store":false,"temperature":1.0,"text":{"format":{"type":"text"},"verbosity":"medium"},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":{"input_tokens":21,"input_tokens_details":{"cached_tokens":0},"output_tokens":7,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":28},"user":null,"metadata":{}}}\n\n'
)

# Reasoning with a two-part summary and encrypted content, then text.
REASONING_TEXT = (
    b'event: response.created\n'
    b'data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_68af1c2d3e4f5061","object":"response","created_at":1756315696,"status":"in_progress","background":false,"error":null,"incomplete_details":null,"instructions":null,"max_output_tokens":null,"model":"gpt-5-2025-08-07","output":[],"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":"high","summary":"detailed"},"store":false,"temperature":1.0,"text":{"format":{"type":"text"},"verbosity":"medium"},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":null,"user":null,"metadata":{}}}\n\n'
    b'event: response.in_progress\n'
    b'data: {"type":"response.in_progress","sequence_number":1,"response":{"id":"resp_68af1c2d3e4f5061","object":"response","created_at":1756315696,"status":"in_progress","background":false,"error":null,"incomplete_details":null,"instructions":null,"max_output_tokens":null,"model":"gpt-5-2025-08-07","output":[],"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":"high","summary":"detailed"},"store":false,"temperature":1.0,"text":{"format":{"type":"text"},"verbosity":"medium"},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":null,"user":null,"metadata":{}}}\n\n'
    b'event: response.output_item.added\n'
    b'data: {"type":"response.output_item.added","sequence_number":2,"output_index":0,"item":{"id":"rs_68af1c2d77aa88bb","type":"reasoning","summary":[],"encrypted_content":"gAAAAABor_PARTIAL"}}\n\n'
    b'event: response.reasoning_summary_part.added\n'
    b'data: {"type":"response.reasoning_summary_part.added","sequence_number":3,"item_id":"rs_68af1c2d77aa88bb","output_index":0,"summary_index":0,"part":{"type":"summary_text","text":""}}\n\n'
    b'event: response.reasoning_summary_text.delta\n'
    b'data: {"type":"response.reasoning_summary_text.delta","sequence_number":4,"item_id":"rs_68af1c2d77aa88bb","output_index":0,"summary_index":0,"delta":"**Converting units**\\n\\n","obfuscation":"Qw"}\n\n'
    b'event: response.reasoning_summary_text.delta\n'
    b'data: {"type":"response.reasoning_summary_text.delta","sequence_number":5,"item_id":"rs_68af1c2d77aa88bb","output_index":0,"summary_index":0,"delta":"100 km/h is 27.78 m/s.","obfuscation":"Qw"}\n\n'
    b'event: response.reasoning_summary_text.done\n'
    b'data: {"type":"response.reasoning_summary_text.done","sequence_number":6,"item_id":"rs_68af1c2d77aa88bb","output_index":0,"summary_index":0,"text":"**Converting units**\\n\\n100 km/h is 27.78 m/s."}\n\n'
    b'event: response.reasoning_summary_part.done\n'
    b'data: {"type":"response.reasoning_summary_part.done","sequence_number":7,"item_id":"rs_68af1c2d77aa88bb","output_index":0,"summary_index":0,"part":{"type":"summary_text","text":"**Converting units**\\n\\n100 km/h is 27.78 m/s."}}\n\n'
    b'event: response.reasoning_summary_part.added\n'
    b'data: {"type":"response.reasoning_summary_part.added","sequence_number":8,"item_id":"rs_68af1c2d77aa88bb","output_index":0,"summary_index":1,"part":{"type":"summary_text","text":""}}\n\n'
    b'event: response.reasoning_summary_text.delta\n'
    b'data: {"type":"response.reasoning_summary_text.delta","sequence_number":9,"item_id":"rs_68af1c2d77aa88bb","output_index":0,"summary_index":1,"delta":"**Checking**\\n\\n","obfuscation":"Qw"}\n\n'
    b'event: response.reasoning_summary_text.delta\n'
    b'data: {"type":"response.reasoning_summary_text.delta","sequence_number":10,"item_id":"rs_68af1c2d77aa88bb","output_index":0,"summary_index":1,"delta":"Rounded to two decimals.","obfuscation":"Qw"}\n\n'
    b'event: response.reasoning_summary_text.done\n'
    b'data: {"type":"response.reasoning_summary_text.done","sequence_number":11,"item_id":"rs_68af1c2d77aa88bb","output_index":0,"summary_index":1,"text":"**Checking**\\n\\nRounded to two decimals."}\n\n'
    b'event: response.reasoning_summary_part.done\n'
    b'data: {"type":"response.reasoning_summary_part.done","sequence_number":12,"item_id":"rs_68af1c2d77aa88bb","output_index":0,"summary_index":1,"part":{"type":"summary_text","text":"**Checking**\\n\\nRounded to two decimals."}}\n\n'
    b'event: response.output_item.done\n'
    b'data: {"type":"response.output_item.done","sequence_number":13,"output_index":0,"item":{"id":"rs_68af1c2d77aa88bb","type":"reasoning","summary":[{"type":"summary_text","text":"**Converting units**\\n\\n100 km/h is 27.78 m/s."},{"type":"summary_text","text":"**Checking**\\n\\nRounded to two decimals."}],"encrypted_content":"gAAAAABor_x1Yk9uZ2VuY3J5cHRlZC1yZWFzb25pbmctYmxvYg=="}}\n\n'
    b'event: response.output_item.added\n'
    b'data: {"type":"response.output_item.added","sequence_number":14,"output_index":1,"item":{"id":"msg_68af1c2e00112233","type":"message","status":"in_progress","content":[],"role":"assistant","phase":"final_answer"}}\n\n'
    b'event: response.content_part.added\n'
    b'data: {"type":"response.content_part.added","sequence_number":15,"item_id":"msg_68af1c2e00112233","output_index":1,"content_index":0,"part":{"type":"output_text","annotations":[],"logprobs":[],"text":""}}\n\n'
    b'event: response.output_text.delta\n'
    b'data: {"type":"response.output_text.delta","sequence_number":16,"item_id":"msg_68af1c2e00112233","output_index":1,"content_index":0,"delta":"It is ","logprobs":[],"obfuscation":"aZ3x"}\n\n'
    b'event: response.output_text.delta\n'
    b'data: {"type":"response.output_text.delta","sequence_number":17,"item_id":"msg_68af1c2e00112233","output_index":1,"content_index":0,"delta":"27.78 m/s.","logprobs":[],"obfuscation":"aZ3x"}\n\n'
    b'event: response.output_text.done\n'
    b'data: {"type":"response.output_text.done","sequence_number":18,"item_id":"msg_68af1c2e00112233","output_index":1,"content_index":0,"text":"It is 27.78 m/s.","logprobs":[]}\n\n'
    b'event: response.content_part.done\n'
    b'data: {"type":"response.content_part.done","sequence_number":19,"item_id":"msg_68af1c2e00112233","output_index":1,"content_index":0,"part":{"type":"output_text","annotations":[],"logprobs":[],"text":"It is 27.78 m/s."}}\n\n'
    b'event: response.output_item.done\n'
    b'data: {"type":"response.output_item.done","sequence_number":20,"output_index":1,"item":{"id":"msg_68af1c2e00112233","type":"message","status":"completed","content":[{"type":"output_text","annotations":[],"logprobs":[],"text":"It is 27.78 m/s."}],"role":"assistant","phase":"final_answer"}}\n\n'
    b'event: response.completed\n'
    b'data: {"type":"response.completed","sequence_number":21,"response":{"id":"resp_68af1c2d3e4f5061","object":"response","created_at":1756315696,"status":"completed","background":false,"error":null,"incomplete_details":null,"instructions":null,"max_output_tokens":null,"model":"gpt-5-2025-08-07","output":[{"id":"rs_68af1c2d77aa88bb","type":"reasoning","summary":[{"type":"summary_text","text":"**Converting units**\\n\\n100 km/h is 27.78 m/s."},{"type":"summary_text","text":"**Checking**\\n\\nRounded to two decimals."}],"encrypted_content":"gAAAAABor_x1Yk9uZ2VuY3J5cHRlZC1yZWFzb25pbmctYmxvYg=="},{"id":"msg_68af1c2e00112233","type":"message","status":"completed","content":[{"type":"output_text","annotations":[],"logprobs":[],"text":"It is 27.78 m/s."}],"role":"assistant","phase":"final_answer"}],"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":"high","summary":"detailed"},"store":false,"temperature":1.0,"text":{"format":{"type":"text"},"verbosity":"medium"},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":{"input_tokens":1200,"input_tokens_details":{"cached_tokens":1024},"output_tokens":340,"output_tokens_details":{"reasoning_tokens":256},"total_tokens":1540},"user":null,"metadata":{}}}\n\n'
)

# A reasoning item without summary, then two function calls with argument deltas.
PARALLEL_CALLS = (
    b'event: response.created\n'
    b'data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_68af2d3e4f506172","object":"response","created_at":1756315696,"status":"in_progress","background":false,"error":null,"incomplete_details":null,"instructions":null,"max_output_tokens":null,"model":"gpt-5-2025-08-07","output":[],"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":"medium","summary":"auto"},"store":false,"temperature":1.0,"text":{"format":{"type":"text"},"verbosity":"medium"},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":null,"user":null,"metadata":{}}}\n\n'
    b'event: response.output_item.added\n'
    b'data: {"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"id":"rs_68af2d3e11223344","type":"reasoning","summary":[]}}\n\n'
    b'event: response.output_item.done\n'
    b'data: {"type":"response.output_item.done","sequence_number":2,"output_index":0,"item":{"id":"rs_68af2d3e11223344","type":"reasoning","summary":[],"encrypted_content":"gAAAAABor_Y2FsbHMtcmVhc29uaW5n"}}\n\n'
    b'event: response.output_item.added\n'
    b'data: {"type":"response.output_item.added","sequence_number":3,"output_index":1,"item":{"id":"fc_68af2d3e55667788","type":"function_call","status":"in_progress","arguments":"","call_id":"call_Wq3bN0pK","name":"get_weather"}}\n\n'
    b'event: response.function_call_arguments.delta\n'
    b'data: {"type":"response.function_call_arguments.delta","sequence_number":4,"item_id":"fc_68af2d3e55667788","output_index":1,"delta":"{\\"ci","obfuscation":"x"}\n\n'
    b'event: response.function_call_arguments.delta\n'
    b'data: {"type":"response.function_call_arguments.delta","sequence_number":5,"item_id":"fc_68af2d3e55667788","output_index":1,"delta":"ty\\":\\"Par","obfuscation":"x"}\n\n'
    b'event: response.function_call_arguments.delta\n'
    b'data: {"type":"response.function_call_arguments.delta","sequence_number":6,"item_id":"fc_68af2d3e55667788","output_index":1,"delta":"is\\",\\"unit\\":\\"c\\"}","obfuscation":"x"}\n\n'
    b'event: response.function_call_arguments.done\n'
    b'data: {"type":"response.function_call_arguments.done","sequence_number":7,"item_id":"fc_68af2d3e55667788","output_index":1,"name":"get_weather","arguments":"{\\"city\\":\\"Paris\\",\\"unit\\":\\"c\\"}"}\n\n'
    b'event: response.output_item.done\n'
    b'data: {"type":"response.output_item.done","sequence_number":8,"output_index":1,"item":{"id":"fc_68af2d3e55667788","type":"function_call","status":"completed","arguments":"{\\"city\\":\\"Paris\\",\\"unit\\":\\"c\\"}","call_id":"call_Wq3bN0pK","name":"get_weather"}}\n\n'
    b'event: response.output_item.added\n'
    b'data: {"type":"response.output_item.added","sequence_number":9,"output_index":2,"item":{"id":"fc_68af2d3e99aabbcc","type":"function_call","status":"in_progress","arguments":"","call_id":"call_Ty7mZ2xR","name":"get_time"}}\n\n'
    b'event: response.function_call_arguments.delta\n'
    b'data: {"type":"response.function_call_arguments.delta","sequence_number":10,"item_id":"fc_68af2d3e99aabbcc","output_index":2,"delta":"{\\"tz\\":","obfuscation":"x"}\n\n'
    b'event: response.function_call_arguments.delta\n'
    b'data: {"type":"response.function_call_arguments.delta","sequence_number":11,"item_id":"fc_68af2d3e99aabbcc","output_index":2,"delta":"\\"Europe/Paris\\"}","obfuscation":"x"}\n\n'
    b'event: response.function_call_arguments.done\n'
    b'data: {"type":"response.function_call_arguments.done","sequence_number":12,"item_id":"fc_68af2d3e99aabbcc","output_index":2,"name":"get_time","arguments":"{\\"tz\\":\\"Europe/Paris\\"}"}\n\n'
    b'event: response.output_item.done\n'
    b'data: {"type":"response.output_item.done","sequence_number":13,"output_index":2,"item":{"id":"fc_68af2d3e99aabbcc","type":"function_call","status":"completed","arguments":"{\\"tz\\":\\"Europe/Paris\\"}","call_id":"call_Ty7mZ2xR","name":"get_time"}}\n\n'
    b'event: response.completed\n'
    b'data: {"type":"response.completed","sequence_number":14,"response":{"id":"resp_68af2d3e4f506172","object":"response","created_at":1756315696,"status":"completed","background":false,"error":null,"incomplete_details":null,"instructions":null,"max_output_tokens":null,"model":"gpt-5-2025-08-07","output":[{"id":"rs_68af2d3e11223344","type":"reasoning","summary":[],"encrypted_content":"gAAAAABor_Y2FsbHMtcmVhc29uaW5n"},{"id":"fc_68af2d3e55667788","type":"function_call","status":"completed","arguments":"{\\"city\\":\\"Paris\\",\\"unit\\":\\"c\\"}","call_id":"call_Wq3bN0pK","name":"get_weather"},{"id":"fc_68af2d3e99aabbcc","type":"function_call","status":"completed","arguments":"{\\"tz\\":\\"Europe/Paris\\"}","call_id":"call_Ty7mZ2xR","name":"get_time"}],"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":"medium","summary":"auto"},"store":false,"temperature":1.0,"text":{"format":{"type":"text"},"verbosity":"medium"},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":{"input_tokens":310,"input_tokens_details":{"cached_tokens":0},"output_tokens":96,"output_tokens_details":{"reasoning_tokens":64},"total_tokens":406},"user":null,"metadata":{}}}\n\n'
)

# Text cut short by max_output_tokens.
INCOMPLETE_LENGTH = (
    b'event: response.created\n'
    b'data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_68af3e4f50617283","object":"response","created_at":1756315696,"status":"in_progress","background":false,"error":null,"incomplete_details":null,"instructions":null,"max_output_tokens":null,"model":"gpt-4.1-2025-04-14","output":[],"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":null,"summary":null},"store":false,"temperature":1.0,"text":{"format":{"type":"text"},"verbosity":"medium"},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":null,"user":null,"metadata":{}}}\n\n'
    b'event: response.output_item.added\n'
    b'data: {"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"id":"msg_68af3e4f0a0b0c0d","type":"message","status":"in_progress","content":[],"role":"assistant"}}\n\n'
    b'event: response.content_part.added\n'
    b'data: {"type":"response.content_part.added","sequence_number":2,"item_id":"msg_68af3e4f0a0b0c0d","output_index":0,"content_index":0,"part":{"type":"output_text","annotations":[],"logprobs":[],"text":""}}\n\n'
    b'event: response.output_text.delta\n'
    b'data: {"type":"response.output_text.delta","sequence_number":3,"item_id":"msg_68af3e4f0a0b0c0d","output_index":0,"content_index":0,"delta":"Once upon","logprobs":[],"obfuscation":"aZ3x"}\n\n'
    b'event: response.output_text.delta\n'
    b'data: {"type":"response.output_text.delta","sequence_number":4,"item_id":"msg_68af3e4f0a0b0c0d","output_index":0,"content_index":0,"delta":" a time","logprobs":[],"obfuscation":"aZ3x"}\n\n'
    b'event: response.output_item.done\n'
    b'data: {"type":"response.output_item.done","sequence_number":5,"output_index":0,"item":{"id":"msg_68af3e4f0a0b0c0d","type":"message","status":"incomplete","content":[{"type":"output_text","annotations":[],"logprobs":[],"text":"Once upon a time"}],"role":"assistant"}}\n\n'
    b'event: response.incomplete\n'
    b'data: {"type":"response.incomplete","sequence_number":6,"response":{"id":"resp_68af3e4f50617283","object":"response","created_at":1756315696,"status":"incomplete","background":false,"error":null,"incomplete_details":{"reason":"max_output_tokens"},"instructions":null,"max_output_tokens":null,"model":"gpt-4.1-2025-04-14","output":[{"id":"msg_68af3e4f0a0b0c0d","type":"message","status":"incomplete","content":[{"type":"output_text","annotations":[],"logprobs":[],"text":"Once upon a time"}],"role":"assistant"}],"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":null,"summary":null},"store":false,"temperature":1.0,"text":{"format":{"type":"text"},"verbosity":"medium"},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":{"input_tokens":12,"input_tokens_details":{"cached_tokens":0},"output_tokens":16,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":28},"user":null,"metadata":{}}}\n\n'
)

# Text stopped by the content filter.
INCOMPLETE_FILTER = (
    b'event: response.created\n'
    b'data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_68af3e4f50617299","object":"response","created_at":1756315696,"status":"in_progress","background":false,"error":null,"incomplete_details":null,"instructions":null,"max_output_tokens":null,"model":"gpt-4.1-2025-04-14","output":[],"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":null,"summary":null},"store":false,"temperature":1.0,"text":{"format":{"type":"text"},"verbosity":"medium"},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":null,"user":null,"metadata":{}}}\n\n'
    b'event: response.output_item.added\n'
    b'data: {"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"id":"msg_68af3e4f0a0b0c99","type":"message","status":"in_progress","content":[],"role":"assistant"}}\n\n'
    b'event: response.content_part.added\n'
    b'data: {"type":"response.content_part.added","sequence_number":2,"item_id":"msg_68af3e4f0a0b0c99","output_index":0,"content_index":0,"part":{"type":"output_text","annotations":[],"logprobs":[],"text":""}}\n\n'
    b'event: response.output_text.delta\n'
    b'data: {"type":"response.output_text.delta","sequence_number":3,"item_id":"msg_68af3e4f0a0b0c99","output_index":0,"content_index":0,"delta":"I can","logprobs":[],"obfuscation":"aZ3x"}\n\n'
    b'event: response.output_item.done\n'
    b'data: {"type":"response.output_item.done","sequence_number":4,"output_index":0,"item":{"id":"msg_68af3e4f0a0b0c99","type":"message","status":"incomplete","content":[{"type":"output_text","annotations":[],"logprobs":[],"text":"I can"}],"role":"assistant"}}\n\n'
    b'event: response.incomplete\n'
    b'data: {"type":"response.incomplete","sequence_number":5,"response":{"id":"resp_68af3e4f50617299","object":"response","created_at":1756315696,"status":"incomplete","background":false,"error":null,"incomplete_details":{"reason":"content_filter"},"instructions":null,"max_output_tokens":null,"model":"gpt-4.1-2025-04-14","output":[{"id":"msg_68af3e4f0a0b0c99","type":"message","status":"incomplete","content":[{"type":"output_text","annotations":[],"logprobs":[],"text":"I can"}],"role":"assistant"}],"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":null,"summary":null},"store":false,"temperature":1.0,"text":{"format":{"type":"text"},"verbosity":"medium"},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":{"input_tokens":12,"input_tokens_details":{"cached_tokens":0},"output_tokens":2,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":14},"user":null,"metadata":{}}}\n\n'
)

# response.failed with server_error before any output.
FAILED_SERVER = (
    b'event: response.created\n'
    b'data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_68af4f5061728394","object":"response","created_at":1756315696,"status":"in_progress","background":false,"error":null,"incomplete_details":null,"instructions":null,"max_output_tokens":null,"model":"gpt-4.1-2025-04-14","output":[],"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":null,"summary":null},"store":false,"temperature":1.0,"text":{"format":{"type":"text"},"verbosity":"medium"},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":null,"user":null,"metadata":{}}}\n\n'
    b'event: response.in_progress\n'
    b'data: {"type":"response.in_progress","sequence_number":1,"response":{"id":"resp_68af4f5061728394","object":"response","created_at":1756315696,"status":"in_progress","background":false,"error":null,"incomplete_details":null,"instructions":null,"max_output_tokens":null,"model":"gpt-4.1-2025-04-14","output":[],"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":null,"summary":null},"store":false,"temperature":1.0,"text":{"format":{"type":"text"},"verbosity":"medium"},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":null,"user":null,"metadata":{}}}\n\n'
    b'event: response.failed\n'
    b'data: {"type":"response.failed","sequence_number":2,"response":{"id":"resp_68af4f5061728394","object":"response","created_at":1756315696,"status":"failed","background":false,"error":{"code":"server_error","message":"The model failed to generate a response."},"incomplete_details":null,"instructions":null,"max_output_tokens":null,"model":"gpt-4.1-2025-04-14","output":[],"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":null,"summary":null},"store":false,"temperature":1.0,"text":{"format":{"type":"text"},"verbosity":"medium"},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":null,"user":null,"metadata":{}}}\n\n'
)

# response.failed with rate_limit_exceeded.
FAILED_RATE_LIMIT = (
    b'event: response.created\n'
    b'data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_68af4f50617283a5","object":"response","created_at":1756315696,"status":"in_progress","background":false,"error":null,"incomplete_details":null,"instructions":null,"max_output_tokens":null,"model":"gpt-4.1-2025-04-14","output":[],"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":null,"summary":null},"store":false,"temperature":1.0,"text":{"format":{"type":"text"},"verbosity":"medium"},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":null,"user":null,"metadata":{}}}\n\n'
    b'event: response.failed\n'
    b'data: {"type":"response.failed","sequence_number":1,"response":{"id":"resp_68af4f50617283a5","object":"response","created_at":1756315696,"status":"failed","background":false,"error":{"code":"rate_limit_exceeded","message":"Rate limit reached for gpt-4.1 in organization org-test on tokens per min (TPM). Please try again in 20ms."},"incomplete_details":null,"instructions":null,"max_output_tokens":null,"model":"gpt-4.1-2025-04-14","output":[],"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":null,"summary":null},"store":false,"temperature":1.0,"text":{"format":{"type":"text"},"verbosity":"medium"},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":null,"user":null,"metadata":{}}}\n\n'
)

# response.failed with invalid_prompt after some text.
FAILED_INVALID_PROMPT = (
    b'event: response.created\n'
    b'data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_68af4f50617283b6","object":"response","created_at":1756315696,"status":"in_progress","background":false,"error":null,"incomplete_details":null,"instructions":null,"max_output_tokens":null,"model":"gpt-4.1-2025-04-14","output":[],"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":null,"summary":null},"store":false,"temperature":1.0,"text":{"format":{"type":"text"},"verbosity":"medium"},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":null,"user":null,"metadata":{}}}\n\n'
    b'event: response.output_item.added\n'
    b'data: {"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"id":"msg_68af4f5061aa","type":"message","status":"in_progress","content":[],"role":"assistant"}}\n\n'
    b'event: response.content_part.added\n'
    b'data: {"type":"response.content_part.added","sequence_number":2,"item_id":"msg_68af4f5061aa","output_index":0,"content_index":0,"part":{"type":"output_text","annotations":[],"logprobs":[],"text":""}}\n\n'
    b'event: response.output_text.delta\n'
    b'data: {"type":"response.output_text.delta","sequence_number":3,"item_id":"msg_68af4f5061aa","output_index":0,"content_index":0,"delta":"Partial","logprobs":[],"obfuscation":"aZ3x"}\n\n'
    b'event: response.output_item.done\n'
    b'data: {"type":"response.output_item.done","sequence_number":4,"output_index":0,"item":{"id":"msg_68af4f5061aa","type":"message","status":"incomplete","content":[{"type":"output_text","annotations":[],"logprobs":[],"text":"Partial"}],"role":"assistant"}}\n\n'
    b'event: response.failed\n'
    b'data: {"type":"response.failed","sequence_number":5,"response":{"id":"resp_68af4f50617283b6","object":"response","created_at":1756315696,"status":"failed","background":false,"error":{"code":"invalid_prompt","message":"Invalid prompt: your prompt was flagged as potentially violating our usage policy."},"incomplete_details":null,"instructions":null,"max_output_tokens":null,"model":"gpt-4.1-2025-04-14","output":[{"id":"msg_68af4f5061aa","type":"message","status":"incomplete","content":[{"type":"output_text","annotations":[],"logprobs":[],"text":"Partial"}],"role":"assistant"}],"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":null,"summary":null},"store":false,"temperature":1.0,"text":{"format":{"type":"text"},"verbosity":"medium"},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":{"input_tokens":40,"input_tokens_details":{"cached_tokens":0},"output_tokens":1,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":41},"user":null,"metadata":{}}}\n\n'
)

# An `error` event (context_length_exceeded) after response.created.
ERROR_EVENT = (
    b'event: response.created\n'
    b'data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_68af5061728394a5","object":"response","created_at":1756315696,"status":"in_progress","background":false,"error":null,"incomplete_details":null,"instructions":null,"max_output_tokens":null,"model":"gpt-4.1-2025-04-14","output":[],"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":null,"summary":null},"store":false,"temperature":1.0,"text":{"format":{"type":"text"},"verbosity":"medium"},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":null,"user":null,"metadata":{}}}\n\n'
    b'event: error\n'
    b'data: {"type":"error","sequence_number":1,"code":"context_length_exceeded","message":"Your input exceeds the context window of this model. Please adjust your input and try again.","param":"input"}\n\n'
)

# A complete (non-streaming) response: reasoning, text and a function call.
NON_STREAMING = (
    b'{"id":"resp_68af60718293a4b5","object":"response","created_at":1756315696,"status":"completed","background":false,"error":null,"incomplete_details":null,"instructions":null,"max_output_tokens":null,"model":"gpt-5-2025-08-07","output":[{"id":"rs_68af6071aa","type":"reasoning","summary":[{"type":"summary_text","text":"**Plan**\\n\\nLook up the weather."}],"encrypted_content":"gAAAAABor_bm9uLXN0cmVhbWluZw=="},{"id":"msg_68af6071bb","type":"message","status":"completed","content":[{"type":"output_text","annotations":[],"logprobs":[],"text":"Checking the weather."}],"role":"assistant"},{"id":"fc_68af6071cc","type":"function_call","status":"completed","arguments":"{\\"city\\":\\"Oslo\\"}","call_id":"call_Nn1","name":"get_weather"}],"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":"low","summary":"auto"},"store":false,"temperature":1.0,"text":{"format":{"type":"text"},"verbosity":"medium"},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":{"input_tokens":500,"input_tokens_details":{"cached_tokens":128},"output_tokens":80,"output_tokens_details":{"reasoning_tokens":48},"total_tokens":580},"user":null,"metadata":{}}'
)


# HTTP error bodies, as the API returns them.
ERROR_429 = (
    b'{\n  "error": {\n    "message": "Rate limit reached for gpt-5 in organization org-test on requests per min (RPM): Limit 500, Used 500, Requested 1. Please try again in 120ms.",\n'
    b'    "type": "requests",\n    "param": null,\n    "code": "rate_limit_exceeded"\n  }\n}\n'
)
ERROR_429_QUOTA = (
    b'{\n  "error": {\n    "message": "You exceeded your current quota, please check your plan and billing details.",\n'
    b'    "type": "insufficient_quota",\n    "param": null,\n    "code": "insufficient_quota"\n  }\n}\n'
)
ERROR_500 = (
    b'{\n  "error": {\n    "message": "The server had an error while processing your request. Sorry about that!",\n'
    b'    "type": "server_error",\n    "param": null,\n    "code": null\n  }\n}\n'
)
ERROR_503 = (
    b'{\n  "error": {\n    "message": "The engine is currently overloaded, please try again later",\n'
    b'    "type": "server_error",\n    "param": null,\n    "code": null\n  }\n}\n'
)
ERROR_401 = (
    b'{\n  "error": {\n    "message": "Incorrect API key provided: sk-test-********************7890. You can find your API key at https://platform.openai.com/account/api-keys.",\n'
    b'    "type": "invalid_request_error",\n    "param": null,\n    "code": "invalid_api_key"\n  }\n}\n'
)
ERROR_400_CONTEXT = (
    b'{\n  "error": {\n    "message": "Your input exceeds the context window of this model. Please adjust your input and try again.",\n'
    b'    "type": "invalid_request_error",\n    "param": "input",\n    "code": "context_length_exceeded"\n  }\n}\n'
)
