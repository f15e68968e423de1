"""Structured output: a JSON schema for a Python type, and the type back from the text.

:func:`response_format_for` turns a dataclass, ``TypedDict``, ``msgspec.Struct`` or
pydantic model into the ``response_format`` of :class:`~ketch.llm.StreamOptions`
(``{"name", "schema", "strict": True}``). The schema follows the rules of strict
structured-output modes: the root is an object, every object lists all its properties
as required and allows no others, optional properties accept ``null`` instead, and
keywords those modes reject (``default``, ``title``, length and uniqueness limits …)
are left out.

:func:`parse_structured` validates a model's reply against the type and returns an
instance, or raises :class:`StructuredOutputError` saying what was wrong. A reply
wrapped in a Markdown code fence is unwrapped first, and a ``null`` for an optional
property (as a strict schema invites) means "use the default".

Pydantic is used only for pydantic models, and never imported by this module.
"""

from __future__ import annotations

import re
import sys
from typing import Any
from typing import TypeVar

import msgspec

from .._schema._types import is_pydantic_model
from .._schema._types import output_name

T = TypeVar("T")

_DROPPED = frozenset(
    {
        "default",
        "title",
        "$schema",
        "discriminator",
        "examples",
        "minLength",
        "maxLength",
        "patternProperties",
        "unevaluatedProperties",
        "propertyNames",
        "minProperties",
        "maxProperties",
        "unevaluatedItems",
        "contains",
        "minContains",
        "maxContains",
        "uniqueItems",
    }
)
_NAMED_SCHEMAS = ("properties", "$defs", "definitions")
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SUB_SCHEMAS = ("items", "additionalProperties", "not")
_FENCE = re.compile(r"```[^\n`]*\n(.*?)\n?[ \t]*```", re.DOTALL)


