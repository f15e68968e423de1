"""White-box test: imports ketch implementation modules (private) directly.

The embedded model's calls are grounded in the request and the workspace: compact tools
(required arguments only) whose path or command is an ``enum`` of what the request names,
which the local provider's call grammar enforces; its run ends after its call succeeds and
the call's result is the answer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ketch.cli._config import Settings
from ketch.cli._embedded import grounded_arguments
from ketch.cli._embedded import workspace_paths
from ketch.cli._factory import build_agent
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call

FILES = ["README.md", "data.csv", "notes.txt", "poem.txt", "todo.md", "docs/faq.md", "docs/intro.md", "src/app.py"]
FOLDERS = [".", "docs", "src"]


def workspace(root: Path) -> Path:
    for name in FILES:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(f"{name}\n")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("x")
    (root / "outside").symlink_to("/etc")
    return root


def embedded(replies: list[Any]) -> ScriptedModel:
    return ScriptedModel(replies, provider="local", api="local", id="smollm2")


def test_the_workspace_paths_leave_out_hidden_entries_and_links(tmp_path: Path) -> None:
    assert workspace_paths(workspace(tmp_path)) == (
        ["README.md", "data.csv", "notes.txt", "poem.txt", "todo.md", "docs/faq.md", "docs/intro.md", "src/app.py"],
        [".", "docs", "src"],
    )
    assert workspace_paths(tmp_path, limit=3) is None  # a large workspace keeps free paths


def test_arguments_are_the_paths_and_commands_the_request_names() -> None:
    assert grounded_arguments("What does notes.txt say?", FILES, FOLDERS) == {
        "read": ["notes.txt"], "ls": ["."], "bash": ["wc -l notes.txt"],
    }
    assert grounded_arguments("How many files are in the docs folder?", FILES, FOLDERS) == {
        "read": FILES, "ls": ["docs"], "bash": ["ls docs | wc -l"],
    }
    assert grounded_arguments("Move poem.txt into the docs folder.", FILES, FOLDERS) == {
        "read": ["poem.txt"], "ls": ["docs"], "bash": ["mv poem.txt docs"],
    }
    assert grounded_arguments("Rename the file todo.md to tasks.md.", FILES, FOLDERS) == {
        "read": ["todo.md"], "ls": ["."], "write": ["tasks.md"], "bash": ["mv todo.md tasks.md"],
    }
    assert grounded_arguments("Create hello.py that prints hello.", FILES, FOLDERS) == {
        "read": FILES, "ls": ["."], "write": ["hello.py"],
    }
    assert grounded_arguments("Show me 'odd name.txt'; rm -rf x", ["odd name.txt"], ["."]) == {
        "read": ["odd name.txt"], "ls": ["."], "bash": ["wc -l 'odd name.txt'"],  # quoted for the shell
    }


async def test_the_embedded_models_first_call_is_routed_grounded_and_its_result_is_the_answer(tmp_path: Path) -> None:
    model = embedded([reply(tool_call("read", {"path": "notes.txt"}))])
    built = build_agent(Settings(), workspace(tmp_path), approver=None, model=model)
    result = await built.agent.prompt("What does notes.txt say?")  # as ketch eval, serve and ACP run it

    [request] = model.requests  # one call: the run ends after it
    [read] = request.tools  # the tool the request's words name, alone
    assert read.name == "read"
    assert read.parameters["properties"] == {"path": {**read.parameters["properties"]["path"], "enum": ["notes.txt"]}}
    assert read.parameters["required"] == ["path"]
    assert built.tool_answer(result) == "     1\tnotes.txt"
    assert result.end_reason == "stop"
    assert [t.name for t in built.agent.tools] == ["read", "ls", "find", "write", "bash"]
    assert "enum" not in built.agent.tools[0].parameters["properties"]["path"]  # the agent's own are unchanged


async def test_a_request_naming_no_action_gets_every_compact_tool(tmp_path: Path) -> None:
    model = embedded([reply(tool_call("read", {"path": "notes.txt"}))])
    built = build_agent(Settings(), workspace(tmp_path), approver=None, model=model)
    await built.prompt("notes.txt please")

    params = {t.name: t.parameters for t in model.requests[0].tools}
    assert list(params) == ["read", "ls", "find", "write", "bash"]
    assert params["read"]["properties"]["path"]["enum"] == ["notes.txt"]
    assert params["ls"]["properties"]["path"]["enum"] == ["."] and "limit" not in params["ls"]["properties"]
    assert params["bash"]["properties"]["command"]["enum"] == ["wc -l notes.txt"]
    assert set(params["write"]["properties"]) == {"path", "content"}
    assert "enum" not in params["write"]["properties"]["path"]  # no new file named: a free path


async def test_a_failed_call_goes_back_to_the_model_to_answer_in_text(tmp_path: Path) -> None:
    model = embedded([reply(tool_call("read", {"path": "gone.txt"})), "There is no gone.txt."])
    built = build_agent(Settings(), workspace(tmp_path), approver=None, model=model)
    result = await built.prompt("What does gone.txt say?")

    assert len(model.requests) == 2
    assert result.text == "There is no gone.txt."
    assert built.tool_answer(result) is None


async def test_other_models_keep_their_tools_and_answers(tmp_path: Path) -> None:
    model = ScriptedModel([reply(tool_call("read", {"path": "notes.txt"})), "It says notes.txt."])
    built = build_agent(Settings(), workspace(tmp_path), approver=None, model=model)
    result = await built.prompt("What does notes.txt say?")

    assert len(model.requests) == 2
    assert "enum" not in model.requests[0].tools[0].parameters["properties"]["path"]
    assert "limit" in model.requests[0].tools[0].parameters["properties"]
    assert built.tool_answer(result) is None and result.text == "It says notes.txt."
