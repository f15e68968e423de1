"""Settings layering (user < project < environment < flags), model selection, providers from
config, ``ketch config`` and ``ketch models``."""

from __future__ import annotations

import json

from clihelp import Env, FakeServer, lines

from ketch.llm.registry import lookup

KEY_VARS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY")


def _answer(env: Env, *args: str, extra: dict[str, str] | None = None) -> tuple[str, dict[str, object]]:
    proc = env.run("run", "-o", "stream-json", *args, "go", extra=extra)
    assert proc.returncode == 0, proc.stderr
    events = lines(proc.stdout)
    return events[-1]["text"], events[0]


def test_model_precedence_user_project_env_flag(env: Env) -> None:
    user = env.script(["user"], "user.json")
    project = env.script(["project"], "project.json")
    from_env = env.script(["env"], "env.json")
    flag = env.script(["flag"], "flag.json")
    env.user_config(f'model = "scripted:{user}"\nthinking = "low"\n[permissions]\nmode = "plan"\n')
    assert _answer(env)[0] == "user"
    env.project_config(f'model = "scripted:{project}"\n[permissions]\nmode = "accept-edits"\n')
    text, init = _answer(env)
    assert (text, init["thinking"], init["permission_mode"]) == ("project", "low", "accept_edits")
    text, init = _answer(env, extra={"KETCH_MODEL": f"scripted:{from_env}", "KETCH_PERMISSION_MODE": "bypass"})
    assert (text, init["permission_mode"]) == ("env", "bypass")
    text, init = _answer(
        env,
        "--model",
        f"scripted:{flag}",
        "--permission-mode",
        "default",
        "--thinking",
        "high",
        extra={"KETCH_MODEL": f"scripted:{from_env}", "KETCH_THINKING": "medium"},
    )
    assert (text, init["permission_mode"], init["thinking"]) == ("flag", "default", "high")


def test_project_config_found_in_a_parent_directory(env: Env) -> None:
    (env.work / ".git").mkdir()  # the project root: files between it and the cwd apply
    script = env.script(["from parent"], "p.json")
    env.project_config(f'model = "scripted:{script}"\ntools = ["read", "ls"]\n')
    sub = env.work / "a" / "b"
    sub.mkdir(parents=True)
    proc = env.run("run", "-o", "stream-json", "go", cwd=sub)
    events = lines(proc.stdout)
    assert (events[-1]["text"], events[0]["tools"], events[0]["cwd"]) == ("from parent", ["read", "ls"], str(sub))
    assert _answer(env, "--tools", "grep", "--cwd", str(sub))[1]["tools"] == ["grep"]
    assert _answer(env, "--cwd", str(sub), extra={"KETCH_TOOLS": "find,ls"})[1]["tools"] == ["find", "ls"]


def test_test_script_variable_wins(env: Env) -> None:
    script = env.script(["scripted by env"])
    text, init = _answer(env, "--model", "openai:gpt-5", extra={"KETCH_TEST_SCRIPT": script})
    assert (text, init["model"]) == ("scripted by env", "scripted:scripted-model")


def test_invalid_config_files_exit_2(env: Env) -> None:
    path = env.user_config("model = \n")
    proc = env.run("run", "go")
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"ketch: {path}: invalid TOML: ")
    env.user_config('modle = "x"\n')
    proc = env.run("run", "go")
    assert (proc.returncode, proc.stderr) == (2, f"ketch: {path}: Object contains unknown field `modle`\n")
    env.user_config('[permissions]\nmode = "yolo"\n')
    proc = env.run("run", "go")
    assert (proc.returncode, proc.stderr) == (
        2,
        f"ketch: user config {path}: unknown permission mode 'yolo'; "
        "expected one of default, accept_edits, plan, bypass (or accept-edits)\n",
    )
    env.user_config("")
    proc = env.run("run", "go", extra={"KETCH_MAX_TURNS": "many"})
    assert (proc.returncode, proc.stderr) == (2, "ketch: KETCH_MAX_TURNS: expected an integer, got 'many'\n")
    proc = env.run("run", "go", extra={"KETCH_THINKING": "extreme"})
    assert (proc.returncode, proc.stderr) == (
        2,
        "ketch: environment KETCH_THINKING: unknown thinking level 'extreme'; "
        "expected one of off, minimal, low, medium, high, xhigh\n",
    )


def _config_model_line(env: Env, extra: dict[str, str] | None = None) -> str:
    proc = env.run("config", extra=extra)
    assert proc.returncode == 0, proc.stderr
    return next(line for line in proc.stdout.splitlines() if line.startswith("model "))


def test_model_selection_falls_back_by_key_then_local(env: Env) -> None:
    assert _config_model_line(env) == "model           local  (no provider key found)"
    assert _config_model_line(env, {"GEMINI_API_KEY": "g" * 20}) == (
        "model           google:gemini-2.5-flash  (GEMINI_API_KEY is set)"
    )
    assert _config_model_line(env, {"GEMINI_API_KEY": "g" * 20, "ANTHROPIC_API_KEY": "a" * 20}) == (
        "model           anthropic:claude-sonnet-4-5  (ANTHROPIC_API_KEY is set)"
    )
    assert _config_model_line(env, {"ANTHROPIC_API_KEY": "a" * 20, "OPENAI_API_KEY": "o" * 20}) == (
        "model           openai:gpt-5-mini  (OPENAI_API_KEY is set)"
    )
    env.user_config('[providers.anthropic]\napi_key_env = "WORK_ANTHROPIC"\n')
    assert _config_model_line(env, {"WORK_ANTHROPIC": "w" * 20}) == (
        "model           anthropic:claude-sonnet-4-5  (WORK_ANTHROPIC is set)"
    )
    env.user_config('model = "anthropic:claude-haiku-4-5"\n')
    assert _config_model_line(env, {"OPENAI_API_KEY": "o" * 20}) == (
        f"model           anthropic:claude-haiku-4-5  (user config {env.xdg / 'ketch' / 'config.toml'})"
    )


