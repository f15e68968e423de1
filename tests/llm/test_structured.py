"""White-box test: imports ketch implementation modules (private) directly.

Structured output: strict schemas from types, and validated instances from replies."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path
from typing import Annotated
from typing import Any
from typing import TypedDict

import msgspec
import pydantic
import pytest

from ketch.llm._structured import StructuredOutputError
from ketch.llm._structured import parse_structured
from ketch.llm._structured import response_format_for

SRC = str(Path(__file__).resolve().parents[2] / "src")


@dataclasses.dataclass
class Weather:
    """Weather report."""

    city: str
    temp: float
    tags: list[str] = dataclasses.field(default_factory=list)
    note: str | None = None


class Point(TypedDict, total=False):
    x: int
    y: int


class Track(msgspec.Struct):
    name: Annotated[str, msgspec.Meta(min_length=1, description="track name")]
    count: Annotated[int, msgspec.Meta(ge=0)]
    start: Point | None = None
    points: list[Point] = []
    level: int = 3


@dataclasses.dataclass
class Node:
    label: str
    children: list[Node] = dataclasses.field(default_factory=list)


class Person(pydantic.BaseModel):
    """A person."""

    name: str
    age: int = 0
    email: str | None = None
    address: Address | None = None


class Address(pydantic.BaseModel):
    street: str


Person.model_rebuild()


def test_dataclass_schema() -> None:
    assert response_format_for(Weather) == {
        "name": "Weather",
        "schema": {
            "description": "Weather report.",
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "temp": {"type": "number"},
                "tags": {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]},
                "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            },
            "required": ["city", "temp", "tags", "note"],
            "additionalProperties": False,
        },
        "strict": True,
    }


def test_typeddict_schema() -> None:
    assert response_format_for(Point) == {
        "name": "Point",
        "schema": {
            "type": "object",
            "properties": {
                "x": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
                "y": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
            },
            "required": ["x", "y"],
            "additionalProperties": False,
        },
        "strict": True,
    }


def test_struct_schema_with_nested_types() -> None:
    point = {
        "type": "object",
        "properties": {
            "x": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
            "y": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        },
        "required": ["x", "y"],
        "additionalProperties": False,
    }
    assert response_format_for(Track) == {
        "name": "Track",
        "schema": {
            "type": "object",
            "properties": {
                "name": {"description": "track name", "type": "string"},
                "count": {"type": "integer", "minimum": 0},
                "start": {"anyOf": [{"$ref": "#/$defs/Point"}, {"type": "null"}]},
                "points": {"anyOf": [{"type": "array", "items": {"$ref": "#/$defs/Point"}}, {"type": "null"}]},
                "level": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
            },
            "required": ["name", "count", "start", "points", "level"],
            "additionalProperties": False,
            "$defs": {"Point": point},
        },
        "strict": True,
    }


def test_recursive_type_keeps_its_definition() -> None:
    fmt = response_format_for(Node)
    schema = fmt["schema"]
    assert schema["properties"]["children"] == {
        "anyOf": [{"type": "array", "items": {"$ref": "#/$defs/Node"}}, {"type": "null"}]
    }
    assert schema["$defs"]["Node"]["required"] == ["label", "children"]
    assert schema["$defs"]["Node"]["additionalProperties"] is False


def test_pydantic_schema() -> None:
    assert response_format_for(Person) == {
        "name": "Person",
        "schema": {
            "$defs": {
                "Address": {
                    "properties": {"street": {"type": "string"}},
                    "required": ["street"],
                    "type": "object",
                    "additionalProperties": False,
                }
            },
            "description": "A person.",
            "properties": {
                "name": {"type": "string"},
                "age": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
                "email": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                "address": {"anyOf": [{"$ref": "#/$defs/Address"}, {"type": "null"}]},
            },
            "required": ["name", "age", "email", "address"],
            "type": "object",
            "additionalProperties": False,
        },
        "strict": True,
    }


def test_returned_dicts_are_fresh() -> None:
    first = response_format_for(Weather)
    first["schema"]["properties"].clear()
    assert response_format_for(Weather)["schema"]["properties"]["city"] == {"type": "string"}


@pytest.mark.parametrize("type_", [int, list[int], dict[str, int], object])
def test_unsupported_types(type_: Any) -> None:
    with pytest.raises(TypeError) as e:
        response_format_for(type_)
    assert str(e.value) == (
        f"response_format_for needs a dataclass, TypedDict, msgspec Struct or pydantic model, got {type_!r}"
    )


# -- parsing ----------------------------------------------------------------------------


def test_parse_dataclass() -> None:
    assert parse_structured('{"city": "Paris", "temp": 21.5, "tags": ["sun"], "note": "warm"}', Weather) == Weather(
        "Paris", 21.5, ["sun"], "warm"
    )


def test_nulls_for_optional_fields_mean_defaults() -> None:
    assert parse_structured('{"city": "P", "temp": 3, "tags": null, "note": null}', Weather) == Weather("P", 3.0)
    track = parse_structured('{"name": "t", "count": 1, "start": null, "points": [{"x": 1, "y": null}], "level": null}', Track)
    assert track == Track(name="t", count=1, points=[{"x": 1}])
    assert parse_structured('{"x": null, "y": 2}', Point) == {"y": 2}


@pytest.mark.parametrize(
    "text",
    [
        '```json\n{"city": "P", "temp": 1}\n```',
        '```\n{"city": "P", "temp": 1}\n```',
        '  \n```json\n{"city": "P", "temp": 1}```  ',
        'Here it is:\n```json\n{"city": "P", "temp": 1}\n```\nAnything else?',
    ],
)
def test_fences_are_stripped(text: str) -> None:
    assert parse_structured(text, Weather) == Weather("P", 1.0)


def test_invalid_json() -> None:
    with pytest.raises(StructuredOutputError) as e:
        parse_structured("sure, here you go", Weather)
    assert str(e.value) == "Structured output for Weather is not valid JSON: JSON is malformed: invalid character (byte 0)"
    assert e.value.text == "sure, here you go"
    with pytest.raises(StructuredOutputError) as e:
        parse_structured('{"city": "P", "temp": 1', Weather)
    assert str(e.value) == "Structured output for Weather is not valid JSON: Input data was truncated"


def test_empty_reply() -> None:
    with pytest.raises(StructuredOutputError) as e:
        parse_structured("  \n", Weather)
    assert str(e.value) == "Structured output for Weather is empty"


def test_mismatches_name_the_path() -> None:
    with pytest.raises(StructuredOutputError) as e:
        parse_structured('{"city": "P", "temp": "hot"}', Weather)
    assert str(e.value) == "Structured output does not match Weather: Expected `float`, got `str` - at `$.temp`"
    with pytest.raises(StructuredOutputError) as e:
        parse_structured('{"temp": 1}', Weather)
    assert str(e.value) == "Structured output does not match Weather: Object missing required field `city`"
    with pytest.raises(StructuredOutputError) as e:
        parse_structured('{"name": "t", "count": -1}', Track)
    assert str(e.value) == "Structured output does not match Track: Expected `int` >= 0 - at `$.count`"
    with pytest.raises(StructuredOutputError) as e:
        parse_structured('{"name": "t", "count": 1, "points": [{"x": "a"}]}', Track)
    assert str(e.value) == "Structured output does not match Track: Expected `int`, got `str` - at `$.points[0].x`"
    with pytest.raises(StructuredOutputError) as e:
        parse_structured('{"city": null, "temp": 1}', Weather)
    assert str(e.value) == "Structured output does not match Weather: Expected `str`, got `null` - at `$.city`"


def test_parse_pydantic() -> None:
    assert parse_structured('{"name": "Ann", "age": 40}', Person) == Person(name="Ann", age=40)
    assert parse_structured(
        '```json\n{"name": "Ann", "age": null, "email": null, "address": {"street": "Main"}}\n```', Person
    ) == Person(name="Ann", address=Address(street="Main"))


def test_pydantic_errors() -> None:
    with pytest.raises(StructuredOutputError) as e:
        parse_structured('{"name": "Ann", "age": "old", "address": {}}', Person)
    assert str(e.value) == (
        "Structured output does not match Person: Input should be a valid integer, unable to parse string as "
        "an integer - at `$.age` (and 1 more)"
    )
    with pytest.raises(StructuredOutputError) as e:
        parse_structured('{"name": ', Person)
    assert str(e.value) == "Structured output for Person is not valid JSON: Input data was truncated"
    with pytest.raises(StructuredOutputError) as e:
        parse_structured('{"name": "A", "address": {"street": 5}}', Person)
    assert str(e.value) == "Structured output does not match Person: Input should be a valid string - at `$.address.street`"


def test_structured_output_error_is_a_value_error() -> None:
    assert issubclass(StructuredOutputError, ValueError)


def test_pydantic_is_never_imported_for_other_types() -> None:
    code = (
        "import sys, dataclasses\n"
        "from ketch.llm._structured import parse_structured, response_format_for\n"
        "@dataclasses.dataclass\n"
        "class A:\n"
        "    x: int\n"
        "response_format_for(A)\n"
        "print(parse_structured('{\"x\": 1}', A), 'pydantic' in sys.modules)\n"
    )
    env = {**os.environ, "PYTHONPATH": SRC}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "A(x=1) False"
