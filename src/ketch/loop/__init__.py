"""The stateless tool-call loop. Imports only :mod:`ketch.llm`."""

from typing import TYPE_CHECKING
from typing import Any

from ._config import AGENT_MANAGED
from ._config import AgentOptions
from ._config import LoopConfig
from ._config import ToolExecution
from ._config import UsageLimits
from ._config import stop_after_tool
from ._events import AgentEnd
from ._events import AgentEvent
from ._events import AgentStart
from ._events import ApprovalRequired
from ._events import CompactionEnd
from ._events import CompactionStart
from ._events import MessageEnd
from ._events import MessageStart
from ._events import MessageUpdate
from ._events import Retry
from ._events import RunError
from ._events import RunResult
from ._events import RunSummary
from ._events import ToolCallNote
from ._events import ToolExecutionEnd
from ._events import ToolExecutionStart
from ._events import ToolExecutionUpdate
from ._events import TurnEnd
from ._events import TurnStart
from ._guardrails import Guardrail
from ._guardrails import GuardrailResult
from ._guardrails import GuardrailTrip
from ._guardrails import InputCheck
from ._guardrails import OutputCheck
from ._guardrails import ToolResultCheck
from ._guardrails import input_guardrail
from ._guardrails import output_guardrail
from ._guardrails import tool_guardrail
from ._hooks import AfterToolCallResult
from ._hooks import BeforeToolCallResult
from ._hooks import ContextManager
from ._hooks import ContextRequest
from ._hooks import Conversation
from ._hooks import NextTurn
from ._hooks import Projection
from ._hooks import StopDecision
from ._hooks import StopInfo
from ._hooks import ToolCallInfo
from ._hooks import TurnInfo
from ._next import Continue
from ._next import End
from ._options import INHERITANCE
from ._options import Inheritance
from ._options import Rule
from ._options import derived_options
from ._phase import Phase
from ._phase import PhaseRef
from ._repair import default_convert_to_llm
from ._repair import repair_messages
from ._repair import validate_message_sequence
from ._run import RunStream
from ._run import continue_loop
from ._run import resume_loop
from ._run import run_loop
from ._state import Approve
from ._state import Decision
from ._state import Deny
from ._state import Edit
from ._state import PendingCall
from ._state import RunState
from ._state import approve
from ._state import denied_text
from ._state import deny
from ._state import edit
from ._tool import Tool
from ._tool import ToolContext
from ._tool import ToolPreview
from ._tool import ToolProgress
from ._tool import ToolResult
from ._tool import to_tool_result

__all__ = [
    "AGENT_MANAGED",
    "INHERITANCE",
    "OUTPUT_TOOL_NAME",
    "AfterToolCallResult",
    "AfterTurnCheck",
    "AgentEnd",
    "AgentEvent",
    "AgentOptions",
    "AgentStart",
    "ApprovalRequired",
    "Approve",
    "BeforeToolCallResult",
    "Capability",
    "CompactionEnd",
    "CompactionStart",
    "ContextManager",
    "ContextRequest",
    "Continue",
    "Contribution",
    "Conversation",
    "Decision",
    "Deny",
    "Edit",
    "End",
    "Guardrail",
    "GuardrailResult",
    "GuardrailTrip",
    "Inheritance",
    "InputCheck",
    "LoopConfig",
    "MessageEnd",
    "MessageStart",
    "MessageUpdate",
    "NextTurn",
    "OutputCheck",
    "OutputMode",
    "OutputStream",
    "OutputValidator",
    "PendingCall",
    "Phase",
    "PhaseRef",
    "Projection",
    "RejectOutput",
    "Retry",
    "Rule",
    "RunError",
    "RunResult",
    "RunState",
    "RunStream",
    "RunSummary",
    "StopCheck",
    "StopDecision",
    "StopInfo",
    "Tool",
    "ToolCallInfo",
    "ToolCallNote",
    "ToolContext",
    "ToolExecution",
    "ToolExecutionEnd",
    "ToolExecutionStart",
    "ToolExecutionUpdate",
    "ToolPreview",
    "ToolProgress",
    "ToolResult",
    "ToolResultCheck",
    "ToolsView",
    "TurnEnd",
    "TurnInfo",
    "TurnStart",
    "UsageLimits",
    "approve",
    "continue_loop",
    "continue_paused",
    "default_convert_to_llm",
    "denied_text",
    "deny",
    "derived_options",
    "edit",
    "input_guardrail",
    "output_guardrail",
    "repair_messages",
    "resume_loop",
    "run_loop",
    "stop_after_tool",
    "to_tool_result",
    "tool_guardrail",
    "validate_message_sequence",
]

if TYPE_CHECKING:
    from ._capability import AfterTurnCheck
    from ._capability import Capability
    from ._capability import Contribution
    from ._capability import StopCheck
    from ._capability import ToolsView
    from ._output import OUTPUT_TOOL_NAME
    from ._output import OutputMode
    from ._output import OutputStream
    from ._output import OutputValidator
    from ._output import RejectOutput
    from ._paused import continue_paused

_OUTPUT_NAMES = frozenset({"OUTPUT_TOOL_NAME", "OutputMode", "OutputStream", "OutputValidator", "RejectOutput"})


_CAPABILITY_NAMES = frozenset({"AfterTurnCheck", "Capability", "Contribution", "StopCheck", "ToolsView"})


def __getattr__(name: str) -> Any:
    # Typed output and the capability seam are imported with their first use, not with the loop.
    if name in _OUTPUT_NAMES:
        from . import _output

        return getattr(_output, name)
    if name in _CAPABILITY_NAMES:
        from . import _capability

        return getattr(_capability, name)
    if name == "continue_paused":
        from ._paused import continue_paused

        return continue_paused
    raise AttributeError(f"module 'ketch.loop' has no attribute {name!r}")
