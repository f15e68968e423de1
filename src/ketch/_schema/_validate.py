"""Tool-argument validation against a JSON schema, with coercion of common model mistakes.

:func:`validate_arguments` returns ``(arguments, None)`` on success (the arguments
possibly coerced) or ``(arguments, message)`` on failure, where the message lists every
issue and is meant for the model::

    Validation failed for tool "weather":
      - days: expected integer, got string "abc"
      - citty: unknown property

    Received arguments:
    {
      "days": "abc",
      "citty": "Paris"
    }

:func:`check_arguments` gives the structured form: ``(arguments, issues)``.
:func:`malformed_arguments_message` is the message for arguments that were not JSON.

Before a value is judged it is coerced where a model plausibly meant the expected type:
``"500"`` → ``500`` for integers, ``"1.5"`` → ``1.5`` for numbers, ``"true"``/``"false"``
→ booleans, numbers → strings, and a JSON-encoded string → array/object. A single value
is never wrapped into an array. ``null`` for a property that is neither required nor
allowed to be ``null`` is treated as absent (the key is dropped). The caller's data is
never mutated: containers are copied only when something in them changed.

Supported keywords: ``type`` (single or list), ``enum``, ``const``, ``required``,
``properties``, ``additionalProperties``, ``items`` / ``prefixItems``, ``minimum`` /
``maximum`` / ``exclusiveMinimum`` / ``exclusiveMaximum`` / ``multipleOf``,
``minLength`` / ``maxLength`` / ``pattern``, ``minItems`` / ``maxItems`` /
``uniqueItems``, ``anyOf`` / ``oneOf`` / ``allOf``, ``nullable`` and local ``$ref``
(``#/...``, e.g. into ``$defs``). Other keywords are ignored; remote refs accept anything.

Schemas are compiled on first use and cached by identity, so treat a schema dict as
immutable once it has been used for validation.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any
from typing import Final
from typing import Literal
from typing import TypeAlias

import msgspec

IssueKind: TypeAlias = Literal["missing", "type", "value", "unknown"]
PathSegment: TypeAlias = str | int
Path: TypeAlias = tuple[PathSegment, ...]

_KIND_ORDER: Final = {"missing": 0, "type": 1, "value": 2, "unknown": 3}


class Issue(msgspec.Struct, frozen=True):
    """One problem found in the arguments: its kind, where it is, and what is wrong.

    ``kind`` orders issues in messages: ``missing`` < ``type`` < ``value`` < ``unknown``.
    ``path`` is a tuple of keys and indexes; :attr:`where` renders it (``items[2].qty``).
    """

    kind: IssueKind
    path: Path
    message: str

    @property
    def where(self) -> str:
        """The path as text: ``city``, ``items[2].qty`` or ``(root)``."""
        return _format_path(self.path)


def validate_arguments(
    tool_name: str, schema: dict[str, Any], args: dict[str, Any]
) -> tuple[dict[str, Any], str | None]:
    """Coerce and validate ``args`` against ``schema``.

    Returns ``(arguments, None)`` when valid, where ``arguments`` is ``args`` itself if
    nothing was coerced and a copy otherwise; or ``(args, message)`` listing every issue.
    """
    value, issues = check_arguments(schema, args)
    if issues:
        return args, format_issues(tool_name, issues, args)
    return value, None


def check_arguments(schema: dict[str, Any], args: Any) -> tuple[Any, list[Issue]]:
    """Coerce and validate ``args``; return the coerced value and every issue, sorted."""
    check = _compiled(schema)
    issues: list[Issue] = []
    value = check(args, (), _NO_KEY, issues, True)
    if len(issues) > 1:
        issues.sort(key=_issue_sort_key)
    return value, issues


def format_issues(tool_name: str, issues: list[Issue], args: Any) -> str:
    """The validation-failure message for ``issues`` (see the module docstring)."""
    lines = [f'Validation failed for tool "{tool_name}":']
    lines.extend(f"  - {issue.where}: {issue.message}" for issue in issues)
    lines.append("")
    lines.append("Received arguments:")
    lines.append(_pretty_json(args))
    return "\n".join(lines)


def malformed_arguments_message(tool_name: str, parse_error: str, raw: str | None) -> str:
    """The message for arguments that were not valid JSON (``ToolCall.parse_error`` set)."""
    return f'Tool "{tool_name}" received malformed JSON arguments: {parse_error}\nRaw arguments:\n{raw or ""}'


# --------------------------------------------------------------------------- rendering


_SIMPLE_KEY = re.compile(r"[A-Za-z_$][A-Za-z0-9_$-]*")


def _format_path(path: Path) -> str:
    if not path:
        return "(root)"
    out: list[str] = []
    for seg in path:
        if isinstance(seg, int):
            out.append(f"[{seg}]")
        elif _SIMPLE_KEY.fullmatch(seg):
            out.append(f".{seg}" if out else seg)
        else:
            out.append(f"[{_json(seg)}]")
    return "".join(out)


def _issue_sort_key(issue: Issue) -> tuple[int, tuple[tuple[int, int, str], ...]]:
    segs = tuple((0, s, "") if isinstance(s, int) else (1, 0, s) for s in issue.path)
    return _KIND_ORDER[issue.kind], segs


_encoder = msgspec.json.Encoder()


def _json(value: Any) -> str:
    try:
        return _encoder.encode(value).decode()
    except (TypeError, msgspec.EncodeError, UnicodeEncodeError):
        return repr(value)


def _pretty_json(value: Any) -> str:
    try:
        return msgspec.json.format(_encoder.encode(value), indent=2).decode()
    except (TypeError, msgspec.EncodeError, UnicodeEncodeError):
        return repr(value)


_MAX_SHOWN = 60


def _describe(value: Any) -> str:
    """``string "abc"``, ``integer 3``, ``number 1.5``, ``boolean true``, ``null``, ``array``, ``object``."""
    if value is None:
        return "null"
    t = type(value)
    if t is bool:
        return "boolean true" if value else "boolean false"
    if t is str:
        shown = value if len(value) <= _MAX_SHOWN else value[:_MAX_SHOWN] + "…"
        return f"string {_json(shown)}"
    if t is int:
        return f"integer {value}"
    if t is float:
        return f"number {_json(value)}"
    if t is list or t is tuple:
        return "array"
    if t is dict:
        return "object"
    return t.__name__


def _join_names(names: list[str]) -> str:
    if len(names) <= 2:
        return " or ".join(names)
    return ", ".join(names[:-1]) + " or " + names[-1]


def _plural(n: Any, word: str) -> str:
    return f"{_json(n)} {word}" if n == 1 else f"{_json(n)} {word}s"


# --------------------------------------------------------------------------- compilation

# A compiled check takes (value, parent path, key, issues, coerce) and returns the value,
# coerced where allowed. The value's own path is ``parent + (key,)`` unless key is _NO_KEY;
# it is only built when an issue is recorded or a container is entered.
Check: TypeAlias = Callable[[Any, Path, Any, list[Issue], bool], Any]
Stage: TypeAlias = Callable[[Any, Path, Any, list[Issue], bool], Any]

_NO_KEY: Final[Any] = object()


def _here(parent: Path, key: Any) -> Path:
    return parent if key is _NO_KEY else (*parent, key)


def _issue(issues: list[Issue], kind: IssueKind, parent: Path, key: Any, message: str) -> None:
    issues.append(Issue(kind, _here(parent, key), message))


_CACHE_LIMIT: Final = 512
_cache: dict[int, tuple[Any, Check]] = {}


def _compiled(schema: Any) -> Check:
    entry = _cache.get(id(schema))
    if entry is not None and entry[0] is schema:
        return entry[1]
    check = _Compiler(schema).compile(schema)
    if len(_cache) >= _CACHE_LIMIT:
        _cache.clear()
    _cache[id(schema)] = (schema, check)
    return check


def _accept(value: Any, parent: Path, key: Any, issues: list[Issue], coerce: bool) -> Any:
    return value


def _reject(value: Any, parent: Path, key: Any, issues: list[Issue], coerce: bool) -> Any:
    _issue(issues, "value", parent, key, "is not allowed")
    return value


# Exact type tests. Integral floats count as integers (JSON does not distinguish 5 and 5.0).
def _is_string(v: Any) -> bool:
    return type(v) is str


def _is_integer(v: Any) -> bool:
    t = type(v)
    return t is int or (t is float and v.is_integer())


def _is_number(v: Any) -> bool:
    t = type(v)
    return t is int or t is float


def _is_boolean(v: Any) -> bool:
    return type(v) is bool


def _is_object(v: Any) -> bool:
    return type(v) is dict


def _is_array(v: Any) -> bool:
    t = type(v)
    return t is list or t is tuple


def _is_null(v: Any) -> bool:
    return v is None


_TYPE_TESTS: Final[dict[str, Callable[[Any], bool]]] = {
    "string": _is_string,
    "integer": _is_integer,
    "number": _is_number,
    "boolean": _is_boolean,
    "object": _is_object,
    "array": _is_array,
    "null": _is_null,
}

_INT_TEXT = re.compile(r"\s*-?\d+\s*")
_NUM_TEXT = re.compile(r"\s*-?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?\s*")
_MISSING: Final[Any] = object()


def _coerce_to(value: Any, name: str) -> Any:
    """``value`` converted to JSON type ``name``, or ``_MISSING`` when not plausible."""
    t = type(value)
    if name == "integer":
        if t is float and value.is_integer():
            return int(value)
        if t is str:
            if _INT_TEXT.fullmatch(value):
                return int(value)
            if _NUM_TEXT.fullmatch(value):
                f = float(value)
                if math.isfinite(f) and f.is_integer():
                    return int(f)
    elif name == "number":
        if t is str:
            if _INT_TEXT.fullmatch(value):
                return int(value)
            if _NUM_TEXT.fullmatch(value):
                f = float(value)
                if math.isfinite(f):
                    return f
    elif name == "boolean":
        if t is str:
            low = value.strip().lower()
            if low == "true":
                return True
            if low == "false":
                return False
    elif name == "string":
        if t is int:
            return str(value)
        if t is float:
            return _json(value)
    elif name == "array" or name == "object":
        if t is str and value.lstrip()[:1] in ("[", "{"):
            try:
                decoded = msgspec.json.decode(value)
            except msgspec.DecodeError:
                return _MISSING
            if (name == "array") == (type(decoded) is list) and type(decoded) in (list, dict):
                return decoded
    return _MISSING


def _json_equal(a: Any, b: Any) -> bool:
    ta, tb = type(a), type(b)
    if (ta is bool) != (tb is bool):
        return False
    if ta in (list, tuple) and tb in (list, tuple):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    if ta is dict and tb is dict:
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if ta in (list, tuple, dict) or tb in (list, tuple, dict):
        return False
    equal: bool = a == b
    return equal


def _scalar_text(v: Any) -> str | None:
    if type(v) is str:
        return v
    if type(v) in (int, float, bool) or v is None:
        return _json(v)
    return None


class _Compiler:
    """Compiles one root schema; resolves local ``$ref`` pointers against it."""

    def __init__(self, root: Any) -> None:
        self.root = root
        self.refs: dict[str, Check] = {}

    def compile(self, schema: Any) -> Check:
        if schema is True or schema == {}:
            return _accept
        if schema is False:
            return _reject
        if not isinstance(schema, dict):
            return _accept

        type_stage = self._type_stage(schema)
        stages: list[Stage] = []
        if "$ref" in schema:
            stages.append(self._ref(schema["$ref"]))
        if "enum" in schema or "const" in schema:
            stages.append(self._enum_stage(schema, coerce_values=type_stage is None))
        for keyword in ("anyOf", "oneOf"):
            branches = schema.get(keyword)
            if isinstance(branches, list) and branches:
                stages.append(self._union_stage(branches, exactly_one=keyword == "oneOf"))
        all_of = schema.get("allOf")
        if isinstance(all_of, list):
            stages.extend(self.compile(s) for s in all_of)
        for make in (self._object_stage, self._array_stage, self._string_stage, self._number_stage):
            stage = make(schema)
            if stage is not None:
                stages.append(stage)
        return _node(type_stage, stages)

    # ---- type

    def _type_stage(self, schema: dict[str, Any]) -> Stage | None:
        raw = schema.get("type")
        if raw is None:
            return None
        names = [raw] if isinstance(raw, str) else [n for n in raw if isinstance(n, str)]
        if schema.get("nullable") is True and "null" not in names:
            names.append("null")
        names = [n for n in names if n in _TYPE_TESTS]
        if not names:
            return None
        tests = tuple(_TYPE_TESTS[n] for n in names)
        expected = _join_names(names)
        coercible = tuple(n for n in names if n != "null")
        # An integral float becomes an int only where "integer" is the one type allowed.
        integral = names == ["integer"]

        def mismatch(value: Any, parent: Path, key: Any, issues: list[Issue], coerce: bool) -> Any:
            if coerce:
                for n in coercible:
                    out = _coerce_to(value, n)
                    if out is not _MISSING:
                        return out
            _issue(issues, "type", parent, key, f"expected {expected}, got {_describe(value)}")
            return value

        if len(tests) == 1:  # the common case, kept free of the loop
            test = tests[0]

            def single(value: Any, parent: Path, key: Any, issues: list[Issue], coerce: bool) -> Any:
                if test(value):
                    return int(value) if integral and type(value) is float else value
                return mismatch(value, parent, key, issues, coerce)

            return single

        def multi(value: Any, parent: Path, key: Any, issues: list[Issue], coerce: bool) -> Any:
            for test in tests:
                if test(value):
                    return value
            return mismatch(value, parent, key, issues, coerce)

        return multi

    # ---- $ref

    def _ref(self, ref: Any) -> Stage:
        if not isinstance(ref, str) or not ref.startswith("#"):
            return _accept
        found = self.refs.get(ref)
        if found is not None:
            return found
        cell: list[Check] = []

        def deferred(value: Any, parent: Path, key: Any, issues: list[Issue], coerce: bool) -> Any:
            return cell[0](value, parent, key, issues, coerce)

        self.refs[ref] = deferred
        target = self._resolve(ref)
        cell.append(self.compile(target) if target is not _MISSING else _accept)
        self.refs[ref] = cell[0]
        return deferred

    def _resolve(self, ref: str) -> Any:
        node = self.root
        for part in ref[1:].split("/"):
            if not part:
                continue
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                return _MISSING
        return node

    # ---- enum / const

    def _enum_stage(self, schema: dict[str, Any], *, coerce_values: bool) -> Stage:
        if "const" in schema:
            members = [schema["const"]]
            message = f"must be equal to {_json(schema['const'])}"
        else:
            members = list(schema["enum"]) if isinstance(schema["enum"], list) else []
            message = "must be one of [" + ", ".join(_json(m) for m in members) + "]"
        strings = frozenset(m for m in members if type(m) is str)
        only_strings = len(strings) == len(members)
        by_text = {}
        if coerce_values:
            for m in reversed(members):
                text = _scalar_text(m)
                if text is not None and type(m) is not str:
                    by_text[text] = m

        def enum(value: Any, parent: Path, key: Any, issues: list[Issue], coerce: bool) -> Any:
            if type(value) is str:
                if value in strings:
                    return value
                if coerce and value in by_text:
                    return by_text[value]
            elif not only_strings and any(_json_equal(value, m) for m in members):
                return value
            elif coerce and coerce_values:
                text = _scalar_text(value)
                if text is not None and text in strings:
                    return text
            _issue(issues, "value", parent, key, message)
            return value

        return enum

    # ---- anyOf / oneOf

    def _union_stage(self, branch_schemas: list[Any], *, exactly_one: bool) -> Stage:
        branches = [self.compile(s) for s in branch_schemas]
        type_names: list[list[str] | None] = [self._simple_types(s) for s in branch_schemas]

        def union(value: Any, parent: Path, key: Any, issues: list[Issue], coerce: bool) -> Any:
            matched = 0
            first: Any = _MISSING
            for branch in branches:
                scratch: list[Issue] = []
                out = branch(value, parent, key, scratch, False)
                if not scratch:
                    if not exactly_one:
                        return out
                    matched += 1
                    if first is _MISSING:
                        first = out
            if matched == 1:
                return first
            if matched > 1:
                _issue(issues, "value", parent, key, f"must match exactly one allowed schema, matched {matched}")
                return value
            failures: list[list[Issue]] = []
            for branch in branches:
                scratch = []
                out = branch(value, parent, key, scratch, coerce)
                if not scratch:
                    return out
                failures.append(scratch)
            here = _here(parent, key)
            root_type_failure = [len(f) == 1 and f[0].kind == "type" and f[0].path == here for f in failures]
            if all(root_type_failure):
                names: list[str] = []
                for n in type_names:
                    if n is None:
                        names = []
                        break
                    names.extend(x for x in n if x not in names)
                if names:
                    message = f"expected {_join_names(names)}, got {_describe(value)}"
                else:
                    message = f"does not match any allowed schema, got {_describe(value)}"
                issues.append(Issue("type", here, message))
                return value
            best = min(
                (f for f, shallow in zip(failures, root_type_failure, strict=True) if not shallow), key=len
            )
            issues.extend(best)
            return value

        return union

    def _simple_types(self, schema: Any) -> list[str] | None:
        if isinstance(schema, dict):
            if "$ref" in schema and isinstance(schema["$ref"], str) and len(schema) == 1:
                target = self._resolve(schema["$ref"]) if schema["$ref"].startswith("#") else _MISSING
                return self._simple_types(target) if target is not _MISSING else None
            t = schema.get("type")
            if isinstance(t, str):
                return [t]
            if isinstance(t, list) and all(isinstance(x, str) for x in t):
                return list(t)
            nested = schema.get("anyOf") or schema.get("oneOf")
            if isinstance(nested, list):
                out: list[str] = []
                for s in nested:
                    names = self._simple_types(s)
                    if names is None:
                        return None
                    out.extend(n for n in names if n not in out)
                return out
        return None

    # ---- objects

    def _object_stage(self, schema: dict[str, Any]) -> Stage | None:
        props_schema = schema.get("properties")
        required_raw = schema.get("required")
        extra_schema = schema.get("additionalProperties", True)
        if props_schema is None and required_raw is None and extra_schema is True:
            return None
        props: dict[str, Check] = {}
        if isinstance(props_schema, dict):
            props = {k: self.compile(v) for k, v in props_schema.items()}
        required = tuple(r for r in required_raw or () if isinstance(r, str))
        required_set = frozenset(required)
        extra: Check | None = None if extra_schema is False else self.compile(extra_schema)
        extra_is_any = extra is _accept

        def obj(value: Any, parent: Path, key: Any, issues: list[Issue], coerce: bool) -> Any:
            if type(value) is not dict:
                return value
            here = _here(parent, key)
            out = value
            for name in required:
                if name not in value:
                    issues.append(Issue("missing", (*here, name), "missing required property"))
            for name, item in value.items():
                check = props.get(name)
                if check is None:
                    if extra_is_any:
                        continue
                    if extra is None:
                        issues.append(Issue("unknown", (*here, name), "unknown property"))
                        continue
                    check = extra
                if item is None and name not in required_set:
                    probe: list[Issue] = []
                    check(None, here, name, probe, False)
                    if probe:
                        if out is value:
                            out = dict(value)
                        del out[name]
                        continue
                new = check(item, here, name, issues, coerce)
                if new is not item:
                    if out is value:
                        out = dict(value)
                    out[name] = new
            return out

        return obj

    # ---- arrays

    def _array_stage(self, schema: dict[str, Any]) -> Stage | None:
        items_schema = schema.get("items")
        prefix_schema = schema.get("prefixItems")
        if isinstance(items_schema, list):
            prefix_schema, items_schema = items_schema, schema.get("additionalItems", True)
        min_items = schema.get("minItems")
        max_items = schema.get("maxItems")
        unique = schema.get("uniqueItems") is True
        if items_schema is None and prefix_schema is None and min_items is None and max_items is None:
            if not unique:
                return None
        prefix = [self.compile(s) for s in prefix_schema] if isinstance(prefix_schema, list) else []
        rest = self.compile(items_schema) if items_schema is not None else _accept
        n_prefix = len(prefix)
        has_items = bool(prefix) or rest is not _accept
        sizes = _sizes(min_items, max_items, "have", "item")

        def arr(value: Any, parent: Path, key: Any, issues: list[Issue], coerce: bool) -> Any:
            t = type(value)
            if t is not list and t is not tuple:
                return value
            n = len(value)
            for lower, limit, message in sizes:
                if n < limit if lower else n > limit:
                    _issue(issues, "value", parent, key, message)
            out = value
            if has_items:
                here = _here(parent, key)
                for i, item in enumerate(value):
                    check = prefix[i] if i < n_prefix else rest
                    new = check(item, here, i, issues, coerce)
                    if new is not item:
                        if out is value:
                            out = list(value)
                        out[i] = new
            if unique and n > 1:
                seen: set[bytes] = set()
                for item in out:
                    try:
                        marker = _sorted_encoder.encode(item)
                    except (TypeError, msgspec.EncodeError):
                        continue
                    if marker in seen:
                        _issue(issues, "value", parent, key, "must not contain duplicate items")
                        break
                    seen.add(marker)
            return out

        return arr

    # ---- strings

    def _string_stage(self, schema: dict[str, Any]) -> Stage | None:
        min_len = schema.get("minLength")
        max_len = schema.get("maxLength")
        pattern_text = schema.get("pattern")
        if min_len is None and max_len is None and not isinstance(pattern_text, str):
            return None
        pattern: re.Pattern[str] | None = None
        if isinstance(pattern_text, str):
            try:
                pattern = re.compile(pattern_text)
            except re.error:
                pattern = None
        sizes = _sizes(min_len, max_len, "be", "character", " long")

        def string(value: Any, parent: Path, key: Any, issues: list[Issue], coerce: bool) -> Any:
            if type(value) is not str:
                return value
            n = len(value)
            for lower, limit, message in sizes:
                if n < limit if lower else n > limit:
                    _issue(issues, "value", parent, key, message)
            if pattern is not None and pattern.search(value) is None:
                _issue(issues, "value", parent, key, f"must match pattern {_json(pattern_text)}")
            return value

        return string

    # ---- numbers

    def _number_stage(self, schema: dict[str, Any]) -> Stage | None:
        bounds: list[tuple[Callable[[Any], bool], str]] = []
        for keyword, op in (
            ("minimum", ">="),
            ("maximum", "<="),
            ("exclusiveMinimum", ">"),
            ("exclusiveMaximum", "<"),
        ):
            limit = schema.get(keyword)
            if isinstance(limit, (int, float)) and not isinstance(limit, bool):
                bounds.append((_bound_test(op, limit), f"must be {op} {_json(limit)}"))
        multiple = schema.get("multipleOf")
        if isinstance(multiple, (int, float)) and not isinstance(multiple, bool) and multiple > 0:
            bounds.append((_multiple_test(multiple), f"must be a multiple of {_json(multiple)}"))
        if not bounds:
            return None

        def number(value: Any, parent: Path, key: Any, issues: list[Issue], coerce: bool) -> Any:
            t = type(value)
            if t is not int and t is not float:
                return value
            for ok, message in bounds:
                if not ok(value):
                    _issue(issues, "value", parent, key, message)
            return value

        return number


_sorted_encoder = msgspec.json.Encoder(order="sorted")

# A length limit: (whether it is the lower one, the limit, the message when it is broken).
_Size: TypeAlias = tuple[bool, Any, str]


def _sizes(low: Any, high: Any, verb: str, unit: str, tail: str = "") -> tuple[_Size, ...]:
    """``minItems``/``minLength``-style limits with their messages (``must have at least 2 items``)."""
    sizes: list[_Size] = []
    if low is not None:
        sizes.append((True, low, f"must {verb} at least {_plural(low, unit)}{tail}"))
    if high is not None:
        sizes.append((False, high, f"must {verb} at most {_plural(high, unit)}{tail}"))
    return tuple(sizes)


def _bound_test(op: str, limit: float) -> Callable[[Any], bool]:
    if op == ">=":
        return lambda v: bool(v >= limit)
    if op == "<=":
        return lambda v: bool(v <= limit)
    if op == ">":
        return lambda v: bool(v > limit)
    return lambda v: bool(v < limit)


def _multiple_test(multiple: float) -> Callable[[Any], bool]:
    def ok(v: Any) -> bool:
        q = float(v) / multiple
        return abs(q - round(q)) < 1e-9

    return ok


def _node(type_stage: Stage | None, stages: list[Stage]) -> Check:
    if type_stage is None:
        if not stages:
            return _accept
        if len(stages) == 1:
            return stages[0]
    if not stages:
        assert type_stage is not None
        return type_stage
    if type_stage is not None and len(stages) == 1:
        first_stage: Stage = type_stage
        only = stages[0]

        def pair(value: Any, parent: Path, key: Any, issues: list[Issue], coerce: bool) -> Any:
            n = len(issues)
            value = first_stage(value, parent, key, issues, coerce)
            if len(issues) != n:
                return value
            return only(value, parent, key, issues, coerce)

        return pair

    seq = tuple(stages)

    def chain(value: Any, parent: Path, key: Any, issues: list[Issue], coerce: bool) -> Any:
        if type_stage is not None:
            n = len(issues)
            value = type_stage(value, parent, key, issues, coerce)
            if len(issues) != n:
                return value
        for stage in seq:
            value = stage(value, parent, key, issues, coerce)
        return value

    return chain
