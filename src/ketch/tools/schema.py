"""JSON schemas from Python type hints and docstrings, and conversion of JSON back to Python.

:func:`type_schema` gives the schema of one annotation; :func:`function_schema` gives the
parameter schema of a function, its description, and a binder that turns validated
JSON arguments into call arguments of the annotated Python types.

Supported annotations: ``str``, ``int``, ``float``, ``bool``, ``None``, ``Any``,
``Literal``, ``Enum`` subclasses, ``list`` / ``Sequence`` / ``tuple`` / ``set`` /
``frozenset``, ``dict[str, T]`` / ``Mapping``, unions and ``Optional``, dataclasses,
``TypedDict``, ``msgspec.Struct``, pydantic models (only when pydantic is already
imported by the application), ``datetime`` / ``date`` / ``time`` / ``UUID`` /
``Decimal`` / ``Path``, ``NewType``, and ``Annotated[T, ...]`` with a description string,
:class:`Param`, ``pydantic.Field``, ``msgspec.Meta`` or ``annotated_types`` constraints.

Schemas are self-contained: named types are inlined, except recursive ones, which stay
in ``$defs`` at the root.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import inspect
import re
import sys
import types
import typing
from collections import abc
from collections.abc import Callable, Mapping
from typing import Any, Final

import msgspec

from ..loop.tool import ToolContext

__all__ = [
    "Docstring",
    "FunctionSchema",
    "Param",
    "ParamInfo",
    "converter_for",
    "function_schema",
    "parse_docstring",
    "type_schema",
]

_NONE_TYPE: Final = type(None)
_EMPTY: Final = inspect.Parameter.empty


class Param:
    """Describes a parameter inside ``Annotated``: ``Annotated[int, Param("Days ahead", minimum=1)]``.

    ``min_length`` / ``max_length`` apply to strings (characters) or arrays (items).
    """

    __slots__ = ("description", "examples", "max_length", "maximum", "min_length", "minimum", "pattern")

    def __init__(
        self,
        description: str | None = None,
        *,
        minimum: float | None = None,
        maximum: float | None = None,
        min_length: int | None = None,
        max_length: int | None = None,
        pattern: str | None = None,
        examples: list[Any] | None = None,
    ) -> None:
        self.description = description
        self.minimum = minimum
        self.maximum = maximum
        self.min_length = min_length
        self.max_length = max_length
        self.pattern = pattern
        self.examples = examples

    def __repr__(self) -> str:
        shown = [f"{n}={getattr(self, n)!r}" for n in self.__slots__ if getattr(self, n) is not None]
        return f"Param({', '.join(shown)})"


# --------------------------------------------------------------------------- docstrings


class Docstring(msgspec.Struct, frozen=True):
    """A parsed docstring: the first paragraph and per-parameter descriptions."""

    summary: str = ""
    params: dict[str, str] = msgspec.field(default_factory=dict)


_GOOGLE_PARAM_SECTIONS: Final = frozenset(
    {"args", "arguments", "parameters", "params", "keyword args", "keyword arguments", "attributes", "other parameters"}
)
_GOOGLE_HEADER = re.compile(r"^([A-Za-z][A-Za-z ]*):\s*$")
_KNOWN_SECTIONS: Final = _GOOGLE_PARAM_SECTIONS | {
    "returns", "return", "yields", "yield", "raises", "raise", "examples", "example", "notes", "note",
    "see also", "warnings", "warning", "references", "todo", "methods",
}  # fmt: skip
_GOOGLE_ENTRY = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_NUMPY_ENTRY = re.compile(r"^(\*{0,2}\w+(?:\s*,\s*\*{0,2}\w+)*)\s*(?::.*)?$")
_NUMPY_RULE = re.compile(r"^\s*-{3,}\s*$")
_REST_FIELD = re.compile(r"^:(?:param|parameter|arg|argument|key|keyword)\s+(?:[^:]*\s)?\*{0,2}(\w+)\s*:\s*(.*)$")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _is_numpy_header(lines: list[str], i: int) -> bool:
    return i + 1 < len(lines) and bool(lines[i].strip()) and bool(_NUMPY_RULE.match(lines[i + 1]))


def _is_google_header(line: str) -> bool:
    m = _GOOGLE_HEADER.match(line.strip())
    return m is not None and m.group(1).strip().lower() in _KNOWN_SECTIONS


def parse_docstring(doc: str | None) -> Docstring:
    """Parse a Google, NumPy or reST (``:param x:``) docstring."""
    if not doc:
        return Docstring()
    lines = inspect.cleandoc(doc).splitlines()
    summary: list[str] = []
    for i, line in enumerate(lines):
        text = line.strip()
        if not text or _is_google_header(line) or _is_numpy_header(lines, i) or text.startswith(":"):
            break
        summary.append(text)
    params: dict[str, str] = {}
    _parse_rest(lines, params)
    _parse_google(lines, params)
    _parse_numpy(lines, params)
    return Docstring(summary=" ".join(summary), params=params)


def _join(parts: list[str]) -> str:
    return " ".join(p for p in (x.strip() for x in parts) if p)


def _parse_rest(lines: list[str], params: dict[str, str]) -> None:
    i = 0
    while i < len(lines):
        m = _REST_FIELD.match(lines[i].strip())
        i += 1
        if m is None:
            continue
        parts = [m.group(2)]
        while i < len(lines) and lines[i].strip() and not lines[i].strip().startswith(":") and _indent(lines[i]) > 0:
            parts.append(lines[i])
            i += 1
        params.setdefault(m.group(1), _join(parts))


def _parse_google(lines: list[str], params: dict[str, str]) -> None:
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        m = _GOOGLE_HEADER.match(line.strip())
        if m is None or m.group(1).strip().lower() not in _GOOGLE_PARAM_SECTIONS:
            continue
        # cleandoc leaves the body at column 0 when the docstring starts with the header.
        header_indent = _indent(line) if i > 1 else -1
        base: int | None = None
        name: str | None = None
        parts: list[str] = []
        while i < len(lines):
            cur = lines[i]
            if cur.strip() and (_indent(cur) <= header_indent or (header_indent < 0 and _is_google_header(cur))):
                break
            i += 1
            if not cur.strip():
                continue
            if base is None:
                base = _indent(cur)
            entry = _GOOGLE_ENTRY.match(cur.strip()) if _indent(cur) <= base else None
            if entry is not None:
                if name is not None:
                    params.setdefault(name, _join(parts))
                name, parts = entry.group(1), [entry.group(2)]
            elif name is not None:
                parts.append(cur)
        if name is not None:
            params.setdefault(name, _join(parts))


def _parse_numpy(lines: list[str], params: dict[str, str]) -> None:
    i = 0
    while i < len(lines):
        if not _is_numpy_header(lines, i):
            i += 1
            continue
        title = lines[i].strip().lower()
        base = _indent(lines[i])
        i += 2
        if title not in ("parameters", "other parameters", "attributes", "keyword arguments", "params"):
            continue
        names: list[str] = []
        parts: list[str] = []
        while i < len(lines) and not _is_numpy_header(lines, i):
            cur = lines[i]
            i += 1
            if not cur.strip():
                continue
            if _indent(cur) <= base:
                entry = _NUMPY_ENTRY.match(cur.strip())
                if entry is None:
                    continue
                for n in names:
                    params.setdefault(n, _join(parts))
                names = [n.strip().lstrip("*") for n in entry.group(1).split(",")]
                parts = []
            elif names:
                parts.append(cur)
        for n in names:
            params.setdefault(n, _join(parts))


# --------------------------------------------------------------------------- annotations


def _unwrap(tp: Any) -> tuple[Any, list[Any]]:
    """``(base type, Annotated metadata)``, also stripping Required/NotRequired/ReadOnly."""
    meta: list[Any] = []
    while True:
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            meta.extend(tp.__metadata__)
            tp = tp.__origin__
        elif origin in (typing.Required, typing.NotRequired) or _is_readonly(origin):
            tp = typing.get_args(tp)[0]
        else:
            return tp, meta


def _is_readonly(origin: Any) -> bool:
    readonly = getattr(typing, "ReadOnly", None)
    return readonly is not None and origin is readonly


def _is_union(tp: Any) -> bool:
    origin = typing.get_origin(tp)
    return origin is typing.Union or origin is types.UnionType


def _pydantic_base() -> type | None:
    module = sys.modules.get("pydantic")
    base = getattr(module, "BaseModel", None) if module is not None else None
    return base if isinstance(base, type) else None


def _is_pydantic_model(tp: Any) -> bool:
    base = _pydantic_base()
    return base is not None and isinstance(tp, type) and issubclass(tp, base)


def _is_field_info(obj: Any) -> bool:
    module = sys.modules.get("pydantic.fields")
    cls = getattr(module, "FieldInfo", None) if module is not None else None
    return isinstance(cls, type) and isinstance(obj, cls)


def _is_struct(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, msgspec.Struct)


def _type_hints(obj: Any) -> dict[str, Any]:
    try:
        return typing.get_type_hints(obj, include_extras=True)
    except (NameError, TypeError, AttributeError) as exc:
        name = getattr(obj, "__qualname__", repr(obj))
        raise TypeError(f"cannot resolve the type hints of {name}: {exc}") from exc


def _json_default(value: Any) -> tuple[bool, Any]:
    """Whether ``value`` can be shown as a schema default, and its JSON form."""
    if isinstance(value, enum.Enum):
        return _json_default(value.value)
    if value is None:
        return False, None
    if isinstance(value, (str, bool, int, float)):
        return True, value
    if isinstance(value, (list, tuple)):
        items = [_json_default(v) for v in value]
        return all(ok for ok, _ in items), [v for _, v in items]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        pairs = {k: _json_default(v) for k, v in value.items()}
        return all(ok for ok, _ in pairs.values()), {k: v for k, (_, v) in pairs.items()}
    return False, None


def _literal_type(values: list[Any]) -> str | None:
    kinds = {type(v) for v in values}
    if kinds == {str}:
        return "string"
    if kinds == {bool}:
        return "boolean"
    if kinds == {int}:
        return "integer"
    if kinds and kinds <= {int, float}:
        return "number"
    return None


_ARRAY_TYPES: Final = (list, abc.Sequence, abc.MutableSequence, abc.Iterable, abc.Collection)
_SET_TYPES: Final = (set, frozenset, abc.Set, abc.MutableSet)
_MAPPING_TYPES: Final = (dict, abc.Mapping, abc.MutableMapping)
_PLAIN_ARRAY_ORIGINS: Final = (list, abc.Sequence, abc.Iterable, abc.Collection)


# An annotation of these types means their module is loaded: look them up, never import.
def _string_format(tp: Any) -> str | None:
    dt = sys.modules.get("datetime")
    if dt is not None:
        if tp is dt.datetime:
            return "date-time"
        if tp is dt.date:
            return "date"
        if tp is dt.time:
            return "time"
    uu = sys.modules.get("uuid")
    if uu is not None and tp is uu.UUID:
        return "uuid"
    return None


def _is_decimal(tp: Any) -> bool:
    module = sys.modules.get("decimal")
    return module is not None and tp is module.Decimal


def _is_path(tp: Any) -> bool:
    module = sys.modules.get("pathlib")
    return module is not None and isinstance(tp, type) and issubclass(tp, module.PurePath)


# --------------------------------------------------------------------------- schema building


class _Builder:
    """Builds schemas for annotations, collecting named object types in ``defs``."""

    def __init__(self) -> None:
        self.defs: dict[str, dict[str, Any]] = {}
        self.names: dict[Any, str] = {}

    def build(self, tp: Any) -> dict[str, Any]:
        base, meta = _unwrap(tp)
        schema = self._base(base)
        return _apply_meta(schema, meta) if meta else schema

    def _base(self, tp: Any) -> dict[str, Any]:
        if tp is Any or tp is object or tp is _EMPTY:
            return {}
        if tp is None or tp is _NONE_TYPE:
            return {"type": "null"}
        supertype = getattr(tp, "__supertype__", None)
        if supertype is not None:
            return self.build(supertype)
        if _is_union(tp):
            return self._union(tp)
        origin = typing.get_origin(tp)
        args = typing.get_args(tp)
        if origin is typing.Literal:
            return _literal_schema(list(args))
        if isinstance(tp, type) and issubclass(tp, enum.Enum):
            return _literal_schema([m.value for m in tp])
        if tp is bool:
            return {"type": "boolean"}
        if tp is int:
            return {"type": "integer"}
        if tp is float:
            return {"type": "number"}
        if tp is str:
            return {"type": "string"}
        string_format = _string_format(tp)
        if string_format is not None:
            return {"type": "string", "format": string_format}
        if _is_decimal(tp):
            return {"type": "number"}
        if _is_path(tp):
            return {"type": "string"}
        container = origin if origin is not None else tp
        if container is tuple:
            return self._tuple(args, bare=origin is None)
        if container in _ARRAY_TYPES or container in _SET_TYPES:
            schema: dict[str, Any] = {"type": "array"}
            if args and args[0] is not Any:
                schema["items"] = self.build(args[0])
            if container in _SET_TYPES:
                schema["uniqueItems"] = True
            return schema
        if container in _MAPPING_TYPES:
            schema = {"type": "object"}
            if len(args) == 2 and args[1] is not Any:
                schema["additionalProperties"] = self.build(args[1])
            return schema
        if _is_pydantic_model(tp):
            return self._pydantic(tp)
        if _is_struct(tp):
            return self._struct(tp)
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            return self._named(tp, self._dataclass)
        if typing.is_typeddict(tp):
            return self._named(tp, self._typeddict)
        if tp is ToolContext:
            raise TypeError("ToolContext is only allowed as a direct parameter annotation")
        raise TypeError(f"unsupported type for a tool schema: {tp!r}")

    def _union(self, tp: Any) -> dict[str, Any]:
        arms: list[Any] = []
        stack = list(typing.get_args(tp))
        while stack:
            arm = stack.pop(0)
            if _is_union(arm):
                stack[:0] = typing.get_args(arm)
            elif arm not in arms:
                arms.append(arm)
        nullable = _NONE_TYPE in arms
        others = [a for a in arms if a is not _NONE_TYPE]
        branches = [self.build(a) for a in others]
        if nullable:
            branches.append({"type": "null"})
        return branches[0] if len(branches) == 1 else {"anyOf": branches}

    def _tuple(self, args: tuple[Any, ...], *, bare: bool) -> dict[str, Any]:
        if bare:
            return {"type": "array"}
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": self.build(args[0])}
        if args == ((),):
            args = ()
        n = len(args)
        schema: dict[str, Any] = {"type": "array"}
        if n:
            schema["prefixItems"] = [self.build(a) for a in args]
        schema["minItems"] = n
        schema["maxItems"] = n
        return schema

    def _named(self, tp: type, make: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
        name = self.names.get(tp)
        if name is None:
            name = self._fresh_name(tp.__name__)
            self.names[tp] = name
            self.defs[name] = {}
            self.defs[name] = make(tp)
        return {"$ref": f"#/$defs/{name}"}

    def _fresh_name(self, base: str) -> str:
        name, n = base, 1
        while name in self.defs:
            n += 1
            name = f"{base}{n}"
        return name

    def _object(
        self, cls: type, fields: list[tuple[str, Any, bool, Any]], field_docs: Mapping[str, str]
    ) -> dict[str, Any]:
        """Object schema from ``(name, type, required, default)`` tuples."""
        props: dict[str, Any] = {}
        required: list[str] = []
        for name, tp, is_required, default in fields:
            prop = self.build(tp)
            if "description" not in prop and name in field_docs:
                prop["description"] = field_docs[name]
            if is_required:
                required.append(name)
            else:
                ok, value = _json_default(default)
                if ok:
                    prop["default"] = value
            props[name] = prop
        schema: dict[str, Any] = {"type": "object", "properties": props}
        if required:
            schema["required"] = required
        schema["additionalProperties"] = False
        summary = _class_summary(cls)
        if summary:
            schema["description"] = summary
        return schema

    def _dataclass(self, cls: type) -> dict[str, Any]:
        hints = _type_hints(cls)
        fields = []
        for f in dataclasses.fields(cls):
            if not f.init:
                continue
            required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            fields.append((f.name, hints.get(f.name, Any), required, f.default))
        return self._object(cls, fields, parse_docstring(_own_doc(cls)).params)

    def _typeddict(self, cls: type) -> dict[str, Any]:
        hints = _type_hints(cls)
        required_keys: frozenset[str] = getattr(cls, "__required_keys__", frozenset(hints))
        fields = [(name, tp, name in required_keys, None) for name, tp in hints.items()]
        return self._object(cls, fields, parse_docstring(_own_doc(cls)).params)

    def _struct(self, cls: type) -> dict[str, Any]:
        (schema,), components = msgspec.json.schema_components((cls,), ref_template="#/$defs/{name}")
        return self._import(schema, components)

    def _pydantic(self, cls: Any) -> dict[str, Any]:
        schema: dict[str, Any] = cls.model_json_schema(ref_template="#/$defs/{model}")
        components = schema.pop("$defs", {})
        return self._import(schema, components)

    def _import(self, schema: dict[str, Any], components: dict[str, Any]) -> dict[str, Any]:
        """Merge foreign ``$defs`` into ours, renaming clashes, and return ``schema`` rewritten."""
        renames: dict[str, str] = {}
        for name, body in components.items():
            if name in self.defs and self.defs[name] != body:
                renames[name] = self._fresh_name(name)
        if renames:
            components = {renames.get(k, k): _rewrite_refs(v, renames) for k, v in components.items()}
            schema = _rewrite_refs(schema, renames)
        for name, body in components.items():
            self.defs.setdefault(name, body)
        return schema


def _own_doc(cls: type) -> str | None:
    doc = cls.__dict__.get("__doc__")
    if not isinstance(doc, str):
        return None
    if dataclasses.is_dataclass(cls) and doc.startswith(f"{cls.__name__}("):
        return None
    return doc


def _class_summary(cls: type) -> str:
    return parse_docstring(_own_doc(cls)).summary


def _rewrite_refs(node: Any, renames: dict[str, str]) -> Any:
    if isinstance(node, dict):
        out = {k: _rewrite_refs(v, renames) for k, v in node.items()}
        ref = out.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            name = ref[len("#/$defs/") :]
            if name in renames:
                out["$ref"] = f"#/$defs/{renames[name]}"
        return out
    if isinstance(node, list):
        return [_rewrite_refs(v, renames) for v in node]
    return node


def _literal_schema(values: list[Any]) -> dict[str, Any]:
    values = [v.value if isinstance(v, enum.Enum) else v for v in values]
    non_null = [v for v in values if v is not None]
    kind = _literal_type(non_null)
    schema: dict[str, Any] = {}
    if kind is not None:
        schema["type"] = [kind, "null"] if len(non_null) < len(values) else kind
    schema["enum"] = values
    return schema


_NUMERIC_META: Final = (
    ("ge", "minimum"),
    ("minimum", "minimum"),
    ("gt", "exclusiveMinimum"),
    ("le", "maximum"),
    ("maximum", "maximum"),
    ("lt", "exclusiveMaximum"),
    ("multiple_of", "multipleOf"),
)


def _meta_items(meta: list[Any]) -> dict[str, Any]:
    """Schema keywords from Annotated metadata (strings, Param, Field, Meta, annotated_types)."""
    out: dict[str, Any] = {}
    for item in meta:
        if isinstance(item, str):
            out.setdefault("description", item)
            continue
        if isinstance(item, type) or item is None:
            continue
        if _is_field_info(item):
            nested = _meta_items(list(getattr(item, "metadata", ())))
            for key, value in nested.items():
                out.setdefault(key, value)
        description = getattr(item, "description", None)
        if isinstance(description, str):
            out.setdefault("description", description)
        title = getattr(item, "title", None)
        if isinstance(title, str) and not isinstance(item, Param):
            out.setdefault("title", title)
        examples = getattr(item, "examples", None)
        if isinstance(examples, list):
            out.setdefault("examples", examples)
        for attr, keyword in _NUMERIC_META:
            value = getattr(item, attr, None)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                out.setdefault(keyword, value)
        for attr in ("min_length", "max_length"):
            value = getattr(item, attr, None)
            if isinstance(value, int) and not isinstance(value, bool):
                out.setdefault(attr, value)
        pattern = getattr(item, "pattern", None)
        if isinstance(pattern, str):
            out.setdefault("pattern", pattern)
    return out


def _target_type(schema: dict[str, Any]) -> str | None:
    t = schema.get("type")
    if isinstance(t, str):
        return t
    if isinstance(t, list):
        names = [x for x in t if x != "null"]
        return names[0] if len(names) == 1 else None
    branches = schema.get("anyOf")
    if isinstance(branches, list):
        found = [b for b in (_target_type(x) for x in branches) if b not in (None, "null")]
        return found[0] if len(found) == 1 else None
    return None


def _apply_meta(schema: dict[str, Any], meta: list[Any]) -> dict[str, Any]:
    items = _meta_items(meta)
    if not items:
        return schema
    schema = dict(schema)
    is_array = _target_type(schema) == "array"
    for key, value in items.items():
        if key == "min_length":
            schema["minItems" if is_array else "minLength"] = value
        elif key == "max_length":
            schema["maxItems" if is_array else "maxLength"] = value
        else:
            schema[key] = value
    return schema


def _finalize(schema: dict[str, Any], defs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Inline every non-recursive ``$ref``; keep recursive definitions in root ``$defs``."""
    if not defs:
        return schema
    graph = {name: _refs_in(body) for name, body in defs.items()}
    recursive = {name for name in defs if _reaches(graph, name, name)}
    used: dict[str, dict[str, Any]] = {}
    pending: list[str] = []

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                name = ref[len("#/$defs/") :]
                if name in defs:
                    siblings = {k: inline(v) for k, v in node.items() if k != "$ref"}
                    if name in recursive:
                        if name not in used:
                            used[name] = {}
                            pending.append(name)
                        return {"$ref": ref, **siblings}
                    body = inline(defs[name])
                    body.update(siblings)
                    return body
            return {k: inline(v) for k, v in node.items()}
        if isinstance(node, list):
            return [inline(v) for v in node]
        return copy.copy(node)

    out: dict[str, Any] = inline(schema)
    while pending:
        name = pending.pop()
        used[name] = inline(defs[name])
    if used:
        out["$defs"] = dict(sorted(used.items()))
    return out


