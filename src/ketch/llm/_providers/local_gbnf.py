"""JSON schemas to GBNF grammars (llama.cpp's grammar format), with compact JSON.

llama.cpp's server translates a ``json_schema`` itself, but its JSON may put up to two
newlines and twenty spaces between any two tokens, and a small model spends its token
budget there (SmolLM2 wrote 40 tokens of a call without reaching its first argument).
The grammars made here write JSON one way only (``{"a": 1, "b": [2, 3]}``: one space
after each colon and comma, none elsewhere), so a bounded call stays bounded and no token
is spent on layout.

Supported: ``type`` (one or a list), ``properties`` / ``required`` (required ones in
order, then the optional ones, each optional; no other keys), ``enum``, ``const``,
``anyOf`` / ``oneOf``, ``$ref`` to ``#/$defs/…`` or ``#/definitions/…``, strings with
``minLength`` / ``maxLength``, arrays with ``items`` / ``minItems`` / ``maxItems``,
integers and numbers (at most 16 digits, so they end), booleans and null. What is not
supported (``allOf``, ``not``, ``pattern``, ``format``, ``minimum`` …) is not enforced:
such a part accepts any JSON value of its type. :class:`GrammarError` is raised for a
reference that names no definition.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

_CHAR = r'[^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})'
_BASE = {
    "char": _CHAR,
    "string": r'"\"" char* "\""',
    "integer": '"-"? ([0-9] | [1-9] [0-9]{1,15})',
    "number": '"-"? ([0-9] | [1-9] [0-9]{1,15}) ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?',
    "boolean": '"true" | "false"',
    "null": '"null"',
    "value": "object | array | string | number | boolean | null",
    "object": '"{" ( string ": " value (", " string ": " value)* )? "}"',
    "array": '"[" ( value (", " value)* )? "]"',
}
_DEPENDS = {
    "string": ("char",),
    "value": ("object", "array", "string", "number", "boolean", "null"),
    "object": ("string", "value"),
    "array": ("value",),
}
_NAME = re.compile(r"[^a-zA-Z0-9-]+")


class GrammarError(ValueError):
    """A schema that cannot be translated (a reference to no definition)."""


def literal(value: Any) -> str:
    """The GBNF literal for ``value`` written as compact JSON."""
    text = msgspec.json.encode(value).decode()
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def text_literal(text: str) -> str:
    """The GBNF literal for raw ``text``."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    return f'"{escaped}"'


