"""The stateless tool-call loop. Imports only :mod:`ketch.llm`."""

from typing import TYPE_CHECKING, Any

from ._config import (
    AfterToolCallResult,
    BeforeToolCallResult,
    ContextManager,
    ContextRequest,
    Conversation,
    LoopConfig,
    NextTurn,
    Projection,
    StopDecision,
    StopInfo,
    ToolCallInfo,
    TurnInfo,
    UsageLimits,
    stop_after_tool,
)
from ._events import (
    AgentEnd,
    AgentEvent,
    AgentStart,
    ApprovalRequired,
    CompactionEnd,
    CompactionStart,
    MessageEnd,
    MessageStart,
    MessageUpdate,
    Retry,
    RunError,
    RunResult,
    RunSummary,
    ToolCallNote,
    ToolExecutionEnd,
    ToolExecutionStart,
    ToolExecutionUpdate,
    TurnEnd,
    TurnStart,
)
from ._guardrails import (
    Guardrail,
    GuardrailResult,
    GuardrailTrip,
    InputCheck,
    OutputCheck,
    ToolResultCheck,
    input_guardrail,
    output_guardrail,
    tool_guardrail,
)
from ._phase import Phase, PhaseRef
from ._repair import default_convert_to_llm, repair_messages, validate_message_sequence
from ._run import RunStream, continue_loop, resume_loop, run_loop
from ._state import Approve, Decision, Deny, Edit, PendingCall, RunState, approve, deny, edit
from ._tool import Tool, ToolContext, ToolPreview, ToolProgress, ToolResult, to_tool_result

__all__ = [
    "OUTPUT_TOOL_NAME",
    "AfterToolCallResult",
    "AgentEnd",
    "AgentEvent",
    "AgentStart",
    "ApprovalRequired",
    "Approve",
    "BeforeToolCallResult",
    "CompactionEnd",
    "CompactionStart",
    "ContextManager",
    "ContextRequest",
    "Conversation",
    "Decision",
    "Deny",
    "Edit",
    "Guardrail",
    "GuardrailResult",
    "GuardrailTrip",
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
    "RunError",
    "RunResult",
    "RunState",
    "RunStream",
    "RunSummary",
    "StopDecision",
    "StopInfo",
    "Tool",
    "ToolCallInfo",
    "ToolCallNote",
    "ToolContext",
    "ToolExecutionEnd",
    "ToolExecutionStart",
    "ToolExecutionUpdate",
    "ToolPreview",
    "ToolProgress",
    "ToolResult",
    "ToolResultCheck",
    "TurnEnd",
    "TurnInfo",
    "TurnStart",
    "UsageLimits",
    "approve",
    "continue_loop",
    "default_convert_to_llm",
    "deny",
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
    from ._output import OUTPUT_TOOL_NAME, OutputMode, OutputStream, OutputValidator, RejectOutput

_OUTPUT_NAMES = frozenset({"OUTPUT_TOOL_NAME", "OutputMode", "OutputStream", "OutputValidator", "RejectOutput"})


def __getattr__(name: str) -> Any:
    # Typed output is imported with its first use, not with the loop.
    if name in _OUTPUT_NAMES:
        from . import _output

        return getattr(_output, name)
    raise AttributeError(f"module 'ketch.loop' has no attribute {name!r}")
