"""Tools: the ``@tool`` decorator, schema generation, and the built-in coding tools.

:class:`Tool` (the base of every tool), :class:`ToolContext` and :class:`ToolResult` are
the loop's own (:mod:`ketch.loop`), here too for writing tools.

``coding_tools(root)`` builds the built-in set (read, write, edit, bash, grep, find, ls)
sharing one workspace; it is imported on first use. The tools themselves
(:class:`ReadTool`, :class:`WriteTool`, :class:`EditTool`, :class:`BashTool`,
:class:`GrepTool`, :class:`FindTool`, :class:`LsTool`) and :class:`Workspace` are
public for building a custom set; they load on first use too.

:class:`HostedTools` asks the model's provider for the tools it runs itself (web
search, web fetch, code execution, file search, remote MCP).

:class:`ToolSearch` sends a large tool set to the model on demand: deferred tools are
listed by name and loaded by a ``tool_search`` call (:class:`ToolActivations` records
activations a compaction would drop).

:class:`Todo` is a capability giving the model a ``todo_write`` tool: the to-do list it
keeps while it works (:class:`TodoItem`), shown by ``ketch acp`` as the editor's plan.

The ``write`` and ``edit`` tools change files exactly once per idempotency key under a
durable runner, keeping records in a journal (:class:`Journal`: :class:`DirJournal`,
:class:`StoreJournal`; :func:`use_journal`, :func:`journal_warning`).
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_getattr
from .._schema import Param
from .._schema import validate_arguments
from ..loop import Tool
from ..loop import ToolContext
from ..loop import ToolResult
from ._decorator import FunctionTool
from ._decorator import ToolOptions
from ._decorator import tool

if TYPE_CHECKING:
    from ._bash import BashTool
    from ._builtins import coding_tools
    from ._edit import EditTool
    from ._hosted import HostedTools
    from ._idempotency import DirJournal
    from ._idempotency import Journal
    from ._idempotency import StoreJournal
    from ._idempotency import journal_warning
    from ._idempotency import use_journal
    from ._ls import LsTool
    from ._read import ReadTool
    from ._search import FindTool
    from ._search import GrepTool
    from ._search_tools import ToolActivations
    from ._search_tools import ToolSearch
    from ._todo import Todo
    from ._todo import TodoItem
    from ._workspace import Workspace
    from ._write import WriteTool

__all__ = [
    "BashTool",
    "DirJournal",
    "EditTool",
    "FindTool",
    "FunctionTool",
    "GrepTool",
    "HostedTools",
    "Journal",
    "LsTool",
    "Param",
    "ReadTool",
    "StoreJournal",
    "Todo",
    "TodoItem",
    "Tool",
    "ToolActivations",
    "ToolContext",
    "ToolOptions",
    "ToolResult",
    "ToolSearch",
    "Workspace",
    "WriteTool",
    "coding_tools",
    "journal_warning",
    "tool",
    "use_journal",
    "validate_arguments",
]

_LAZY = {
    "BashTool": "._bash",
    "DirJournal": "._idempotency",
    "EditTool": "._edit",
    "HostedTools": "._hosted",
    "Journal": "._idempotency",
    "StoreJournal": "._idempotency",
    "journal_warning": "._idempotency",
    "use_journal": "._idempotency",
    "FindTool": "._search",
    "GrepTool": "._search",
    "LsTool": "._ls",
    "ReadTool": "._read",
    "ToolActivations": "._search_tools",
    "ToolSearch": "._search_tools",
    "Todo": "._todo",
    "TodoItem": "._todo",
    "Workspace": "._workspace",
    "WriteTool": "._write",
    "coding_tools": "._builtins",
}


__getattr__ = lazy_getattr(__name__, _LAZY, globals())
