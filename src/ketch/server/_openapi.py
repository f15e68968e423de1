"""The OpenAPI 3.1 document of the server (written by hand; a test checks that every
route is in it)."""

from __future__ import annotations

from typing import Any

_ID = {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}, "description": "session id"}
_TEXT_BODY = {
    "required": True,
    "content": {
        "application/json": {
            "schema": {"type": "object", "required": ["text"], "properties": {"text": {"type": "string", "minLength": 1}}}
        }
    },
}
_ERROR = {
    "description": "error",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
}
_ACCEPTED = {"description": "accepted", "content": {"application/json": {"schema": {"type": "object"}}}}
_SESSION = {"description": "the session", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Session"}}}}


def _command(summary: str, body: dict[str, Any] | None = None, *, conflict: str) -> dict[str, Any]:
    op: dict[str, Any] = {
        "summary": summary,
        "parameters": [_ID],
        "responses": {"202": _ACCEPTED, "400": _ERROR, "401": _ERROR, "403": _ERROR, "404": _ERROR, "409": {**_ERROR, "description": conflict}, "413": _ERROR, "415": _ERROR},
    }
    if body is not None:
        op["requestBody"] = body
    return {"post": op}


def openapi_document() -> dict[str, Any]:
    """The OpenAPI document served at ``/openapi.json``."""
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "ketch server",
            "version": "1",
            "description": "Sessions of ketch agents: JSON commands and a Server-Sent-Events stream of their events. "
            "Every route needs the bearer token (Authorization: Bearer <token>, or the page's cookie). A request "
            "that changes state needs Content-Type application/json (else 415) and, from a browser, this server's "
            "Origin (else 403).",
        },
        "security": [{"bearer": []}],
        "components": _components(),
        "paths": {**_paths(), **_protocol_paths()},
    }


def _components() -> dict[str, Any]:
    """The document's security scheme and schemas."""
    return {
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        "schemas": {
            "Error": {"type": "object", "required": ["error"], "properties": {"error": {"type": "string"}}},
            "Session": {
                "type": "object",
                "properties": {
                    "id": {"type": "string"},
                    "title": {"type": "string"},
                    "cwd": {"type": "string"},
                    "model": {"type": "string"},
                    "thinking": {"type": "string"},
                    "running": {"type": "boolean"},
                    "phase": {"type": "string"},
                    "pending_approvals": {"type": "array", "items": {"type": "object"}},
                    "pending_elicitations": {"type": "array", "items": {"type": "object"}},
                    "context": {"type": "object", "properties": {"tokens": {"type": "integer"}, "window": {"type": "integer"}}},
                    "cost": {"type": "number"},
                    "last_end": {"type": ["object", "null"]},
                    "writable": {"type": "boolean"},
                    "last_event_id": {"type": "string"},
                    "messages": {"type": "array", "items": {"type": "object"}},
                    "streaming": {
                        "type": ["object", "null"],
                        "description": "the assistant message being streamed, as far as the events up to last_event_id show it",
                    },
                },
            },
        },
    }


def _vendor_path() -> dict[str, Any]:
    """The route of the page's vendored libraries."""
    return {
        "/static/vendor/{name}": {
            "get": {
                "summary": "The page's vendored libraries (marked, DOMPurify, highlight.js; their licenses in the package beside them)",
                "parameters": [
                    {
                        "name": "name",
                        "in": "path",
                        "required": True,
                        "schema": {"type": "string", "enum": ["marked.umd.js", "purify.min.js", "highlight.min.js", "highlight-github.min.css"]},
                    }
                ],
                "responses": {"200": {"description": "file"}, "401": _ERROR, "404": _ERROR},
            }
        },
    }


_ELICITATION_BODY = {
    "required": True,
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "required": ["id", "action"],
                "properties": {
                    "id": {"type": "string"},
                    "action": {"enum": ["accept", "decline", "cancel"]},
                    "content": {"type": "object"},
                },
            }
        }
    },
}