def _refs_in(node: Any) -> set[str]:
    found: set[str] = set()
    stack = [node]
    while stack:
        cur = stack.pop()
        if isinstance(cur, dict):
            ref = cur.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                found.add(ref[len("#/$defs/") :])
            stack.extend(cur.values())
        elif isinstance(cur, list):
            stack.extend(cur)
    return found


def _reaches(graph: dict[str, set[str]], start: str, target: str) -> bool:
    seen: set[str] = set()
    stack = list(graph.get(start, ()))
    while stack:
        cur = stack.pop()
        if cur == target:
            return True
        if cur not in seen:
            seen.add(cur)
            stack.extend(graph.get(cur, ()))
    return False


def type_schema(tp: Any) -> dict[str, Any]:
    """The self-contained JSON schema of one annotation."""
    builder = _Builder()
    return _finalize(builder.build(tp), builder.defs)


# --------------------------------------------------------------------------- conversion

Converter = Callable[[Any], Any]


def _dec_hook(tp: Any, value: Any) -> Any:
    if _is_pydantic_model(tp):
        return tp.model_validate(value)
    if _is_path(tp) and isinstance(value, str):
        return tp(value)
    raise NotImplementedError(f"cannot convert to {tp!r}")


def _is_plain(tp: Any) -> bool:
    """Whether validated JSON already has the Python type ``tp`` (no conversion needed)."""
    tp, _ = _unwrap(tp)
    if tp in (str, int, bool, Any, object, None, _NONE_TYPE, _EMPTY, dict, list):
        return True
    if _is_union(tp):
        return all(_is_plain(a) for a in typing.get_args(tp))
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Literal:
        return not any(isinstance(a, enum.Enum) for a in args)
    if origin in _PLAIN_ARRAY_ORIGINS:
        return all(_is_plain(a) for a in args)
    if origin in _MAPPING_TYPES:
        return len(args) == 2 and args[0] is str and _is_plain(args[1])
    if typing.is_typeddict(tp):
        return all(_is_plain(a) for a in _type_hints(tp).values())
    return False