def test_config_display_redacts_keys(env: Env) -> None:
    secret = "sk-live-SECRET-abcdefghijklmnop-9876"
    literal = "literal-SECRET-key-in-config-5555"
    env.user_config(
        f'[providers.mine]\nbase_url = "http://127.0.0.1:9/v1"\napi_key = "{literal}"\n'
        '[providers.other]\nbase_url = "http://127.0.0.1:9/v2"\napi_key_env = "OTHER_KEY"\n'
    )
    proc = env.run("config", extra={"OPENAI_API_KEY": secret, "OTHER_KEY": "short"})
    assert proc.returncode == 0, proc.stderr
    assert "SECRET" not in proc.stdout + proc.stderr
    assert "short" not in proc.stdout
    rows = proc.stdout.splitlines()
    assert "  openai       key set (…9876) from OPENAI_API_KEY" in rows
    assert "  anthropic    key not set" in rows
    assert "  ollama       no key needed" in rows
    assert "  mine         key set (…5555) from config  base_url http://127.0.0.1:9/v1" in rows
    assert "  other        key set from OTHER_KEY  base_url http://127.0.0.1:9/v2" in rows


def test_custom_provider_from_config_reaches_the_server(env: Env, fake_server: FakeServer) -> None:
    env.user_config(
        f'model = "mine:tiny-1"\n[providers.mine]\nbase_url = "{fake_server.base_url}"\napi_key_env = "MINE_KEY"\n'
    )
    proc = env.run("run", "-o", "json", "--tools", "", "hello", extra={"MINE_KEY": fake_server.good_key})
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert (result["text"], result["model"], result["usage"]["input"], result["usage"]["output"]) == (
        "Hi from the fake.",
        "mine:tiny-1",
        12,
        4,
    )
    method, path, headers, body = fake_server.requests[0]
    assert (method, path, headers["authorization"]) == ("POST", "/v1/chat/completions", f"Bearer {fake_server.good_key}")
    sent = json.loads(body)
    assert (sent["model"], sent["messages"][-1]) == ("tiny-1", {"role": "user", "content": "hello"})


def test_literal_key_in_config_is_used_and_a_bad_key_is_an_error(env: Env, fake_server: FakeServer) -> None:
    env.user_config(
        f'[providers.mine]\nbase_url = "{fake_server.base_url}"\napi_key = "{fake_server.good_key}"\n'
    )
    proc = env.run("run", "-o", "json", "--tools", "", "--model", "mine:m", "hello")
    assert (proc.returncode, json.loads(proc.stdout)["text"]) == (0, "Hi from the fake.")
    env.user_config(f'[providers.mine]\nbase_url = "{fake_server.base_url}"\napi_key = "wrong-key"\n')
    proc = env.run("run", "-o", "json", "--tools", "", "--model", "mine:m", "hello")
    result = json.loads(proc.stdout)
    assert (proc.returncode, result["end_reason"]) == (1, "error")
    assert "wrong-key" not in proc.stdout + proc.stderr


def test_models_lists_models_with_keys(env: Env) -> None:
    proc = env.run("models")
    assert proc.returncode == 0
    assert proc.stdout == (
        "MODEL          CONTEXT    $IN/M   $OUT/M  KEY\n"
        "local:smollm2       8k     0.00     0.00  no key needed\n"
        "\n"
        "Without a key (ketch models --all lists them): anthropic, deepseek, google, groq, mistral, openai, xai\n"
    )
    proc = env.run("models", extra={"ANTHROPIC_API_KEY": "sk-ant-" + "x" * 30})
    rows = {r.split()[0]: r.split()[1:] for r in proc.stdout.splitlines()[1:] if r.strip() and ":" in r.split()[0]}
    info = lookup("anthropic", "claude-sonnet-4-5")
    assert info is not None
    assert rows["anthropic:claude-sonnet-4-5"] == [
        f"{info.context_window // 1000}k",
        f"{info.pricing.input:.2f}",
        f"{info.pricing.output:.2f}",
        "ANTHROPIC_API_KEY",
        "set",
    ]
    assert {name.split(":")[0] for name in rows} == {"anthropic", "local"}
    assert "xxxx" not in proc.stdout
    everything = json.loads(env.run("models", "--json").stdout)
    by_name = {m["model"]: m for m in everything}
    assert by_name["openai:gpt-5-mini"]["available"] is False
    assert by_name["openai:gpt-5-mini"]["key"] is None
    assert by_name["openai:gpt-5-mini"]["context_window"] == 400_000
    only = env.run("models", "--provider", "google").stdout.splitlines()
    assert all(r.startswith("google:") for r in only[1:]) and len(only) > 2
    assert only[1].endswith("no key")
