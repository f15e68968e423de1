"""``ketch serve`` as a subprocess: token handling, binding, provider keys never exposed."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

from serverhelp import TOKEN
from serverhelp import add_url_server
from serverhelp import free_port
from serverhelp import serve_env
from serverhelp import start_serve
from serverhelp import wait_listening

SECRET = "sk-proj-SECRETVALUE0123456789abcdef"


def _get(url: str, token: str | None = TOKEN, method: str = "GET", body: Any = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, method=method)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, data=data, timeout=60) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _events_until_idle(url: str) -> bytes:
    """Read the SSE stream until the session_state that ends a run."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {TOKEN}"})
    out = b""
    with urllib.request.urlopen(request, timeout=60) as response:
        for line in response:
            out += line
            if line.startswith(b"data: ") and b'"type":"session_state"' in line and b'"running":false' in line:
                return out
    return out


def _serve_without_token_flag(env: dict[str, str], work: Path, port: int) -> subprocess.Popen[str]:
    """``ketch serve --port P`` with no ``--token``: the token comes from the environment or is generated."""
    return subprocess.Popen(
        [sys.executable, "-m", "ketch", "serve", "--port", str(port)],
        cwd=work,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_generated_token_is_printed_once_in_the_page_url_and_the_server_stops_on_sigterm(tmp_path: Path) -> None:
    env, work = serve_env(tmp_path)
    port = free_port()
    proc = _serve_without_token_flag(env, work, port)
    try:
        wait_listening(port, proc)
        assert proc.stderr is not None
        first = proc.stderr.readline()
        second = proc.stderr.readline()
        assert first == f"ketch: serving {work} on http://127.0.0.1:{port}/\n"
        prefix = f"ketch: open http://127.0.0.1:{port}/?token="
        assert second.startswith(prefix) and second.endswith("  (the token is shown only this once)\n")
        token = second[len(prefix) :].split()[0]
        assert len(token) >= 32
        assert _get(f"http://127.0.0.1:{port}/api/sessions", token)[0] == 200
        assert _get(f"http://127.0.0.1:{port}/api/sessions", None)[0] == 401
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert out == "" and token not in err


def test_a_token_from_the_environment_is_used_and_not_printed(tmp_path: Path) -> None:
    env, work = serve_env(tmp_path, KETCH_SERVER_TOKEN="env-token-abcdefghijklmnop")
    port = free_port()
    proc = _serve_without_token_flag(env, work, port)
    try:
        wait_listening(port, proc)
        assert _get(f"http://127.0.0.1:{port}/api/sessions", "env-token-abcdefghijklmnop")[0] == 200
        assert _get(f"http://127.0.0.1:{port}/api/sessions", TOKEN)[0] == 401
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert "env-token-abcdefghijklmnop" not in err
    assert err.startswith(f"ketch: serving {work} on http://127.0.0.1:{port}/  (token from --token or KETCH_SERVER_TOKEN")


def test_bad_flags_are_one_line_usage_errors(tmp_path: Path) -> None:
    env, work = serve_env(tmp_path)
    for args, message in [
        (["--port", "99999"], "ketch: argument --port: expected a port number 0-65535, got '99999' (see ketch serve --help)"),
        (["--token", "short"], "ketch: --token: expected at least 16 characters (or leave it out for a generated one)"),
        (["--model", "nope:x"], "ketch: "),
    ]:
        proc = subprocess.run(
            [sys.executable, "-m", "ketch", "serve", *args], cwd=work, env=env, capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.startswith(message) and proc.stderr.count("\n") == 1, proc.stderr


def test_provider_keys_never_appear_in_any_response(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            [
                {"blocks": [{"type": "tool_call", "id": "c1", "name": "bash", "args": {"command": "env; echo $OPENAI_API_KEY"}}]},
                "done",
            ]
        )
    )
    served = start_serve(
        tmp_path,
        "--permission-mode",
        "bypass",
        env_extra={"OPENAI_API_KEY": SECRET, "ANTHROPIC_API_KEY": SECRET + "-ant", "KETCH_TEST_SCRIPT": str(script)},
    )
    try:
        bodies: list[bytes] = []
        status, body = _get(f"{served.url}/api/sessions", method="POST", body={})
        assert status == 201
        sid = json.loads(body)["id"]
        bodies.append(body)
        status, body = _get(f"{served.url}/api/sessions/{sid}/prompt", method="POST", body={"text": "show me the keys"})
        assert status == 202
        bodies.append(body)
        bodies.append(_events_until_idle(f"{served.url}/api/sessions/{sid}/events?last_event_id=" + json.loads(body)["last_event_id"]))
        for path in ("/", "/static/app.js", "/static/app.css", "/openapi.json", "/api/sessions", f"/api/sessions/{sid}"):
            status, body = _get(served.url + path)
            assert status == 200, path
            bodies.append(body)
        transcript = json.loads(bodies[-1])["messages"]
        status, body = _get(f"{served.url}/api/sessions/{sid}/model", method="POST", body={"model": "openai:gpt-5-mini"})
        assert (status, json.loads(body)) == (200, {"model": "openai:gpt-5-mini"})
        bodies.append(body)
        status, body = _get(f"{served.url}/api/sessions/{sid}")
        assert json.loads(body)["model"] == "openai:gpt-5-mini"
        bodies.append(body)
        assert transcript[2]["role"] == "tool_result"  # the command ran; its environment had no keys
        for body in bodies:
            assert SECRET.encode() not in body
            assert b"SECRETVALUE" not in body
    finally:
        assert served.stop() == 0


PROXY_TOKEN = "proxy-client-token-0123456789"


def _proxy_get(url: str, token: str) -> tuple[int, Any]:
    status, body = _get(url, token=token)
    return status, json.loads(body)


def test_the_model_proxy_is_served_at_proxy_with_its_own_client_tokens(tmp_path: Path) -> None:
    import asyncio

    from ketch.llm import Request
    from ketch.llm import UserMessage
    from ketch.llm import complete
    from ketch.llm import proxy

    script = tmp_path / "upstream.json"
    script.write_text(json.dumps(["Hello from upstream."]))
    name = f"scripted:{script}"
    served = start_serve(
        tmp_path,
        "--proxy-model",
        name,
        env_extra={"KETCH_PROXY_TOKENS": f"{PROXY_TOKEN}=1.5", "OPENAI_API_KEY": SECRET},
    )
    try:
        # The proxy's routes take its client tokens, not the server's; the server's take only its own.
        status, listed = _proxy_get(f"{served.url}/proxy/models", PROXY_TOKEN)
        assert (status, [m["id"] for m in listed["data"]], listed["default"]) == (200, [name], name)
        assert _get(f"{served.url}/proxy/models", token=TOKEN)[0] == 401
        assert _get(f"{served.url}/api/sessions", token=PROXY_TOKEN)[0] == 401
        assert _get(f"{served.url}/proxy/../api/sessions", token=PROXY_TOKEN)[0] in (401, 404)
        assert _get(f"{served.url}/proxy%2F..%2Fapi/sessions", token=PROXY_TOKEN)[0] in (401, 404)
        assert _get(f"{served.url}/proxy/%2e%2e/api/sessions", token=PROXY_TOKEN)[0] in (401, 404)

        async def ask() -> str:
            model = proxy(f"{served.url}/proxy", PROXY_TOKEN, model=name)
            message = await complete(model, Request(messages=[UserMessage(content="hi")]))
            return message.text

        assert asyncio.run(ask()) == "Hello from upstream."
        status, usage = _proxy_get(f"{served.url}/proxy/usage", PROXY_TOKEN)
        assert status == 200 and usage["budget_usd"] == 1.5
    finally:
        assert served.stop() == 0
    assert served.proc.stderr is not None and SECRET not in served.proc.stderr.read()


def test_proxy_flags_without_good_client_tokens_are_one_line_usage_errors(tmp_path: Path) -> None:
    script = tmp_path / "upstream.json"
    script.write_text(json.dumps(["x"]))
    name = f"scripted:{script}"
    for tokens, message in [
        (None, "ketch: --proxy-model: set KETCH_PROXY_TOKENS to the client tokens (comma-separated token or token=usd)\n"),
        ("short", "ketch: KETCH_PROXY_TOKENS: token 1 has 5 characters; expected at least 16\n"),
        (f"{PROXY_TOKEN}=lots", "ketch: KETCH_PROXY_TOKENS: token 1's budget 'lots' is not a non-negative number of US dollars\n"),
        (f"{PROXY_TOKEN}, {PROXY_TOKEN}x=-1", "ketch: KETCH_PROXY_TOKENS: token 2's budget '-1' is not a non-negative number of US dollars\n"),
    ]:
        env, work = serve_env(tmp_path, **({"KETCH_PROXY_TOKENS": tokens} if tokens is not None else {}))
        proc = subprocess.run(
            [sys.executable, "-m", "ketch", "serve", "--proxy-model", name],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert (proc.returncode, proc.stderr) == (2, message)
        assert PROXY_TOKEN not in proc.stderr


def test_a_custom_slash_command_sent_from_the_page_runs_expanded(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps(["Hello, Ann!"]))
    log = tmp_path / "requests.jsonl"
    commands = tmp_path / "home" / ".config" / "ketch" / "commands"
    commands.mkdir(parents=True)
    (commands / "hello.md").write_text("Say hello to $1.")
    served = start_serve(tmp_path, env_extra={"KETCH_TEST_SCRIPT": str(script), "KETCH_TEST_REQUESTS": str(log)})
    try:
        status, body = _get(f"{served.url}/api/sessions", method="POST", body={})
        sid = json.loads(body)["id"]
        status, body = _get(f"{served.url}/api/sessions/{sid}/prompt", method="POST", body={"text": "/hello Ann"})
        assert status == 202
        _events_until_idle(f"{served.url}/api/sessions/{sid}/events?last_event_id=" + json.loads(body)["last_event_id"])
        (request,) = [json.loads(line) for line in log.read_text().splitlines()]
        assert request["messages"][0]["content"][0]["text"] == "Say hello to Ann."
    finally:
        assert served.stop() == 0


def test_the_session_state_lists_the_custom_commands(tmp_path: Path) -> None:
    commands = tmp_path / "home" / ".config" / "ketch" / "commands"
    (commands / "git").mkdir(parents=True)
    (commands / "hello.md").write_text("---\ndescription: Greet someone\nargument-hint: NAME\n---\nSay hello to $1.")
    (commands / "git" / "log.md").write_text("Summarise the git log.")
    served = start_serve(tmp_path)
    try:
        status, body = _get(f"{served.url}/api/sessions", method="POST", body={})
        assert status == 201
        listed = json.loads(body)["commands"]
        assert listed == [
            {"name": "git:log", "usage": "/git:log", "description": "Summarise the git log.", "origin": "user"},
            {"name": "hello", "usage": "/hello NAME", "description": "Greet someone", "origin": "user"},
        ]
        status, body = _get(f"{served.url}/api/sessions/{json.loads(body)['id']}")
        assert status == 200 and json.loads(body)["commands"] == listed
    finally:
        assert served.stop() == 0


def _next_state(url: str, want: Any) -> dict[str, Any]:
    """Read the SSE stream until a session_state for which ``want(state)`` holds."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(request, timeout=60) as response:
        for line in response:
            if line.startswith(b"data: ") and b'"type":"session_state"' in line:
                state: dict[str, Any] = json.loads(line[6:])
                if want(state):
                    return state
    raise AssertionError("the event stream ended")


def _url_elicitation_run(tmp_path: Path, answers: list[str]) -> list[Any]:
    """A run whose MCP call is refused with -32042 and answered through the API with
    ``answers`` in turn (one per question asked); returns the run's tool results."""
    add_url_server(tmp_path)
    script = tmp_path / "script.json"
    call = {"blocks": [{"type": "tool_call", "id": "c1", "name": "mcp__linker__connect", "args": {}}]}
    script.write_text(json.dumps([call, "done"]))
    served = start_serve(tmp_path, "--permission-mode", "bypass", env_extra={"KETCH_TEST_SCRIPT": str(script)})
    try:
        status, body = _get(f"{served.url}/api/sessions", method="POST", body={})
        sid = json.loads(body)["id"]
        events = f"{served.url}/api/sessions/{sid}/events"
        status, body = _get(f"{served.url}/api/sessions/{sid}/prompt", method="POST", body={"text": "connect me"})
        assert status == 202
        since = json.loads(body)["last_event_id"]
        for action in answers:
            state = _next_state(f"{events}?last_event_id={since}", lambda s: bool(s.get("pending_elicitations")))
            since = state["last_event_id"]
            [question] = state["pending_elicitations"]
            assert {k: v for k, v in question.items() if k != "id"} == {
                "server": "linker",
                "message": "Sign in to Acme",
                "mode": "url",
                "url": "https://acme.example/connect",
                "requested_schema": {},
            }
            assert state["running"] is True
            status, body = _get(f"{served.url}/api/sessions/{sid}/elicitations", method="POST", body={"id": "el_nope", "action": "cancel"})
            assert status == 409 and "no pending elicitation 'el_nope'" in json.loads(body)["error"]
            bad = {"id": question["id"], "action": "maybe"}
            status, body = _get(f"{served.url}/api/sessions/{sid}/elicitations", method="POST", body=bad)
            assert (status, json.loads(body)["error"]) == (400, '"action": expected one of accept, decline, cancel, got \'maybe\'')
            if action == "abort":
                status, body = _get(f"{served.url}/api/sessions/{sid}/abort", method="POST", body={})
            else:
                answer = {"id": question["id"], "action": action}
                status, body = _get(f"{served.url}/api/sessions/{sid}/elicitations", method="POST", body=answer)
            assert status == 202, body
        state = _next_state(f"{events}?last_event_id={since}", lambda s: s["running"] is False)
        assert state["pending_elicitations"] == []
        status, body = _get(f"{served.url}/api/sessions/{sid}")
        messages = json.loads(body)["messages"]
    finally:
        served.stop()
    return [m for m in messages if m["role"] == "tool_result"]


def test_a_url_elicitation_is_answered_through_the_api_and_the_call_retried(tmp_path: Path) -> None:
    [result] = _url_elicitation_run(tmp_path, ["accept"])
    assert (result.get("is_error", False), result["content"][0]["text"]) == (False, "connected on call 2")


def test_a_url_elicitation_declined_through_the_api_names_the_url_to_the_model(tmp_path: Path) -> None:
    [result] = _url_elicitation_run(tmp_path, ["decline"])
    assert result["is_error"] is True
    assert result["content"][0]["text"] == (
        "MCP server 'linker': 'connect' needs you to open https://acme.example/connect (Sign in to Acme); the user chose decline"
    )


def test_an_abort_while_a_url_elicitation_waits_ends_the_run_and_the_question(tmp_path: Path) -> None:
    [result] = _url_elicitation_run(tmp_path, ["abort"])
    # the question is answered "cancel" at once (the call is not left waiting on it)
    assert result["is_error"] is True
    assert result["content"][0]["text"] == (
        "MCP server 'linker': 'connect' needs you to open https://acme.example/connect (Sign in to Acme); the user chose cancel"
    )
