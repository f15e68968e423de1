"""GBNF grammars for the local provider: tool calls and JSON output from JSON schemas.

A tool call is one JSON object ``{"name": <tool name>, "arguments": <arguments>}``
whose arguments follow that tool's parameter schema. :func:`tool_call_grammar` builds
the grammar for one call of any of the given tools; :func:`json_schema_grammar` the
grammar for one JSON value of a schema (structured output).

Schemas are translated with llama.cpp's own converter (``llama_cpp.llama_grammar``),
imported only when a grammar is built. What it cannot translate falls back to "any
JSON object", so a call still parses (its arguments are then checked by the loop).
Keywords it ignores (``minimum``, ``maximum`` …) are not enforced by the grammar.

A call whose token budget is known can be bounded (``token_budget``): every free string
of the arguments (no ``maxLength``, ``enum``, ``const``, ``pattern`` or ``format``) gets a
maximum length such that the whole call fits the budget even at the worst case of one
six-character escape (six tokens) per character. Numbers are bounded by the converter, so a
call whose arguments hold no arrays and no free-form objects always ends within the budget.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

import msgspec

from .._model import ToolSpec

CALL_OVERHEAD_TOKENS = 96
"""Tokens kept, in a bounded call, for the JSON around the strings: the name, keys,
punctuation, spaces and numbers (each number is at most 17 characters)."""

_TOKENS_PER_CHAR = 6  # a string character written as an escape: backslash, u, four hex digits

# JSON string characters: no raw control characters, only valid escapes.
_CHAR_RULE = (
    r'[^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F])'
)

ANY_OBJECT_GRAMMAR = "\n".join(
    (
        'root ::= "{" space ( string ":" space value ("," space string ":" space value)* )? "}"',
        "value ::= object | array | string | number | boolean | null",
        'object ::= "{" space ( string ":" space value ("," space string ":" space value)* )? "}" space',
        'array ::= "[" space ( value ("," space value)* )? "]" space',
        r'string ::= "\"" char* "\"" space',
        f"char ::= {_CHAR_RULE}",
        'number ::= "-"? ([0-9] | [1-9] [0-9]*) ("." [0-9]+)? ([eE] [-+]? [0-9]+)? space',
        'boolean ::= ("true" | "false") space',
        'null ::= "null" space',
        'space ::= " "?',
    )
)
"""A grammar for any one JSON object."""

_DEF_KEYS = ("$defs", "definitions")


def _copy(schema: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(schema))
    return out


def _prefix_definitions(node: Any, prefix: str) -> Any:
    """Rename ``$defs`` entries (and local refs to them) so that rules from different
    tools never share a name: the converter names a ref's rule after its last segment."""
    if isinstance(node, list):
        return [_prefix_definitions(x, prefix) for x in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DEF_KEYS and isinstance(value, dict):
            out[key] = {f"{prefix}{name}": _prefix_definitions(v, prefix) for name, v in value.items()}
        elif key == "$ref" and isinstance(value, str):
            parts = value.split("/")
            if len(parts) >= 3 and parts[0] == "#" and parts[1] in _DEF_KEYS:
                parts[2] = prefix + parts[2]
            out[key] = "/".join(parts)
        else:
            out[key] = _prefix_definitions(value, prefix)
    return out


class _Converter:
    """One llama.cpp ``SchemaConverter`` shared by several schemas."""

    def __init__(self) -> None:
        grammar_module: Any = importlib.import_module("llama_cpp.llama_grammar")
        self._conv: Any = grammar_module.SchemaConverter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)

    def literal(self, text: str) -> str:
        result: str = self._conv._format_literal(text)
        return result

    def add(self, name: str, schema: dict[str, Any], url: str) -> str | None:
        """The rule name for ``schema`` (None when it cannot be translated)."""
        rules = dict(self._conv._rules)
        refs = dict(self._conv._refs)
        try:
            resolved = self._conv.resolve_refs(_prefix_definitions(_copy(schema), f"{name}-"), url)
            rule: str = self._conv.visit(resolved, name)
        except Exception:
            self._conv._rules = rules
            self._conv._refs = refs
            return None
        return rule

    def rule(self, name: str, body: str) -> str:
        result: str = self._conv._add_rule(name, body)
        return result

    def grammar(self) -> str:
        rules: dict[str, str] = self._conv._rules
        if "char" in rules:
            rules["char"] = _CHAR_RULE
        return "\n".join(f"{name} ::= {body}" for name, body in sorted(rules.items()))


