"""JSON Schema for tools: building schemas from Python signatures, and validating arguments.

The bottom layer of ketch: it imports nothing else of ketch, so ``llm``, ``loop`` and
``tools`` can all use it. Private: the public face is :class:`ketch.tools.Param` and the
``@tool`` decorator; ``ketch.loop`` validates every tool call with :func:`validate_arguments`.

- :mod:`._validate`: validation with coercion of common model mistakes, and the messages
  the model reads (:func:`validate_arguments`, :func:`check_arguments`).
- :mod:`._build`: the schema of a Python annotation (:func:`type_schema`, :class:`Param`).
- :mod:`._function`: a function's parameter schema and the binder back to Python values
  (:func:`function_schema`, :func:`converter_for`).
- :mod:`._docstring`: Google, NumPy and reST docstrings (:func:`parse_docstring`).
"""

from typing import TYPE_CHECKING
from typing import Any

from ._validate import Issue
from ._validate import IssueKind
from ._validate import check_arguments
from ._validate import format_issues
from ._validate import malformed_arguments_message
from ._validate import validate_arguments

if TYPE_CHECKING:
    from ._build import Param
    from ._build import type_schema
    from ._docstring import Docstring
    from ._docstring import parse_docstring
    from ._function import Converter
    from ._function import FunctionSchema
    from ._function import ParamInfo
    from ._function import converter_for
    from ._function import function_schema

# The builder loads on first use: the loop needs only the validator.
_LAZY = {
    "Param": "_build",
    "type_schema": "_build",
    "Docstring": "_docstring",
    "parse_docstring": "_docstring",
    "Converter": "_function",
    "FunctionSchema": "_function",
    "ParamInfo": "_function",
    "converter_for": "_function",
    "function_schema": "_function",
}

__all__ = [
    "Converter",
    "Docstring",
    "FunctionSchema",
    "Issue",
    "IssueKind",
    "Param",
    "ParamInfo",
    "check_arguments",
    "converter_for",
    "format_issues",
    "function_schema",
    "malformed_arguments_message",
    "parse_docstring",
    "type_schema",
    "validate_arguments",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ketch._schema' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