class StructuredOutputError(ValueError):
    """A model reply that is not valid JSON for the requested type. ``text`` is the reply."""

    def __init__(self, message: str, *, text: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.text = text


def _unsupported(type_: Any) -> TypeError:
    return TypeError(
        f"response_format_for needs a dataclass, TypedDict, msgspec Struct or pydantic model, got {type_!r}"
    )


def _allows_null(schema: Any) -> bool:
    if not isinstance(schema, dict):
        return True
    kind = schema.get("type")
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return True
    return any(_allows_null(s) for s in schema.get("anyOf", ()))


def _strict(schema: Any) -> Any:
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _DROPPED:
            continue
        if key in _NAMED_SCHEMAS and isinstance(value, dict):
            value = {name: _strict(sub) for name, sub in value.items()}
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            value = [_strict(sub) for sub in value]
        elif key in _SUB_SCHEMAS:
            value = _strict(value)
        out[key] = value
    props = out.get("properties")
    if isinstance(props, dict):
        required = set(schema.get("required", ()))
        for name, sub in props.items():
            if name not in required and not _allows_null(sub):
                props[name] = {"anyOf": [sub, {"type": "null"}]}
        out["required"] = list(props)
        out["additionalProperties"] = False
    return out


class _Schemas(msgspec.Struct, frozen=True):
    name: str
    strict_json: bytes


_originals: dict[Any, dict[str, Any]] = {}
_stricts: dict[Any, _Schemas] = {}


def _original(type_: Any) -> dict[str, Any]:
    schema = _originals.get(type_)
    if schema is None:
        if is_pydantic_model(type_):
            schema = type_.model_json_schema()
        else:
            try:
                schema = msgspec.json.schema(type_)
            except TypeError:
                raise _unsupported(type_) from None
        assert isinstance(schema, dict)
        _originals[type_] = schema
    return schema


def _schemas(type_: Any) -> _Schemas:
    found = _stricts.get(type_)
    if found is None:
        found = _stricts[type_] = _build(type_)
    return found


def _build(type_: Any) -> _Schemas:
    name = output_name(type_)
    original = root = _original(type_)
    if not is_pydantic_model(type_):
        ref = original.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            defs = dict(original.get("$defs", {}))
            root = dict(defs.get(ref[len("#/$defs/") :], {}))
            if ref not in msgspec.json.encode(defs).decode():
                defs.pop(ref[len("#/$defs/") :], None)
            if defs:
                root["$defs"] = defs
    if root.get("type") != "object" or "properties" not in root:
        raise _unsupported(type_)
    return _Schemas(name, msgspec.json.encode(_strict(root)))


def response_format_for(type_: type[Any]) -> dict[str, Any]:
    """``{"name": ..., "schema": <strict JSON schema>, "strict": True}`` for ``type_``
    (a dataclass, ``TypedDict``, ``msgspec.Struct`` or pydantic model)."""
    s = _schemas(type_)
    return {"name": s.name, "schema": msgspec.json.decode(s.strict_json), "strict": True}


def _strip_fences(text: str) -> str:
    s = text.strip()
    if s.startswith("{") or s.startswith("["):
        return s
    match = _FENCE.search(s)
    return match.group(1).strip() if match else s


def _resolve(schema: Any, defs: dict[str, Any]) -> Any:
    while isinstance(schema, dict) and isinstance(schema.get("$ref"), str):
        schema = defs.get(schema["$ref"].rsplit("/", 1)[-1])
    return schema


def _prune(data: Any, schema: Any, defs: dict[str, Any]) -> Any:
    """``data`` without ``null`` values for optional properties that do not allow null."""
    schema = _resolve(schema, defs)
    if not isinstance(schema, dict):
        return data
    if isinstance(data, dict):
        props = schema.get("properties")
        if not isinstance(props, dict):
            objects = [s for s in map(lambda b: _resolve(b, defs), schema.get("anyOf", ())) if _is_object(s)]
            return _prune(data, objects[0], defs) if len(objects) == 1 else data
        required = set(schema.get("required", ()))
        out: dict[str, Any] = {}
        for key, value in data.items():
            sub = props.get(key)
            if sub is None:
                out[key] = value
            elif value is None and key not in required and not _allows_null(_resolve(sub, defs)):
                continue
            else:
                out[key] = _prune(value, sub, defs)
        return out
    if isinstance(data, list):
        items = schema.get("items")
        if items is None:
            arrays = [s for s in map(lambda b: _resolve(b, defs), schema.get("anyOf", ())) if _is_array(s)]
            items = arrays[0].get("items") if len(arrays) == 1 else None
        return [_prune(x, items, defs) for x in data] if items is not None else data
    return data


def _is_object(schema: Any) -> bool:
    return isinstance(schema, dict) and isinstance(schema.get("properties"), dict)


def _is_array(schema: Any) -> bool:
    return isinstance(schema, dict) and schema.get("type") == "array"


def _pydantic_problem(exc: Any) -> str:
    errors = exc.errors()
    first = errors[0]
    path = "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first.get("loc", ()))
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{first.get('msg', 'invalid value')} - at `{path}`{more}"


def parse_structured(text: str, type_: type[T]) -> T:
    """Validate ``text`` (a model's JSON reply) against ``type_`` and return an instance.

    Raises :class:`StructuredOutputError` naming the problem: an empty reply, invalid
    JSON, or the first value that does not match the type, with its path.
    """
    name = getattr(type_, "__name__", repr(type_))
    body = _strip_fences(text)
    if not body:
        raise StructuredOutputError(f"Structured output for {name} is empty", text=text)
    problem: Any
    try:
        return _validate(body, type_, json=True)
    except _invalid(type_) as exc:
        problem = exc
    except msgspec.DecodeError as exc:
        raise StructuredOutputError(f"Structured output for {name} is not valid JSON: {exc}", text=text) from None
    return _pruned(_decode(body, name, text), type_, name, problem, text)


def validate_structured(data: Any, type_: type[T]) -> T:
    """Validate ``data`` (a decoded JSON value, such as a tool call's arguments) against
    ``type_`` and return an instance, with the rules of :func:`parse_structured` (a
    ``null`` for an optional property means "use the default").

    Raises :class:`StructuredOutputError` naming the first value that does not match.
    """
    name = getattr(type_, "__name__", repr(type_))
    problem: Any
    try:
        return _validate(data, type_, json=False)
    except _invalid(type_) as exc:
        problem = exc
    return _pruned(data, type_, name, problem, "")


def _validate(value: Any, type_: type[T], *, json: bool) -> T:
    """``value`` as ``type_``: JSON text when ``json``, else decoded JSON data; pydantic
    validates a pydantic model, msgspec anything else.

    Raises :func:`_invalid` of ``type_`` for a value that does not match (msgspec's
    ``DecodeError`` for text that is not JSON), ``TypeError`` for a type msgspec cannot
    validate.
    """
    if is_pydantic_model(type_):
        if json:
            return type_.model_validate_json(value)  # type: ignore[attr-defined, no-any-return]
        return type_.model_validate(value)  # type: ignore[attr-defined, no-any-return]
    try:
        return msgspec.json.decode(value, type=type_) if json else msgspec.convert(value, type=type_)
    except TypeError:
        raise _unsupported(type_) from None


def _invalid(type_: Any) -> type[Exception]:
    """The error :func:`_validate` raises for a value that does not match ``type_``."""
    return sys.modules["pydantic"].ValidationError if is_pydantic_model(type_) else msgspec.ValidationError


def _pruned(data: Any, type_: type[T], name: str, problem: Any, text: str) -> T:
    """``data`` without the properties ``type_`` does not declare (and optional ``null``s),
    validated again; else the error for the first attempt's ``problem``."""
    original = _original(type_)
    pruned = _prune(data, original, original.get("$defs", {}))
    if pruned != data:
        try:
            return _validate(pruned, type_, json=False)
        except _invalid(type_):
            pass
    detail = _pydantic_problem(problem) if is_pydantic_model(type_) else str(problem)
    raise StructuredOutputError(f"Structured output does not match {name}: {detail}", text=text)


def _decode(body: str, name: str, text: str) -> Any:
    try:
        return msgspec.json.decode(body)
    except msgspec.DecodeError as exc:
        raise StructuredOutputError(f"Structured output for {name} is not valid JSON: {exc}", text=text) from None
