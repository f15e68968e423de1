"""Recorded-format fixtures of provider-hosted tools, written from the providers' public
documentation: an Anthropic stream with a web search (``server_tool_use``, input JSON
deltas, a ``web_search_tool_result`` with encrypted content) and a code execution
(``bash_code_execution_tool_result``); an OpenAI Responses stream with a
``web_search_call`` and a ``code_interpreter_call`` item, then an answer carrying
``url_citation`` annotations; a Gemini stream with ``executableCode`` /
``codeExecutionResult`` parts and ``groundingMetadata``. Byte-exact SSE bodies.
"""

from __future__ import annotations

ENCRYPTED = "EqgfCioIARgBIiQ3YTAwMjY1Mi1mZjM5LTQ1NGUtODgxNC1kNjNjNTk1ZWI3Y2EYcAh0bx7mAQN3ew=="
PAGE_ENCRYPTED = "Eo8BCioIAhgBIiQyYzY1ZGFjZC1hYWU0LTRiMmMtODZhNy1lMjQxZmM2NjRmY2IYrWZ2sA=="

# Anthropic: "Search, then compute" -- a web search with two results, a bash code
# execution, then the answer (stop reason end_turn; usage counts one web search).
ANTHROPIC = (
    b'event: message_start\n'
    b'data: {"type":"message_start","message":{"id":"msg_01HXB8Sx2wBYnCDwAaWg1Cqy","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":2679,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":3}}}\n\n'
    b'event: content_block_start\n'
    b'data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n'
    b'event: content_block_delta\n'
    b'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"I\'ll search for that."}}\n\n'
    b'event: content_block_stop\n'
    b'data: {"type":"content_block_stop","index":0}\n\n'
    b'event: content_block_start\n'
    b'data: {"type":"content_block_start","index":1,"content_block":{"type":"server_tool_use","id":"srvtoolu_014hJH82Qum7Td6UV8gDXThB","name":"web_search","input":{}}}\n\n'
    b'event: content_block_delta\n'
    b'data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}\n\n'
    b'event: content_block_delta\n'
    b'data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\\"query\\": \\"ketch agent"}}\n\n'
    b'event: content_block_delta\n'
    b'data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":" runtime\\"}"}}\n\n'
    b'event: content_block_stop\n'
    b'data: {"type":"content_block_stop","index":1}\n\n'
    b'event: content_block_start\n'
    b'data: {"type":"content_block_start","index":2,"content_block":{"type":"web_search_tool_result","tool_use_id":"srvtoolu_014hJH82Qum7Td6UV8gDXThB","content":[{"type":"web_search_result","title":"ketch: an asyncio agent runtime","url":"https://example.com/ketch","encrypted_content":"' + ENCRYPTED.encode() + b'","page_age":"April 30, 2025"},{"type":"web_search_result","title":"Agent runtimes compared","url":"https://example.org/runtimes","encrypted_content":"' + PAGE_ENCRYPTED.encode() + b'","page_age":null}]}}\n\n'
    b'event: content_block_stop\n'
    b'data: {"type":"content_block_stop","index":2}\n\n'
    b'event: content_block_start\n'
    b'data: {"type":"content_block_start","index":3,"content_block":{"type":"server_tool_use","id":"srvtoolu_01B3C4D5E6F7G8H9I0J1K2L3","name":"bash_code_execution","input":{"command":"python -c \\"print(6*7)\\""}}}\n\n'
    b'event: content_block_stop\n'
    b'data: {"type":"content_block_stop","index":3}\n\n'
    b'event: content_block_start\n'
    b'data: {"type":"content_block_start","index":4,"content_block":{"type":"bash_code_execution_tool_result","tool_use_id":"srvtoolu_01B3C4D5E6F7G8H9I0J1K2L3","content":{"type":"bash_code_execution_result","stdout":"42\\n","stderr":"","return_code":0,"content":[]}}}\n\n'
    b'event: content_block_stop\n'
    b'data: {"type":"content_block_stop","index":4}\n\n'
    b'event: content_block_start\n'
    b'data: {"type":"content_block_start","index":5,"content_block":{"type":"text","text":""}}\n\n'
    b'event: content_block_delta\n'
    b'data: {"type":"content_block_delta","index":5,"delta":{"type":"text_delta","text":"ketch is an asyncio agent runtime; 6*7 is 42."}}\n\n'
    b'event: content_block_stop\n'
    b'data: {"type":"content_block_stop","index":5}\n\n'
    b'event: message_delta\n'
    b'data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"input_tokens":10682,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":510,"server_tool_use":{"web_search_requests":1}}}\n\n'
    b'event: message_stop\n'
    b'data: {"type":"message_stop"}\n\n'
)

