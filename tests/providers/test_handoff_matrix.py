"""White-box test: imports ketch implementation modules (private) directly.

Cross-provider handoff over the four wire protocols, end to end.

Each source protocol writes a transcript through its real adapter against the loopback
server, from recorded-format streams: thinking with a signature, text and two parallel
tool calls; their results; an answer; an aborted reply; a failed reply; a tool call that
never got its result. Every target protocol (the source itself included) then continues
that transcript, once through ``Model.stream`` and once through ``run_loop`` with the
loop's default conversion, and the exact request body it sent is checked, together with
a structural validator of the target API's rules.

The helpers here (stream writers per protocol, models, validators) are also used by
``tests/context/test_compaction_providers.py``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from typing import Any

import anthropic_streams
import gemini_streams
import msgspec
import pytest
import responses_streams
from loopback import LoopbackServer
from loopback import Reply
from loopback import sse

from ketch.llm import AbortSignal
from ketch.llm import AssistantMessage
from ketch.llm import Message
from ketch.llm import Model
from ketch.llm import Request
from ketch.llm import StreamOptions
from ketch.llm import TextContent
from ketch.llm import ThinkingContent
from ketch.llm import ToolCall
from ketch.llm import ToolResultMessage
from ketch.llm import ToolSpec
from ketch.llm import UserMessage
from ketch.llm._handoff import MISSING_TOOL_RESULT
from ketch.llm._providers.anthropic import AnthropicModel
from ketch.llm._providers.gemini import SKIP_SIGNATURE
from ketch.llm._providers.gemini import GeminiModel
from ketch.llm._providers.openai_chat import Compat
from ketch.llm._providers.openai_chat import OpenAIChatModel
from ketch.llm._providers.openai_responses import OpenAIResponsesModel
from ketch.llm._retry import NO_RETRY
from ketch.loop import Conversation
from ketch.loop import LoopConfig
from ketch.loop import Tool
from ketch.loop import ToolContext
from ketch.loop import run_loop
from ketch.loop._repair import INTERRUPTED_NOTE

CHAT = "openai-chat"
RESPONSES = "openai-responses"
ANTHROPIC = "anthropic-messages"
GEMINI = "gemini"
PROTOCOLS = (CHAT, RESPONSES, ANTHROPIC, GEMINI)

SYSTEM = "You are a weather assistant."
WEATHER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string", "description": "City name"}},
    "required": ["city"],
}
WEATHER = ToolSpec(name="get_weather", description="Current weather for a city", parameters=WEATHER_SCHEMA)


# -- recorded-format streams ------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """A tool call a scripted reply makes. ``id`` None: the protocol has no id for it
    (Gemini 2.5), and the adapter makes one."""

    id: str | None
    name: str
    args: dict[str, Any]


def _dump(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def _sse_reply(events: list[dict[str, Any]], *, named: bool, done: bool = False, stall: bool = False) -> Reply:
    names = [e["type"] for e in events] if named else None
    chunks = sse(*(_dump(e) for e in events), done=done, event_names=names)
    return Reply(headers={"content-type": "text/event-stream"}, chunks=chunks, stall_after=len(chunks) if stall else None)


def _signature(rid: str, what: str) -> str:
    return f"Eq{what}{rid}+sig/AA=="


class AnthropicWire:
    """Messages API streams (``event:`` + ``data:`` per event)."""

    name = ANTHROPIC

    def model(self, url: str) -> Model:
        return AnthropicModel("claude-sonnet-4-5", base_url=url + "/v1", api_key="sk-ant-test", retry=NO_RETRY)

    def _start(self, rid: str, tokens: int) -> dict[str, Any]:
        usage = {"input_tokens": tokens, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 1}
        message: dict[str, Any] = {"id": rid, "type": "message", "role": "assistant", "model": "claude-sonnet-4-5-20250929",
                   "content": [], "stop_reason": None, "stop_sequence": None, "usage": usage}
        return {"type": "message_start", "message": message}

    def _text(self, index: int, text: str) -> list[dict[str, Any]]:
        return [
            {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}},
            {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": text}},
        ]

    def reply(self, rid: str, *, thinking: str | None = None, text: str | None = None,
              calls: Sequence[Call] = (), tokens: int = 100) -> Reply:
        events = [self._start(rid, tokens)]
        index = 0
        if thinking is not None:
            events += [
                {"type": "content_block_start", "index": index,
                 "content_block": {"type": "thinking", "thinking": "", "signature": ""}},
                {"type": "content_block_delta", "index": index, "delta": {"type": "thinking_delta", "thinking": thinking}},
                {"type": "content_block_delta", "index": index,
                 "delta": {"type": "signature_delta", "signature": _signature(rid, "think")}},
                {"type": "content_block_stop", "index": index},
            ]
            index += 1
        if text is not None:
            events += [*self._text(index, text), {"type": "content_block_stop", "index": index}]
            index += 1
        for call in calls:
            events += [
                {"type": "content_block_start", "index": index,
                 "content_block": {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}},
                {"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": ""}},
                {"type": "content_block_delta", "index": index,
                 "delta": {"type": "input_json_delta", "partial_json": _dump(call.args)}},
                {"type": "content_block_stop", "index": index},
            ]
            index += 1
        stop = "tool_use" if calls else "end_turn"
        events += [
            {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None}, "usage": {"output_tokens": 40}},
            {"type": "message_stop"},
        ]
        return _sse_reply(events, named=True)

    def partial(self, rid: str, text: str) -> Reply:
        return _sse_reply([self._start(rid, 100), *self._text(0, text)], named=True, stall=True)

    def failing(self, rid: str, text: str) -> Reply:
        error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
        return _sse_reply([self._start(rid, 100), *self._text(0, text), error], named=True)


class ResponsesWire:
    """Responses API streams (``event:`` + ``data:``, ``sequence_number`` on each)."""

    name = RESPONSES

    def model(self, url: str) -> Model:
        return OpenAIResponsesModel("gpt-5", base_url=url + "/v1", api_key="sk-test", retry=NO_RETRY)

    @staticmethod
    def _response(rid: str, status: str, output: list[Any], **extra: Any) -> dict[str, Any]:
        return {"id": rid, "object": "response", "created_at": 1756315696, "status": status, "error": None,
                "incomplete_details": None, "model": "gpt-5-2025-08-07", "output": output, "store": False,
                "usage": None, **extra}

    @staticmethod
    def _number(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{**e, "sequence_number": i} for i, e in enumerate(events)]

    @staticmethod
    def _message(rid: str, index: int, text: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        item_id = f"msg_{rid[5:]}{index}"
        part = {"type": "output_text", "annotations": [], "logprobs": [], "text": text}
        done_item = {"id": item_id, "type": "message", "status": "completed", "content": [part], "role": "assistant"}
        events = [
            {"type": "response.output_item.added", "output_index": index,
             "item": {"id": item_id, "type": "message", "status": "in_progress", "content": [], "role": "assistant"}},
            {"type": "response.content_part.added", "item_id": item_id, "output_index": index, "content_index": 0,
             "part": {**part, "text": ""}},
            {"type": "response.output_text.delta", "item_id": item_id, "output_index": index, "content_index": 0,
             "delta": text, "logprobs": [], "obfuscation": "aZ3x"},
            {"type": "response.output_text.done", "item_id": item_id, "output_index": index, "content_index": 0,
             "text": text, "logprobs": []},
            {"type": "response.content_part.done", "item_id": item_id, "output_index": index, "content_index": 0,
             "part": part},
            {"type": "response.output_item.done", "output_index": index, "item": done_item},
        ]
        return events, done_item

    def reply(self, rid: str, *, thinking: str | None = None, text: str | None = None,
              calls: Sequence[Call] = (), tokens: int = 100) -> Reply:
        events: list[dict[str, Any]] = [{"type": "response.created", "response": self._response(rid, "in_progress", [])}]
        output: list[dict[str, Any]] = []
        index = 0
        if thinking is not None:
            item_id = f"rs_{rid[5:]}{index}"
            summary = [{"type": "summary_text", "text": thinking}]
            done_item = {"id": item_id, "type": "reasoning", "summary": summary,
                         "encrypted_content": f"gAAAAAB{rid}_encrypted"}
            events += [
                {"type": "response.output_item.added", "output_index": index,
                 "item": {"id": item_id, "type": "reasoning", "summary": []}},
                {"type": "response.reasoning_summary_part.added", "item_id": item_id, "output_index": index,
                 "summary_index": 0, "part": {"type": "summary_text", "text": ""}},
                {"type": "response.reasoning_summary_text.delta", "item_id": item_id, "output_index": index,
                 "summary_index": 0, "delta": thinking, "obfuscation": "Qw"},
                {"type": "response.reasoning_summary_text.done", "item_id": item_id, "output_index": index,
                 "summary_index": 0, "text": thinking},
                {"type": "response.reasoning_summary_part.done", "item_id": item_id, "output_index": index,
                 "summary_index": 0, "part": summary[0]},
                {"type": "response.output_item.done", "output_index": index, "item": done_item},
            ]
            output.append(done_item)
            index += 1
        if text is not None:
            more, done_item = self._message(rid, index, text)
            events += more
            output.append(done_item)
            index += 1
        for call in calls:
            item_id = f"fc_{rid[5:]}{index}"
            arguments = _dump(call.args)
            added: dict[str, Any] = {"id": item_id, "type": "function_call", "status": "in_progress", "arguments": "",
                     "call_id": call.id, "name": call.name}
            done_item = {**added, "status": "completed", "arguments": arguments}
            events += [
                {"type": "response.output_item.added", "output_index": index, "item": added},
                {"type": "response.function_call_arguments.delta", "item_id": item_id, "output_index": index,
                 "delta": arguments, "obfuscation": "x"},
                {"type": "response.function_call_arguments.done", "item_id": item_id, "output_index": index,
                 "arguments": arguments},
                {"type": "response.output_item.done", "output_index": index, "item": done_item},
            ]
            output.append(done_item)
            index += 1
        usage = {"input_tokens": tokens, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 40,
                 "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": tokens + 40}
        events.append({"type": "response.completed", "response": self._response(rid, "completed", output, usage=usage)})
        return _sse_reply(self._number(events), named=True)

    def partial(self, rid: str, text: str) -> Reply:
        events, _ = self._message(rid, 0, text)
        created = {"type": "response.created", "response": self._response(rid, "in_progress", [])}
        return _sse_reply(self._number([created, *events[:3]]), named=True, stall=True)

    def failing(self, rid: str, text: str) -> Reply:
        events, _ = self._message(rid, 0, text)
        created = {"type": "response.created", "response": self._response(rid, "in_progress", [])}
        error = {"code": "server_error", "message": "The model failed to generate a response."}
        failed = {"type": "response.failed", "response": self._response(rid, "failed", [], error=error)}
        return _sse_reply(self._number([created, *events[:3], failed]), named=True)


class GeminiWire:
    """``streamGenerateContent?alt=sse`` bodies: ``data:`` chunks split by CRLF pairs,
    no terminal marker (the chunk with a finish reason is the last)."""

    name = GEMINI

    def model(self, url: str) -> Model:
        return GeminiModel("gemini-2.5-flash", base_url=url + "/v1beta", api_key="AIza-test", retry=NO_RETRY)

    @staticmethod
    def _chunk(rid: str, parts: list[dict[str, Any]] | None, tokens: int, finish: str | None = None) -> dict[str, Any]:
        candidate: dict[str, Any] = {"index": 0}
        if parts is not None:
            candidate["content"] = {"parts": parts, "role": "model"}
        if finish is not None:
            candidate["finishReason"] = finish
        usage = {"promptTokenCount": tokens, "candidatesTokenCount": 40, "totalTokenCount": tokens + 40,
                 "promptTokensDetails": [{"modality": "TEXT", "tokenCount": tokens}]}
        return {"candidates": [candidate], "usageMetadata": usage, "modelVersion": "gemini-2.5-flash", "responseId": rid}

    @staticmethod
    def _reply(chunks: list[dict[str, Any]], stall: bool = False) -> Reply:
        data = [b"data: " + _dump(c).encode() + b"\r\n\r\n" for c in chunks]
        return Reply(headers={"content-type": "text/event-stream"}, chunks=data, stall_after=len(data) if stall else None)

    def reply(self, rid: str, *, thinking: str | None = None, text: str | None = None,
              calls: Sequence[Call] = (), tokens: int = 100) -> Reply:
        chunks = []
        if thinking is not None:
            chunks.append(self._chunk(rid, [{"text": thinking, "thought": True}], tokens))
        if text is not None:
            chunks.append(self._chunk(rid, [{"text": text}], tokens))
        if calls:
            parts = []
            for i, call in enumerate(calls):
                fc: dict[str, Any] = {"name": call.name, "args": call.args}
                if call.id is not None:
                    fc["id"] = call.id
                part: dict[str, Any] = {"functionCall": fc}
                if i == 0:
                    part["thoughtSignature"] = _signature(rid, "call")
                parts.append(part)
            chunks.append(self._chunk(rid, parts, tokens, "STOP"))
        else:
            chunks.append(self._chunk(rid, [{"text": "", "thoughtSignature": _signature(rid, "text")}], tokens, "STOP"))
        return self._reply(chunks)

    def partial(self, rid: str, text: str) -> Reply:
        return self._reply([self._chunk(rid, [{"text": text}], 100)], stall=True)

    def failing(self, rid: str, text: str) -> Reply:
        error = {"error": {"code": 503, "message": "The model is overloaded. Please try again later.",
                           "status": "UNAVAILABLE"}}
        return self._reply([self._chunk(rid, [{"text": text}], 100), error])


class ChatWire:
    """Chat Completions streams (``data:`` chunks, ``data: [DONE]``) as a Kimi K2
    thinking endpoint sends them: ``reasoning_content`` deltas and tool-call ids of the
    form ``functions.<name>:<n>``, which other providers reject."""

    name = CHAT

    def model(self, url: str) -> Model:
        return OpenAIChatModel("kimi-k2-thinking", provider="moonshot", base_url=url + "/v1", api_key="sk-test",
                               compat=Compat(replay_reasoning_field="reasoning_content"), retry=NO_RETRY)

    @staticmethod
    def _delta(rid: str, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"id": rid, "object": "chat.completion.chunk", "created": 1756315696, "model": "kimi-k2-thinking",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    def reply(self, rid: str, *, thinking: str | None = None, text: str | None = None,
              calls: Sequence[Call] = (), tokens: int = 100) -> Reply:
        chunks = [self._delta(rid, {"role": "assistant", "content": ""})]
        if thinking is not None:
            chunks.append(self._delta(rid, {"reasoning_content": thinking}))
        if text is not None:
            chunks.append(self._delta(rid, {"content": text}))
        for i, call in enumerate(calls):
            start = {"index": i, "id": call.id, "type": "function", "function": {"name": call.name, "arguments": ""}}
            chunks.append(self._delta(rid, {"tool_calls": [start]}))
            chunks.append(self._delta(rid, {"tool_calls": [{"index": i, "function": {"arguments": _dump(call.args)}}]}))
        chunks.append(self._delta(rid, {}, "tool_calls" if calls else "stop"))
        usage = {"prompt_tokens": tokens, "completion_tokens": 40, "total_tokens": tokens + 40}
        chunks.append({"id": rid, "object": "chat.completion.chunk", "created": 1756315696,
                       "model": "kimi-k2-thinking", "choices": [], "usage": usage})
        return Reply(headers={"content-type": "text/event-stream"}, chunks=sse(*(_dump(c) for c in chunks), done=True))

    def partial(self, rid: str, text: str) -> Reply:
        chunks = [self._delta(rid, {"role": "assistant", "content": ""}), self._delta(rid, {"content": text})]
        return _sse_reply_raw(chunks, stall=True)

    def failing(self, rid: str, text: str) -> Reply:
        error = {"error": {"message": "The server had an error while processing your request.", "type": "server_error"}}
        return _sse_reply_raw([self._delta(rid, {"content": text}), error])


def _sse_reply_raw(chunks: list[dict[str, Any]], stall: bool = False) -> Reply:
    data = sse(*(_dump(c) for c in chunks))
    return Reply(headers={"content-type": "text/event-stream"}, chunks=data, stall_after=len(data) if stall else None)


Wire = AnthropicWire | ResponsesWire | GeminiWire | ChatWire
WIRES: dict[str, Wire] = {w.name: w for w in (ChatWire(), ResponsesWire(), AnthropicWire(), GeminiWire())}


# -- structural validators ----------------------------------------------------------------

_ANTHROPIC_ID = re.compile(r"[a-zA-Z0-9_-]{1,64}")


def _require(condition: bool, problem: str) -> None:
    if not condition:
        raise AssertionError(problem)


def validate_anthropic(body: dict[str, Any]) -> None:
    """Messages API rules: user first and last; consecutive turns of one role count as
    one turn (the API combines them); every ``tool_use`` is answered by a
    ``tool_result`` at the start of the next (user) turn, once; no other
    ``tool_result``; ids match ``[a-zA-Z0-9_-]{1,64}`` and are unique; thinking is
    signed; no blank text."""
    messages = body["messages"]
    _require(bool(messages), "no messages")
    _require(messages[0]["role"] == "user", f"first message is {messages[0]['role']}")
    _require(messages[-1]["role"] == "user", "last message is not the user's")
    turns: list[tuple[str, list[dict[str, Any]]]] = []
    for i, m in enumerate(messages):
        _require(m["role"] in ("user", "assistant"), f"message {i}: role {m['role']!r}")
        _require(isinstance(m["content"], list) and bool(m["content"]), f"message {i}: empty content")
        for block in m["content"]:
            if block["type"] == "text":
                _require(bool(block["text"].strip()), f"message {i}: blank text block")
            elif block["type"] == "thinking":
                _require(m["role"] == "assistant" and bool(block.get("signature")), f"message {i}: unsigned thinking")
            elif block["type"] == "redacted_thinking":
                _require(m["role"] == "assistant" and bool(block.get("data")), f"message {i}: bad redacted thinking")
        if turns and turns[-1][0] == m["role"]:
            turns[-1][1].extend(m["content"])
        else:
            turns.append((m["role"], list(m["content"])))
    seen: set[str] = set()
    expected: list[str] = []
    for role, blocks in turns:
        if role == "assistant":
            _require(not expected, f"tool_use {expected} not answered")
            for block in blocks:
                if block["type"] == "tool_use":
                    tid = block["id"]
                    _require(_ANTHROPIC_ID.fullmatch(tid) is not None, f"tool_use id {tid!r} is invalid")
                    _require(tid not in seen, f"tool_use id {tid!r} is not unique")
                    seen.add(tid)
                    expected.append(tid)
                _require(block["type"] != "tool_result", "tool_result in an assistant turn")
            continue
        results: list[str] = []
        for j, block in enumerate(blocks):
            if block["type"] == "tool_result":
                _require(j == len(results), "tool_result after other content in a user turn")
                results.append(block["tool_use_id"])
        _require(sorted(results) == sorted(expected), f"tool_results {results} do not answer tool_use {expected}")
        expected = []


def validate_gemini(body: dict[str, Any]) -> None:
    """Gemini rules: ``user``/``model`` turns alternating from ``user`` and ending with
    ``user``; every part holds one kind of data; a model turn with function calls is
    followed by a user turn with exactly as many function responses, same names in
    order and same ids where the calls have ids; no other function responses."""
    contents = body["contents"]
    _require(bool(contents), "no contents")
    _require(contents[0]["role"] == "user", f"first turn is {contents[0]['role']}")
    _require(contents[-1]["role"] == "user", "last turn is not the user's")
    kinds = ("text", "inlineData", "fileData", "functionCall", "functionResponse")
    calls: list[dict[str, Any]] = []
    previous = ""
    for i, content in enumerate(contents):
        role = content["role"]
        _require(role in ("user", "model"), f"turn {i}: role {role!r}")
        _require(role != previous, f"turn {i}: two {role} turns in a row")
        previous = role
        parts = content["parts"]
        _require(bool(parts), f"turn {i}: no parts")
        for part in parts:
            _require(sum(k in part for k in kinds) == 1, f"turn {i}: part {part} holds {sum(k in part for k in kinds)} kinds")
        if role == "model":
            _require(all("functionResponse" not in p for p in parts), f"turn {i}: function response from the model")
            calls = [p["functionCall"] for p in parts if "functionCall" in p]
            continue
        _require(all("functionCall" not in p for p in parts), f"turn {i}: function call from the user")
        responses = [p["functionResponse"] for p in parts if "functionResponse" in p]
        _require(len(responses) == len(calls), f"turn {i}: {len(responses)} responses for {len(calls)} calls")
        for call, response in zip(calls, responses, strict=True):
            _require(call["name"] == response["name"], f"turn {i}: response {response['name']} for {call['name']}")
            _require(call.get("id") == response.get("id"), f"turn {i}: response id {response.get('id')} for {call.get('id')}")
            _require(set(response["response"]) <= {"output", "error"}, f"turn {i}: response {response['response']}")
        calls = []


def validate_responses(body: dict[str, Any]) -> None:
    """Responses API rules for stateless input (``store: false``): every
    ``function_call`` has a unique ``call_id`` of at most 64 characters, JSON arguments
    and exactly one later ``function_call_output``; every output answers an earlier
    call; a reasoning item carries its encrypted content and is followed by the output
    it led to; item ids are unique."""
    _require(body.get("store") is False, "not stateless")
    items = body["input"]
    _require(bool(items), "no input")
    calls: dict[str, int] = {}
    answered: set[str] = set()
    item_ids: set[str] = set()
    for i, item in enumerate(items):
        kind = item.get("type", "message")
        if "id" in item:
            _require(item["id"] not in item_ids, f"item {i}: duplicate id {item['id']}")
            item_ids.add(item["id"])
        if kind == "message":
            _require(item["role"] in ("user", "assistant", "system", "developer"), f"item {i}: role {item['role']}")
            # llama-server rejects an assistant item without its type ("Cannot determine type of 'item'").
            _require(item["role"] != "assistant" or item.get("type") == "message", f"item {i}: assistant without type")
            content = item["content"]
            _require(bool(content), f"item {i}: empty message")
            if isinstance(content, list):
                allowed = ("input_text", "input_image") if item["role"] != "assistant" else ("output_text", "refusal")
                _require(all(p["type"] in allowed for p in content), f"item {i}: parts {content}")
        elif kind == "reasoning":
            _require(item["id"].startswith("rs_") and isinstance(item.get("encrypted_content"), str),
                     f"item {i}: reasoning without encrypted content")
            follower = items[i + 1] if i + 1 < len(items) else {}
            _require(follower.get("type") == "function_call" or follower.get("role") == "assistant",
                     f"item {i}: reasoning without its following item")
        elif kind == "function_call":
            cid = item["call_id"]
            _require(isinstance(cid, str) and 0 < len(cid) <= 64, f"item {i}: call_id {cid!r}")
            _require(cid not in calls, f"item {i}: call_id {cid} is not unique")
            _require(isinstance(json.loads(item["arguments"]), dict), f"item {i}: arguments")
            _require("id" not in item or item["id"].startswith("fc_"), f"item {i}: id {item.get('id')}")
            calls[cid] = i
        elif kind == "function_call_output":
            cid = item["call_id"]
            _require(cid in calls, f"item {i}: output for unknown call {cid}")
            _require(cid not in answered, f"item {i}: second output for {cid}")
            answered.add(cid)
        else:
            raise AssertionError(f"item {i}: unknown type {kind}")
    _require(answered == set(calls), f"calls without output: {sorted(set(calls) - answered)}")
    last = items[-1]
    _require(last.get("role") == "user" or last.get("type") == "function_call_output", "input does not end with input")


def validate_chat(body: dict[str, Any]) -> None:
    """Chat Completions rules: system prompt first; an assistant message with
    ``tool_calls`` is followed by one tool message per call (ids unique, at most 40
    characters, JSON arguments) and nothing else before them;
    no other tool messages; assistant messages without calls have text; the last
    message is the user's or a tool result."""
    messages = body["messages"]
    _require(bool(messages), "no messages")
    seen: set[str] = set()
    open_calls: list[str] = []
    started = False
    for i, m in enumerate(messages):
        role = m["role"]
        if role in ("system", "developer"):
            _require(not started, f"message {i}: system prompt after the conversation started")
            continue
        started = True
        if role == "tool":
            _require(m["tool_call_id"] in open_calls, f"message {i}: tool result for {m['tool_call_id']} not expected")
            open_calls.remove(m["tool_call_id"])
            _require(isinstance(m["content"], str), f"message {i}: tool content")
            continue
        _require(not open_calls, f"message {i}: calls {open_calls} not answered")
        if role == "assistant":
            calls = m.get("tool_calls") or []
            if not calls:
                _require(isinstance(m.get("content"), str) and bool(m["content"]), f"message {i}: empty assistant")
            for call in calls:
                cid = call["id"]
                _require(isinstance(cid, str) and 0 < len(cid) <= 40, f"message {i}: tool call id {cid!r}")
                _require(cid not in seen, f"message {i}: tool call id {cid} is not unique")
                seen.add(cid)
                _require(call["type"] == "function", f"message {i}: call type")
                _require(isinstance(json.loads(call["function"]["arguments"]), dict), f"message {i}: arguments")
                open_calls.append(cid)
        else:
            _require(role == "user", f"message {i}: role {role!r}")
    _require(not open_calls, f"calls {open_calls} not answered")
    _require(messages[-1]["role"] in ("user", "tool"), "last message is the assistant's")


