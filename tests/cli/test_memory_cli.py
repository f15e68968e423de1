"""``ketch run --memory`` / ``memory = true``: a fact saved in one run is recalled in the
next, kept per user and project outside the project; a project needs trust to turn it on."""

from __future__ import annotations

import json

from clihelp import Env
from clihelp import lines


def call(id: str, **args: object) -> dict[str, object]:
    return {"blocks": [{"type": "tool_call", "id": id, "name": "memory", "args": args}]}


def tool_results(stdout: str) -> list[str]:
    found = []
    for event in lines(stdout):
        message = event.get("message") or {}
        if event.get("type") == "message_end" and message.get("role") == "tool_result":
            found.append("".join(b.get("text", "") for b in message["content"]))
    return found


def test_a_fact_saved_in_one_run_is_recalled_in_the_next(env: Env) -> None:
    save = env.script(
        [call("c1", command="create", path="/memories/user.md", file_text="Favourite colour: teal\n"), "Noted."],
        "save.json",
    )
    proc = env.run("run", "--memory", "-o", "stream-json", "--model", f"scripted:{save}", "I like teal")
    assert proc.returncode == 0, proc.stderr
    assert tool_results(proc.stdout) == ["File created successfully at /memories/user.md"]
    recall = env.script([call("c2", command="view", path="/memories/user.md"), "Teal."], "recall.json")
    proc = env.run("run", "--memory", "-o", "stream-json", "--model", f"scripted:{recall}", "my colour?")
    assert proc.returncode == 0, proc.stderr
    assert tool_results(proc.stdout) == ["/memories/user.md:\n     1\tFavourite colour: teal"]
    # kept in the user's data directory, per project, never in the project
    kept = sorted(p.relative_to(env.home) for p in (env.home / ".local/share/ketch/memory").rglob("*.md"))
    assert len(kept) == 1 and kept[0].name == "user.md" and kept[0].parts[-2].startswith("work-")
    assert sorted(p.name for p in env.work.iterdir()) == []


def test_a_project_turns_memory_on_only_when_trusted(env: Env) -> None:
    config = env.project_config("memory = true\n")
    script = env.script([call("c1", command="view", path="/memories"), "ok"])
    proc = env.run("run", "-o", "stream-json", "--model", f"scripted:{script}", "hi")
    assert proc.returncode == 0, proc.stderr
    assert f"memory = true ({config})" in proc.stderr
    assert tool_results(proc.stdout) == ['Tool "memory" not found']
    proc = env.run("run", "--trust-project", "-o", "stream-json", "--model", f"scripted:{script}", "hi")
    assert proc.returncode == 0, proc.stderr
    assert tool_results(proc.stdout) == ["/memories is empty"]


def test_the_user_config_turns_memory_on(env: Env) -> None:
    env.user_config("memory = true\n")
    script = env.script([call("c1", command="view", path="/memories"), "ok"])
    proc = env.run("run", "-o", "stream-json", "--model", f"scripted:{script}", "hi")
    assert proc.returncode == 0, proc.stderr
    assert tool_results(proc.stdout) == ["/memories is empty"]
    assert json.loads(proc.stdout.splitlines()[0])["type"] == "init"
