"""The ``ketch`` command under bad input: a reader that goes away, bytes that are not
UTF-8, broken config files, a deleted working directory, bad option values, credentials
in a base URL. Every case runs the real command in a subprocess."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from clihelp import Env
from clihelp import FakeServer
from clihelp import call_reply
from clihelp import text_reply

TRACEBACK = "Traceback"


def _ketch(env: Env, *args: str | bytes) -> list[str | bytes]:
    return [sys.executable, "-m", "ketch", *args]


def _run_closed(env: Env, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``ketch *args`` with stdout a pipe whose reader is already gone."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(
            _ketch(env, *args),
            cwd=env.work,
            env=env.vars,
            stdin=subprocess.DEVNULL,
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write)


def _run_bytes(
    env: Env, *args: str | bytes, input: bytes = b"", cwd: Path | bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        _ketch(env, *args),
        cwd=cwd or env.work,
        env=env.vars,
        input=input,
        capture_output=True,
        timeout=60,
    )


# --- stdout closed early -----------------------------------------------------------------


def test_head_of_a_large_answer_exits_quietly_with_141(env: Env) -> None:
    script = env.script([text_reply("x" * 1_000_000)])
    command = " ".join(shlex.quote(str(a)) for a in _ketch(env, "run", "--model", f"scripted:{script}", "go"))
    proc = subprocess.run(
        ["bash", "-c", f'{command} | head -c 10; echo " ${{PIPESTATUS[0]}}"'],
        cwd=env.work,
        env=env.vars,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (proc.stdout, proc.stderr) == ("xxxxxxxxxx 141\n", "")


@pytest.mark.parametrize("output", ["text", "stream-json"])
def test_a_closed_stdout_aborts_the_run_before_its_tools_run(env: Env, output: str) -> None:
    script = env.script(
        [
            {
                "blocks": [
                    {"type": "text", "text": "Writing the file."},
                    {"type": "tool_call", "id": "c1", "name": "write", "args": {"path": "f.txt", "content": "x"}},
                ]
            },
            text_reply("done"),
        ]
    )
    proc = _run_closed(
        env, "run", "--model", f"scripted:{script}", "--permission-mode", "bypass", "-o", output, "write it"
    )
    assert (proc.returncode, proc.stderr) == (141, "")
    assert not (env.work / "f.txt").exists()


def test_a_closed_stdout_after_a_json_run_exits_141(env: Env) -> None:
    script = env.script([text_reply("y" * 200_000)])
    proc = _run_closed(env, "run", "--model", f"scripted:{script}", "-o", "json", "go")
    assert (proc.returncode, proc.stderr) == (141, "")


@pytest.mark.parametrize("command", [["config"], ["models", "--all"], ["doctor", "--quick"], ["--help"]])
def test_other_commands_exit_141_quietly_on_a_closed_stdout(env: Env, command: list[str]) -> None:
    proc = _run_closed(env, *command)
    assert (proc.returncode, proc.stderr) == (141, "")


def test_config_piped_into_head_prints_its_first_line(env: Env) -> None:
    command = " ".join(shlex.quote(str(a)) for a in _ketch(env, "config"))
    proc = subprocess.run(
        ["bash", "-c", f"{command} | head -1"], cwd=env.work, env=env.vars, capture_output=True, text=True, timeout=60
    )
    assert proc.stdout == f"user config:    {env.xdg / 'ketch' / 'config.toml'} (not found)\n"
    assert proc.stderr == ""


# --- text that is not UTF-8 --------------------------------------------------------------

WARNING_STDIN = b"ketch: warning: the task on stdin is not valid UTF-8; the invalid bytes were replaced with U+FFFD\n"
WARNING_ARGS = (
    b"ketch: warning: a command-line argument is not valid UTF-8; the invalid bytes were replaced with U+FFFD\n"
)


def _user_messages(stdout: bytes) -> list[Any]:
    events = [json.loads(line) for line in stdout.decode("utf-8").splitlines()]
    return [e["message"] for e in events if e["type"] == "message_end" and e["message"]["role"] == "user"]


def test_latin1_task_on_stdin_is_decoded_with_replacement_and_one_warning(env: Env) -> None:
    script = env.script([text_reply("ok")])
    proc = _run_bytes(
        env, "run", "--model", f"scripted:{script}", "-o", "stream-json", "-", input="café au lait\n".encode("latin-1")
    )
    assert (proc.returncode, proc.stderr) == (0, WARNING_STDIN)
    (user,) = _user_messages(proc.stdout)
    assert user["content"] == [{"type": "text", "text": "caf\ufffd au lait\n"}]


def test_non_utf8_arguments_are_decoded_with_replacement_and_one_warning(env: Env) -> None:
    script = env.script([text_reply("ok")])
    proc = _run_bytes(
        env,
        "run",
        "--model",
        f"scripted:{script}",
        "-o",
        "stream-json",
        "--system-prompt",
        b"Be br\xefef.",
        b"na\xefve task",
    )
    assert (proc.returncode, proc.stderr) == (0, WARNING_ARGS)
    (user,) = _user_messages(proc.stdout)
    assert user["content"] == [{"type": "text", "text": "na\ufffdve task"}]


def test_valid_utf8_gives_no_warning(env: Env) -> None:
    script = env.script([text_reply("ok")])
    proc = _run_bytes(env, "run", "--model", f"scripted:{script}", "-o", "json", "-", input="naïve ☃\n".encode())
    assert (proc.returncode, proc.stderr) == (0, b"")


def test_non_utf8_file_names_in_tool_results_reach_stream_json(env: Env) -> None:
    (env.work / os.fsdecode(b"caf\xe9.txt")).write_text("x")
    script = env.script([call_reply(("c1", "ls", {"path": "."})), text_reply("listed")])
    proc = _run_bytes(env, "run", "--model", f"scripted:{script}", "-o", "stream-json", "list")
    assert (proc.returncode, proc.stderr) == (0, b"")
    events = [json.loads(line) for line in proc.stdout.decode("utf-8").splitlines()]
    end = next(e for e in events if e["type"] == "tool_execution_end")
    assert end["result"]["content"] == [{"type": "text", "text": "caf\ufffd.txt"}]
    results = [e for e in events if e["type"] == "message_end" and e["message"]["role"] == "tool_result"]
    assert len(results) == 1
    assert events[-1]["type"] == "result" and events[-1]["text"] == "listed"


def test_a_non_utf8_workspace_path_reaches_the_provider_as_valid_json(env: Env, fake_server: FakeServer) -> None:
    env.user_config(f'[providers.fake]\nbase_url = "{fake_server.base_url}"\napi_key = "{fake_server.good_key}"\n')
    workspace = env.work / os.fsdecode(b"proj\xe9")
    workspace.mkdir()
    proc = _run_bytes(env, "run", "--model", "fake:m1", "-o", "stream-json", "hello", cwd=os.fsencode(workspace))
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.decode("utf-8").splitlines()]
    assert events[0]["cwd"] == str(env.work / "proj\ufffd")
    assert events[-1]["text"] == "Hi from the fake."
    (post,) = [r for r in fake_server.requests if r[0] == "POST"]
    body = json.loads(post[3])
    system = body["messages"][0]
    assert system["role"] == "system" and str(env.work / "proj\ufffd") in system["content"]


# --- config files, working directory, option values --------------------------------------


def test_a_non_utf8_user_config_is_a_one_line_error(env: Env) -> None:
    path = env.user_config("x")
    path.write_bytes(b'model = "caf\xe9"\n')
    expected = f"ketch: {path}: not valid UTF-8 (byte 0xe9 at offset 12)\n"
    for command in (["run", "go"], ["config"], []):
        proc = env.run(*command)
        assert (proc.returncode, proc.stderr) == (2, expected), command
    doctor = env.run("doctor", "--quick")
    assert doctor.returncode == 1 and TRACEBACK not in doctor.stdout + doctor.stderr
    assert f"FAIL  config                 {path}: not valid UTF-8 (byte 0xe9 at offset 12)\n" in doctor.stdout


def test_a_deeply_nested_project_config_is_a_one_line_error(env: Env) -> None:
    path = env.project_config("tools = " + "[" * 5000 + "]" * 5000 + "\n")
    expected = f"ketch: {path}: invalid TOML: arrays or tables nested too deeply\n"
    for command in (["run", "go"], ["config"]):
        proc = env.run(*command)
        assert (proc.returncode, proc.stderr) == (2, expected), command


@pytest.mark.parametrize("command", [["run", "go"], ["config"], ["doctor", "--quick"], ["models"], []])
def test_a_deleted_working_directory_is_a_one_line_error(env: Env, command: list[str]) -> None:
    gone = env.work / "gone"
    gone.mkdir()
    line = " ".join(shlex.quote(str(a)) for a in _ketch(env, *command))
    proc = subprocess.run(
        ["bash", "-c", f'cd {shlex.quote(str(gone))} && rmdir "$PWD" && exec {line}'],
        env=env.vars,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == "ketch: the current directory is gone (No such file or directory): cd to an existing directory\n"


BAD_OPTIONS = [
    (
        ["--thinking", "banana"],
        "argument --thinking: invalid choice: 'banana' (choose from 'off', 'minimal', 'low', 'medium', 'high', 'xhigh')",
    ),
    (
        ["--permission-mode", "x"],
        "argument --permission-mode: invalid choice: 'x' (choose from 'default', 'accept_edits', 'plan', 'bypass', 'accept-edits')",
    ),
    (["--output", "x"], "argument -o/--output: invalid choice: 'x' (choose from 'text', 'json', 'stream-json')"),
    (["--max-turns", "banana"], "argument --max-turns: expected a positive integer, got 'banana'"),
    (["--max-turns", "0"], "argument --max-turns: expected a positive integer, got '0'"),
    (["--max-tokens", "1.5"], "argument --max-tokens: expected a positive integer, got '1.5'"),
    (["--context-window", "-3"], "argument --context-window: expected a positive integer, got '-3'"),
    (["--max-budget-usd", "nan"], "argument --max-budget-usd: expected a finite number >= 0, got 'nan'"),
    (["--max-budget-usd", "inf"], "argument --max-budget-usd: expected a finite number >= 0, got 'inf'"),
    (["--max-budget-usd", "-1"], "argument --max-budget-usd: expected a finite number >= 0, got '-1'"),
    (["--temperature", "x"], "argument --temperature: expected a finite number >= 0, got 'x'"),
    (["--temperature", "nan"], "argument --temperature: expected a finite number >= 0, got 'nan'"),
    (["--no-such-option"], "unrecognized arguments: --no-such-option"),
]


@pytest.mark.parametrize(("args", "message"), BAD_OPTIONS, ids=[" ".join(a) for a, _ in BAD_OPTIONS])
@pytest.mark.parametrize("prefix", [["run"], []], ids=["run", "default"])
def test_bad_option_values_are_one_line_errors(env: Env, prefix: list[str], args: list[str], message: str) -> None:
    proc = env.run(*prefix, *args, "go")
    program = "ketch run" if prefix else "ketch"
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", f"ketch: {message} (see {program} --help)\n")
    assert "_positive_int" not in proc.stderr and "_non_negative" not in proc.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["doctor", "--timeout", "soon"], "argument --timeout: expected a finite number >= 0, got 'soon' (see ketch doctor --help)"),
        (["doctor", "--max-tokens", "0"], "argument --max-tokens: expected a positive integer, got '0' (see ketch doctor --help)"),
        (["config", "--bogus"], "unrecognized arguments: --bogus (see ketch config --help)"),
        (["models", "--bogus"], "unrecognized arguments: --bogus (see ketch models --help)"),
    ],
)
def test_bad_options_of_other_commands_are_one_line_errors(env: Env, args: list[str], message: str) -> None:
    proc = env.run(*args)
    assert (proc.returncode, proc.stderr) == (2, f"ketch: {message}\n")


@pytest.mark.parametrize("value", ["nan", "inf", "-0.5"])
def test_a_non_finite_budget_from_the_environment_or_config_is_rejected(env: Env, value: str) -> None:
    proc = env.run("run", "go", extra={"KETCH_MAX_BUDGET_USD": value})
    shown = repr(float(value))
    assert (proc.returncode, proc.stderr) == (
        2,
        f"ketch: environment KETCH_MAX_BUDGET_USD: max_budget_usd must be a finite number >= 0, got {shown}\n",
    )
    path = env.user_config(f"max_budget_usd = {value}\ntemperature = 0.5\n")
    proc = env.run("run", "go")
    assert (proc.returncode, proc.stderr) == (
        2,
        f"ketch: user config {path}: max_budget_usd must be a finite number >= 0, got {shown}\n",
    )


def test_a_missing_api_key_is_a_configuration_error(env: Env) -> None:
    for output in ("text", "json"):
        proc = env.run("run", "--model", "openai:gpt-5-mini", "-o", output, "go")
        assert (proc.returncode, proc.stdout) == (2, "")
        assert proc.stderr == "ketch: no API key for provider 'openai' (model openai:gpt-5-mini): set OPENAI_API_KEY\n"
    env.user_config('model = "anthropic:claude-sonnet-4-5"\n[providers.anthropic]\napi_key_env = "WORK_KEY"\n')
    proc = env.run("run", "go")
    assert (proc.returncode, proc.stderr) == (
        2,
        "ketch: no API key for provider 'anthropic' (model anthropic:claude-sonnet-4-5): "
        "set WORK_KEY or ANTHROPIC_API_KEY\n",
    )


# --- credentials in a base URL -----------------------------------------------------------


def test_base_url_credentials_are_masked_and_doctor_does_not_crash(env: Env, fake_server: FakeServer) -> None:
    password = "s3cret-Pa55word"
    url = fake_server.base_url.replace("http://", f"http://alice:{password}@")
    env.user_config(f'[providers.corp]\nbase_url = "{url}"\napi_key_env = "CORP_KEY"\n')
    keys = {"CORP_KEY": fake_server.good_key}
    masked = fake_server.base_url.replace("http://", "http://***@")

    doctor = env.run("doctor", "--quick", extra=keys)
    assert doctor.returncode == 0, doctor.stderr
    assert TRACEBACK not in doctor.stderr
    row = next(line for line in doctor.stdout.splitlines() if "provider corp" in line)
    assert row.startswith(f"ok    {'provider corp':<22} reachable, key accepted (CORP_KEY, ")
    probes = [(m, p, h["authorization"]) for m, p, h, _ in fake_server.requests]
    assert probes == [("GET", "/v1/models", f"Bearer {fake_server.good_key}")]

    config = env.run("config", extra=keys)
    assert config.returncode == 0
    (line,) = [row for row in config.stdout.splitlines() if row.strip().startswith("corp")]
    assert line.endswith(f"base_url {masked}")

    down = url.replace(f":{fake_server.port}", ":9")
    env.user_config(f'[providers.corp]\nbase_url = "{down}"\napi_key_env = "CORP_KEY"\n')
    unreachable = env.run("doctor", "--quick", "--timeout", "5", extra=keys)
    assert f"unreachable (ClientConnectorError) at {masked.replace(f':{fake_server.port}', ':9')}" in unreachable.stdout

    run = env.run("run", "--model", "corp:m1", "-o", "stream-json", "go", extra=keys)
    for proc in (doctor, config, unreachable, run):
        assert password not in proc.stdout + proc.stderr
        assert "alice" not in proc.stdout + proc.stderr



@pytest.mark.parametrize(
    ("reply", "named"),
    [
        ({"blocks": [{"type": "tool_call", "id": "c1", "name": "ls", "arguments": {"path": "."}}]},
         "reply 1, block 1 (tool_call): unknown key 'arguments'; allowed: args, id, name, parse_error, "
         "raw_arguments, signature, type"),
        ({"text": "hi"}, "reply 1: unknown key 'text'; allowed: blocks, chunk_size, delay, error, error_kind, "
         "hang, stop_reason, usage"),
        ({"usage": {"inputs": 3}}, "reply 1, usage: unknown key 'inputs'; allowed: "),
    ],
)  # fmt: skip
def test_an_unknown_key_in_a_model_script_is_an_error_naming_it(env: Env, reply: dict[str, Any], named: str) -> None:
    path = env.work / "script.json"
    path.write_text(json.dumps([reply]))
    done = env.run("run", "--model", f"scripted:{path}", "--no-session", "hi")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith(f"ketch: invalid model script {path}: {named}"), done.stderr