VALIDATORS = {CHAT: validate_chat, RESPONSES: validate_responses, ANTHROPIC: validate_anthropic, GEMINI: validate_gemini}


def call_ids(protocol: str, body: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The tool-call ids a request sends, and the ids its results answer (Gemini:
    function names, as its calls may have no ids)."""
    calls: list[str] = []
    results: list[str] = []
    if protocol == ANTHROPIC:
        for m in body["messages"]:
            for b in m["content"]:
                if b["type"] == "tool_use":
                    calls.append(b["id"])
                elif b["type"] == "tool_result":
                    results.append(b["tool_use_id"])
    elif protocol == RESPONSES:
        for item in body["input"]:
            if item.get("type") == "function_call":
                calls.append(item["call_id"])
            elif item.get("type") == "function_call_output":
                results.append(item["call_id"])
    elif protocol == CHAT:
        for m in body["messages"]:
            calls.extend(c["id"] for c in m.get("tool_calls") or ())
            if m["role"] == "tool":
                results.append(m["tool_call_id"])
    else:
        for content in body["contents"]:
            for p in content["parts"]:
                if "functionCall" in p:
                    calls.append(p["functionCall"].get("id", p["functionCall"]["name"]))
                elif "functionResponse" in p:
                    results.append(p["functionResponse"].get("id", p["functionResponse"]["name"]))
    return calls, results


def test_validators_reject_what_the_apis_reject() -> None:
    ok_anthropic = {"messages": [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a"}]},
        {"role": "user", "content": [{"type": "text", "text": "more"}]},
    ]}
    validate_anthropic(ok_anthropic)
    bad = [
        ({"messages": ok_anthropic["messages"][1:]}, "first message is assistant"),
        ({"messages": [*ok_anthropic["messages"][:2], ok_anthropic["messages"][3]]},
         "tool_results [] do not answer tool_use ['a']"),
        ({"messages": [*ok_anthropic["messages"][:2], ok_anthropic["messages"][3], ok_anthropic["messages"][2]]},
         "tool_result after other content in a user turn"),
    ]
    for body, problem in bad:
        with pytest.raises(AssertionError) as caught:
            validate_anthropic(body)
        assert str(caught.value) == problem
    call = {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {}}}]}
    with pytest.raises(AssertionError, match="^first turn is model$"):
        validate_gemini({"contents": [call, {"role": "user", "parts": [{"text": "x"}]}]})
    with pytest.raises(AssertionError, match=r"^turn 2: 0 responses for 1 calls$"):
        validate_gemini({"contents": [{"role": "user", "parts": [{"text": "x"}]}, call,
                                      {"role": "user", "parts": [{"text": "y"}]}]})
    fc = {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}
    with pytest.raises(AssertionError, match=r"^calls without output: \['c'\]$"):
        validate_responses({"store": False, "input": [{"role": "user", "content": "x"}, fc,
                                                      {"role": "user", "content": "y"}]})
    with pytest.raises(AssertionError, match="^item 2: call_id c is not unique$"):
        validate_responses({"store": False, "input": [{"role": "user", "content": "x"}, fc, fc]})
    with pytest.raises(AssertionError, match="^item 1: reasoning without its following item$"):
        validate_responses({"store": False, "input": [
            {"role": "user", "content": "x"},
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "e"},
            {"role": "user", "content": "y"}]})
    tc = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    with pytest.raises(AssertionError, match=r"^message 2: calls \['c'\] not answered$"):
        validate_chat({"messages": [{"role": "user", "content": "x"},
                                    {"role": "assistant", "content": "", "tool_calls": [tc]},
                                    {"role": "user", "content": "y"}]})
    with pytest.raises(AssertionError, match=f"^message 1: tool call id '{'c' * 41}'$"):
        validate_chat({"messages": [{"role": "user", "content": "x"},
                                    {"role": "assistant", "content": "", "tool_calls": [{**tc, "id": "c" * 41}]}]})


# -- the transcript every source writes ---------------------------------------------------

ASK = "What's the weather in Paris and in München?"
THOUGHT = "Two cities, so two get_weather calls."
INTRO = "I'll check both cities."
PARIS = "18°C, cloudy"
MUNICH = "12°C, light rain"
ANSWER = "Paris: 18°C and cloudy. München: 12°C with light rain."
TOKYO = "And Tokyo?"
PARTIAL = "Let me look up Tok"
AGAIN = "Please try again."
FAILED = "Checking Tok"
ONCE_MORE = "Once more, with the tool."
SUMMARISE = "Never mind. Summarise what you know."
DONE = "Here is what I know."

# The ids each source gives its three calls.
SOURCE_IDS: dict[str, tuple[str, str, str]] = {
    CHAT: ("functions.get_weather:0", "functions.get_weather:1", "functions.get_weather:2"),
    RESPONSES: ("call_Wq3bN0pKx8TzQ2mLr5Vn7Yd1", "call_Hc7tS2eLm9Qa4Zp1Xk6Bv3Nu", "call_Jd5rT8yUi2Op4As6Df8Gh0Jk"),
    ANTHROPIC: ("toolu_01T1x1fJ34qAmk2tNTrN7Up6", "toolu_01VGKkxjCn1dcfpX3Bbpx6jo", "toolu_01A09q90qw90lq917835lq9"),
    GEMINI: ("get_weather_qpc2afWVFJK4vr0Pq6WiyAU_0", "get_weather_qpc2afWVFJK4vr0Pq6WiyAU_1",
             "get_weather_Zm9vYmFyYmF6cXV4MTIz_0"),
}
# Response ids of the source's first and last replies (Gemini's call ids derive from them).
RID_CALLS = {CHAT: "chatcmpl-9xA1", RESPONSES: "resp_68af2d3e4f506172", ANTHROPIC: "msg_014p7gG3wDgGV9EUtLvnow3U",
             GEMINI: "qpc2afWVFJK4vr0Pq6WiyAU"}
RID_ANSWER = {CHAT: "chatcmpl-9xA2", RESPONSES: "resp_68af2d3e4f506173", ANTHROPIC: "msg_01EcyWo6m4hyW8KHs2y2pei5",
              GEMINI: "b3TOaKmUOsOx1dkPhPG-wQ4"}
RID_LAST = {CHAT: "chatcmpl-9xA5", RESPONSES: "resp_68af2d3e4f506176", ANTHROPIC: "msg_01A09q90qw90lq917835lq9x",
            GEMINI: "Zm9vYmFyYmF6cXV4MTIz"}


def _calls(source: str) -> tuple[Call, Call, Call]:
    ids: Sequence[str | None] = (None, None, None) if source == GEMINI else SOURCE_IDS[source]
    return (Call(ids[0], "get_weather", {"city": "Paris"}), Call(ids[1], "get_weather", {"city": "München"}),
            Call(ids[2], "get_weather", {"city": "Tokyo"}))


async def turn(model: Model, messages: list[Message], *, abort_at: str | None = None) -> AssistantMessage:
    """One response to ``messages`` through ``model.stream``; ``abort_at`` aborts the
    request once the streamed text reads exactly that."""
    signal = AbortSignal()
    final: AssistantMessage | None = None
    context = Request(system_prompt=SYSTEM, messages=list(messages), tools=[WEATHER])
    async for event in model.stream(context, StreamOptions(signal=signal)):
        if abort_at is not None and event.type == "text_delta" and event.partial.text == abort_at:
            signal.abort()
        elif event.type == "done":
            final = event.message
        elif event.type == "error":
            final = event.error
    assert final is not None
    return final


def result(call: ToolCall, text: str, t: float) -> ToolResultMessage:
    return ToolResultMessage(tool_call_id=call.id, tool_name=call.name, content=[TextContent(text=text)], timestamp=t)


async def write_transcript(server: LoopbackServer, source: str) -> list[Message]:
    """The source's transcript, ending with the user's last message."""
    wire = WIRES[source]
    model = wire.model(server.url)
    paris, munich, tokyo = _calls(source)
    messages: list[Message] = [UserMessage(content=ASK, timestamp=1.0)]
    server.queue(
        wire.reply(RID_CALLS[source], thinking=THOUGHT, text=INTRO, calls=[paris, munich]),
        wire.reply(RID_ANSWER[source], text=ANSWER),
        wire.partial("resp_68af2d3e4f506174" if source == RESPONSES else "rid-partial", PARTIAL),
        wire.failing("resp_68af2d3e4f506175" if source == RESPONSES else "rid-failing", FAILED),
        wire.reply(RID_LAST[source], calls=[tokyo]),
    )
    first = await turn(model, messages)
    assert first.stop_reason == "tool_use"
    assert [type(b) for b in first.content] == [ThinkingContent, TextContent, ToolCall, ToolCall]
    assert [c.id for c in first.tool_calls] == list(SOURCE_IDS[source][:2])
    messages += [first, result(first.tool_calls[0], PARIS, 2.0), result(first.tool_calls[1], MUNICH, 2.1)]
    answer = await turn(model, messages)
    assert (answer.stop_reason, answer.text) == ("stop", ANSWER)
    messages += [answer, UserMessage(content=TOKYO, timestamp=3.0)]
    aborted = await turn(model, messages, abort_at=PARTIAL)
    assert (aborted.stop_reason, aborted.content) == ("aborted", [TextContent(text=PARTIAL)])
    messages += [aborted, UserMessage(content=AGAIN, timestamp=4.0)]
    failed = await turn(model, messages)
    assert (failed.stop_reason, failed.content) == ("error", [TextContent(text=FAILED)])
    messages += [failed, UserMessage(content=ONCE_MORE, timestamp=5.0)]
    last = await turn(model, messages)
    assert last.stop_reason == "tool_use"
    assert [c.id for c in last.tool_calls] == [SOURCE_IDS[source][2]]
    messages += [last, UserMessage(content=SUMMARISE, timestamp=6.0)]
    assert len(server.requests) == 5
    return messages


# -- what each target must send -------------------------------------------------------------

# The ids another model sends for the source's calls (Gemini sends none for calls it did
# not make); the source itself gets its own ids back.
NORMALISED: dict[str, tuple[str, str, str]] = {
    **SOURCE_IDS,
    CHAT: ("functions_get_weather_0", "functions_get_weather_1", "functions_get_weather_2"),
}


def seen_ids(source: str, x: Expect) -> tuple[str, str, str]:
    return SOURCE_IDS[source] if x.own else NORMALISED[source]


@dataclass
class Expect:
    """What differs between continuations of one source's transcript."""

    loop: bool  # through run_loop (interruption note)
    own: bool  # the target is the model that wrote the transcript
    missing: str = field(init=False)

    def __post_init__(self) -> None:
        self.missing = MISSING_TOOL_RESULT  # one text, through the loop or not


def expected_anthropic(source: str, x: Expect) -> dict[str, Any]:
    i1, i2, i3 = seen_ids(source, x)

    def text(t: str) -> dict[str, Any]:
        return {"type": "text", "text": t}

    def use(i: str, city: str) -> dict[str, Any]:
        return {"type": "tool_use", "id": i, "name": "get_weather", "input": {"city": city}}

    first = [text(INTRO), use(i1, "Paris"), use(i2, "München")]
    if x.own:
        first.insert(0, {"type": "thinking", "thinking": THOUGHT, "signature": _signature(RID_CALLS[source], "think")})
    messages = [
        {"role": "user", "content": [text(ASK)]},
        {"role": "assistant", "content": first},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": i1, "content": PARIS},
                                     {"type": "tool_result", "tool_use_id": i2, "content": MUNICH}]},
        {"role": "assistant", "content": [text(ANSWER)]},
        {"role": "user", "content": [text(TOKYO)]},
    ]
    if x.loop:
        messages += [{"role": "assistant", "content": [text(PARTIAL)]}, {"role": "user", "content": [text(INTERRUPTED_NOTE)]}]
    messages += [
        {"role": "user", "content": [text(AGAIN)]},
        {"role": "user", "content": [text(ONCE_MORE)]},
        {"role": "assistant", "content": [use(i3, "Tokyo")]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": i3, "content": x.missing, "is_error": True}]},
        {"role": "user", "content": [{**text(SUMMARISE), "cache_control": {"type": "ephemeral"}}]},
    ]
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 32000,
        "stream": True,
        "system": [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
        "messages": messages,
        "tools": [{"name": "get_weather", "description": WEATHER.description, "input_schema": WEATHER_SCHEMA}],
    }


def expected_responses(source: str, x: Expect) -> dict[str, Any]:
    i1, i2, i3 = seen_ids(source, x)
    own = x.own

    def user(t: str) -> dict[str, Any]:
        return {"role": "user", "content": [{"type": "input_text", "text": t}]}

    def said(t: str, item: str | None) -> dict[str, Any]:
        if item is None:
            return {"type": "message", "role": "assistant", "content": t}
        return {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": t, "annotations": []}],
                "status": "completed", "id": item}

    def call(i: str, city: str, item: str | None) -> dict[str, Any]:
        out = {"type": "function_call", "call_id": i, "name": "get_weather", "arguments": _dump({"city": city})}
        if item is not None:
            out["id"] = item
        return out

    def output(i: str, t: str) -> dict[str, Any]:
        return {"type": "function_call_output", "call_id": i, "output": t}

    items: list[dict[str, Any]] = [user(ASK)]
    if own:
        items.append({"type": "reasoning", "id": "rs_68af2d3e4f5061720",
                      "summary": [{"type": "summary_text", "text": THOUGHT}],
                      "encrypted_content": f"gAAAAAB{RID_CALLS[source]}_encrypted"})
    items += [
        said(INTRO, "msg_68af2d3e4f5061721" if own else None),
        call(i1, "Paris", "fc_68af2d3e4f5061722" if own else None),
        call(i2, "München", "fc_68af2d3e4f5061723" if own else None),
        output(i1, PARIS),
        output(i2, MUNICH),
        said(ANSWER, "msg_68af2d3e4f5061730" if own else None),
        user(TOKYO),
    ]
    if x.loop:
        items += [said(PARTIAL, None), user(INTERRUPTED_NOTE)]
    items += [
        user(AGAIN),
        user(ONCE_MORE),
        call(i3, "Tokyo", "fc_68af2d3e4f5061760" if own else None),
        output(i3, x.missing),
        user(SUMMARISE),
    ]
    return {
        "model": "gpt-5",
        "instructions": SYSTEM,
        "input": items,
        "store": False,
        "stream": True,
        "tools": [{"type": "function", "name": "get_weather", "description": WEATHER.description,
                   "parameters": WEATHER_SCHEMA, "strict": False}],
        "include": ["reasoning.encrypted_content"],
    }


def expected_gemini(source: str, x: Expect) -> dict[str, Any]:
    own = x.own

    def call(city: str, signature: str | None = None) -> dict[str, Any]:
        part: dict[str, Any] = {"functionCall": {"name": "get_weather", "args": {"city": city}}}
        if signature is not None:
            part["thoughtSignature"] = signature
        return part

    def response(key: str, t: str) -> dict[str, Any]:
        return {"functionResponse": {"name": "get_weather", "response": {key: t}}}

    first = [{"text": INTRO}, call("Paris", _signature(RID_CALLS[source], "call") if own else None), call("München")]
    if own:
        first.insert(0, {"text": THOUGHT, "thought": True})
    answer: dict[str, Any] = {"text": ANSWER}
    if own:
        answer["thoughtSignature"] = _signature(RID_ANSWER[source], "text")
    contents = [
        {"role": "user", "parts": [{"text": ASK}]},
        {"role": "model", "parts": first},
        {"role": "user", "parts": [response("output", PARIS), response("output", MUNICH)]},
        {"role": "model", "parts": [answer]},
    ]
    if x.loop:
        contents += [
            {"role": "user", "parts": [{"text": TOKYO}]},
            {"role": "model", "parts": [{"text": PARTIAL}]},
            {"role": "user", "parts": [{"text": INTERRUPTED_NOTE}, {"text": AGAIN}, {"text": ONCE_MORE}]},
        ]
    else:
        contents.append({"role": "user", "parts": [{"text": TOKYO}, {"text": AGAIN}, {"text": ONCE_MORE}]})
    contents += [
        {"role": "model", "parts": [call("Tokyo", _signature(RID_LAST[source], "call") if own else None)]},
        {"role": "user", "parts": [response("error", x.missing), {"text": SUMMARISE}]},
    ]
    declaration = {"name": "get_weather", "description": WEATHER.description,
                   "parameters": {"type": "OBJECT", "properties": {"city": {"type": "STRING", "description": "City name"}},
                                  "required": ["city"]}}
    # Gemini 2.5 Flash thinks unless told not to: the turn's thinking level is "off".
    return {"contents": contents, "systemInstruction": {"parts": [{"text": SYSTEM}]},
            "tools": [{"functionDeclarations": [declaration]}],
            "generationConfig": {"thinkingConfig": {"thinkingBudget": 0}}}


def expected_chat(source: str, x: Expect) -> dict[str, Any]:
    i1, i2, i3 = seen_ids(source, x)

    def call(i: str, city: str) -> dict[str, Any]:
        return {"id": i, "type": "function", "function": {"name": "get_weather", "arguments": _dump({"city": city})}}

    first: dict[str, Any] = {"role": "assistant", "content": INTRO, "tool_calls": [call(i1, "Paris"), call(i2, "München")]}
    if x.own:
        first["reasoning_content"] = THOUGHT
    messages = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": ASK},
        first,
        {"role": "tool", "tool_call_id": i1, "content": PARIS},
        {"role": "tool", "tool_call_id": i2, "content": MUNICH},
        {"role": "assistant", "content": ANSWER},
        {"role": "user", "content": TOKYO},
    ]
    if x.loop:
        messages += [{"role": "assistant", "content": PARTIAL}, {"role": "user", "content": INTERRUPTED_NOTE}]
    messages += [
        {"role": "user", "content": AGAIN},
        {"role": "user", "content": ONCE_MORE},
        {"role": "assistant", "content": "", "tool_calls": [call(i3, "Tokyo")]},
        {"role": "tool", "tool_call_id": i3, "content": x.missing},
        {"role": "user", "content": SUMMARISE},
    ]
    return {
        "model": "kimi-k2-thinking",
        "messages": messages,
        "tools": [{"type": "function", "function": {"name": "get_weather", "description": WEATHER.description,
                                                    "parameters": WEATHER_SCHEMA}}],
        "tool_choice": "auto",
        "stream": True,
        "stream_options": {"include_usage": True},
    }


