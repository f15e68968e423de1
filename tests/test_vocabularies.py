"""White-box test: imports ketch implementation modules (private) directly.

Each vocabulary is written once: the tuple a program iterates is the Literal's arguments."""

from __future__ import annotations

from typing import get_args

from ketch.cli._wire import OUTPUT_FORMATS
from ketch.cli._wire import OutputFormat
from ketch.llm._model import THINKING_LEVELS
from ketch.llm._model import TOOL_CHOICE_MODES
from ketch.llm._model import ThinkingLevel
from ketch.llm._model import ToolChoiceMode
from ketch.llm._providers.anthropic import _CACHE_RETENTIONS
from ketch.llm._providers.anthropic import CacheRetention
from ketch.permissions import PERMISSION_MODES
from ketch.permissions import PermissionMode


def test_thinking_levels_are_the_literal_in_order_of_effort() -> None:
    assert THINKING_LEVELS == get_args(ThinkingLevel) == ("off", "minimal", "low", "medium", "high", "xhigh")


def test_permission_modes_are_the_literal() -> None:
    assert PERMISSION_MODES == get_args(PermissionMode) == ("default", "accept_edits", "plan", "bypass")


def test_output_formats_are_the_literal() -> None:
    assert OUTPUT_FORMATS == get_args(OutputFormat) == ("text", "json", "stream-json")


def test_cache_retentions_are_the_literal() -> None:
    assert _CACHE_RETENTIONS == get_args(CacheRetention) == ("none", "short", "long")


def test_tool_choice_modes_are_the_literal() -> None:
    assert TOOL_CHOICE_MODES == get_args(ToolChoiceMode) == ("auto", "none", "required")


def test_the_claude_sdk_modes_hook_events_are_ketchs() -> None:
    # written out in the module the SDK's invocation starts with, which imports no hooks code
    from ketch.cli._claude_compat import HOOK_EVENTS_SUPPORTED
    from ketch.hooks import HOOK_EVENTS

    assert HOOK_EVENTS_SUPPORTED == HOOK_EVENTS
