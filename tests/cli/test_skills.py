"""Agent Skills through the ``ketch`` command (scripted models; the requests the model
got are read from ``KETCH_TEST_REQUESTS``): progressive disclosure, trust, discovery
folders, bad files and ``ketch skills list``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from clihelp import Env

BODY = "Step 1: run scripts/fill.py on the form. UNIQUE-BODY-MARKER"


def skill(root: Path, folder: str, name: str, description: str, body: str = BODY, extra: str = "") -> Path:
    path = root / folder / name / "SKILL.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"---\nname: {name}\ndescription: {description}\n{extra}---\n{body}\n", encoding="utf-8")
    return path


def requests(env: Env) -> list[dict[str, Any]]:
    log = env.home / "requests.jsonl"
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]


def run(env: Env, replies: list[Any], *flags: str) -> Any:
    return env.run(
        "run", *flags, "fill in the form",
        extra={"KETCH_TEST_SCRIPT": env.script(replies), "KETCH_TEST_REQUESTS": str(env.home / "requests.jsonl")},
    )


def use(name: str) -> dict[str, Any]:
    return {"blocks": [{"type": "tool_call", "id": "c1", "name": "skill", "args": {"name": name}}]}


def test_the_body_enters_the_context_only_after_the_model_asks(env: Env) -> None:
    folder = skill(env.work, ".ketch/skills", "pdf-forms", "Fill in PDF forms. Use for any PDF with fields.").parent
    skill(env.work, ".claude/skills", "changelog", "Write changelog entries.", body="CHANGELOG-BODY")
    proc = run(env, [use("pdf-forms"), "Filled."], "--trust-project")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "Filled."
    first, second = requests(env)
    # Before: only the names and descriptions, and the skill tool.
    assert "- changelog: Write changelog entries.\n- pdf-forms: Fill in PDF forms. Use for any PDF with fields." in (
        first["system_prompt"]
    )
    assert "UNIQUE-BODY-MARKER" not in json.dumps(first)
    assert "CHANGELOG-BODY" not in json.dumps(first)
    assert "skill" in first["tools"]
    # After the call: the body, with the folder its files are read from.
    result = second["messages"][-1]
    assert result["role"] == "tool_result" and result["tool_name"] == "skill"
    text = result["content"][0]["text"]
    assert text == (
        f"# Skill: pdf-forms\nBase directory: {folder} (read its files with the file tools; run its scripts "
        f"with bash)\n\n{BODY}"
    )
    assert "CHANGELOG-BODY" not in json.dumps(second)


def test_an_untrusted_projects_skills_are_not_loaded(env: Env) -> None:
    skill(env.work, ".ketch/skills", "pdf-forms", "Fill in PDF forms.")
    skill(env.work, ".agents/skills", "deploy", "Deploy the app.")
    proc = run(env, ["Done."])
    assert proc.returncode == 0, proc.stderr
    (first,) = requests(env)
    assert "pdf-forms" not in first["system_prompt"] and "# Skills" not in first["system_prompt"]
    assert "skill" not in first["tools"]
    line = next(x for x in proc.stderr.splitlines() if "untrusted project" in x)
    assert f"skills deploy ({env.work / '.agents' / 'skills'})" in line
    assert f"skills pdf-forms ({env.work / '.ketch' / 'skills'})" in line


def test_the_users_skills_load_in_any_project_and_a_project_skill_replaces_one_of_its_name(env: Env) -> None:
    skill(env.xdg / "ketch", "skills", "review", "The user's review rules.")
    skill(env.xdg / "ketch", "skills", "style", "The user's style.")
    skill(env.work, ".ketch/skills", "style", "The project's style.")
    proc = run(env, ["Done."])
    assert proc.returncode == 0, proc.stderr
    assert "- review: The user's review rules.\n- style: The user's style." in requests(env)[0]["system_prompt"]
    env.home.joinpath("requests.jsonl").unlink()
    proc = run(env, ["Done."], "--trust-project")
    assert "- review: The user's review rules.\n- style: The project's style." in requests(env)[0]["system_prompt"]


def test_a_bad_skill_file_is_one_line_naming_file_and_field_and_the_others_load(env: Env) -> None:
    bad = skill(env.xdg / "ketch", "skills", "Bad_Name", "x")
    nodesc = env.xdg / "ketch" / "skills" / "nodesc" / "SKILL.md"
    nodesc.parent.mkdir(parents=True)
    nodesc.write_text("---\nname: nodesc\n---\nbody\n")
    skill(env.xdg / "ketch", "skills", "good", "Fine.", extra="colour: blue\n")
    proc = run(env, ["Done."])
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert (
        f"ketch: skill left out: {bad}: 'name' 'Bad_Name' must be 1-64 lowercase letters, digits and single hyphens"
        in lines
    )
    assert f"ketch: skill left out: {nodesc}: 'description' is missing from the front matter" in lines
    good = env.xdg / "ketch" / "skills" / "good" / "SKILL.md"
    assert (
        f"ketch: {good}: unknown front matter key 'colour' ignored; known: name, description, license, "
        "allowed-tools, metadata, compatibility, model" in lines
    )
    assert "- good: Fine." in requests(env)[0]["system_prompt"]


def test_skills_list_shows_what_was_found_and_from_where(env: Env) -> None:
    skill(env.xdg / "ketch", "skills", "review", "Review a diff.\n  Use on pull requests.".replace("\n  ", " "))
    skill(env.work, ".claude/skills", "pdf-forms", "Fill in PDF forms.")
    proc = env.run("skills", "list")
    assert proc.returncode == 0, proc.stderr
    user = env.xdg / "ketch" / "skills" / "review"
    assert proc.stdout == f"review  [user] {user}\n    Review a diff. Use on pull requests.\n"
    assert f"skills pdf-forms ({env.work / '.claude' / 'skills'})" in proc.stderr
    proc = env.run("skills", "list", "--json", "--trust-project")
    assert [json.loads(x) for x in proc.stdout.splitlines()] == [
        {"name": "pdf-forms", "description": "Fill in PDF forms.", "origin": "project",
         "path": str(env.work / ".claude" / "skills" / "pdf-forms")},
        {"name": "review", "description": "Review a diff. Use on pull requests.", "origin": "user", "path": str(user)},
    ]


def test_no_skills_no_tool_and_no_section(env: Env) -> None:
    proc = run(env, ["Done."])
    assert proc.returncode == 0, proc.stderr
    (first,) = requests(env)
    assert "skill" not in first["tools"] and "# Skills" not in first["system_prompt"]
    proc = env.run("skills", "list")
    assert proc.stdout.startswith("no skills found (looked in: ")


def test_a_trusted_projects_skill_that_leads_out_of_the_project_is_not_read(env: Env) -> None:
    outside = env.home / "outside"
    skill(outside, "", "stolen", "Secret.", body="KETCHCANARY body")
    (env.work / ".ketch" / "skills" / "linked-file").mkdir(parents=True)
    (env.work / ".ketch" / "skills" / "linked-file" / "SKILL.md").symlink_to(outside / "stolen" / "SKILL.md")
    (env.work / ".ketch" / "skills" / "stolen").symlink_to(outside / "stolen")  # a linked folder
    fifo = env.work / ".claude" / "skills" / "pipe"
    fifo.mkdir(parents=True)
    os.mkfifo(fifo / "SKILL.md")  # not a file: not a skill (a read would block forever)
    skill(env.work, ".ketch/skills", "kept", "A skill of the project's own.")
    proc = run(env, ["Done."], "--trust-project")
    assert proc.returncode == 0, proc.stderr
    (first,) = requests(env)
    assert "KETCHCANARY" not in json.dumps(first) and "Secret." not in first["system_prompt"]
    assert "kept: A skill of the project's own." in first["system_prompt"]
    left = sorted(x for x in proc.stderr.splitlines() if x.startswith("ketch: skill left out:"))
    assert left == [
        f"ketch: skill left out: {env.work / '.ketch/skills/linked-file/SKILL.md'}: cannot read the skill "
        f"({env.work / '.ketch/skills/linked-file/SKILL.md'} leads outside {env.work})",
        f"ketch: skill left out: {env.work / '.ketch/skills/stolen/SKILL.md'}: cannot read the skill "
        f"({env.work / '.ketch/skills/stolen/SKILL.md'} leads outside {env.work})",
    ]


def test_a_loaded_skills_allowed_tools_run_without_asking_and_its_model_takes_the_rest(env: Env) -> None:
    second = env.script(
        [
            {"blocks": [{"type": "tool_call", "id": "b1", "name": "bash", "args": {"command": "touch made.txt"}}]},
            "Made it.",
        ],
        name="second.json",
    )
    skill(env.work, ".ketch/skills", "maker", "Make files.", body="Touch it.", extra=f"allowed-tools: Bash(touch made.txt)\nmodel: scripted:{second}\n")
    skill(env.work, ".ketch/skills", "other", "Other.", body="Touch it.")
    denied = run(env, [use("other"), {"blocks": [{"type": "tool_call", "id": "b1", "name": "bash", "args": {"command": "touch made.txt"}}]}, "No."], "--trust-project")
    assert denied.returncode == 5 and "run paused: bash (b1) needs approval" in denied.stderr  # without the skill
    assert not (env.work / "made.txt").exists()
    (env.home / "requests.jsonl").unlink()
    proc = run(env, [use("maker")], "--trust-project")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "Made it."  # the first script had one reply: the rest came from the skill's model
    assert (env.work / "made.txt").exists()
    assert len(requests(env)) == 3


def test_the_users_claude_code_skills_load_and_ketchs_own_replace_them(env: Env) -> None:
    skill(env.home, ".claude/skills", "review", "Claude's review rules.")
    skill(env.home, ".claude/skills", "style", "Claude's style.")
    skill(env.xdg / "ketch", "skills", "style", "ketch's style.")
    proc = run(env, ["Done."])
    assert proc.returncode == 0, proc.stderr
    assert "- review: Claude's review rules.\n- style: ketch's style." in requests(env)[0]["system_prompt"]
    listed = env.run("skills", "list", "--json")
    assert [json.loads(line)["path"] for line in listed.stdout.splitlines()] == [
        str(env.home / ".claude" / "skills" / "review"),
        str(env.xdg / "ketch" / "skills" / "style"),
    ]


def test_a_skill_whose_allowed_tools_are_not_rules_is_left_out_with_a_line(env: Env) -> None:
    path = skill(env.work, ".ketch/skills", "broken", "Broken.", extra="allowed-tools: Bash(unclosed\n")
    skill(env.work, ".ketch/skills", "fine", "Fine.")
    proc = run(env, ["Done."], "--trust-project")
    assert proc.returncode == 0, proc.stderr
    (line,) = [x for x in proc.stderr.splitlines() if "skill left out" in x]
    assert line.startswith(f"ketch: skill left out: {path}: 'allowed-tools': ")
    assert "- fine: Fine." in requests(env)[0]["system_prompt"] and "broken" not in requests(env)[0]["system_prompt"]