EXPECTED = {CHAT: expected_chat, RESPONSES: expected_responses, ANTHROPIC: expected_anthropic, GEMINI: expected_gemini}
PAIRS = [pytest.param(a, b, id=f"{a}->{b}") for a in PROTOCOLS for b in PROTOCOLS]


def _source_secrets(source: str) -> list[str]:
    """Strings only the source model may see again: its thinking and signatures."""
    return [THOUGHT, _signature(RID_CALLS[source], "think"), _signature(RID_CALLS[source], "call"),
            _signature(RID_ANSWER[source], "text"), _signature(RID_LAST[source], "call"), f"gAAAAAB{RID_CALLS[source]}",
            "rs_68af", "msg_68af", "fc_68af"]


def check_request(source: str, target: str, body: dict[str, Any], x: Expect) -> None:
    assert body == EXPECTED[target](source, x)
    VALIDATORS[target](body)
    calls, results = call_ids(target, body)
    assert sorted(calls) == sorted(results)
    assert len(calls) == 3
    if not x.own:
        sent = json.dumps(body, ensure_ascii=False)
        assert [s for s in _source_secrets(source) if s in sent] == []


async def unused_weather(args: dict[str, Any], ctx: ToolContext) -> str:
    raise AssertionError("no tool runs: the continuation answers with text")


