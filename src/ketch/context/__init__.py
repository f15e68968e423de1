"""Context management: token accounting, projection, and compaction with summaries.

Use it by giving an agent a manager::

    agent = Agent(model, context_manager=Compactor())
"""

from ..llm._tokens import ContextUsage
from ..llm._tokens import context_usage
from ..llm._tokens import estimate_message_tokens
from ..llm._tokens import set_token_counter
from ._manager import Compactor
from ._manager import PreCompact
from ._manager import default_reserve
from ._strategies import CLEARED_TOOL_RESULT
from ._strategies import clear_old_tool_results
from ._strategies import trim_long_text
from ._summary import ContextSummary
from ._summary import find_cut

__all__ = [
    "CLEARED_TOOL_RESULT",
    "Compactor",
    "ContextSummary",
    "ContextUsage",
    "PreCompact",
    "clear_old_tool_results",
    "context_usage",
    "default_reserve",
    "estimate_message_tokens",
    "find_cut",
    "set_token_counter",
    "trim_long_text",
]