def _paths() -> dict[str, Any]:
    """The document's routes."""
    return {
        "/": {"get": {"summary": "The web page (GET /?token=T sets the page's cookie and redirects to /)", "responses": {"200": {"description": "HTML"}, "303": {"description": "token accepted"}, "401": _ERROR}}},
        "/static/{name}": {
            "get": {
                "summary": "The page's script and style",
                "parameters": [{"name": "name", "in": "path", "required": True, "schema": {"type": "string", "enum": ["app.js", "app.css"]}}],
                "responses": {"200": {"description": "file"}, "401": _ERROR, "404": _ERROR},
            }
        },
        **_vendor_path(),
        "/openapi.json": {"get": {"summary": "This document", "responses": {"200": {"description": "OpenAPI 3.1"}, "401": _ERROR}}},
        "/api/sessions": {
            "get": {
                "summary": "Sessions of the server's directory, newest first (all=1: of every directory)",
                "parameters": [
                    {"name": "all", "in": "query", "schema": {"type": "string", "enum": ["0", "1"]}},
                    {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 200}},
                    {"name": "cursor", "in": "query", "schema": {"type": "string"}},
                    {"name": "q", "in": "query", "schema": {"type": "string"}, "description": "only sessions whose title contains this (or whose id starts with it)"},
                ],
                "responses": {"200": {"description": "{sessions, next_cursor}; each session says running and waiting (for approval)"}, "400": _ERROR, "401": _ERROR},
            },
            "post": {
                "summary": "Create a session (optionally on a model)",
                "requestBody": {"content": {"application/json": {"schema": {"type": "object", "properties": {"model": {"type": "string"}}}}}},
                "responses": {"201": _SESSION, "400": _ERROR, "401": _ERROR},
            },
        },
        "/api/sessions/{id}": {
            "get": {
                "summary": "The session: state, transcript, pending approvals, context and cost",
                "parameters": [_ID],
                "responses": {"200": _SESSION, "401": _ERROR, "404": _ERROR},
            },
            "delete": {
                "summary": "Delete the session (its transcript and files)",
                "parameters": [_ID],
                "responses": {"200": {"description": "{deleted}"}, "401": _ERROR, "403": _ERROR, "404": _ERROR, "409": _ERROR},
            },
        },
        "/api/sessions/{id}/title": {
            "post": {
                "summary": "Rename the session (one line, at most 80 characters)",
                "parameters": [_ID],
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": {"type": "object", "required": ["title"], "properties": {"title": {"type": "string"}}}}},
                },
                "responses": {"200": {"description": "{id, title}"}, "400": _ERROR, "401": _ERROR, "404": _ERROR},
            }
        },
        "/api/sessions/{id}/prompt": _command("Start a run on a prompt", _TEXT_BODY, conflict="a run is active or approvals are pending"),
        "/api/sessions/{id}/steer": _command("Steer the running agent (next turn)", _TEXT_BODY, conflict="no run is active"),
        "/api/sessions/{id}/follow_up": _command("Queue a follow-up for the running agent", _TEXT_BODY, conflict="no run is active"),
        "/api/sessions/{id}/abort": _command("Abort the run", conflict="no run is active"),
        "/api/sessions/{id}/approvals": _command(
            "Approve or deny calls a paused run waits on; the run resumes once each has a decision",
            {
                "required": True,
                "content": {
                    "application/json": {
                        "schema": {
                            "type": "object",
                            "required": ["decisions"],
                            "properties": {
                                "decisions": {
                                    "type": "object",
                                    "additionalProperties": {
                                        "type": "object",
                                        "properties": {"decision": {"enum": ["approve", "deny"]}, "reason": {"type": "string"}},
                                    },
                                }
                            },
                        }
                    }
                },
            },
            conflict="the session is not paused for approval",
        ),
        "/api/sessions/{id}/elicitations": _command(
            "Answer a question a tool's server asks during a run (an MCP elicitation: a URL to open, or a form)",
            _ELICITATION_BODY,
            conflict="no pending elicitation has this id",
        ),
        "/api/sessions/{id}/model": {
            "post": {
                "summary": "Change the session's model (provider:id)",
                "parameters": [_ID],
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": {"type": "object", "required": ["model"], "properties": {"model": {"type": "string"}}}}},
                },
                "responses": {"200": {"description": "{model}"}, "400": _ERROR, "401": _ERROR, "404": _ERROR, "409": _ERROR},
            }
        },
        "/api/sessions/{id}/events": {
            "get": {
                "summary": "Live events (Server-Sent Events). Each event has `id: <epoch>.<seq>` and one JSON object as data "
                "(the agent events as `ketch run -o stream-json` writes them, plus `session_state` and `run_error`). "
                "Last-Event-ID (or ?last_event_id=) replays what was missed from a bounded buffer; an id it no "
                "longer covers gets an `event: reset` (reload the session; its reason: behind, restarted, or "
                "slow_client for a client that stopped reading). Idle streams get `: ping` comments; past the "
                "server's limit of open streams: 503.",
                "parameters": [
                    _ID,
                    {"name": "Last-Event-ID", "in": "header", "schema": {"type": "string"}},
                    {"name": "last_event_id", "in": "query", "schema": {"type": "string"}},
                ],
                "responses": {"200": {"description": "text/event-stream"}, "401": _ERROR, "404": _ERROR, "409": _ERROR, "503": _ERROR},
            }
        },
    }


