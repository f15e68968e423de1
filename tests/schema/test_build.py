"""Schemas from type hints, docstring parsing, and conversion of JSON back to Python types.

White-box tests of the private ``ketch._schema`` package, which ``@tool`` (``ketch.tools``)
builds on; ``ToolContext`` is passed as the injected ``context_type`` as the decorator does.
"""

import dataclasses
import datetime
import decimal
import enum
import pathlib
import subprocess
import sys
import uuid
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Annotated
from typing import Any
from typing import Generic
from typing import Literal
from typing import NotRequired
from typing import Optional
from typing import Required
from typing import TypedDict
from typing import TypeVar
from typing import Union

import annotated_types as at
import msgspec
import pydantic
import pytest

from ketch._schema import Docstring
from ketch._schema import Param
from ketch._schema import converter_for
from ketch._schema import function_schema
from ketch._schema import parse_docstring
from ketch._schema import type_schema
from ketch._schema import validate_arguments
from ketch.loop import ToolContext


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


@dataclasses.dataclass
class Point:
    """A point on the plane.

    Attributes:
        x: Horizontal position.
        y: Vertical position.
    """

    x: int
    y: Annotated[float, "Overrides the docstring"] = 0.0
    tags: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Bare:
    n: int


@dataclasses.dataclass
class Tree:
    value: int
    children: "list[Tree]" = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Box:
    left: Tree
    right: Point | None = None


class Movie(TypedDict):
    title: str
    year: NotRequired[int]


class Filters(TypedDict, total=False):
    genre: Required[str]
    min_rating: float


class Inner(msgspec.Struct):
    n: int


class Record(msgspec.Struct, rename="camel"):
    first_name: str
    inner: Inner
    tags: list[str] = []


class Address(pydantic.BaseModel):
    city: str


class User(pydantic.BaseModel):
    """A user."""

    name: Annotated[str, pydantic.Field(description="Full name", min_length=1)]
    age: int = pydantic.Field(default=0, ge=0)
    address: Address | None = None


@dataclasses.dataclass
class Cat:
    meow: str


@dataclasses.dataclass
class Dog:
    bark: int


# --------------------------------------------------------------------------- type schemas


@pytest.mark.parametrize(
    ("annotation", "expected"),
    [
        (str, {"type": "string"}),
        (int, {"type": "integer"}),
        (float, {"type": "number"}),
        (bool, {"type": "boolean"}),
        (None, {"type": "null"}),
        (type(None), {"type": "null"}),
        (Any, {}),
        (object, {}),
        (Literal["a", "b"], {"type": "string", "enum": ["a", "b"]}),
        (Literal[1, 2], {"type": "integer", "enum": [1, 2]}),
        (Literal[1, 2.5], {"type": "number", "enum": [1, 2.5]}),
        (Literal[True], {"type": "boolean", "enum": [True]}),
        (Literal["a", 1], {"enum": ["a", 1]}),
        (Literal["a", None], {"type": ["string", "null"], "enum": ["a", None]}),
        (Literal[Color.RED], {"type": "string", "enum": ["red"]}),
        (Color, {"type": "string", "enum": ["red", "blue"]}),
        (Level, {"type": "integer", "enum": [1, 2]}),
        (list[int], {"type": "array", "items": {"type": "integer"}}),
        (list, {"type": "array"}),
        (list[Any], {"type": "array"}),
        (Sequence[str], {"type": "array", "items": {"type": "string"}}),
        (tuple[int, ...], {"type": "array", "items": {"type": "integer"}}),
        (
            tuple[int, str],
            {
                "type": "array",
                "prefixItems": [{"type": "integer"}, {"type": "string"}],
                "minItems": 2,
                "maxItems": 2,
            },
        ),
        (tuple, {"type": "array"}),
        (set[str], {"type": "array", "items": {"type": "string"}, "uniqueItems": True}),
        (frozenset[int], {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}),
        (dict[str, int], {"type": "object", "additionalProperties": {"type": "integer"}}),
        (dict[str, Any], {"type": "object"}),
        (dict, {"type": "object"}),
        (Mapping[str, list[str]], {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "string"}}}),
        (Optional[int], {"anyOf": [{"type": "integer"}, {"type": "null"}]}),  # noqa: UP045
        (int | None, {"anyOf": [{"type": "integer"}, {"type": "null"}]}),
        (Union[int, str], {"anyOf": [{"type": "integer"}, {"type": "string"}]}),  # noqa: UP007
        (int | Union[str, None] | int, {"anyOf": [{"type": "integer"}, {"type": "string"}, {"type": "null"}]}),  # noqa: UP007
        (datetime.datetime, {"type": "string", "format": "date-time"}),
        (datetime.date, {"type": "string", "format": "date"}),
        (uuid.UUID, {"type": "string", "format": "uuid"}),
        (decimal.Decimal, {"type": "number"}),
        (pathlib.Path, {"type": "string"}),
    ],
)
def test_type_schema(annotation: Any, expected: dict[str, Any]) -> None:
    assert type_schema(annotation) == expected