# OpenAI Responses: a web search, a code interpreter run, then an answer citing a page.
RESPONSES = (
    b'event: response.created\n'
    b'data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_67ccd2bed1ec8190b14f964abc054267","object":"response","status":"in_progress","output":[],"usage":null}}\n\n'
    b'event: response.output_item.added\n'
    b'data: {"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"type":"web_search_call","id":"ws_67ccf18f64008190a39b619f4c8455ef087bb177ab789d5c","status":"in_progress"}}\n\n'
    b'event: response.web_search_call.in_progress\n'
    b'data: {"type":"response.web_search_call.in_progress","sequence_number":2,"output_index":0,"item_id":"ws_67ccf18f64008190a39b619f4c8455ef087bb177ab789d5c"}\n\n'
    b'event: response.web_search_call.searching\n'
    b'data: {"type":"response.web_search_call.searching","sequence_number":3,"output_index":0,"item_id":"ws_67ccf18f64008190a39b619f4c8455ef087bb177ab789d5c"}\n\n'
    b'event: response.web_search_call.completed\n'
    b'data: {"type":"response.web_search_call.completed","sequence_number":4,"output_index":0,"item_id":"ws_67ccf18f64008190a39b619f4c8455ef087bb177ab789d5c"}\n\n'
    b'event: response.output_item.done\n'
    b'data: {"type":"response.output_item.done","sequence_number":5,"output_index":0,"item":{"type":"web_search_call","id":"ws_67ccf18f64008190a39b619f4c8455ef087bb177ab789d5c","status":"completed","action":{"type":"search","query":"ketch agent runtime","sources":[{"type":"url","url":"https://example.com/ketch"}]}}}\n\n'
    b'event: response.output_item.added\n'
    b'data: {"type":"response.output_item.added","sequence_number":6,"output_index":1,"item":{"type":"code_interpreter_call","id":"ci_68b1c2d3e4f5a6b7","status":"in_progress","code":"","container_id":"cntr_68b1c2d3","outputs":null}}\n\n'
    b'event: response.code_interpreter_call_code.delta\n'
    b'data: {"type":"response.code_interpreter_call_code.delta","sequence_number":7,"output_index":1,"item_id":"ci_68b1c2d3e4f5a6b7","delta":"print(6*7)"}\n\n'
    b'event: response.output_item.done\n'
    b'data: {"type":"response.output_item.done","sequence_number":8,"output_index":1,"item":{"type":"code_interpreter_call","id":"ci_68b1c2d3e4f5a6b7","status":"completed","code":"print(6*7)","container_id":"cntr_68b1c2d3","outputs":[{"type":"logs","logs":"42\\n"}]}}\n\n'
    b'event: response.output_item.added\n'
    b'data: {"type":"response.output_item.added","sequence_number":9,"output_index":2,"item":{"id":"msg_67ccf190ca3881909d433c50b1f6357e087bb177ab789d5c","type":"message","status":"in_progress","content":[],"role":"assistant"}}\n\n'
    b'event: response.content_part.added\n'
    b'data: {"type":"response.content_part.added","sequence_number":10,"item_id":"msg_67ccf190ca3881909d433c50b1f6357e087bb177ab789d5c","output_index":2,"content_index":0,"part":{"type":"output_text","annotations":[],"text":""}}\n\n'
    b'event: response.output_text.delta\n'
    b'data: {"type":"response.output_text.delta","sequence_number":11,"item_id":"msg_67ccf190ca3881909d433c50b1f6357e087bb177ab789d5c","output_index":2,"content_index":0,"delta":"ketch is an agent runtime (example.com). 42."}\n\n'
    b'event: response.output_text.annotation.added\n'
    b'data: {"type":"response.output_text.annotation.added","sequence_number":12,"item_id":"msg_67ccf190ca3881909d433c50b1f6357e087bb177ab789d5c","output_index":2,"content_index":0,"annotation_index":0,"annotation":{"type":"url_citation","start_index":26,"end_index":39,"url":"https://example.com/ketch","title":"ketch: an asyncio agent runtime"}}\n\n'
    b'event: response.output_item.done\n'
    b'data: {"type":"response.output_item.done","sequence_number":13,"output_index":2,"item":{"id":"msg_67ccf190ca3881909d433c50b1f6357e087bb177ab789d5c","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","text":"ketch is an agent runtime (example.com). 42.","annotations":[{"type":"url_citation","start_index":26,"end_index":39,"url":"https://example.com/ketch","title":"ketch: an asyncio agent runtime"}]}]}}\n\n'
    b'event: response.completed\n'
    b'data: {"type":"response.completed","sequence_number":14,"response":{"id":"resp_67ccd2bed1ec8190b14f964abc054267","object":"response","status":"completed","usage":{"input_tokens":328,"input_tokens_details":{"cached_tokens":0},"output_tokens":356,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":684}}}\n\n'
)