def _to_float(value: Any) -> Any:
    return float(value) if type(value) is int else value


def _object_like(tp: Any) -> bool:
    tp, _ = _unwrap(tp)
    return (
        _is_pydantic_model(tp)
        or _is_struct(tp)
        or (isinstance(tp, type) and dataclasses.is_dataclass(tp))
        or typing.is_typeddict(tp)
        or tp is dict
        or typing.get_origin(tp) in _MAPPING_TYPES
    )


def converter_for(tp: Any) -> Converter | None:
    """A function turning validated JSON into a value of type ``tp``; ``None`` if none is needed."""
    if _is_plain(tp):
        return None
    base, _ = _unwrap(tp)
    if base is float:
        return _to_float
    if _is_pydantic_model(base):
        validate: Converter = base.model_validate
        return validate
    if _is_union(base):
        arms = [a for a in typing.get_args(base) if a is not _NONE_TYPE]
        if sum(1 for a in arms if _object_like(a)) > 1:
            return _union_converter(arms)

    def convert(value: Any) -> Any:
        return msgspec.convert(value, base, strict=False, dec_hook=_dec_hook)

    return convert


def _union_converter(arms: list[Any]) -> Converter:
    converters = [(a, converter_for(a)) for a in arms]

    def convert(value: Any) -> Any:
        if value is None:
            return None
        errors: list[str] = []
        for arm, conv in converters:
            if conv is None:
                if _matches_plain(value, arm):
                    return value
                continue
            try:
                return conv(value)
            except (ValueError, TypeError) as exc:
                errors.append(str(exc))
        raise ValueError("value matches none of the union's types: " + "; ".join(errors))

    return convert