@pytest.mark.parametrize(
    ("annotation", "expected"),
    [
        (Annotated[str, "A city"], {"type": "string", "description": "A city"}),
        (
            Annotated[int, Param("Days", minimum=1, maximum=14)],
            {"type": "integer", "description": "Days", "minimum": 1, "maximum": 14},
        ),
        (
            Annotated[str, Param(min_length=1, max_length=5, pattern="^[a-z]+$", examples=["abc"])],
            {"type": "string", "minLength": 1, "maxLength": 5, "pattern": "^[a-z]+$", "examples": ["abc"]},
        ),
        (
            Annotated[list[int], Param(min_length=1, max_length=3)],
            {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3},
        ),
        (
            Annotated[int, pydantic.Field(description="Count", gt=0, le=10)],
            {"type": "integer", "description": "Count", "exclusiveMinimum": 0, "maximum": 10},
        ),
        (
            Annotated[int, msgspec.Meta(ge=1, lt=5, description="Small")],
            {"type": "integer", "description": "Small", "minimum": 1, "exclusiveMaximum": 5},
        ),
        (
            Annotated[float, at.Ge(0), at.MultipleOf(0.5)],
            {"type": "number", "minimum": 0, "multipleOf": 0.5},
        ),
        (
            Annotated[int | None, Param("Maybe", minimum=0)],
            {"anyOf": [{"type": "integer"}, {"type": "null"}], "description": "Maybe", "minimum": 0},
        ),
        (
            Annotated[list[str] | None, Param(max_length=2)],
            {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}], "maxItems": 2},
        ),
        (
            list[Annotated[str, "A tag"]],
            {"type": "array", "items": {"type": "string", "description": "A tag"}},
        ),
        (Annotated[Annotated[int, "inner"], "outer"], {"type": "integer", "description": "inner"}),
    ],
)
def test_annotated_metadata(annotation: Any, expected: dict[str, Any]) -> None:
    assert type_schema(annotation) == expected


