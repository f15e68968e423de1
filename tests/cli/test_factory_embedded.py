"""White-box test: imports ketch implementation modules (private) directly.

The embedded model's defaults in ``build_agent``: its own short system prompt (no
absolute path to copy), configured prompts still win, and after a forced first call it
answers in text."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ketch.cli._config import Settings
from ketch.cli._factory import build_agent
from ketch.cli._factory import default_system_prompt
from ketch.cli._factory import embedded_system_prompt
from ketch.llm._providers.local import LocalModel


def test_embedded_model_gets_the_short_prompt_without_the_path(tmp_path: Path) -> None:
    built = build_agent(Settings(), tmp_path, approver=None, model=LocalModel("smollm2"))
    prompt = built.agent.system_prompt
    assert prompt == embedded_system_prompt()
    assert str(tmp_path) not in prompt
    assert '"name"' not in prompt  # no example call: the model would repeat it as its answer
    assert len(prompt) < 300


def test_a_configured_prompt_and_other_gguf_files_keep_theirs(tmp_path: Path) -> None:
    mine = build_agent(Settings(system_prompt="Be terse."), tmp_path, approver=None, model=LocalModel("smollm2"))
    assert mine.agent.system_prompt == "Be terse."
    other = build_agent(Settings(), tmp_path, approver=None, model=LocalModel(str(tmp_path / "big.gguf")))
    assert other.agent.system_prompt == default_system_prompt(tmp_path, other.agent.tools)


def test_after_the_forced_call_the_embedded_model_answers_in_text(tmp_path: Path) -> None:
    info: Any = None
    embedded = build_agent(Settings(), tmp_path, approver=None, tool_choice="ls", model=LocalModel("smollm2"))
    chooser = embedded.tool_choice
    assert chooser is not None
    embedded.arm()
    assert chooser.options.tool_choice == "ls"
    chooser(info)
    assert chooser.options.tool_choice == "none"
    other = build_agent(Settings(), tmp_path, approver=None, tool_choice="ls", model=LocalModel("/x/big.gguf"))
    assert other.tool_choice is not None
    other.arm()
    other.tool_choice(info)
    assert other.tool_choice.options.tool_choice is None