@pytest.mark.parametrize(("source", "target"), PAIRS)
async def test_continue_through_model_stream(loopback: LoopbackServer, source: str, target: str) -> None:
    transcript = await write_transcript(loopback, source)
    wire = WIRES[target]
    loopback.queue(wire.reply("resp_68af9999aaaa0000" if target == RESPONSES else "rid-next", text=DONE))
    answer = await turn(wire.model(loopback.url), transcript)
    assert (answer.stop_reason, answer.text) == ("stop", DONE)
    check_request(source, target, loopback.requests[-1].json, Expect(loop=False, own=source == target))


@pytest.mark.parametrize(("source", "target"), PAIRS)
async def test_continue_through_the_loop(loopback: LoopbackServer, source: str, target: str) -> None:
    transcript = await write_transcript(loopback, source)
    wire = WIRES[target]
    loopback.queue(wire.reply("resp_68af9999aaaa0000" if target == RESPONSES else "rid-next", text=DONE))
    tool = Tool("get_weather", WEATHER.description, WEATHER_SCHEMA, unused_weather)
    context = Conversation(system_prompt=SYSTEM, messages=transcript[:-1], tools=[tool])
    outcome = await run_loop(transcript[-1], context, LoopConfig(model=wire.model(loopback.url))).result()
    assert outcome.end_reason == "stop"
    assert [m.role for m in outcome.messages] == ["user", "assistant"]
    assert outcome.messages[-1].text == DONE  # type: ignore[attr-defined]
    check_request(source, target, loopback.requests[-1].json, Expect(loop=True, own=source == target))


