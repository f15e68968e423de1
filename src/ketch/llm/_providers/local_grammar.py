"""Constrained output for the local provider: grammars for a tool call and for JSON.

A tool call is one JSON object ``{"name": <tool name>, "arguments": <arguments>}`` whose
arguments follow that tool's parameter schema. :func:`tool_call_schema` builds the
schema of one call of any of the given tools, :func:`tool_call_grammar` its GBNF grammar
(:mod:`ketch.llm._providers.local_gbnf`: compact JSON) that constrains decoding;
:func:`json_schema_grammar` the grammar of one JSON value of a schema (structured
output). A schema that cannot be translated gets :data:`ANY_OBJECT` arguments instead,
so a call still parses (its arguments are then checked by the loop). Keywords the
translation ignores (``minimum``, ``maximum``, ``pattern`` …) are not enforced.

A call whose token budget is known can be bounded (``token_budget``): every free string
of the arguments (no ``maxLength``, ``enum``, ``const``, ``pattern`` or ``format``) gets a
maximum length such that the whole call fits the budget even at the worst case of one
six-character escape (six tokens) per character. Numbers are bounded by the translation,
so a call whose arguments hold no arrays and no free-form objects always ends within the
budget.

A string argument that names a file or folder (:data:`PATH_KEYS`) must not be empty: a
small model otherwise answers a forced call with ``{"path": ""}``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from .._model import ToolSpec
from .local_gbnf import Converter
from .local_gbnf import GrammarError
from .local_gbnf import schema_grammar
from .local_gbnf import text_literal

CALL_OVERHEAD_TOKENS = 96
"""Tokens kept, in a bounded call, for the JSON around the strings: the name, keys,
punctuation, spaces and numbers (each number is at most 17 characters)."""

ANY_OBJECT: dict[str, Any] = {"type": "object"}
"""The schema of any one JSON object."""

PATH_KEYS = frozenset({"path", "file", "file_path", "filename", "folder", "directory", "dir"})
"""Argument names whose string value names a file or folder: never empty in a call."""

_TOKENS_PER_CHAR = 6  # a string character written as an escape: backslash, u, four hex digits
_SKIP = ("enum", "const", "default", "examples")
_DEF_KEYS = ("$defs", "definitions")


def _is_string(node: dict[str, Any]) -> bool:
    kind = node.get("type")
    return kind == "string" or (isinstance(kind, list) and "string" in kind)


def _is_free_string(node: dict[str, Any]) -> bool:
    return _is_string(node) and not any(key in node for key in ("maxLength", "enum", "const", "pattern", "format"))


def _free_strings(node: Any) -> int:
    if isinstance(node, list):
        return sum(_free_strings(x) for x in node)
    if not isinstance(node, dict):
        return 0
    own = 1 if _is_free_string(node) else 0
    return own + sum(_free_strings(v) for k, v in node.items() if k not in _SKIP)


def _constrain(node: Any, limit: int | None) -> Any:
    """A copy of ``node`` with free strings bounded by ``limit`` (None: unbounded) and
    path arguments made non-empty."""
    if isinstance(node, list):
        return [_constrain(x, limit) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: (v if k in _SKIP else _constrain(v, limit)) for k, v in node.items()}
    if limit is not None and _is_free_string(node):
        out["maxLength"] = max(limit, int(node.get("minLength", 0)))
    properties = out.get("properties")
    if isinstance(properties, dict):
        for key, value in properties.items():
            if key in PATH_KEYS and isinstance(value, dict) and _is_string(value) and "minLength" not in value:
                value["minLength"] = 1
                if "maxLength" in value:
                    value["maxLength"] = max(int(value["maxLength"]), 1)
    return out


def _hoist_definitions(node: Any, prefix: str, found: dict[str, Any]) -> Any:
    """A copy of ``node`` whose local definitions (``$defs``, ``definitions``) move to
    ``found`` under names starting with ``prefix`` (so that tools never share one), with
    the references to them rewritten: refs resolve from the root of the call's schema."""
    if isinstance(node, list):
        return [_hoist_definitions(x, prefix, found) for x in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DEF_KEYS and isinstance(value, dict):
            for name, definition in value.items():
                found[f"{prefix}{name}"] = _hoist_definitions(definition, prefix, found)
        elif key == "$ref" and isinstance(value, str):
            parts = value.split("/")
            if len(parts) == 3 and parts[0] == "#" and parts[1] in _DEF_KEYS:
                value = f"#/$defs/{prefix}{parts[2]}"
            out[key] = value
        elif key in _SKIP:
            out[key] = value
        else:
            out[key] = _hoist_definitions(value, prefix, found)
    return out


def bounded_string_length(tools: Sequence[ToolSpec], token_budget: int) -> int:
    """The longest free string a call of ``tools`` may hold to end within ``token_budget``
    tokens (at least 8 characters)."""
    strings = max((_free_strings(t.parameters) for t in tools), default=0)
    room = max(token_budget - CALL_OVERHEAD_TOKENS, 0)
    return max(room // (_TOKENS_PER_CHAR * max(strings, 1)), 8)


def tool_call_schema(
    tools: Sequence[ToolSpec], *, token_budget: int | None = None, loose: bool = False
) -> dict[str, Any]:
    """The JSON schema of exactly one call of one of ``tools``:
    ``{"name": "<name>", "arguments": {...}}`` with arguments following the tool's
    schema (any object with ``loose``). With ``token_budget``, free strings are bounded
    so that the call fits it (see the module documentation)."""
    if not tools:
        raise ValueError("tool_call_schema needs at least one tool")
    limit = bounded_string_length(tools, token_budget) if token_budget is not None else None
    alternatives: list[dict[str, Any]] = []
    definitions: dict[str, Any] = {}
    for i, tool in enumerate(tools):
        params = tool.parameters if isinstance(tool.parameters, dict) and tool.parameters else ANY_OBJECT
        arguments = ANY_OBJECT if loose else _constrain(_hoist_definitions(params, f"t{i}-", definitions), limit)
        alternatives.append(
            {
                "type": "object",
                "properties": {"name": {"const": tool.name}, "arguments": arguments},
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
        )
    schema = alternatives[0] if len(alternatives) == 1 else {"anyOf": alternatives}
    if definitions and not loose:
        schema = {**schema, "$defs": {k: _constrain(v, limit) for k, v in definitions.items()}}
    return schema


CALL_PREFIX = '{"name": "'
"""How every call starts: written into the prompt (the model continues it in its own
words' tokens) rather than generated under the grammar (which it would spell out in
one- and two-letter tokens)."""


def _call_grammar(tools: Sequence[ToolSpec], limit: int | None, loose: bool) -> str:
    definitions: dict[str, Any] = {}
    arguments: list[Any] = []
    for i, tool in enumerate(tools):
        params = tool.parameters if isinstance(tool.parameters, dict) and tool.parameters else ANY_OBJECT
        arguments.append(ANY_OBJECT if loose else _constrain(_hoist_definitions(params, f"t{i}-", definitions), limit))
    converter = Converter({name: _constrain(d, limit) for name, d in definitions.items()})
    alternatives = []
    for i, tool in enumerate(tools):
        name = msgspec.json.encode(tool.name).decode()[1:-1]
        rule = converter.rule(arguments[i], f"t{i}-args")
        head = f'{name}", "arguments": '
        alternatives.append(f'{text_literal(head)} {rule} "}}"')
    return converter.grammar(" | ".join(f"({a})" for a in alternatives))


def tool_call_grammar(tools: Sequence[ToolSpec], *, token_budget: int | None = None, loose: bool = False) -> str:
    """The GBNF grammar of a call of one of ``tools`` (:func:`tool_call_schema`) after its
    first characters, :data:`CALL_PREFIX`; with any-object arguments when a tool's schema
    cannot be translated (or with ``loose``)."""
    if not tools:
        raise ValueError("tool_call_grammar needs at least one tool")
    limit = bounded_string_length(tools, token_budget) if token_budget is not None else None
    try:
        return _call_grammar(tools, limit, loose)
    except GrammarError:
        return _call_grammar(tools, limit, True)


def json_schema_grammar(schema: dict[str, Any]) -> str:
    """The GBNF grammar of one JSON value following ``schema`` (any JSON object when it
    cannot be translated)."""
    try:
        return schema_grammar(schema)
    except GrammarError:
        return schema_grammar(ANY_OBJECT)
