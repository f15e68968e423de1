"""The command's file tools and checkpoints stay away from the files that may hold keys:
its config directory, and any config file with a literal ``api_key``."""

from __future__ import annotations

import json
import os
from pathlib import Path

from clihelp import Env
from clihelp import call_reply
from clihelp import text_reply

KEY = "sk-test-LEAKCHECK-0123456789abcdef"
DENIED = "Permission denied: the call matches the deny rule Read(/{path})."


def _tool_results(stdout: str) -> list[tuple[str, bool, str]]:
    out = []
    for line in stdout.splitlines():
        event = json.loads(line)
        if event.get("type") == "tool_execution_end":
            out.append((event["tool_call_id"], event["is_error"], event["result"]["content"][0]["text"]))
    return out


def test_the_agent_cannot_read_config_files_that_hold_keys(env: Env) -> None:
    env.user_config(f'[providers.mine]\nbase_url = "http://127.0.0.1:9/v1"\napi_key = "{KEY}"\n')
    local = env.work / ".ketch" / "config.local.toml"
    local.parent.mkdir(parents=True)
    local.write_text(f'[providers.other]\nbase_url = "http://127.0.0.1:9/v1"\napi_key = "{KEY}"\n')
    env.project_config('thinking = "off"\n')
    script = env.script(
        [
            call_reply(
                ("r1", "read", {"path": ".ketch/config.local.toml"}),
                ("g1", "grep", {"pattern": "api_key", "path": ".ketch"}),
                ("r2", "read", {"path": ".ketch/config.toml"}),
            ),
            text_reply("done"),
        ]
    )
    proc = env.run("run", "-o", "stream-json", "--model", f"scripted:{script}", "go")
    assert proc.returncode == 0, proc.stderr
    real = os.path.realpath(local)
    assert _tool_results(proc.stdout) == [
        ("r1", True, DENIED.format(path=real)),
        ("g1", True, DENIED.format(path=real)),
        ("r2", False, '     1\tthinking = "off"'),
    ]
    assert KEY not in proc.stdout + proc.stderr


def test_the_config_directory_is_out_of_reach_when_it_is_in_the_workspace(env: Env) -> None:
    config = env.user_config('model = "local"\n')
    script = env.script([call_reply(("r1", "read", {"path": "ketch/config.toml"})), text_reply("done")])
    proc = env.run("run", "-o", "stream-json", "--model", f"scripted:{script}", "go", cwd=env.xdg)
    assert proc.returncode == 0, proc.stderr
    assert _tool_results(proc.stdout) == [("r1", True, DENIED.format(path=os.path.realpath(Path(config).parent)))]


def test_a_key_pasted_as_a_variable_name_is_rejected_without_echoing_it(env: Env) -> None:
    path = env.user_config(f'[providers.mine]\nbase_url = "http://127.0.0.1:9/v1"\napi_key_env = "{KEY}"\n')
    proc = env.run("run", "--model", "mine:m", "hi")
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"ketch: {path}: Expected `str` matching regex '^[A-Za-z_][A-Za-z0-9_]*$' - at `$.providers[...].api_key_env`"
    )
    assert KEY not in proc.stdout + proc.stderr


def test_a_workspace_whose_name_looks_like_a_pattern_keeps_its_key_files_out_of_reach(env: Env) -> None:
    work = env.work / "proj[1]"
    local = work / ".ketch" / "config.local.toml"
    local.parent.mkdir(parents=True)
    local.write_text(f'[providers.other]\nbase_url = "http://127.0.0.1:9/v1"\napi_key = "{KEY}"\n')
    (env.work / "proj1").mkdir()  # what the name would match as a pattern
    script = env.script(
        [
            call_reply(("r1", "read", {"path": ".ketch/config.local.toml"}), ("g1", "grep", {"pattern": "api_key", "path": ".ketch"})),
            text_reply("done"),
        ]
    )
    proc = env.run("run", "-o", "stream-json", "--model", f"scripted:{script}", "go", cwd=work)
    assert proc.returncode == 0, proc.stderr
    rule = os.path.realpath(local).replace("[", "[[]")
    assert _tool_results(proc.stdout) == [("r1", True, DENIED.format(path=rule)), ("g1", True, DENIED.format(path=rule))]
    assert KEY not in proc.stdout + proc.stderr