# -- ids that only clash on the target --------------------------------------------------------

LONG_TOOL = "mcp__weather_service__get_current_conditions"


async def _continue(server: LoopbackServer, target: str, transcript: list[Message], tools: list[ToolSpec]) -> dict[str, Any]:
    wire = WIRES[target]
    server.queue(wire.reply("resp_68af9999aaaa0000" if target == RESPONSES else "rid-next", text=DONE))
    context = Request(system_prompt=SYSTEM, messages=transcript, tools=tools)
    answer = await complete_turn(wire.model(server.url), context)
    assert (answer.stop_reason, answer.text) == ("stop", DONE)
    body: dict[str, Any] = server.requests[-1].json
    VALIDATORS[target](body)
    return body


async def complete_turn(model: Model, context: Request) -> AssistantMessage:
    final: AssistantMessage | None = None
    async for event in model.stream(context):
        if event.type == "done":
            final = event.message
        elif event.type == "error":
            final = event.error
    assert final is not None
    return final


@pytest.mark.parametrize("target", [CHAT, RESPONSES, ANTHROPIC])
async def test_long_generated_gemini_ids_stay_distinct(loopback: LoopbackServer, target: str) -> None:
    # Gemini 2.5 sends parallel calls without ids; the adapter names them
    # {name}_{responseId}_{n}, which for a long (MCP-style) tool name is longer than the
    # 40 (Chat) or 64 (Responses, Anthropic) characters other APIs accept, so they are
    # shortened there, and must stay distinct.
    spec = ToolSpec(name=LONG_TOOL, description="Current conditions", parameters=WEATHER_SCHEMA)
    gemini = WIRES[GEMINI]
    loopback.queue(gemini.reply(RID_CALLS[GEMINI], calls=[Call(None, LONG_TOOL, {"city": "Paris"}),
                                                          Call(None, LONG_TOOL, {"city": "Oslo"})]))
    transcript: list[Message] = [UserMessage(content=ASK, timestamp=1.0)]
    first = await complete_turn(gemini.model(loopback.url), Request(messages=list(transcript), tools=[spec]))
    assert [c.id for c in first.tool_calls] == [f"{LONG_TOOL}_{RID_CALLS[GEMINI]}_0", f"{LONG_TOOL}_{RID_CALLS[GEMINI]}_1"]
    transcript += [first, result(first.tool_calls[0], PARIS, 2.0), result(first.tool_calls[1], "3°C, snow", 2.1),
                   UserMessage(content="Thanks.", timestamp=3.0)]
    body = await _continue(loopback, target, transcript, [spec])
    calls, results = call_ids(target, body)
    assert len(set(calls)) == 2
    assert results == calls