class Converter:
    """Rules for one grammar; :meth:`rule` adds a schema, :meth:`grammar` writes it."""

    def __init__(self, definitions: dict[str, Any] | None = None) -> None:
        self.rules: dict[str, str] = {}
        self.definitions = definitions or {}
        self._refs: dict[str, str] = {}

    def _base(self, name: str) -> str:
        if name not in self.rules:
            self.rules[name] = _BASE[name]
            for needed in _DEPENDS.get(name, ()):
                self._base(needed)
        return name

    def _add(self, hint: str, body: str) -> str:
        name = _NAME.sub("-", hint).strip("-") or "r"
        if name in _BASE:
            name = f"{name}-x"
        candidate, n = name, 1
        while candidate in self.rules and self.rules[candidate] != body:
            n += 1
            candidate = f"{name}{n}"
        self.rules[candidate] = body
        return candidate

    def rule(self, schema: Any, hint: str) -> str:
        """A rule name (or inline expression) for ``schema``."""
        if schema is True or not isinstance(schema, dict) or not schema:
            return self._base("value")
        if "$ref" in schema:
            return self._ref(str(schema["$ref"]))
        if "const" in schema:
            return literal(schema["const"])
        if "enum" in schema and isinstance(schema["enum"], list) and schema["enum"]:
            options = " | ".join(literal(v) for v in schema["enum"])
            return self._add(hint, options)
        for key in ("anyOf", "oneOf"):
            choices = schema.get(key)
            if isinstance(choices, list) and choices:
                parts = [self.rule(c, f"{hint}-{i}") for i, c in enumerate(choices)]
                return self._add(hint, " | ".join(parts))
        kind = schema.get("type")
        if isinstance(kind, list):
            parts = [self.rule({**schema, "type": k}, f"{hint}-{k}") for k in kind]
            return self._add(hint, " | ".join(parts)) if parts else self._base("value")
        if kind is None:
            if "properties" in schema:
                kind = "object"
            elif "items" in schema:
                kind = "array"
            else:
                return self._base("value")
        if kind == "object":
            return self._object(schema, hint)
        if kind == "array":
            return self._array(schema, hint)
        if kind == "string":
            return self._string(schema, hint)
        if kind in ("integer", "number", "boolean", "null"):
            return self._base(str(kind))
        return self._base("value")

    def _ref(self, ref: str) -> str:
        found = self._refs.get(ref)
        if found is not None:
            return found
        parts = ref.split("/")
        if len(parts) != 3 or parts[0] != "#" or parts[1] not in ("$defs", "definitions"):
            raise GrammarError(f"unsupported reference {ref!r}")
        if parts[2] not in self.definitions:
            raise GrammarError(f"reference {ref!r} names no definition")
        name = self._add(f"ref-{parts[2]}", f"<{ref}>")  # reserved first: definitions may recurse
        self._refs[ref] = name
        self.rules[name] = self.rule(self.definitions[parts[2]], f"{name}-body")
        return name

    def _string(self, schema: dict[str, Any], hint: str) -> str:
        low = int(schema.get("minLength", 0) or 0)
        high = schema.get("maxLength")
        if low == 0 and high is None:
            return self._base("string")
        self._base("char")
        count = f"{{{low},}}" if high is None else f"{{{low},{max(int(high), low)}}}"
        return self._add(hint, f'"\\"" char{count} "\\""')

    def _array(self, schema: dict[str, Any], hint: str) -> str:
        item = self.rule(schema.get("items"), f"{hint}-item")
        low = int(schema.get("minItems", 0) or 0)
        high = schema.get("maxItems")
        if high is not None and int(high) == 0:
            return self._add(hint, '"[]"')
        rest_low = max(low - 1, 0)
        rest = f"{{{rest_low},}}" if high is None else f"{{{rest_low},{max(int(high) - 1, rest_low)}}}"
        body = f'{item} (", " {item}){rest}'
        if low == 0:
            body = f"({body})?"
        return self._add(hint, f'"[" {body} "]"')

    def _object(self, schema: dict[str, Any], hint: str) -> str:
        properties = schema.get("properties")
        if not isinstance(properties, dict):
            return self._base("object")
        if not properties:  # declared without properties: the empty object
            return self._add(hint, '"{}"')
        required = [k for k in schema.get("required") or () if k in properties]
        optional = [k for k in properties if k not in required]
        pairs = {key: f"{literal(key)} \": \" {self.rule(properties[key], f'{hint}-{key}')}" for key in properties}

        def after(keys: list[str]) -> str:
            return " ".join(f'(", " {pairs[k]})?' for k in keys)

        if required:
            body = ' ", " '.join(pairs[k] for k in required)
            if optional:
                body = f"{body} {after(optional)}"
        else:
            starts = [f"{pairs[k]} {after(optional[i + 1 :])}".strip() for i, k in enumerate(optional)]
            body = f"({' | '.join(starts)})?"
        return self._add(hint, f'"{{" {body} "}}"')

    def grammar(self, root: str) -> str:
        """The grammar whose start rule ``root ::=`` is ``root``."""
        lines = [f"root ::= {root}"]
        lines.extend(f"{name} ::= {body}" for name, body in self.rules.items())
        return "\n".join(lines)


def schema_grammar(schema: Any) -> str:
    """A grammar for one JSON value following ``schema``."""
    definitions = {}
    if isinstance(schema, dict):
        for key in ("$defs", "definitions"):
            found = schema.get(key)
            if isinstance(found, dict):
                definitions.update(found)
    converter = Converter(definitions)
    return converter.grammar(converter.rule(schema, "value-root"))
