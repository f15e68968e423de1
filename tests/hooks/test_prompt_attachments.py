"""``HookRunner.prompt(..., attachments=...)``: documents and recordings go after the
prompt's text (and the hooks' context) in the one user message the model gets."""

from __future__ import annotations

from pathlib import Path

from ketch import Agent
from ketch.hooks import HookRunner
from ketch.llm import AudioContent
from ketch.llm import DocumentContent
from ketch.llm import TextContent
from ketch.testing import ScriptedModel


async def test_attachments_follow_the_prompt_text(tmp_path: Path) -> None:
    model = ScriptedModel(["ok"])
    runner = HookRunner(cwd=tmp_path, environment={})
    document = DocumentContent.from_bytes(b"%PDF-1.4\n", name="a.pdf")
    audio = AudioContent.from_bytes(b"RIFF", name="a.wav")
    result = await runner.prompt(Agent(model), "look", attachments=[document, audio])
    assert result.text == "ok"
    assert model.requests[0].messages[0].content == [TextContent(text="look"), document, audio]