# Gemini: code execution (executableCode, codeExecutionResult), then an answer grounded
# in a Google search (groundingMetadata on the last chunk).
GEMINI = (
    b'data: {"candidates": [{"content": {"parts": [{"text": "Let me compute."}],"role": "model"},"index": 0}],'
    b'"usageMetadata": {"promptTokenCount": 30,"candidatesTokenCount": 4,"totalTokenCount": 34},'
    b'"modelVersion": "gemini-2.5-flash","responseId": "Ym3OaKq1Lf2Z1dkPqZ2RmQ4"}\r\n\r\n'
    b'data: {"candidates": [{"content": {"parts": [{"executableCode": {"language": "PYTHON","code": "print(6*7)\\n"}},'
    b'{"codeExecutionResult": {"outcome": "OUTCOME_OK","output": "42\\n"}}],"role": "model"},"index": 0}],'
    b'"usageMetadata": {"promptTokenCount": 30,"candidatesTokenCount": 20,"totalTokenCount": 50},'
    b'"modelVersion": "gemini-2.5-flash","responseId": "Ym3OaKq1Lf2Z1dkPqZ2RmQ4"}\r\n\r\n'
    b'data: {"candidates": [{"content": {"parts": [{"text": "ketch is an agent runtime; 6*7 is 42."}],"role": "model"},'
    b'"finishReason": "STOP","index": 0,"groundingMetadata": {"webSearchQueries": ["ketch agent runtime"],'
    b'"searchEntryPoint": {"renderedContent": "<style></style><div></div>"},'
    b'"groundingChunks": [{"web": {"uri": "https://vertexaisearch.cloud.google.com/grounding-api-redirect/AbF9wXE","title": "example.com"}}],'
    b'"groundingSupports": [{"segment": {"startIndex": 0,"endIndex": 25,"text": "ketch is an agent runtime"},"groundingChunkIndices": [0]}]}}],'
    b'"usageMetadata": {"promptTokenCount": 30,"candidatesTokenCount": 32,"totalTokenCount": 62},'
    b'"modelVersion": "gemini-2.5-flash","responseId": "Ym3OaKq1Lf2Z1dkPqZ2RmQ4"}\r\n\r\n'
)

# Anthropic: a long web-search turn the API paused (stop reason pause_turn) after one
# search and its results, then the continuation it sent when that response was sent back
# as it is: the answer (end_turn). Written from the server-tools documentation.
PAUSED_SEARCH_ID = "srvtoolu_01WYG3ziw53XMcoyKL4XcZmE"
ANTHROPIC_PAUSED = (
    b'event: message_start\n'
    b'data: {"type":"message_start","message":{"id":"msg_01PausedTurnA7kq2Xq9TzB","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":2100,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":2}}}\n\n'
    b'event: content_block_start\n'
    b'data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n'
    b'event: content_block_delta\n'
    b'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Let me research that."}}\n\n'
    b'event: content_block_stop\n'
    b'data: {"type":"content_block_stop","index":0}\n\n'
    b'event: content_block_start\n'
    b'data: {"type":"content_block_start","index":1,"content_block":{"type":"server_tool_use","id":"' + PAUSED_SEARCH_ID.encode() + b'","name":"web_search","input":{}}}\n\n'
    b'event: content_block_delta\n'
    b'data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\\"query\\": \\"ketch releases\\"}"}}\n\n'
    b'event: content_block_stop\n'
    b'data: {"type":"content_block_stop","index":1}\n\n'
    b'event: content_block_start\n'
    b'data: {"type":"content_block_start","index":2,"content_block":{"type":"web_search_tool_result","tool_use_id":"' + PAUSED_SEARCH_ID.encode() + b'","content":[{"type":"web_search_result","title":"ketch releases","url":"https://example.com/ketch/releases","encrypted_content":"' + ENCRYPTED.encode() + b'","page_age":"May 2, 2025"}]}}\n\n'
    b'event: content_block_stop\n'
    b'data: {"type":"content_block_stop","index":2}\n\n'
    b'event: message_delta\n'
    b'data: {"type":"message_delta","delta":{"stop_reason":"pause_turn","stop_sequence":null},"usage":{"input_tokens":6200,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":95,"server_tool_use":{"web_search_requests":1}}}\n\n'
    b'event: message_stop\n'
    b'data: {"type":"message_stop"}\n\n'
)
ANTHROPIC_RESUMED = (
    b'event: message_start\n'
    b'data: {"type":"message_start","message":{"id":"msg_01PausedTurnB3mn8Rv4WcD","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":6300,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}}}\n\n'
    b'event: content_block_start\n'
    b'data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n'
    b'event: content_block_delta\n'
    b'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"ketch 1.0 was released in May 2025."}}\n\n'
    b'event: content_block_stop\n'
    b'data: {"type":"content_block_stop","index":0}\n\n'
    b'event: message_delta\n'
    b'data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"input_tokens":6300,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":14}}\n\n'
    b'event: message_stop\n'
    b'data: {"type":"message_stop"}\n\n'
)
