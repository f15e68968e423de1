"""JSON schemas from Python type hints and ``Annotated`` metadata.

:func:`type_schema` gives the schema of one annotation; :class:`Builder` is the shared
machinery (also used for a function's parameters, see :mod:`._function`).

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
import sys
import types
import typing
from collections import abc
from collections.abc import Callable
from collections.abc import Sequence
from dataclasses import MISSING
from typing import Any
from typing import Final

import msgspec

from ._docstring import class_docstring
from ._types import is_pydantic_model as is_pydantic_model

NONE_TYPE: Final = type(None)
EMPTY: Final = inspect.Parameter.empty
_DEFS: Final = "#/$defs/"


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


# --------------------------------------------------------------------------- annotations


def unwrap(tp: Any) -> tuple[Any, list[Any]]:
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


def is_union(tp: Any) -> bool:
    origin = typing.get_origin(tp)
    return origin is typing.Union or origin is types.UnionType




def is_field_info(obj: Any) -> bool:
    module = sys.modules.get("pydantic.fields")
    cls = getattr(module, "FieldInfo", None) if module is not None else None
    return isinstance(cls, type) and isinstance(obj, cls)


def is_struct(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, msgspec.Struct)


def type_hints(obj: Any) -> dict[str, Any]:
    try:
        return typing.get_type_hints(obj, include_extras=True)
    except (NameError, TypeError, AttributeError) as exc:
        name = getattr(obj, "__qualname__", repr(obj))
        raise TypeError(f"cannot resolve the type hints of {name}: {exc}") from exc


def json_default(value: Any) -> tuple[bool, Any]:
    """Whether ``value`` can be shown as a schema default, and its JSON form."""
    if isinstance(value, enum.Enum):
        return json_default(value.value)
    if value is None:
        return False, None
    if isinstance(value, (str, bool, int, float)):
        return True, value
    if isinstance(value, (list, tuple)):
        items = [json_default(v) for v in value]
        return all(ok for ok, _ in items), [v for _, v in items]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        pairs = {k: json_default(v) for k, v in value.items()}
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
MAPPING_TYPES: Final = (dict, abc.Mapping, abc.MutableMapping)


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


def is_path(tp: Any) -> bool:
    module = sys.modules.get("pathlib")
    return module is not None and isinstance(tp, type) and issubclass(tp, module.PurePath)


# --------------------------------------------------------------------------- schema building


class Builder:
    """Builds schemas for annotations, collecting named object types in ``defs``.

    ``context_type`` is the class of an injected context parameter (the loop's
    ``ToolContext``): it has no schema, and meeting it inside another type is an error.
    """

    def __init__(self, context_type: type | None = None) -> None:
        self.context_type = context_type
        self.defs: dict[str, dict[str, Any]] = {}
        self.names: dict[Any, str] = {}

    def schema(self, root: dict[str, Any]) -> dict[str, Any]:
        """``root`` made self-contained with the definitions built so far (see :func:`finalize`)."""
        return finalize(root, self.defs)

    def field(
        self, tp: Any, *, required: bool, default: Any, description: str | None, meta: list[Any] | None = None
    ) -> dict[str, Any]:
        """The schema of one property: its type, extra ``meta``, a description unless the
        type gave one, and the default when it is optional and has a JSON form."""
        prop = self.build(tp)
        if meta:
            prop = apply_meta(prop, meta)
        if description is not None and "description" not in prop:
            prop["description"] = description
        if not required:
            ok, value = json_default(default)
            if ok:
                prop["default"] = value
        return prop

    def build(self, tp: Any) -> dict[str, Any]:
        base, meta = unwrap(tp)
        schema = self._base(base)
        return apply_meta(schema, meta) if meta else schema

    def _base(self, tp: Any) -> dict[str, Any]:
        if tp is Any or tp is object or tp is EMPTY:
            return {}
        if tp is None or tp is NONE_TYPE:
            return {"type": "null"}
        supertype = getattr(tp, "__supertype__", None)
        if supertype is not None:
            return self.build(supertype)
        if is_union(tp):
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
        if is_path(tp):
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
        if container in MAPPING_TYPES:
            schema = {"type": "object"}
            if len(args) == 2 and args[1] is not Any:
                schema["additionalProperties"] = self.build(args[1])
            return schema
        if is_pydantic_model(tp):
            return self._pydantic(tp)
        if is_struct(tp):
            return self._struct(tp)
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            return self._named(tp, self._dataclass)
        if typing.is_typeddict(tp):
            return self._named(tp, self._typeddict)
        context_type = self.context_type
        if context_type is not None and (tp is context_type or origin is context_type):
            raise TypeError(f"{context_type.__name__} is only allowed as a direct parameter annotation")
        raise TypeError(f"unsupported type for a tool schema: {tp!r}")

    def _union(self, tp: Any) -> dict[str, Any]:
        arms: list[Any] = []
        stack = list(typing.get_args(tp))
        while stack:
            arm = stack.pop(0)
            if is_union(arm):
                stack[:0] = typing.get_args(arm)
            elif arm not in arms:
                arms.append(arm)
        nullable = NONE_TYPE in arms
        others = [a for a in arms if a is not NONE_TYPE]
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
        return {"$ref": _DEFS + name}

    def _fresh_name(self, base: str) -> str:
        name, n = base, 1
        while name in self.defs:
            n += 1
            name = f"{base}{n}"
        return name

    def _object(self, cls: type, fields: Sequence[tuple[str, Any, bool, Any]]) -> dict[str, Any]:
        """Object schema from ``(name, type, required, default)`` tuples, described by the class docstring."""
        doc = class_docstring(cls)
        props = {
            name: self.field(tp, required=is_required, default=default, description=doc.params.get(name))
            for name, tp, is_required, default in fields
        }
        required = [name for name, _, is_required, _ in fields if is_required]
        return object_schema(props, required, closed=True, description=doc.summary)

    def _dataclass(self, cls: type) -> dict[str, Any]:
        hints = type_hints(cls)
        fields = [
            (f.name, hints.get(f.name, Any), f.default is MISSING and f.default_factory is MISSING, f.default)
            for f in dataclasses.fields(cls)
            if f.init
        ]
        return self._object(cls, fields)

    def _typeddict(self, cls: type) -> dict[str, Any]:
        hints = type_hints(cls)
        required_keys: frozenset[str] = getattr(cls, "__required_keys__", frozenset(hints))
        return self._object(cls, [(name, tp, name in required_keys, None) for name, tp in hints.items()])

    def _struct(self, cls: type) -> dict[str, Any]:
        (schema,), components = msgspec.json.schema_components((cls,), ref_template=_DEFS + "{name}")
        return self._import(schema, components)

    def _pydantic(self, cls: Any) -> dict[str, Any]:
        schema: dict[str, Any] = cls.model_json_schema(ref_template=_DEFS + "{model}")
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


def _rewrite_refs(node: Any, renames: dict[str, str]) -> Any:
    if isinstance(node, dict):
        out = {k: _rewrite_refs(v, renames) for k, v in node.items()}
        name = _def_name(out)
        if name is not None and name in renames:
            out["$ref"] = _DEFS + renames[name]
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
        if is_field_info(item):
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


def apply_meta(schema: dict[str, Any], meta: list[Any]) -> dict[str, Any]:
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


def finalize(schema: dict[str, Any], defs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Inline every non-recursive ``$ref``; keep recursive definitions in root ``$defs``."""
    if not defs:
        return schema
    graph = {name: _refs_in(body) for name, body in defs.items()}
    recursive = {name for name in defs if _reaches(graph, name, name)}
    used: dict[str, dict[str, Any]] = {}
    pending: list[str] = []

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            name = _def_name(node)
            if name is not None and name in defs:
                siblings = {k: inline(v) for k, v in node.items() if k != "$ref"}
                if name in recursive:
                    if name not in used:
                        used[name] = {}
                        pending.append(name)
                    return {"$ref": node["$ref"], **siblings}
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


def _def_name(node: dict[str, Any]) -> str | None:
    """The definition a ``{"$ref": "#/$defs/<name>", ...}`` node points at, else ``None``."""
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith(_DEFS):
        return ref[len(_DEFS) :]
    return None


def _refs_in(node: Any) -> set[str]:
    found: set[str] = set()
    stack = [node]
    while stack:
        cur = stack.pop()
        if isinstance(cur, dict):
            name = _def_name(cur)
            if name is not None:
                found.add(name)
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


def type_schema(tp: Any, *, context_type: type | None = None) -> dict[str, Any]:
    """The self-contained JSON schema of one annotation (``context_type``: see :class:`Builder`)."""
    builder = Builder(context_type)
    return builder.schema(builder.build(tp))


def object_schema(
    props: dict[str, Any], required: list[str], *, closed: bool, description: str = ""
) -> dict[str, Any]:
    """An object schema with these properties; ``closed`` forbids other properties."""
    schema: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        schema["required"] = required
    if closed:
        schema["additionalProperties"] = False
    if description:
        schema["description"] = description
    return schema