@pytest.mark.parametrize("target", [RESPONSES, ANTHROPIC])
async def test_ids_a_server_reuses_across_turns_become_unique(loopback: LoopbackServer, target: str) -> None:
    # A Chat Completions server that numbers the calls of each response (call_0, call_1
    # …), so later turns repeat the ids of earlier ones. Anthropic rejects a request whose
    # tool_use ids repeat; Responses pairs outputs with calls by call_id.
    chat = WIRES[CHAT]
    model = chat.model(loopback.url)
    transcript: list[Message] = [UserMessage(content=ASK, timestamp=1.0)]
    for n, city in enumerate(("Paris", "München")):
        loopback.queue(chat.reply(f"chatcmpl-{n}", calls=[Call("call_0", "get_weather", {"city": city})]))
        reply = await complete_turn(model, Request(messages=list(transcript), tools=[WEATHER]))
        assert [c.id for c in reply.tool_calls] == ["call_0"]
        transcript += [reply, result(reply.tool_calls[0], f"{city}: mild", 2.0 + n)]
    transcript.append(UserMessage(content="Thanks.", timestamp=9.0))
    body = await _continue(loopback, target, transcript, [WEATHER])
    calls, results = call_ids(target, body)
    assert len(set(calls)) == 2
    assert results == calls


