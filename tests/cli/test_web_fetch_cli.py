"""``ketch run --web-fetch`` / ``web_fetch = true``: the web_fetch tool is there only when
turned on (a project needs trust to turn it on), and it fetches through its own host
check (an internal address is refused before any connection)."""

from __future__ import annotations

from clihelp import Env
from clihelp import lines

URL = "http://127.0.0.1:9/secret"
REFUSED = f"web_fetch {URL}: host 127.0.0.1 is an internal address (127.0.0.1); name it in allowed_hosts to fetch it"


def fetch_script(env: Env) -> str:
    call = {"blocks": [{"type": "tool_call", "id": "c1", "name": "web_fetch", "args": {"url": URL}}]}
    return env.script([call, "done"])


def tool_results(stdout: str) -> list[str]:
    found = []
    for event in lines(stdout):
        message = event.get("message") or {}
        if event.get("type") == "message_end" and message.get("role") == "tool_result":
            found.append("".join(b.get("text", "") for b in message["content"]))
    return found


def run(env: Env, *args: str) -> list[str]:
    proc = env.run("run", "-o", "stream-json", "--allow", "web_fetch", "--model", f"scripted:{fetch_script(env)}",
                   *args, "fetch it")
    assert proc.returncode == 0, proc.stderr
    return tool_results(proc.stdout)


def test_web_fetch_is_off_by_default(env: Env) -> None:
    assert run(env) == ['Tool "web_fetch" not found']


def test_the_flag_turns_it_on_and_its_host_check_applies(env: Env) -> None:
    assert run(env, "--web-fetch") == [REFUSED]


def test_the_user_config_turns_it_on(env: Env) -> None:
    env.user_config("web_fetch = true\n")
    assert run(env) == [REFUSED]


def test_a_project_turns_it_on_only_when_trusted(env: Env) -> None:
    config = env.project_config("web_fetch = true\n")
    proc = env.run("run", "-o", "stream-json", "--allow", "web_fetch", "--model", f"scripted:{fetch_script(env)}",
                   "fetch it")
    assert f"web_fetch = true ({config})" in proc.stderr
    assert tool_results(proc.stdout) == ['Tool "web_fetch" not found']
    assert run(env, "--trust-project") == [REFUSED]


def test_the_sandbox_network_allow_list_limits_it(env: Env) -> None:
    env.user_config('web_fetch = true\n[sandbox.network]\nallow = ["pypi.org", "*.github.com"]\ndeny = ["pypi.org"]\n')
    assert run(env) == [
        f"web_fetch {URL}: host 127.0.0.1 is not allowed; allowed: *.github.com"
    ]
