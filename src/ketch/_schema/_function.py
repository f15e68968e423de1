"""A function's parameters as a JSON schema, and the binder that turns validated JSON back
into call arguments of the annotated Python types (:func:`converter_for`)."""

from __future__ import annotations

import dataclasses
import enum
import inspect
import typing
from collections import abc
from collections.abc import Callable
from collections.abc import Mapping
from typing import Any
from typing import Final

import msgspec

from ._build import EMPTY
from ._build import MAPPING_TYPES
from ._build import NONE_TYPE
from ._build import Builder
from ._build import is_field_info
from ._build import is_path
from ._build import is_struct
from ._build import is_union
from ._build import object_schema
from ._build import type_hints
from ._build import unwrap
from ._docstring import parse_docstring
from ._types import is_pydantic_model

_PLAIN_ARRAY_ORIGINS: Final = (list, abc.Sequence, abc.Iterable, abc.Collection)

# --------------------------------------------------------------------------- conversion

Converter = Callable[[Any], Any]


def _dec_hook(tp: Any, value: Any) -> Any:
    if is_pydantic_model(tp):
        return tp.model_validate(value)
    if is_path(tp) and isinstance(value, str):
        return tp(value)
    raise NotImplementedError(f"cannot convert to {tp!r}")


def _is_plain(tp: Any) -> bool:
    """Whether validated JSON already has the Python type ``tp`` (no conversion needed)."""
    tp, _ = unwrap(tp)
    if tp in (str, int, bool, Any, object, None, NONE_TYPE, EMPTY, dict, list):
        return True
    if is_union(tp):
        return all(_is_plain(a) for a in typing.get_args(tp))
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Literal:
        return not any(isinstance(a, enum.Enum) for a in args)
    if origin in _PLAIN_ARRAY_ORIGINS:
        return all(_is_plain(a) for a in args)
    if origin in MAPPING_TYPES:
        return len(args) == 2 and args[0] is str and _is_plain(args[1])
    if typing.is_typeddict(tp):
        return all(_is_plain(a) for a in type_hints(tp).values())
    return False


def _to_float(value: Any) -> Any:
    return float(value) if type(value) is int else value


def _object_like(tp: Any) -> bool:
    tp, _ = unwrap(tp)
    return (
        is_pydantic_model(tp)
        or is_struct(tp)
        or (isinstance(tp, type) and dataclasses.is_dataclass(tp))
        or typing.is_typeddict(tp)
        or tp is dict
        or typing.get_origin(tp) in MAPPING_TYPES
    )


def converter_for(tp: Any) -> Converter | None:
    """A function turning validated JSON into a value of type ``tp``; ``None`` if none is needed."""
    if _is_plain(tp):
        return None
    base, _ = unwrap(tp)
    if base is float:
        return _to_float
    if is_pydantic_model(base):
        validate: Converter = base.model_validate
        return validate
    if is_union(base):
        arms = [a for a in typing.get_args(base) if a is not NONE_TYPE]
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
    parameter annotated with the injected context type (the loop's ``ToolContext``);
    ``is_method`` is true when the first parameter is an unannotated ``self``/``cls``
    (left out).
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


def _is_context_annotation(tp: Any, context_type: type) -> bool:
    base, _ = unwrap(tp)
    if is_union(base):
        arms = [a for a in typing.get_args(base) if a is not NONE_TYPE]
        return len(arms) == 1 and _is_context_annotation(arms[0], context_type)
    cls = typing.get_origin(base) or base  # a generic context class may be subscripted
    return isinstance(cls, type) and issubclass(cls, context_type)


def function_schema(
    fn: Callable[..., Any], *, description: str | None = None, context_type: type | None = None
) -> FunctionSchema:
    """Introspect ``fn``: parameter schema, description (docstring first paragraph) and binder.

    Parameter descriptions come from ``Annotated`` metadata, a ``pydantic.Field`` default,
    or the docstring, in that order. ``*args`` is ignored; ``**kwargs`` opens the schema to
    extra properties, which are passed through. A parameter annotated ``context_type`` (or
    a subclass, or ``Optional`` of one) is left out of the schema and becomes
    :attr:`FunctionSchema.context_param`; ``context_type`` anywhere else is an error.
    """
    signature = inspect.signature(fn)
    hints = type_hints(fn)
    doc = parse_docstring(inspect.getdoc(fn))
    builder = Builder(context_type)
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
        annotation = hints.get(name, EMPTY)
        if index == 0 and name in ("self", "cls") and annotation is EMPTY:
            is_method = True
            continue
        if annotation is not EMPTY and context_type is not None and _is_context_annotation(annotation, context_type):
            context_param = name
            context_positional = param.kind is param.POSITIONAL_ONLY
            continue
        default = param.default
        meta: list[Any] = []
        if is_field_info(default):
            meta.append(default)
            default = _field_default(default)
        is_required = default is EMPTY
        if is_required:
            required.append(name)
        props[name] = builder.field(
            annotation, required=is_required, default=default, description=doc.params.get(name), meta=meta
        )
        params.append(
            ParamInfo(
                name=name,
                required=is_required,
                positional_only=param.kind is param.POSITIONAL_ONLY,
                convert=converter_for(annotation) if annotation is not EMPTY else None,
                default=None if default is EMPTY else default,
            )
        )
    return FunctionSchema(
        name=getattr(fn, "__name__", type(fn).__name__),
        description=description if description is not None else doc.summary,
        parameters=builder.schema(object_schema(props, required, closed=not var_keyword)),
        params=tuple(params),
        context_param=context_param,
        context_positional=context_positional,
        var_keyword=var_keyword,
        is_method=is_method,
    )


def _field_default(field: Any) -> Any:
    default = getattr(field, "default", EMPTY)
    factory = getattr(field, "default_factory", None)
    if type(default).__name__ == "PydanticUndefinedType":
        default = EMPTY
    if default is EMPTY and callable(factory):
        return factory()
    return default