def _matches_plain(value: Any, tp: Any) -> bool:
    try:
        msgspec.convert(value, tp, strict=True)
    except (msgspec.ValidationError, TypeError):
        return False
    return True


# --------------------------------------------------------------------------- functions


class ParamInfo(msgspec.Struct, frozen=True):
    """One model-facing parameter of a function: how to pass it and how to convert it."""

    name: str
    required: bool
    positional_only: bool
    convert: Converter | None = None
    default: Any = None


class FunctionSchema(msgspec.Struct, frozen=True):
    """What :func:`function_schema` learned about a function.

    ``parameters`` is the JSON schema sent to the model; ``context_param`` names the
    parameter that receives the :class:`~ketch.loop.tool.ToolContext`; ``is_method`` is
    true when the first parameter is an unannotated ``self``/``cls`` (left out).
    """

    name: str
    description: str
    parameters: dict[str, Any]
    params: tuple[ParamInfo, ...]
    context_param: str | None = None
    context_positional: bool = False
    var_keyword: bool = False
    is_method: bool = False

    def bind(self, args: Mapping[str, Any], context: Any = None) -> tuple[list[Any], dict[str, Any]]:
        """Positional and keyword call arguments from validated JSON ``args``.

        Raises ``ValueError`` naming the parameter when a required one is missing or a
        value cannot be converted to its annotated type.
        """
        positional: list[Any] = []
        keywords: dict[str, Any] = {}
        if self.context_param is not None and self.context_positional:
            positional.append(context)
        for p in self.params:
            if p.name in args:
                value = args[p.name]
                if p.convert is not None and value is not None:
                    try:
                        value = p.convert(value)
                    except (ValueError, TypeError) as exc:
                        raise ValueError(f'Invalid value for parameter "{p.name}": {exc}') from exc
                if p.positional_only:
                    positional.append(value)
                else:
                    keywords[p.name] = value
            elif p.required:
                raise ValueError(f'Missing required argument "{p.name}"')
            elif p.positional_only:
                positional.append(p.default)
        if self.context_param is not None and not self.context_positional:
            keywords[self.context_param] = context
        if self.var_keyword:
            known = {p.name for p in self.params}
            for key, value in args.items():
                if key not in known and key != self.context_param:
                    keywords[key] = value
        return positional, keywords