def test_dataclass_schema_uses_docstring_attributes_and_defaults() -> None:
    assert type_schema(Point) == {
        "type": "object",
        "properties": {
            "x": {"type": "integer", "description": "Horizontal position."},
            "y": {"type": "number", "description": "Overrides the docstring", "default": 0.0},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["x"],
        "additionalProperties": False,
        "description": "A point on the plane.",
    }


def test_dataclass_without_docstring_gets_no_description() -> None:
    assert type_schema(Bare) == {
        "type": "object",
        "properties": {"n": {"type": "integer"}},
        "required": ["n"],
        "additionalProperties": False,
    }


def test_recursive_types_stay_in_defs_and_the_rest_is_inlined() -> None:
    tree = {
        "type": "object",
        "properties": {
            "value": {"type": "integer"},
            "children": {"type": "array", "items": {"$ref": "#/$defs/Tree"}},
        },
        "required": ["value"],
        "additionalProperties": False,
    }
    assert type_schema(Tree) == {"$ref": "#/$defs/Tree", "$defs": {"Tree": tree}}
    box = type_schema(Box)
    assert box["$defs"] == {"Tree": tree}
    assert box["properties"]["left"] == {"$ref": "#/$defs/Tree"}
    assert box["properties"]["right"]["anyOf"][0]["description"] == "A point on the plane."


def test_typeddict_schema_required_keys() -> None:
    assert type_schema(Movie) == {
        "type": "object",
        "properties": {"title": {"type": "string"}, "year": {"type": "integer"}},
        "required": ["title"],
        "additionalProperties": False,
    }
    assert type_schema(Filters) == {
        "type": "object",
        "properties": {"genre": {"type": "string"}, "min_rating": {"type": "number"}},
        "required": ["genre"],
        "additionalProperties": False,
    }


def test_msgspec_struct_schema_is_inlined_with_encoded_names() -> None:
    assert type_schema(Record) == {
        "title": "Record",
        "type": "object",
        "properties": {
            "firstName": {"type": "string"},
            "inner": {
                "title": "Inner",
                "type": "object",
                "properties": {"n": {"type": "integer"}},
                "required": ["n"],
            },
            "tags": {"type": "array", "items": {"type": "string"}, "default": []},
        },
        "required": ["firstName", "inner"],
    }


def test_pydantic_model_schema_is_inlined() -> None:
    assert type_schema(User) == {
        "description": "A user.",
        "properties": {
            "name": {"description": "Full name", "minLength": 1, "title": "Name", "type": "string"},
            "age": {"default": 0, "minimum": 0, "title": "Age", "type": "integer"},
            "address": {
                "anyOf": [
                    {"properties": {"city": {"title": "City", "type": "string"}}, "required": ["city"], "title": "Address", "type": "object"},
                    {"type": "null"},
                ],
                "default": None,
            },
        },
        "required": ["name"],
        "title": "User",
        "type": "object",
    }


def test_unsupported_types_raise() -> None:
    with pytest.raises(TypeError, match=r"unsupported type for a tool schema: <class 'bytes'>"):
        type_schema(bytes)
    with pytest.raises(TypeError, match="ToolContext is only allowed as a direct parameter annotation"):
        type_schema(list[ToolContext], context_type=ToolContext)


# --------------------------------------------------------------------------- docstrings


def test_google_docstring() -> None:
    doc = """Search the web for pages.

    Returns the top results as a list. This second paragraph is not in the summary.

    Args:
        query (str): What to search for,
            in plain words.
        limit: How many results.
        *extra: Ignored extras.

    Returns:
        The results.
    """
    assert parse_docstring(doc) == Docstring(
        summary="Search the web for pages.",
        params={"query": "What to search for, in plain words.", "limit": "How many results.", "extra": "Ignored extras."},
    )


def test_numpy_docstring() -> None:
    doc = """Search the web
    for pages.

    Parameters
    ----------
    query : str
        What to search for,
        in plain words.
    limit, offset : int, optional
        Paging.

    Returns
    -------
    list
        The results.
    """
    assert parse_docstring(doc) == Docstring(
        summary="Search the web for pages.",
        params={"query": "What to search for, in plain words.", "limit": "Paging.", "offset": "Paging."},
    )


def test_rest_docstring() -> None:
    doc = """Search the web for pages.

    :param query: What to search for,
        in plain words.
    :param int limit: How many results.
    :type limit: int
    :returns: The results.
    """
    assert parse_docstring(doc) == Docstring(
        summary="Search the web for pages.",
        params={"query": "What to search for, in plain words.", "limit": "How many results."},
    )


def test_docstring_without_sections_or_text() -> None:
    assert parse_docstring("Just a line.") == Docstring(summary="Just a line.", params={})
    assert parse_docstring(None) == Docstring()
    assert parse_docstring("") == Docstring()
    assert parse_docstring("Args:\n    x: The x.") == Docstring(summary="", params={"x": "The x."})


# --------------------------------------------------------------------------- functions


def weather(
    ctx: ToolContext,
    city: str,
    days: Annotated[int, Param("Days ahead", minimum=1)] = 1,
    units: Literal["c", "f"] = "c",
    when: datetime.date | None = None,
    verbose: bool = pydantic.Field(default=False, description="Say more"),
) -> str:
    """Get the weather forecast.

    Longer explanation.

    Args:
        ctx: The context (not a model parameter).
        city: City name.
        days: Shadowed by the Param description.
        units: Temperature units.
    """
    return city


def test_function_schema() -> None:
    fs = function_schema(weather, context_type=ToolContext)
    assert fs.name == "weather"
    assert fs.description == "Get the weather forecast."
    assert fs.context_param == "ctx"
    assert fs.parameters == {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "City name."},
            "days": {"type": "integer", "description": "Days ahead", "minimum": 1, "default": 1},
            "units": {"type": "string", "enum": ["c", "f"], "description": "Temperature units.", "default": "c"},
            "when": {"anyOf": [{"type": "string", "format": "date"}, {"type": "null"}]},
            "verbose": {"type": "boolean", "description": "Say more", "default": False},
        },
        "required": ["city"],
        "additionalProperties": False,
    }