async def test_ids_made_up_for_calls_without_one_are_unique_across_turns(loopback: LoopbackServer) -> None:
    # A Chat Completions server that sends no call ids: the adapter makes up one per call,
    # never the same twice (a durable run keys its exactly-once records by call).
    chat = WIRES[CHAT]
    model = chat.model(loopback.url)
    seen: list[str] = []
    for n in range(2):
        loopback.queue(chat.reply(f"chatcmpl-{n}", calls=[Call(None, "get_weather", {"city": "Paris"}),
                                                         Call(None, "get_weather", {"city": "Oslo"})]))
        reply = await complete_turn(model, Request(messages=[UserMessage(content=ASK, timestamp=1.0)], tools=[WEATHER]))
        seen += [c.id for c in reply.tool_calls]
    assert len(set(seen)) == 4
    assert all(re.fullmatch(r"call_[0-9a-f]{24}", i) for i in seen)


async def test_aborted_response_replays_without_its_item_ids(loopback: LoopbackServer) -> None:
    # A reasoning model finished its reasoning and a message item, then was aborted while
    # streaming a call. The loop keeps the text of an aborted reply and drops its
    # reasoning; sending the message item's id without that reasoning is rejected ("Item
    # 'msg_…' of type 'message' was provided without its required 'reasoning' item"), so
    # the text goes back as plain assistant text.
    wire = ResponsesWire()
    rid = "resp_68afab0000000001"
    whole = wire.reply(rid, thinking=THOUGHT, text=INTRO, calls=[Call("call_Ab1", "get_weather", {"city": "Paris"})])
    cut = len(whole.chunks) - 3  # up to the call's argument delta
    loopback.queue(Reply(headers=whole.headers, chunks=whole.chunks[:cut], stall_after=cut))
    model = wire.model(loopback.url)
    messages: list[Message] = [UserMessage(content=ASK, timestamp=1.0)]
    signal = AbortSignal()
    aborted: AssistantMessage | None = None
    context = Request(system_prompt=SYSTEM, messages=list(messages), tools=[WEATHER])
    async for event in model.stream(context, StreamOptions(signal=signal)):
        if event.type == "toolcall_delta":
            signal.abort()
        elif event.type == "error":
            aborted = event.error
    assert aborted is not None and aborted.stop_reason == "aborted"
    assert [type(b) for b in aborted.content] == [ThinkingContent, TextContent, ToolCall]
    assert aborted.content[1].signature == '{"id":"msg_68afab00000000011"}'

    loopback.queue(wire.reply("resp_68afab0000000002", text=DONE))
    loop_context = Conversation(system_prompt=SYSTEM, messages=[*messages, aborted], tools=[])
    await run_loop(UserMessage(content=AGAIN, timestamp=3.0), loop_context, LoopConfig(model=model)).result()
    body = loopback.requests[-1].json
    assert body["input"] == [
        {"role": "user", "content": [{"type": "input_text", "text": ASK}]},
        {"type": "message", "role": "assistant", "content": INTRO},
        {"role": "user", "content": [{"type": "input_text", "text": INTERRUPTED_NOTE}]},
        {"role": "user", "content": [{"type": "input_text", "text": AGAIN}]},
    ]
    validate_responses(body)


# -- other models of the same protocol ---------------------------------------------------------


