"""ketch: a fast, fault-correct, asyncio-native agent runtime.

The public API, kept small::

    from ketch import Agent, tool

    @tool
    def add(a: int, b: int) -> int:
        "Add two numbers."
        return a + b

    agent = Agent("openai:gpt-5-mini", tools=[add])
    result = await agent.prompt("What is 2 + 3?")

Provider adapters, the HTTP client and the built-in tools load on first use.
"""

from typing import TYPE_CHECKING, Any

from ._agent import Agent, AgentSession, AgentState
from .llm import (
    AbortSignal,
    AssistantMessage,
    CustomMessage,
    ImageContent,
    Message,
    Model,
    ModelError,
    Request,
    StreamOptions,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
    complete,
    message_from_dict,
    message_to_dict,
    messages_from_json,
    messages_to_json,
)
from .loop import (
    AgentEvent,
    Conversation,
    Guardrail,
    GuardrailResult,
    LoopConfig,
    Phase,
    RunError,
    RunResult,
    RunState,
    StopDecision,
    Tool,
    ToolContext,
    ToolResult,
    UsageLimits,
    approve,
    continue_loop,
    deny,
    edit,
    input_guardrail,
    output_guardrail,
    run_loop,
    stop_after_tool,
    tool_guardrail,
)

if TYPE_CHECKING:
    from .llm._resolve import get_model
    from .loop._output import RejectOutput
    from .tools._decorator import tool

__all__ = [
    "AbortSignal",
    "Agent",
    "AgentEvent",
    "AgentSession",
    "AgentState",
    "AssistantMessage",
    "Conversation",
    "CustomMessage",
    "Guardrail",
    "GuardrailResult",
    "ImageContent",
    "LoopConfig",
    "Message",
    "Model",
    "ModelError",
    "Phase",
    "RejectOutput",
    "Request",
    "RunError",
    "RunResult",
    "RunState",
    "StopDecision",
    "StreamOptions",
    "TextContent",
    "ThinkingContent",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolResult",
    "ToolResultMessage",
    "Usage",
    "UsageLimits",
    "UserMessage",
    "approve",
    "complete",
    "continue_loop",
    "deny",
    "edit",
    "get_model",
    "input_guardrail",
    "message_from_dict",
    "message_to_dict",
    "messages_from_json",
    "messages_to_json",
    "output_guardrail",
    "run_loop",
    "stop_after_tool",
    "tool",
    "tool_guardrail",
]


def __getattr__(name: str) -> Any:
    if name == "tool":
        from .tools._decorator import tool

        return tool
    if name == "RejectOutput":
        from .loop._output import RejectOutput

        return RejectOutput
    if name == "get_model":
        from .llm._resolve import get_model

        return get_model
    raise AttributeError(f"module 'ketch' has no attribute {name!r}")