def test_function_schema_description_override_and_no_parameters() -> None:
    def ping() -> str:
        """Ping it."""
        return "pong"

    fs = function_schema(ping, description="Custom")
    assert fs.description == "Custom"
    assert fs.parameters == {"type": "object", "properties": {}, "additionalProperties": False}


def test_unannotated_parameters_accept_anything() -> None:
    def f(a, b=2):  # type: ignore[no-untyped-def]
        return a

    assert function_schema(f).parameters == {
        "type": "object",
        "properties": {"a": {}, "b": {"default": 2}},
        "required": ["a"],
        "additionalProperties": False,
    }


def test_var_args_are_ignored_and_var_kwargs_open_the_schema() -> None:
    def f(a: int, *rest: int, **extra: Any) -> Any:
        return (a, rest, extra)

    fs = function_schema(f)
    assert fs.parameters == {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    assert fs.bind({"a": 1, "b": "x"}) == ([], {"a": 1, "b": "x"})


def test_bind_converts_to_annotated_types() -> None:
    def f(
        point: Point,
        movie: Movie,
        record: Record,
        user: User,
        color: Color,
        level: Level,
        ratio: float,
        tags: set[str],
        pair: tuple[int, str],
        when: datetime.date,
        path: pathlib.Path,
        maybe: Point | None = None,
    ) -> None:
        return None

    args = {
        "point": {"x": 1, "y": 2},
        "movie": {"title": "Heat"},
        "record": {"firstName": "Ann", "inner": {"n": 3}},
        "user": {"name": "Bo", "address": {"city": "Oslo"}},
        "color": "blue",
        "level": 2,
        "ratio": 3,
        "tags": ["a", "a", "b"],
        "pair": [1, "x"],
        "when": "2024-05-06",
        "path": "a/b.txt",
        "maybe": None,
    }
    positional, keywords = function_schema(f).bind(args)
    assert positional == []
    assert keywords == {
        "point": Point(x=1, y=2.0),
        "movie": {"title": "Heat"},
        "record": Record(first_name="Ann", inner=Inner(n=3)),
        "user": User(name="Bo", address=Address(city="Oslo")),
        "color": Color.BLUE,
        "level": Level.HIGH,
        "ratio": 3.0,
        "tags": {"a", "b"},
        "pair": (1, "x"),
        "when": datetime.date(2024, 5, 6),
        "path": pathlib.Path("a/b.txt"),
        "maybe": None,
    }
    assert type(keywords["ratio"]) is float
    assert type(keywords["point"].y) is float


def test_bind_handles_unions_of_several_object_types() -> None:
    def f(pet: Cat | Dog) -> None:
        return None

    fs = function_schema(f)
    assert fs.bind({"pet": {"bark": 3}}) == ([], {"pet": Dog(bark=3)})
    assert fs.bind({"pet": {"meow": "hi"}}) == ([], {"pet": Cat(meow="hi")})


def test_bind_errors_name_the_parameter() -> None:
    def f(point: Point, n: int) -> None:
        return None

    fs = function_schema(f)
    with pytest.raises(ValueError, match=r'^Missing required argument "n"$'):
        fs.bind({"point": {"x": 1}})
    with pytest.raises(ValueError, match=r'^Invalid value for parameter "point": Object missing required field `x`$'):
        fs.bind({"point": {}, "n": 1})


def test_bind_positional_only_and_context() -> None:
    def f(ctx: ToolContext, a: int, b: int = 5, /, *, c: int = 0) -> None:
        return None

    fs = function_schema(f, context_type=ToolContext)
    assert fs.bind({"a": 1, "c": 2}, "CTX") == (["CTX", 1, 5], {"c": 2})


T = TypeVar("T")


class Injected(Generic[T]):
    """A generic context class, as a deps-typed ``ToolContext[Deps]`` is."""


def test_the_context_type_is_given_by_the_caller_and_may_be_subscripted() -> None:
    def f(ctx: Injected[int], a: int) -> None:
        return None

    fs = function_schema(f, context_type=Injected)
    assert fs.context_param == "ctx"
    assert fs.parameters == {
        "type": "object",
        "properties": {"a": {"type": "integer"}},
        "required": ["a"],
        "additionalProperties": False,
    }
    assert fs.bind({"a": 1}, "CTX") == ([], {"a": 1, "ctx": "CTX"})
    with pytest.raises(TypeError, match="^Injected is only allowed as a direct parameter annotation$"):
        type_schema(list[Injected[int]], context_type=Injected)
    # Without a context type it is an ordinary (unsupported) annotation.
    with pytest.raises(TypeError, match="^unsupported type for a tool schema: "):
        function_schema(f)


def test_plain_json_types_need_no_conversion() -> None:
    for annotation in (str, int, bool, Any, list[str], dict[str, int], Optional[str], Literal["a"], Movie, Sequence[int]):  # noqa: UP045
        assert converter_for(annotation) is None, annotation
    for annotation in (float, Color, Point, list[float], set[str], User, Literal[Color.RED]):
        assert converter_for(annotation) is not None, annotation


def test_schema_validation_and_binding_round_trip() -> None:
    def f(point: Point, colors: list[Color], limit: int | None = None, count: int = 5) -> None:
        return None

    fs = function_schema(f)
    raw = {"point": '{"x": "4"}', "colors": ["red"], "limit": None, "count": None}
    args, problem = validate_arguments("f", fs.parameters, raw)
    assert problem is None
    assert fs.bind(args) == ([], {"point": Point(x=4), "colors": [Color.RED], "limit": None})
    _, problem = validate_arguments("f", fs.parameters, {"point": {"x": 1, "z": 2}, "colors": ["green"]})
    assert problem == (
        'Validation failed for tool "f":\n'
        '  - colors[0]: must be one of ["red", "blue"]\n'
        "  - point.z: unknown property\n"
        "\n"
        "Received arguments:\n"
        "{\n"
        '  "point": {\n'
        '    "x": 1,\n'
        '    "z": 2\n'
        "  },\n"
        '  "colors": [\n'
        '    "green"\n'
        "  ]\n"
        "}"
    )


def test_pydantic_is_not_imported_for_plain_functions() -> None:
    code = (
        "import sys\n"
        "from ketch._schema import function_schema\n"
        "from ketch.tools import tool\n"
        "def f(a: int, b: list[str] | None = None) -> str:\n"
        "    return ''\n"
        "function_schema(f)\n"
        "tool(f)\n"
        "print('pydantic' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout == "False\n"


def test_the_loop_loads_only_the_validator() -> None:
    code = (
        "import sys\n"
        "import ketch, ketch.loop\n"
        "print(sorted(m for m in sys.modules if m.startswith('ketch._schema')))\n"
        "from ketch.tools import Param\n"
        "print(sorted(m for m in sys.modules if m.startswith('ketch._schema')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == [
        "['ketch._schema', 'ketch._schema._validate']",
        "['ketch._schema', 'ketch._schema._build', 'ketch._schema._docstring', 'ketch._schema._function',"
        " 'ketch._schema._types', 'ketch._schema._validate']",
    ]
