# TEMPORARY placeholder written by the loop author so the loop can run; the owner of
# validate.py replaces this file entirely with the real validator.
from __future__ import annotations

from typing import Any


def validate_arguments(tool_name: str, schema: dict[str, Any], args: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    return args, None


def malformed_arguments_message(tool_name: str, parse_error: str, raw: str) -> str:
    return f'Tool "{tool_name}" received malformed JSON arguments: {parse_error}\nRaw arguments:\n{raw}'