def sibling(protocol: str, url: str) -> Model:
    """Another model over the same protocol (and provider) as the source's."""
    if protocol == ANTHROPIC:
        return AnthropicModel("claude-haiku-4-5", base_url=url + "/v1", api_key="sk-ant-test", retry=NO_RETRY)
    if protocol == RESPONSES:
        return OpenAIResponsesModel("gpt-5-mini", base_url=url + "/v1", api_key="sk-test", retry=NO_RETRY)
    if protocol == GEMINI:
        return GeminiModel("gemini-2.5-pro", base_url=url + "/v1beta", api_key="AIza-test", retry=NO_RETRY)
    return OpenAIChatModel("kimi-k2-0905-preview", provider="moonshot", base_url=url + "/v1", api_key="sk-test",
                           compat=Compat(replay_reasoning_field="reasoning_content"), retry=NO_RETRY)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_another_model_of_the_protocol_gets_no_thinking_or_signatures(loopback: LoopbackServer,
                                                                           protocol: str) -> None:
    # Signatures and encrypted reasoning are bound to the model that wrote them.
    transcript = await write_transcript(loopback, protocol)
    loopback.queue(WIRES[protocol].reply("resp_68af9999aaaa0000" if protocol == RESPONSES else "rid-next", text=DONE))
    model = sibling(protocol, loopback.url)
    answer = await turn(model, transcript)
    assert (answer.stop_reason, answer.text) == ("stop", DONE)
    request = loopback.requests[-1]
    expected = EXPECTED[protocol](protocol, Expect(loop=False, own=False))
    if protocol == GEMINI:
        assert request.path == "/v1beta/models/gemini-2.5-pro:streamGenerateContent"
        del expected["generationConfig"]  # 2.5 Pro cannot stop thinking: nothing is sent
    else:
        expected["model"] = model.id
    assert request.json == expected
    VALIDATORS[protocol](request.json)


@pytest.mark.parametrize("source", PROTOCOLS)
async def test_gemini_3_gets_placeholder_signatures_on_calls_it_did_not_make(loopback: LoopbackServer,
                                                                            source: str) -> None:
    # Gemini 3 rejects a function call without a thought signature; calls written by
    # another model (another Gemini included) carry the documented placeholder instead.
    transcript = await write_transcript(loopback, source)
    loopback.queue(WIRES[GEMINI].reply("rid-next", text=DONE))
    model = GeminiModel("gemini-3-pro-preview", base_url=loopback.url + "/v1beta", api_key="AIza-test", retry=NO_RETRY)
    await turn(model, transcript)
    body = loopback.requests[-1].json
    validate_gemini(body)
    model_turns = [c["parts"] for c in body["contents"] if c["role"] == "model"]
    assert [[p.get("thoughtSignature") for p in parts] for parts in model_turns] == [
        [None, SKIP_SIGNATURE, None],
        [None],
        [SKIP_SIGNATURE],
    ]


@pytest.mark.parametrize("source", PROTOCOLS)
async def test_mistral_gets_nine_character_ids(loopback: LoopbackServer, source: str) -> None:
    transcript = await write_transcript(loopback, source)
    loopback.queue(WIRES[CHAT].reply("cmpl-next", text=DONE))
    model = OpenAIChatModel("mistral-large-latest", provider="mistral", base_url=loopback.url + "/v1",
                                   api_key="mistral-test", retry=NO_RETRY)
    await turn(model, transcript)
    body = loopback.requests[-1].json
    validate_chat(body)
    calls, results = call_ids(CHAT, body)
    assert len(set(calls)) == 3
    assert all(re.fullmatch(r"[a-zA-Z0-9]{9}", c) for c in calls)
    assert results == calls
    assert [m["name"] for m in body["messages"] if m["role"] == "tool"] == ["get_weather"] * 3


# -- the adapters' own recorded fixtures as sources ---------------------------------------------

TIME = ToolSpec(name="get_time", description="Local time in a time zone",
                parameters={"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]})


def _recorded(url: str, name: str) -> tuple[Model, list[bytes], list[str]]:
    """A source model, one of its recorded streams, and the opaque strings in it."""
    if name.startswith("anthropic"):
        stream = {"anthropic-parallel-tools": anthropic_streams.PARALLEL_TOOLS,
                  "anthropic-redacted-thinking": anthropic_streams.REDACTED_THINKING,
                  "anthropic-thinking": anthropic_streams.THINKING_TEXT}[name]
        return (WIRES[ANTHROPIC].model(url), anthropic_streams.events(stream),
                [anthropic_streams.THINKING_SIGNATURE, anthropic_streams.REDACTED_DATA, "ErUBCkYIBRgCIkDz"])
    if name.startswith("responses"):
        stream = {"responses-parallel-calls": responses_streams.PARALLEL_CALLS,
                  "responses-reasoning": responses_streams.REASONING_TEXT}[name]
        return WIRES[RESPONSES].model(url), responses_streams.events(stream), ["gAAAAABor_", "rs_68af", "msg_68af", "fc_68af"]
    stream = {"gemini-parallel-calls": gemini_streams.PARALLEL_CALLS, "gemini-3-call-with-id": gemini_streams.CALL_WITH_ID,
              "gemini-thinking": gemini_streams.THINKING_TEXT}[name]
    model = GeminiModel("gemini-3-pro-preview" if "gemini-3" in name else "gemini-2.5-flash",
                        base_url=url + "/v1beta", api_key="AIza-test", retry=NO_RETRY)
    return model, gemini_streams.events(stream), ["CikBcsjafFK168IbtVtoxVV0Tsn8O", "EpYCCpMCAdHtim9x2Y3Q", "CiQB0e2Kb7mR3X"]


RECORDED = ["anthropic-parallel-tools", "anthropic-redacted-thinking", "anthropic-thinking", "responses-parallel-calls",
            "responses-reasoning", "gemini-parallel-calls", "gemini-3-call-with-id", "gemini-thinking"]


@pytest.mark.parametrize("target", PROTOCOLS)
@pytest.mark.parametrize("recorded", RECORDED)
async def test_recorded_fixture_transcripts_continue_on_every_protocol(loopback: LoopbackServer, recorded: str,
                                                                       target: str) -> None:
    source, chunks, opaque = _recorded(loopback.url, recorded)
    loopback.queue(Reply(headers={"content-type": "text/event-stream"}, chunks=chunks))
    transcript: list[Message] = [UserMessage(content=ASK, timestamp=1.0)]
    reply = await turn(source, transcript)
    assert reply.stop_reason in ("stop", "tool_use")
    transcript.append(reply)
    transcript += [result(c, f"{c.name}: ok", 2.0 + i / 10) for i, c in enumerate(reply.tool_calls)]
    transcript.append(UserMessage(content="Thanks.", timestamp=3.0))

    wire = WIRES[target]
    loopback.queue(wire.reply("resp_68af9999aaaa0000" if target == RESPONSES else "rid-next", text=DONE))
    model = wire.model(loopback.url)
    answer = await complete_turn(model, Request(system_prompt=SYSTEM, messages=transcript, tools=[WEATHER, TIME]))
    assert (answer.stop_reason, answer.text) == ("stop", DONE)
    body = loopback.requests[-1].json
    VALIDATORS[target](body)
    calls, results = call_ids(target, body)
    assert len(calls) == len(reply.tool_calls)
    assert results == calls
    sent = json.dumps(body, ensure_ascii=False)
    own = (source.provider, source.api, source.id) == (model.provider, model.api, model.id)
    leaked = [s for s in opaque if s in sent]
    kept = [s for s in opaque if s in json.dumps(msgspec.to_builtins(reply), ensure_ascii=False)]
    assert leaked == (kept if own and target != CHAT else [])
    thinking = [_dump(b.thinking)[1:-1] for b in reply.content if isinstance(b, ThinkingContent) and b.thinking]
    assert [t in sent for t in thinking] == [own and target != CHAT] * len(thinking)
