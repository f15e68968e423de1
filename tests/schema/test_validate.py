"""Tool-argument validation and coercion: exact messages, every issue, no mutation.

White-box tests of the private ``ketch._schema`` package (the validator the loop runs on
every tool call); the loop-level behaviour is covered through ``run_loop`` in tests/loop.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from ketch._schema import Issue
from ketch._schema import check_arguments
from ketch._schema import malformed_arguments_message
from ketch._schema import validate_arguments

WEATHER: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "days": {"type": "integer", "minimum": 1, "maximum": 14},
        "units": {"type": "string", "enum": ["c", "f"]},
    },
    "required": ["city"],
    "additionalProperties": False,
}


def issues_of(schema: dict[str, Any], args: Any) -> list[tuple[str, str, str]]:
    _, issues = check_arguments(schema, args)
    return [(i.kind, i.where, i.message) for i in issues]


def test_valid_arguments_come_back_unchanged_and_uncopied() -> None:
    args = {"city": "Paris", "days": 3, "units": "c"}
    out, problem = validate_arguments("weather", WEATHER, args)
    assert problem is None
    assert out is args


def test_full_message_lists_every_issue_sorted_with_received_arguments() -> None:
    args = {"days": "abc", "citty": "Paris", "units": "k"}
    out, problem = validate_arguments("weather", WEATHER, args)
    assert out is args
    assert problem == (
        'Validation failed for tool "weather":\n'
        "  - city: missing required property\n"
        '  - days: expected integer, got string "abc"\n'
        '  - units: must be one of ["c", "f"]\n'
        "  - citty: unknown property\n"
        "\n"
        "Received arguments:\n"
        "{\n"
        '  "days": "abc",\n'
        '  "citty": "Paris",\n'
        '  "units": "k"\n'
        "}"
    )


def test_empty_arguments_render_as_empty_object() -> None:
    _, problem = validate_arguments("weather", WEATHER, {})
    assert problem == (
        'Validation failed for tool "weather":\n'
        "  - city: missing required property\n"
        "\n"
        "Received arguments:\n"
        "{}"
    )


def test_issue_sorting_is_by_kind_then_path_with_numeric_indexes() -> None:
    schema = {
        "type": "object",
        "properties": {
            "items": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"qty": {"type": "integer"}, "sku": {"type": "string"}},
                    "required": ["sku"],
                    "additionalProperties": False,
                },
            }
        },
    }
    args = {
        "items": [{"sku": "a", "qty": 1}]
        + [{"sku": "x"}] * 1
        + [{"sku": "b", "qty": "many"}]
        + [{"sku": "c"}] * 7
        + [{"qty": "lots", "extra": 1}]
    }
    assert issues_of(schema, args) == [
        ("missing", "items[10].sku", "missing required property"),
        ("type", "items[2].qty", 'expected integer, got string "many"'),
        ("type", "items[10].qty", 'expected integer, got string "lots"'),
        ("unknown", "items[10].extra", "unknown property"),
    ]


def test_root_that_is_not_an_object() -> None:
    assert issues_of(WEATHER, [1, 2]) == [("type", "(root)", "expected object, got array")]


def test_odd_keys_are_quoted_in_paths() -> None:
    schema = {"type": "object", "properties": {"a b": {"type": "object", "properties": {"c.d": {"type": "integer"}}}}}
    assert issues_of(schema, {"a b": {"c.d": True}}) == [
        ("type", '["a b"]["c.d"]', "expected integer, got boolean true")
    ]


@pytest.mark.parametrize(
    ("schema", "value", "expected"),
    [
        ({"type": "integer"}, "500", 500),
        ({"type": "integer"}, " -7 ", -7),
        ({"type": "integer"}, "3.0", 3),
        ({"type": "integer"}, 4.0, 4),
        ({"type": "number"}, "1.5", 1.5),
        ({"type": "number"}, "2", 2),
        ({"type": "number"}, "1e3", 1000.0),
        ({"type": "boolean"}, "true", True),
        ({"type": "boolean"}, "False", False),
        ({"type": "string"}, 42, "42"),
        ({"type": "string"}, 1.5, "1.5"),
        ({"type": "array", "items": {"type": "integer"}}, "[1, 2, 3]", [1, 2, 3]),
        ({"type": "array", "items": {"type": "integer"}}, '["1", 2]', [1, 2]),
        ({"type": "object", "properties": {"a": {"type": "integer"}}}, '{"a": "5"}', {"a": 5}),
        ({"type": ["integer", "null"]}, "9", 9),
        ({"type": "integer", "nullable": True}, None, None),
        ({"enum": [1, 2, 3]}, "2", 2),
        ({"enum": ["1", "2"]}, 2, "2"),
        ({"const": True}, "true", True),
    ],
)
def test_coercions(schema: dict[str, Any], value: Any, expected: Any) -> None:
    wrapped = {"type": "object", "properties": {"v": schema}}
    out, issues = check_arguments(wrapped, {"v": value})
    assert issues == []
    assert out == {"v": expected}
    assert type(out["v"]) is type(expected)


@pytest.mark.parametrize(
    ("schema", "value", "message"),
    [
        ({"type": "integer"}, "abc", 'expected integer, got string "abc"'),
        ({"type": "integer"}, "1.5", 'expected integer, got string "1.5"'),
        ({"type": "integer"}, 1.5, "expected integer, got number 1.5"),
        ({"type": "integer"}, True, "expected integer, got boolean true"),
        ({"type": "integer"}, "1_000", 'expected integer, got string "1_000"'),
        ({"type": "number"}, "nan", 'expected number, got string "nan"'),
        ({"type": "boolean"}, "yes", 'expected boolean, got string "yes"'),
        ({"type": "boolean"}, 1, "expected boolean, got integer 1"),
        ({"type": "string"}, False, "expected string, got boolean false"),
        ({"type": "string"}, [1], "expected string, got array"),
        ({"type": "array"}, "x", 'expected array, got string "x"'),
        ({"type": "array"}, "[1, 2", 'expected array, got string "[1, 2"'),
        ({"type": "array"}, '{"a": 1}', 'expected array, got string "{\\"a\\": 1}"'),
        ({"type": "array"}, 5, "expected array, got integer 5"),
        ({"type": "object"}, "[1]", 'expected object, got string "[1]"'),
        ({"type": "null"}, 0, "expected null, got integer 0"),
        ({"type": ["string", "integer", "null"]}, {}, "expected string, integer or null, got object"),
        ({"type": "integer"}, "x" * 70, "expected integer, got string " + '"' + "x" * 60 + '…"'),
    ],
)
def test_type_mismatches(schema: dict[str, Any], value: Any, message: str) -> None:
    wrapped = {"type": "object", "properties": {"v": schema}, "required": ["v"]}
    assert issues_of(wrapped, {"v": value}) == [("type", "v", message)]


def test_a_single_value_is_not_wrapped_into_an_array() -> None:
    schema = {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}}}}
    assert issues_of(schema, {"tags": "urgent"}) == [("type", "tags", 'expected array, got string "urgent"')]


@pytest.mark.parametrize(
    ("schema", "value", "message"),
    [
        ({"type": "integer", "minimum": 1}, 0, "must be >= 1"),
        ({"type": "integer", "maximum": 10}, 11, "must be <= 10"),
        ({"type": "number", "exclusiveMinimum": 0}, 0, "must be > 0"),
        ({"type": "number", "exclusiveMaximum": 1.5}, 1.5, "must be < 1.5"),
        ({"type": "integer", "multipleOf": 5}, 12, "must be a multiple of 5"),
        ({"type": "string", "minLength": 3}, "ab", "must be at least 3 characters long"),
        ({"type": "string", "minLength": 1}, "", "must be at least 1 character long"),
        ({"type": "string", "maxLength": 2}, "abc", "must be at most 2 characters long"),
        ({"type": "string", "pattern": "^[a-z]+$"}, "A1", 'must match pattern "^[a-z]+$"'),
        ({"type": "array", "minItems": 1}, [], "must have at least 1 item"),
        ({"type": "array", "maxItems": 2}, [1, 2, 3], "must have at most 2 items"),
        ({"type": "array", "uniqueItems": True}, [{"a": 1, "b": 2}, {"b": 2, "a": 1}], "must not contain duplicate items"),
        ({"enum": ["a", "b"]}, "c", 'must be one of ["a", "b"]'),
        ({"enum": [1, 2]}, True, "must be one of [1, 2]"),
        ({"enum": [None, "x"]}, "y", 'must be one of [null, "x"]'),
        ({"const": "fixed"}, "other", 'must be equal to "fixed"'),
        (False, 1, "is not allowed"),
    ],
)
def test_value_constraints(schema: Any, value: Any, message: str) -> None:
    wrapped = {"type": "object", "properties": {"v": schema}}
    assert issues_of(wrapped, {"v": value}) == [("value", "v", message)]


def test_coerced_value_is_checked_against_bounds() -> None:
    assert issues_of(WEATHER, {"city": "Oslo", "days": "20"}) == [("value", "days", "must be <= 14")]


def test_enum_matching_respects_json_types() -> None:
    schema = {"type": "object", "properties": {"v": {"enum": [1, [1, 2], {"a": 1}]}}}
    assert issues_of(schema, {"v": 1.0}) == []
    assert issues_of(schema, {"v": [1, 2]}) == []
    assert issues_of(schema, {"v": {"a": 1}}) == []
    assert issues_of(schema, {"v": [True, 2]}) == [("value", "v", 'must be one of [1, [1,2], {"a":1}]')]


def test_null_for_optional_field_is_treated_as_absent() -> None:
    args = {"city": "Paris", "days": None, "units": None}
    out, problem = validate_arguments("weather", WEATHER, args)
    assert problem is None
    assert out == {"city": "Paris"}
    assert args == {"city": "Paris", "days": None, "units": None}


def test_null_is_kept_where_the_schema_allows_it() -> None:
    schema = {
        "type": "object",
        "properties": {"note": {"anyOf": [{"type": "string"}, {"type": "null"}]}, "any": {}},
    }
    out, issues = check_arguments(schema, {"note": None, "any": None})
    assert issues == []
    assert out == {"note": None, "any": None}


def test_null_for_required_field_is_a_type_issue() -> None:
    assert issues_of(WEATHER, {"city": None}) == [("type", "city", "expected string, got null")]


def test_optional_via_anyof_reports_the_combined_type() -> None:
    schema = {
        "type": "object",
        "properties": {"limit": {"anyOf": [{"type": "integer"}, {"type": "null"}]}},
        "required": ["limit"],
    }
    assert issues_of(schema, {"limit": "ten"}) == [("type", "limit", 'expected integer or null, got string "ten"')]
    assert check_arguments(schema, {"limit": "10"}) == ({"limit": 10}, [])


def test_anyof_prefers_an_exact_match_over_a_coercion() -> None:
    schema = {"type": "object", "properties": {"v": {"anyOf": [{"type": "integer"}, {"type": "string"}]}}}
    assert check_arguments(schema, {"v": "5"}) == ({"v": "5"}, [])
    assert check_arguments(schema, {"v": 5}) == ({"v": 5}, [])
    assert issues_of(schema, {"v": [5]}) == [("type", "v", "expected integer or string, got array")]


def test_anyof_reports_the_issues_of_the_closest_branch() -> None:
    point = {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}}, "required": ["x", "y"]}
    schema = {"type": "object", "properties": {"p": {"anyOf": [point, {"type": "null"}]}}, "required": ["p"]}
    assert issues_of(schema, {"p": {"x": "a"}}) == [
        ("missing", "p.y", "missing required property"),
        ("type", "p.x", 'expected integer, got string "a"'),
    ]


def test_oneof_with_tagged_objects() -> None:
    circle = {
        "type": "object",
        "properties": {"kind": {"const": "circle"}, "r": {"type": "number"}},
        "required": ["kind", "r"],
    }
    square = {
        "type": "object",
        "properties": {"kind": {"const": "square"}, "side": {"type": "number"}},
        "required": ["kind", "side"],
    }
    schema = {"type": "object", "properties": {"shape": {"oneOf": [circle, square]}}}
    assert check_arguments(schema, {"shape": {"kind": "square", "side": "2"}}) == (
        {"shape": {"kind": "square", "side": 2}},
        [],
    )
    assert issues_of({"oneOf": [{"type": "integer"}, {"type": "number"}]}, 3) == [
        ("value", "(root)", "must match exactly one allowed schema, matched 2")
    ]


def test_allof_applies_every_schema() -> None:
    schema = {"allOf": [{"type": "integer"}, {"minimum": 5}]}
    assert check_arguments(schema, "7") == (7, [])
    assert issues_of(schema, 3) == [("value", "(root)", "must be >= 5")]


def test_local_refs_and_recursive_defs() -> None:
    schema = {
        "type": "object",
        "properties": {"tree": {"$ref": "#/$defs/Node"}},
        "required": ["tree"],
        "$defs": {
            "Node": {
                "type": "object",
                "properties": {"value": {"type": "integer"}, "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}},
                "required": ["value"],
                "additionalProperties": False,
            }
        },
    }
    args = {"tree": {"value": 1, "children": [{"value": "2"}, {"value": 3, "children": [{"nope": 1}]}]}}
    assert issues_of(schema, args) == [
        ("missing", "tree.children[1].children[0].value", "missing required property"),
        ("unknown", "tree.children[1].children[0].nope", "unknown property"),
    ]
    fixed = {"tree": {"value": 1, "children": [{"value": "2"}]}}
    assert check_arguments(schema, fixed) == ({"tree": {"value": 1, "children": [{"value": 2}]}}, [])


def test_unresolvable_and_remote_refs_accept_anything() -> None:
    assert check_arguments({"$ref": "#/$defs/Missing"}, {"a": 1}) == ({"a": 1}, [])
    assert check_arguments({"$ref": "https://example.com/s.json"}, 5) == (5, [])


def test_additional_properties_schema_checks_extra_values() -> None:
    schema = {"type": "object", "additionalProperties": {"type": "integer"}}
    assert check_arguments(schema, {"a": "1", "b": 2}) == ({"a": 1, "b": 2}, [])
    assert issues_of(schema, {"a": "x"}) == [("type", "a", 'expected integer, got string "x"')]


def test_tuple_items_via_prefix_items() -> None:
    schema = {
        "type": "array",
        "prefixItems": [{"type": "string"}, {"type": "integer"}],
        "minItems": 2,
        "maxItems": 2,
    }
    assert check_arguments(schema, ["a", "2"]) == (["a", 2], [])
    assert issues_of(schema, [1, "x", 3]) == [
        ("type", "[1]", 'expected integer, got string "x"'),
        ("value", "(root)", "must have at most 2 items"),
    ]


def test_properties_without_type_only_apply_to_objects() -> None:
    schema = {"properties": {"a": {"type": "integer"}}, "minLength": 2}
    assert check_arguments(schema, 5) == (5, [])
    assert issues_of(schema, "x") == [("value", "(root)", "must be at least 2 characters long")]


def test_json_encoded_array_and_object_strings() -> None:
    schema = {
        "type": "object",
        "properties": {
            "paths": {"type": "array", "items": {"type": "string"}},
            "opts": {"type": "object", "properties": {"depth": {"type": "integer"}}},
        },
    }
    args = {"paths": '["a.py", "b.py"]', "opts": '{"depth": "2"}'}
    out, problem = validate_arguments("t", schema, args)
    assert problem is None
    assert out == {"paths": ["a.py", "b.py"], "opts": {"depth": 2}}


def test_coercion_never_mutates_the_input_and_copies_only_what_changed() -> None:
    schema = {
        "type": "object",
        "properties": {
            "keep": {"type": "object", "properties": {"n": {"type": "integer"}}},
            "fix": {"type": "array", "items": {"type": "object", "properties": {"n": {"type": "integer"}}}},
            "drop": {"type": "string"},
        },
    }
    args = {"keep": {"n": 1}, "fix": [{"n": 1}, {"n": "2"}], "drop": None}
    snapshot = copy.deepcopy(args)
    out, issues = check_arguments(schema, args)
    assert issues == []
    assert args == snapshot
    assert out == {"keep": {"n": 1}, "fix": [{"n": 1}, {"n": 2}]}
    assert out is not args
    assert out["keep"] is args["keep"]
    assert out["fix"] is not args["fix"]
    assert out["fix"][0] is args["fix"][0]
    assert out["fix"][1] is not args["fix"][1]


def test_issue_objects_expose_kind_path_and_text() -> None:
    _, issues = check_arguments(WEATHER, {"city": "x", "days": 0})
    assert issues == [Issue("value", ("days",), "must be >= 1")]
    assert issues[0].where == "days"


def test_schema_cache_distinguishes_equal_but_distinct_schemas() -> None:
    a = {"type": "integer"}
    b = {"type": "string"}
    assert check_arguments(a, "1") == (1, [])
    assert check_arguments(b, 1) == ("1", [])
    assert check_arguments(a, "1") == (1, [])


def test_malformed_arguments_message() -> None:
    assert malformed_arguments_message("read", "unexpected end of input at line 1 column 9", '{"path": ') == (
        'Tool "read" received malformed JSON arguments: unexpected end of input at line 1 column 9\n'
        "Raw arguments:\n"
        '{"path": '
    )
    assert malformed_arguments_message("read", "bad", None) == (
        'Tool "read" received malformed JSON arguments: bad\nRaw arguments:\n'
    )