def _object_rule(conv: _Converter) -> str:
    # The converter's generic object rule; added through an empty object schema.
    name = conv.add("any-object", {"type": "object"}, "any-object")
    assert name is not None
    return name


def _is_free_string(node: dict[str, Any]) -> bool:
    kind = node.get("type")
    if kind != "string" and not (isinstance(kind, list) and "string" in kind):
        return False
    return not any(key in node for key in ("maxLength", "enum", "const", "pattern", "format"))


def _free_strings(node: Any) -> int:
    if isinstance(node, list):
        return sum(_free_strings(x) for x in node)
    if not isinstance(node, dict):
        return 0
    own = 1 if _is_free_string(node) else 0
    return own + sum(_free_strings(v) for k, v in node.items() if k not in ("enum", "const", "default", "examples"))


def _bound_strings(node: Any, limit: int) -> Any:
    if isinstance(node, list):
        return [_bound_strings(x, limit) for x in node]
    if not isinstance(node, dict):
        return node
    out = {
        k: (v if k in ("enum", "const", "default", "examples") else _bound_strings(v, limit)) for k, v in node.items()
    }
    if _is_free_string(node):
        out["maxLength"] = max(limit, int(node.get("minLength", 0)))
    return out


def bounded_string_length(tools: Sequence[ToolSpec], token_budget: int) -> int:
    """The longest free string a call of ``tools`` may hold to end within ``token_budget``
    tokens (at least 8 characters)."""
    strings = max((_free_strings(t.parameters) for t in tools), default=0)
    room = max(token_budget - CALL_OVERHEAD_TOKENS, 0)
    return max(room // (_TOKENS_PER_CHAR * max(strings, 1)), 8)


def tool_call_grammar(tools: Sequence[ToolSpec], *, token_budget: int | None = None) -> str:
    """A GBNF grammar (root ``root``) for exactly one call of one of ``tools``:
    ``{"name": "<name>", "arguments": {...}}`` with arguments following the tool's schema.
    With ``token_budget``, free strings are bounded so that the call fits it (see the
    module documentation)."""
    if not tools:
        raise ValueError("tool_call_grammar needs at least one tool")
    limit = bounded_string_length(tools, token_budget) if token_budget is not None else None
    conv = _Converter()
    alternatives: list[str] = []
    for i, tool in enumerate(tools):
        params = tool.parameters if isinstance(tool.parameters, dict) else {}
        if limit is not None:
            params = _bound_strings(params, limit)
        args = conv.add(f"t{i}-args", params, f"tool{i}") if params else None
        if args is None:
            args = _object_rule(conv)
        name = conv.literal(msgspec.json.encode(tool.name).decode())
        body = f'{name} space "," space "\\"arguments\\"" space ":" space {args}'
        alternatives.append(conv.rule(f"call-{i}", body))
    conv.rule("root", '"{" space "\\"name\\"" space ":" space (' + " | ".join(alternatives) + ') "}"')
    return conv.grammar()


def json_schema_grammar(schema: dict[str, Any]) -> str:
    """A GBNF grammar (root ``root``) for one JSON value following ``schema``
    (any JSON object when the schema cannot be translated)."""
    conv = _Converter()
    rule = conv.add("value-root", schema, "schema") if schema else None
    if rule is None:
        return ANY_OBJECT_GRAMMAR
    conv.rule("root", rule)
    return conv.grammar()
