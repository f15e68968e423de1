"""Context management: token accounting, projection, and compaction with summaries.

Use it by giving an agent a manager::

    agent = Agent(model, context_manager=Compactor())
"""

from ..llm._tokens import ContextUsage, context_usage, estimate_message_tokens, set_token_counter
from ._manager import Compactor, PreCompact, default_reserve
from ._strategies import CLEARED_TOOL_RESULT, clear_old_tool_results, trim_long_text
from ._summary import ContextSummary, find_cut

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
