"""``RunResult.error``: why a run did not end normally, in one line (None when it did)."""

from __future__ import annotations

import pytest

from ketch import Agent
from ketch.testing import ScriptedModel
from ketch.testing import error_reply
from ketch.testing import reply
from ketch.testing import tool_call


async def test_a_run_without_a_key_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    result = await Agent("openai:gpt-5-mini").prompt("What is 2 + 40?")
    assert (result.end_reason, result.text) == ("error", "")
    assert result.error == "No API key for provider 'openai': pass api_key or set OPENAI_API_KEY"


async def test_error_is_none_for_a_normal_end_and_names_every_other_end() -> None:
    assert (await Agent(ScriptedModel(["42"])).prompt("2 + 40?")).error is None
    looping = ScriptedModel([reply(tool_call("nothing", {}))] * 3)
    limited = await Agent(looping, max_turns=1).prompt("go")
    assert (limited.end_reason, limited.error) == ("max_turns", "the run stopped at its max_turns limit")
    failed = await Agent(ScriptedModel([error_reply("upstream broke")])).prompt("go")
    assert (failed.end_reason, failed.error) == ("error", "upstream broke")
