"""Secrets written into URLs never reach an output: a provider ``base_url`` with a key in
its query (``?api-key=``, ``key=``, ``token=``, ``access_token=``) or its userinfo is
shown redacted by ``ketch config``, ``ketch doctor`` and a run's errors (text, json,
stream-json; the server's error body and a redirect's address too); a token as the user
name of a proxy URL does not reach bash or hooks. Black-box through the ``ketch``
command; each output path is counted."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator

import pytest

from .cliharness import Ketch
from .cliharness import tally
from .cliharness import tool_results

CANARY = "CANARYsecret0123456789"
URLS = {
    "api-key": "http://127.0.0.1:{port}/v1?api-key=" + CANARY,
    "key": "http://127.0.0.1:{port}/v1?x=1&key=" + CANARY,
    "token": "http://127.0.0.1:{port}/v1?token=" + CANARY,
    "access_token": "http://127.0.0.1:{port}/v1?access_token=" + CANARY + "&v=2",
    "userinfo-token": "http://" + CANARY + "@127.0.0.1:{port}/v1",
    "userinfo-password": "http://user:" + CANARY + "@127.0.0.1:{port}/v1",
}


class EchoServer:
    """Answers every request with an error naming the path it was asked for (query
    included), or with ``redirect`` a 307 to that address plus the path."""

    def __init__(self, redirect: str | None = None) -> None:
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                return

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if outer.redirect is not None:
                    self.send_response(307)
                    self.send_header("Location", outer.redirect + self.path)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = json.dumps({"error": {"message": f"no such route {self.path}"}}).encode()
                self.send_response(400)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST

        self.redirect = redirect
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()


@pytest.fixture
def ketch() -> Iterator[Ketch]:
    k = Ketch("root")
    yield k
    k.cleanup()


@pytest.fixture
def echo() -> Iterator[EchoServer]:
    server = EchoServer()
    yield server
    server.close()


def _provider(k: Ketch, url: str) -> None:
    k.user_config(f'model = "mine:m"\n[providers.mine]\nbase_url = "{url}"\napi_key = "sk-literal-abcdefghijkl"\n')


@pytest.mark.parametrize("variant", list(URLS))
def test_config_and_doctor_redact_a_base_url(ketch: Ketch, variant: str) -> None:
    url = URLS[variant].format(port=9)
    _provider(ketch, url)
    shown = {"config": ketch.run("config"), "doctor": ketch.run("doctor", "--quick", "--timeout", "2")}
    for name, proc in shown.items():
        out = proc.stdout + proc.stderr
        tally(f"output: {name} shows base_url with {variant}", leaked=[CANARY] * (CANARY in out))
        assert CANARY not in out
        assert "127.0.0.1:9/v1" in out
    assert "***" in shown["config"].stdout


@pytest.mark.parametrize("output", ["text", "json", "stream-json"])
@pytest.mark.parametrize("variant", [v for v in URLS if not v.startswith("userinfo")])
def test_run_errors_redact_the_base_url(ketch: Ketch, echo: EchoServer, variant: str, output: str) -> None:
    _provider(ketch, URLS[variant].format(port=echo.port))
    proc = ketch.run("run", "-o", output, "--no-session", "hi")
    out = proc.stdout + proc.stderr
    tally(f"output: run error ({output}) with {variant}", leaked=[CANARY] * (CANARY in out))
    assert CANARY not in out
    assert proc.returncode == 1
    assert "no such route /v1/chat/completions" in out or "no such route /v1" in out


def test_a_redirect_and_a_bad_address_are_redacted(ketch: Ketch) -> None:
    server = EchoServer(redirect=f"http://127.0.0.1:9/elsewhere?token={CANARY}&x=")
    try:
        _provider(ketch, f"http://127.0.0.1:{server.port}/v1")
        redirected = ketch.run("run", "-o", "json", "--no-session", "hi")
    finally:
        server.close()
    _provider(ketch, f"http://127.0.0.1:99999/v1?key={CANARY}")
    bad = ketch.run("run", "-o", "json", "--no-session", "hi")
    for name, proc in (("redirect", redirected), ("invalid address", bad)):
        out = proc.stdout + proc.stderr
        tally(f"output: run error ({name})", leaked=[CANARY] * (CANARY in out))
        assert CANARY not in out
        assert proc.returncode == 1
    assert "redirected the request (HTTP 307) to http://127.0.0.1:9/elsewhere?token=***" in redirected.stdout
    assert "http://127.0.0.1:99999/v1?key=***" in bad.stdout


def test_proxy_credentials_do_not_reach_bash_or_hooks(ketch: Ketch) -> None:
    hook_env = ketch.outside / "hook-env"
    ketch.user_config(
        f'[[hooks.PreToolUse]]\n[[hooks.PreToolUse.hooks]]\ntype = "command"\ncommand = "env > {hook_env}"\n'
    )
    script = ketch.script(
        [{"blocks": [{"type": "tool_call", "id": "c1", "name": "bash", "args": {"command": "env | sort"}}]}, "ok"]
    )
    proc = ketch.run(
        "run", "-o", "stream-json", "--no-session", "--permission-mode", "accept_edits", "--model", f"scripted:{script}",
        "go",
        extra={"HTTPS_PROXY": f"http://{CANARY}@proxy.invalid:3128", "http_proxy": f"http://u:{CANARY}@proxy.invalid:8080/",
               "ALL_PROXY": f"socks5://{CANARY}@proxy.invalid:1080"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    [(_, is_error, text)] = tool_results(proc.stdout)
    hooks = hook_env.read_text()
    for name, seen in (("bash", text), ("hook", hooks)):
        tally(f"output: proxy credentials in the {name} environment", leaked=[CANARY] * (CANARY in seen))
        assert CANARY not in seen
        assert "HTTPS_PROXY=http://proxy.invalid:3128" in seen.splitlines()
        assert "http_proxy=http://proxy.invalid:8080/" in seen.splitlines()
    assert not is_error