def _is_context_annotation(tp: Any) -> bool:
    base, _ = _unwrap(tp)
    if _is_union(base):
        arms = [a for a in typing.get_args(base) if a is not _NONE_TYPE]
        return len(arms) == 1 and _is_context_annotation(arms[0])
    base = typing.get_origin(base) or base  # ToolContext[Deps]
    return isinstance(base, type) and issubclass(base, ToolContext)


def function_schema(fn: Callable[..., Any], *, description: str | None = None) -> FunctionSchema:
    """Introspect ``fn``: parameter schema, description (docstring first paragraph) and binder.

    Parameter descriptions come from ``Annotated`` metadata, a ``pydantic.Field`` default,
    or the docstring, in that order. ``*args`` is ignored; ``**kwargs`` opens the schema to
    extra properties, which are passed through.
    """
    signature = inspect.signature(fn)
    hints = _type_hints(fn)
    doc = parse_docstring(inspect.getdoc(fn))
    builder = _Builder()
    props: dict[str, Any] = {}
    required: list[str] = []
    params: list[ParamInfo] = []
    context_param: str | None = None
    context_positional = False
    var_keyword = False
    is_method = False
    for index, (name, param) in enumerate(signature.parameters.items()):
        if param.kind is param.VAR_POSITIONAL:
            continue
        if param.kind is param.VAR_KEYWORD:
            var_keyword = True
            continue
        annotation = hints.get(name, _EMPTY)
        if index == 0 and name in ("self", "cls") and annotation is _EMPTY:
            is_method = True
            continue
        if annotation is not _EMPTY and _is_context_annotation(annotation):
            context_param = name
            context_positional = param.kind is param.POSITIONAL_ONLY
            continue
        default = param.default
        meta: list[Any] = []
        if _is_field_info(default):
            meta.append(default)
            default = _field_default(default)
        prop = builder.build(annotation)
        if meta:
            prop = _apply_meta(prop, meta)
        if "description" not in prop and name in doc.params:
            prop["description"] = doc.params[name]
        is_required = default is _EMPTY
        if is_required:
            required.append(name)
        else:
            ok, value = _json_default(default)
            if ok:
                prop["default"] = value
        props[name] = prop
        params.append(
            ParamInfo(
                name=name,
                required=is_required,
                positional_only=param.kind is param.POSITIONAL_ONLY,
                convert=converter_for(annotation) if annotation is not _EMPTY else None,
                default=None if default is _EMPTY else default,
            )
        )
    schema: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        schema["required"] = required
    if not var_keyword:
        schema["additionalProperties"] = False
    return FunctionSchema(
        name=getattr(fn, "__name__", type(fn).__name__),
        description=description if description is not None else doc.summary,
        parameters=_finalize(schema, builder.defs),
        params=tuple(params),
        context_param=context_param,
        context_positional=context_positional,
        var_keyword=var_keyword,
        is_method=is_method,
    )


def _field_default(field: Any) -> Any:
    default = getattr(field, "default", _EMPTY)
    factory = getattr(field, "default_factory", None)
    if type(default).__name__ == "PydanticUndefinedType":
        default = _EMPTY
    if default is _EMPTY and callable(factory):
        return factory()
    return default
