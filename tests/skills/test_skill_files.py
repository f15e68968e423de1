"""ketch.skills: SKILL.md parsing and validation, discovery, and the Skills capability on
a scripted model (what the requests carry before and after the skill tool is called)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ketch import Agent
from ketch.skills import Skill
from ketch.skills import SkillError
from ketch.skills import Skills
from ketch.skills import find_skills
from ketch.skills import load_skill
from ketch.skills import parse_skill
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call


def test_front_matter_forms() -> None:
    s = parse_skill(
        "---\n"
        "name: pdf-forms\n"
        "description: >\n  Fill in PDF forms.\n  Use for forms.\n"
        "license: 'Apache-2.0'\n"
        "allowed-tools: [read, bash]\n"
        "metadata:\n  author: ann\n  version: \"1.0\"\n"
        "---\n\n# Body\ntext\n",
        source="x/SKILL.md",
    )
    assert (s.name, s.description, s.body) == ("pdf-forms", "Fill in PDF forms. Use for forms.", "# Body\ntext")
    assert dict(s.fields) == {
        "license": "Apache-2.0",
        "allowed-tools": ["read", "bash"],
        "metadata": {"author": "ann", "version": "1.0"},
    }
    assert s.warnings == ()


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("no front matter", "f/SKILL.md: a SKILL.md must start with '---' front matter (name, description)"),
        ("---\nname: a\n", "f/SKILL.md: the front matter has no closing '---'"),
        ("---\ndescription: d\n---\n", "f/SKILL.md: 'name' is missing from the front matter"),
        ("---\nname: A b\ndescription: d\n---\n",
         "f/SKILL.md: 'name' 'A b' must be 1-64 lowercase letters, digits and single hyphens"),
        ("---\nname: a--b\ndescription: d\n---\n",
         "f/SKILL.md: 'name' 'a--b' must be 1-64 lowercase letters, digits and single hyphens"),
        ("---\nname: a\n---\n", "f/SKILL.md: 'description' is missing from the front matter"),
        ("---\nname: a\ndescription: " + "x" * 1025 + "\n---\n",
         "f/SKILL.md: 'description' is 1025 characters long; at most 1024"),
        ("---\nname: a\njust words\n---\n", "f/SKILL.md:3: expected 'key: value', got 'just words'"),
    ],
)
def test_bad_front_matter_is_one_line_naming_file_and_field(text: str, error: str) -> None:
    with pytest.raises(SkillError) as info:
        parse_skill(text, source="f/SKILL.md")
    assert str(info.value) == error


def test_unknown_keys_are_named_warnings() -> None:
    s = parse_skill("---\nname: a\ndescription: d\ncolour: red\n---\n", source="f/SKILL.md")
    assert s.warnings == (
        "f/SKILL.md: unknown front matter key 'colour' ignored; known: name, description, license, "
        "allowed-tools, metadata, compatibility, model",
    )


def test_the_name_must_match_the_folder(tmp_path: Path) -> None:
    folder = tmp_path / "other"
    folder.mkdir()
    (folder / "SKILL.md").write_text("---\nname: mine\ndescription: d\n---\n")
    with pytest.raises(SkillError) as info:
        load_skill(folder)
    assert str(info.value) == f"{folder / 'SKILL.md'}: 'name' 'mine' must match the folder's name 'other'"
    skills, errors = find_skills([(tmp_path, "user"), (tmp_path / "missing", "project")])
    assert skills == [] and errors == [str(info.value)]


def test_a_later_folder_replaces_a_skill_of_the_same_name(tmp_path: Path) -> None:
    for where, text in (("a", "first"), ("b", "second")):
        folder = tmp_path / where / "s"
        folder.mkdir(parents=True)
        (folder / "SKILL.md").write_text(f"---\nname: s\ndescription: {text}\n---\n")
    skills, errors = find_skills([(tmp_path / "a", "user"), (tmp_path / "b", "project")])
    assert [(s.description, s.source, s.path) for s in skills] == [("second", "project", tmp_path / "b" / "s")]
    assert errors == []


def test_a_name_given_twice_is_an_error() -> None:
    with pytest.raises(ValueError, match="^Skills: the skill name 'a' is given twice$"):
        Skills([Skill("a", "one"), Skill("a", "two")])
    with pytest.raises(SkillError, match="^Skill: 'name' 'A' must be"):
        Skill("A", "d")


async def test_the_capability_sends_descriptions_first_and_the_body_on_request() -> None:
    model = ScriptedModel([
        reply(tool_call("skill", {"name": "nope"}, id="c1")),
        reply(tool_call("skill", {"name": "greet"}, id="c2")),
        "Hello!",
    ])
    skills = Skills([Skill("greet", "Greet people warmly.", "Say HELLO-BODY."), Skill("bye", "Say goodbye.", "x")])
    agent = Agent(model, system_prompt="base", capabilities=[skills])
    result = await agent.prompt("hi")
    assert result.text == "Hello!"
    first, second, third = model.requests
    assert first.system_prompt == (
        "base\n\n# Skills\n\nThese skills are available. When a task matches a skill's description, call the "
        "`skill` tool with its name to load its instructions first, then follow them; read the files they "
        "name from the skill's folder with the file tools.\n\n- bye: Say goodbye.\n- greet: Greet people warmly."
    )
    assert [t.name for t in first.tools] == ["skill"]
    assert "HELLO-BODY" not in repr(first.messages) and "HELLO-BODY" not in repr(second.messages)
    error = second.messages[-1]
    assert error.is_error and error.content[0].text == "no skill named 'nope'; available: bye, greet"
    loaded = third.messages[-1]
    assert not loaded.is_error and loaded.content[0].text == "# Skill: greet\n\nSay HELLO-BODY."
    assert agent.system_prompt == "base"


async def test_no_skills_contribute_nothing() -> None:
    model = ScriptedModel(["ok"])
    await Agent(model, system_prompt="base", capabilities=[Skills()]).prompt("hi")
    assert model.requests[0].system_prompt == "base" and model.requests[0].tools == []


def _skill_folder(root: Path, name: str, body: str) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(f"---\nname: {name}\ndescription: The {name} skill.\n---\n{body}\n")
    return folder


async def test_agent_skills_takes_skill_objects_and_folder_paths(tmp_path: Path) -> None:
    one = _skill_folder(tmp_path / "single", "pdf-forms", "Fill the form.")
    _skill_folder(tmp_path / "many", "alpha", "A body.")
    _skill_folder(tmp_path / "many", "beta", "B body.")
    model = ScriptedModel([reply(tool_call("skill", {"name": "pdf-forms"}, id="c1")), "Done."])
    agent = Agent(
        model, system_prompt="base", skills=[Skill("greet", "Greet people.", "Hi."), one, str(tmp_path / "many")]
    )
    assert (await agent.prompt("fill it")).text == "Done."
    first, second = model.requests
    assert first.system_prompt.endswith(
        "\n\n- alpha: The alpha skill.\n- beta: The beta skill.\n- greet: Greet people.\n- pdf-forms: The pdf-forms skill."
    )
    assert [t.name for t in first.tools] == ["skill"]
    assert second.messages[-1].content[0].text == (
        f"# Skill: pdf-forms\nBase directory: {one} (read its files with the file tools; run its scripts with bash)\n"
        "\nFill the form."
    )


def test_agent_skills_errors_are_one_line(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(SkillError, match=f"^skills: '{tmp_path / 'empty'}' holds no SKILL.md, nor do its sub-folders$"):
        Agent(ScriptedModel(), skills=[tmp_path / "empty"])
    with pytest.raises(TypeError, match="^skills: expected Skill objects or folder paths, got int$"):
        Agent(ScriptedModel(), skills=[3])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="^Skills: the skill name 'a' is given twice$"):
        Agent(ScriptedModel(), skills=[Skill("a", "one"), Skill("a", "two")])


async def test_agent_skills_join_a_given_skills_capability() -> None:
    model = ScriptedModel(["ok"])
    agent = Agent(model, capabilities=[Skills([Skill("a", "one")])], skills=[Skill("b", "two")])
    assert [type(c).__name__ for c in agent.config.capabilities] == ["Skills"]
    await agent.prompt("hi")
    assert [t.name for t in model.requests[0].tools] == ["skill"]
    assert model.requests[0].system_prompt.endswith("\n- a: one\n- b: two")
    assert Agent(ScriptedModel()).config.capabilities == ()


async def test_a_loaded_skill_grants_its_allowed_tools_and_switches_the_model_for_the_run() -> None:
    first = ScriptedModel([reply(tool_call("skill", {"name": "deploy"}, id="c1")), "Back on the first model."])
    fast = ScriptedModel(["Deployed."])
    grants: list[tuple[str, ...]] = []
    deploy = Skill("deploy", "Deploy.", "Run the deploy.", fields=(("allowed-tools", "Bash(make deploy:*), Read"), ("model", "x:fast")))
    skills = Skills([deploy, Skill("plain", "Plain.", "p")], grant=grants.append, resolve_model={"x:fast": fast}.__getitem__)
    agent = Agent(first, capabilities=[skills])
    assert (await agent.prompt("deploy it")).text == "Deployed."
    assert len(first.requests) == 1 and len(fast.requests) == 1
    assert fast.requests[0].messages[-1].content[0].text == (
        "# Skill: deploy\nAllowed without asking for the rest of this task: Bash(make deploy:*), Read\n"
        "Model for the rest of this task: x:fast\n\nRun the deploy."
    )
    assert grants == [(), ("Bash(make deploy:*)", "Read")]
    # the next run starts on the agent's model with nothing granted
    assert (await agent.prompt("again")).text == "Back on the first model."
    assert grants[-1] == () and agent.model is first


async def test_a_skills_model_that_cannot_be_resolved_is_said_and_the_model_stays() -> None:
    model = ScriptedModel([reply(tool_call("skill", {"name": "odd"}, id="c1")), "Same model."])

    def resolve(spec: str) -> Any:
        raise ValueError(f"unknown provider in {spec!r}")

    skills = Skills([Skill("odd", "Odd.", "Body.", fields=(("model", "nope:x"),))], resolve_model=resolve)
    assert (await Agent(model, capabilities=[skills]).prompt("go")).text == "Same model."
    assert model.requests[1].messages[-1].content[0].text == (
        "# Skill: odd\nThe skill's model 'nope:x' cannot be used (unknown provider in 'nope:x'); the model stays\n\nBody."
    )


def test_skill_model_and_allowed_tools_fields() -> None:
    s = parse_skill("---\nname: a\ndescription: d\nallowed-tools: Bash(git add:*), Read\nmodel: inherit\n---\nb")
    assert s.allowed_tools == ("Bash(git add:*)", "Read") and s.model is None
    with pytest.raises(SkillError, match=r"^<SKILL.md>: 'model' must be a string \(provider:id\), got \['a'\]$"):
        parse_skill("---\nname: a\ndescription: d\nmodel: [a]\n---\nb")
