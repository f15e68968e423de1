"""Tools: the ``@tool`` decorator, schema generation, and the built-in coding tools.

``coding_tools(root)`` builds the built-in set (read, write, edit, bash, grep, find, ls)
sharing one workspace; it is imported on first use.
"""

from typing import TYPE_CHECKING, Any

from .._schema import Param
from .decorator import FunctionTool, tool

if TYPE_CHECKING:
    from .builtins import coding_tools

__all__ = ["FunctionTool", "Param", "coding_tools", "tool"]


def __getattr__(name: str) -> Any:
    if name == "coding_tools":
        from .builtins import coding_tools

        return coding_tools
    raise AttributeError(f"module 'ketch.tools' has no attribute {name!r}")
