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

from typing import TYPE_CHECKING
from typing import Any

from ._agent import Agent
from ._agent import AgentSession
from ._agent import AgentState
from ._agent import AgentStream
from .llm import AbortSignal
from .llm import AssistantMessage
from .llm import AudioContent
from .llm import CustomMessage
from .llm import DocumentContent
from .llm import HostedToolCall
from .llm import HostedToolResult
from .llm import ImageContent
from .llm import Message
from .llm import Model
from .llm import ModelError
from .llm import Request
from .llm import StreamOptions
from .llm import TextContent
from .llm import ThinkingContent
from .llm import ToolCall
from .llm import ToolResultMessage
from .llm import Usage
from .llm import UserMessage
from .llm import complete
from .llm import message_from_dict
from .llm import message_to_dict
from .llm import messages_from_json
from .llm import messages_to_json
from .loop import AgentEvent
from .loop import AgentOptions
from .loop import Conversation
from .loop import Guardrail
from .loop import GuardrailResult
from .loop import LoopConfig
from .loop import Phase
from .loop import RunError
from .loop import RunResult
from .loop import RunState
from .loop import StopDecision
from .loop import Tool
from .loop import ToolContext
from .loop import ToolResult
from .loop import UsageLimits
from .loop import approve
from .loop import continue_loop
from .loop import deny
from .loop import edit
from .loop import input_guardrail
from .loop import output_guardrail
from .loop import run_loop
from .loop import stop_after_tool
from .loop import tool_guardrail

if TYPE_CHECKING:
    from .llm._resolve import get_model
    from .loop._capability import Capability
    from .loop._output import RejectOutput
    from .tools._decorator import tool

__all__ = [
    "AbortSignal",
    "Agent",
    "AgentEvent",
    "AgentOptions",
    "AgentSession",
    "AgentState",
    "AgentStream",
    "AssistantMessage",
    "AudioContent",
    "Capability",
    "Conversation",
    "CustomMessage",
    "DocumentContent",
    "Guardrail",
    "GuardrailResult",
    "HostedToolCall",
    "HostedToolResult",
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
    if name == "Capability":
        from .loop._capability import Capability

        return Capability
    if name == "RejectOutput":
        from .loop._output import RejectOutput

        return RejectOutput
    if name == "get_model":
        from .llm._resolve import get_model

        return get_model
    if name == "__version__":  # the installed distribution's version, looked up once
        from importlib.metadata import PackageNotFoundError
        from importlib.metadata import version

        try:
            found = version("ketch")
        except PackageNotFoundError:  # run from a source tree that was never installed
            found = "0+unknown"
        globals()["__version__"] = found
        return found
    raise AttributeError(f"module 'ketch' has no attribute {name!r}")