def _json_post(summary: str, body: str, answer: str, *, stream: str | None = None) -> dict[str, Any]:
    """A protocol route's POST: a JSON body, a JSON answer (or a stream)."""
    content: dict[str, Any] = {"application/json": {"schema": {"type": "object"}}}
    if stream:
        content["text/event-stream"] = {"schema": {"type": "string"}, "description": stream}
    return {
        "post": {
            "summary": summary,
            "requestBody": {"required": True, "description": body, "content": {"application/json": {"schema": {"type": "object"}}}},
            "responses": {"200": {"description": answer, "content": content}, "400": _ERROR, "401": _ERROR, "403": _ERROR, "404": _ERROR, "415": _ERROR},
        }
    }


def _protocol_paths() -> dict[str, Any]:
    """The routes of the protocols other clients speak (OpenAI-compatible, AG-UI, A2A)."""
    return {
        "/v1/models": {
            "get": {
                "summary": "OpenAI-compatible: the served agent as a model ({object: list, data: [{id, object: model, owned_by}]})",
                "responses": {"200": {"description": "the models"}, "401": _ERROR},
            }
        },
        "/v1/chat/completions": _json_post(
            "OpenAI-compatible Chat Completions: the served agent answers (its tools run on the server)",
            "model (the agent's name), messages (text only; no tools of the client's), stream, stream_options.include_usage",
            "a chat.completion",
            stream="chat.completion.chunk objects, then data: [DONE]",
        ),
        "/v1/responses": _json_post(
            "The Responses API (Open Responses): the served agent answers; previous_response_id continues its session",
            "model, input (a string or message items), instructions, previous_response_id, stream",
            "a response",
            stream="the Open Responses streaming events (response.created ... response.completed)",
        ),
        "/agui": _json_post(
            "AG-UI: one run of the served agent (a thread is a session; resume answers its interrupts)",
            "RunAgentInput: threadId, runId, messages, resume (no frontend tools)",
            "AG-UI events",
            stream="AG-UI events: RUN_STARTED, STATE_SNAPSHOT, TEXT_MESSAGE_*, REASONING_*, TOOL_CALL_*, RUN_FINISHED (outcome success, cancelled or interrupt) or RUN_ERROR",
        ),
        "/.well-known/agent-card.json": {
            "get": {
                "summary": "A2A: the served agent's card (public: no token needed to read it)",
                "security": [],
                "responses": {"200": {"description": "the AgentCard (A2A 1.0)"}},
            }
        },
        "/a2a": _json_post(
            "A2A 1.0 JSON-RPC: SendMessage, SendStreamingMessage, GetTask, CancelTask, SubscribeToTask",
            "a JSON-RPC 2.0 request",
            "a JSON-RPC 2.0 response",
            stream="JSON-RPC responses whose results are StreamResponse objects (task, statusUpdate, artifactUpdate)",
        ),
    }
