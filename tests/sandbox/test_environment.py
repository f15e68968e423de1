"""White-box test: imports ketch implementation modules (private) directly.

The tool environment: an allow-list, secrets never passed (names and URL passwords),
and the bash tool's environment with and without a sandbox."""

from __future__ import annotations

from pathlib import Path

import pytest

from ketch.llm import AbortSignal
from ketch.loop import ToolContext
from ketch.sandbox import is_secret_name
from ketch.sandbox import tool_environment
from ketch.tools import Workspace
from ketch.tools._bash import BashTool
from ketch.tools._bash import scrub_environment

PARENT = {
    "PATH": "/usr/bin",
    "HOME": "/home/me",
    "USER": "me",
    "LANG": "C.UTF-8",
    "LC_ALL": "C",
    "LC_TIME": "en_GB.UTF-8",
    "TERM": "xterm",
    "TZ": "UTC",
    "SHELL": "/bin/bash",
    "TMPDIR": "/var/tmp/me",
    "HTTPS_PROXY": "http://proxy:3128",
    "http_proxy": "http://me:hunter2@proxy:3128",
    "EDITOR": "vim",
    "SSH_AUTH_SOCK": "/tmp/ssh-x/agent.1",
    "PYTHONPATH": "/src",
    "OPENAI_API_KEY": "sk-test-1",
    "MYLAB_CRED": "sk-test-2",
}


def test_only_allow_listed_names_pass() -> None:
    assert tool_environment(environ=PARENT) == {
        "PATH": "/usr/bin",
        "HOME": "/home/me",
        "USER": "me",
        "LANG": "C.UTF-8",
        "LC_ALL": "C",
        "LC_TIME": "en_GB.UTF-8",
        "TERM": "xterm",
        "TZ": "UTC",
        "SHELL": "/bin/bash",
        "TMPDIR": "/var/tmp/me",
        "HTTPS_PROXY": "http://proxy:3128",
        "http_proxy": "http://proxy:3128",  # without the credentials of its URL
    }


def test_configured_names_pass_but_secrets_never_do() -> None:
    env = tool_environment(
        environ=PARENT, allow=["EDITOR", "PYTHON*", "OPENAI_API_KEY", "MYLAB_CRED"], secret_names=["mylab_cred"]
    )
    assert env["EDITOR"] == "vim"
    assert env["PYTHONPATH"] == "/src"
    assert "OPENAI_API_KEY" not in env
    assert "MYLAB_CRED" not in env
    everything = tool_environment(environ=PARENT, allow=["*"], secret_names=["MYLAB_CRED"])
    assert set(PARENT) - set(everything) == {"OPENAI_API_KEY", "MYLAB_CRED"}
    assert everything["http_proxy"] == "http://proxy:3128"


def test_the_process_environment_is_the_default_source(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KETCH_SOME_VAR", "v")
    monkeypatch.setenv("LANG", "C.UTF-8")
    env = tool_environment()
    assert env["LANG"] == "C.UTF-8"
    assert "KETCH_SOME_VAR" not in env
    assert tool_environment(allow=["KETCH_SOME_VAR"])["KETCH_SOME_VAR"] == "v"


@pytest.mark.parametrize(
    "name",
    [
        "OPENAI_API_KEY", "anthropic_api_key", "SOME_KEY", "GITHUB_PAT", "HF_TOKEN", "SLACK_TOKENS",
        "APP_SECRET", "CLIENT_SECRET_ID", "DB_PASSWORD", "PASSWORD", "MYSQL_PWD_PASSWORD", "AWS_REGION",
        "GOOGLE_APPLICATION_CREDENTIALS", "DATABASE_URL", "SSH_PRIVATE_KEY_PATH", "API_KEY", "TOKEN",
    ],
)
def test_conventional_secret_names(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize("name", ["PATH", "HOME", "KEYBOARD", "TOKENIZERS_PARALLELISM", "LANG", "MONKEY_BUSINESS"])
def test_names_that_are_not_secrets(name: str) -> None:
    assert not is_secret_name(name)


def test_configured_provider_key_names_are_secrets() -> None:
    assert not is_secret_name("MYLAB_CRED")
    assert is_secret_name("MYLAB_CRED", ["mylab_cred"])


def test_the_unsandboxed_scrub_drops_provider_names_conventional_names_and_url_passwords() -> None:
    env = {
        "PATH": "/usr/bin",
        "GITHUB_PAT": "p",
        "SOME_KEY": "k",
        "MYLAB_CRED": "c",
        "REDIS": "redis://:hunter2@cache:6379/0",
        "PLAIN_URL": "https://example.com/a:b@c",
        "CUSTOM_THING": "x",
    }
    assert scrub_environment(env, extra_names=["MYLAB_CRED"]) == {
        "PATH": "/usr/bin",
        "PLAIN_URL": "https://example.com/a:b@c",
        "CUSTOM_THING": "x",
    }


async def test_unsandboxed_commands_get_the_allow_list_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-parent")
    monkeypatch.setenv("MYLAB_CRED", "sk-test-mylab")
    monkeypatch.setenv("KETCH_OTHER", "other")
    tool = BashTool(Workspace(tmp_path), env_allow=["MYLAB_CRED"], secret_names=["MYLAB_CRED"])
    assert tool.sandboxed is False
    assert tool.sandbox_warning is None
    ctx = ToolContext(call_id="c", tool_name="bash", signal=AbortSignal())
    result = await tool.execute({"command": "env"}, ctx)
    assert "sk-test" not in result.text
    assert "KETCH_OTHER" not in result.text
    assert "PATH=" in result.text


def test_protected_path_resolves_before_matching(tmp_path: Path) -> None:
    from ketch.sandbox import protected_path

    ws = tmp_path / "ws"
    (ws / ".git" / "hooks").mkdir(parents=True)
    (ws / "src").mkdir()
    (ws / "cfg-link").symlink_to(ws / ".ketch" / "config.toml")
    assert protected_path(ws, "src/../.git/config") == ".git/config"
    assert protected_path(ws, ws / ".git" / "hooks" / "pre-commit") == ".git/hooks"
    assert protected_path(ws, ".ketch") == ".ketch"
    assert protected_path(ws, "cfg-link") == ".ketch"
    # the rest of git's own files, anywhere below the root, are guarded as ".git"
    assert protected_path(ws, ".git/HEAD") == ".git"
    assert protected_path(ws, "src/.git/config") == ".git"
    assert protected_path(ws, "src/.git") == ".git"  # a .git file there could point git elsewhere
    assert protected_path(ws, "src/.gitignore") is None
    assert protected_path(ws, ".ketchup") is None
    assert protected_path(ws, "src/a.py", protected=["src"]) == "src"


def test_a_token_as_a_urls_user_name_never_passes() -> None:
    parent = {
        "HTTPS_PROXY": "http://ghp_TOKEN123@proxy:3128",
        "ALL_PROXY": "socks5://ghp_TOKEN123@proxy:1080",
        "GIT_URL": "https://ghp_TOKEN123@github.com/org/repo",
        "DOCS": "https://example.com/a@b",
    }
    env = tool_environment(environ=parent, allow=["ALL_PROXY", "GIT_URL", "DOCS"])
    assert env == {"HTTPS_PROXY": "http://proxy:3128", "ALL_PROXY": "socks5://proxy:1080", "DOCS": "https://example.com/a@b"}
