"""``[sandbox.network]`` through the ``ketch`` command: a sandboxed command reaches the hosts
the allow-list names through ketch's proxy and nothing else (not by IP address, not by
another name for an allowed host's address, not directly), and a configured credential
reaches the host's request headers without ever being visible inside the sandbox, in the
events or in the session file."""

from __future__ import annotations

import http.server
import json
import re
import secrets
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

import pytest
from clihelp import Env
from clihelp import lines


@dataclass
class Host:
    """A loopback HTTP test host: what it received (path, headers) per request."""

    port: int
    seen: list[tuple[str, dict[str, str]]] = field(default_factory=list)


@pytest.fixture
def host() -> Iterator[Host]:
    record = Host(0)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            record.seen.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
            body = f"test host says hello to {self.path}".encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    record.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield record
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _bash(env: Env, commands: dict[str, str], extra: dict[str, str] | None = None, *more: str) -> tuple[Any, dict[str, str]]:
    """Run ``ketch run`` with a scripted model calling bash once per command (ids in
    order); returns the process and each call's result text."""
    calls = [{"type": "tool_call", "id": cid, "name": "bash", "args": {"command": cmd}} for cid, cmd in commands.items()]
    script = env.script([{"blocks": calls}, "done"])
    proc = env.run(
        "run", "-o", "stream-json", "--permission-mode", "accept-edits", *more, "--model", f"scripted:{script}", "go",
        extra=extra,
    )
    results: dict[str, str] = {}
    for event in lines(proc.stdout):
        if event["type"] == "tool_execution_end":
            results[event["tool_call_id"]] = "".join(c.get("text", "") for c in event["result"]["content"])
    return proc, results


def _loopback_alias() -> str:
    """A name other than ``localhost`` that resolves to 127.0.0.1 here (the machine's name,
    or another /etc/hosts name for loopback)."""
    for name in (socket.gethostname(), "localhost.localdomain", "ip6-localhost", "runsc", "vm"):
        try:
            infos = socket.getaddrinfo(name, 80, type=socket.SOCK_STREAM)
        except OSError:
            continue
        if name != "localhost" and any(i[4][0] in ("127.0.0.1", "::1") for i in infos):
            return name
    raise AssertionError("no other name for loopback on this machine (/etc/hosts)")


def _refused(name: str) -> str:
    return f"ketch sandbox: host '{name}' is not in [sandbox.network] allow; allowed: localhost"


def test_only_the_allowed_host_is_reached_by_its_name(env: Env, host: Host) -> None:
    env.user_config('[sandbox.network]\nallow = ["localhost"]\n')
    alias = _loopback_alias()
    port = host.port
    proc, results = _bash(
        env,
        {
            "ok": f"curl -sS http://localhost:{port}/allowed",
            "name": f"curl -sS http://not-listed.test:{port}/by-name",
            "ip": f"curl -sS http://127.0.0.1:{port}/by-ip",
            "ip6": f"curl -sS 'http://[::1]:{port}/by-ipv6'",
            "alias": f"curl -sS http://{alias}:{port}/by-alias",
            "tls": f"curl -sS https://not-listed.test:{port}/ 2>&1; echo exit=$?",
            "direct": f"curl -sS --noproxy '*' http://127.0.0.1:{port}/direct 2>&1 | sed 's/ after [0-9]* ms//'",
            "route": "python3 -I -c 'import socket\ntry: socket.create_connection((\"192.0.2.1\", 80), timeout=5)\n"
            "except OSError as e: print(e.strerror)'",
        },
    )
    assert proc.returncode == 0, proc.stderr
    assert results["ok"] == "test host says hello to /allowed"
    for cid, name in (("name", "not-listed.test"), ("ip", "127.0.0.1"), ("ip6", "::1"), ("alias", alias)):
        # the 403's one line is the command's output, which the model reads
        assert results[cid] == _refused(name), cid
    assert results["tls"] == (
        "curl: (56) CONNECT tunnel failed, response 403\nexit=56\n\n[sandbox: " + _refused("not-listed.test") + "]"
    )
    assert results["direct"] == f"curl: (7) Failed to connect to 127.0.0.1 port {port}: Couldn't connect to server"
    assert results["route"] == "Network is unreachable"
    assert [path for path, _ in host.seen] == ["/allowed"]


def test_deny_wins_and_wildcards_match_names_below(env: Env, host: Host) -> None:
    env.user_config('[sandbox.network]\nallow = ["*.localhost", "localhost"]\ndeny = ["localhost"]\n')
    _, results = _bash(env, {"d": f"curl -sS http://localhost:{host.port}/"})
    line = "ketch sandbox: host 'localhost' is denied by [sandbox.network] deny (localhost)"
    assert results["d"] == line
    assert host.seen == []


def test_a_credential_reaches_the_host_and_nothing_inside(env: Env, host: Host, tmp_path: Path) -> None:
    token = "canary-" + secrets.token_hex(16)
    env.user_config(
        '[sandbox]\nenv_allow = ["CANARY_*"]\n[sandbox.network]\nallow = ["localhost"]\n'
        '[sandbox.network.credentials]\n"localhost" = { header = "X-Api-Auth", env = "CANARY_CRED", value = "Bearer ${CANARY_CRED}" }\n'
    )
    data, tmp = tmp_path / "data", tmp_path / "tmp"
    tmp.mkdir()
    extra = {"CANARY_CRED": token, "CANARY_OTHER": "passed", "XDG_DATA_HOME": str(data), "TMPDIR": str(tmp)}
    look = (
        "env; for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do tr '\\0' '\\n' < $f; done; "
        "ls -la /run; grep -rsl . /run /tmp /etc/ssl 2>/dev/null | head -50; "
        f"curl -sS http://localhost:{host.port}/cred"
    )
    # the variable is also allowed by name: the sandbox still never gets it
    proc, results = _bash(env, {"c": look}, extra)
    assert proc.returncode == 0, proc.stderr
    assert results["c"].endswith("test host says hello to /cred")
    assert host.seen[-1][0] == "/cred"
    assert host.seen[-1][1]["x-api-auth"] == f"Bearer {token}"
    assert token not in proc.stdout and token not in proc.stderr  # events, the model's view
    assert "CANARY_CRED" not in results["c"]
    assert "CANARY_OTHER=passed" in results["c"]  # env_allow works: the credential's variable alone is held back
    sessions = list(data.rglob("*.jsonl"))
    assert sessions, "no session file was written"
    for path in tmp_path.rglob("*"):  # session file, logs, config, anything left behind
        if path.is_file() and not path.is_symlink():
            assert token.encode() not in path.read_bytes(), path


def test_a_missing_credential_refuses_the_request(env: Env, host: Host) -> None:
    env.user_config(
        '[sandbox.network]\nallow = ["localhost"]\n'
        '[sandbox.network.credentials]\nlocalhost = { header = "X-Api-Auth", env = "UNSET_CANARY" }\n'
    )
    _, results = _bash(env, {"m": f"curl -sS http://localhost:{host.port}/"})
    line = "ketch sandbox: the credential for 'localhost' is not available (UNSET_CANARY is not set)"
    assert results["m"] == line
    assert host.seen == []


def test_an_untrusted_project_cannot_open_the_network(env: Env, host: Host) -> None:
    path = env.project_config('[sandbox.network]\nallow = ["localhost"]\n')
    proc, results = _bash(env, {"p": f"curl -sS http://localhost:{host.port}/ 2>&1; echo exit=$?"})
    assert f"ignored settings of the untrusted project {env.work}: [sandbox.network] ({path})" in proc.stderr
    assert results["p"].startswith("curl: (7) Failed to connect to localhost port")
    assert host.seen == []
    trusted, results = _bash(env, {"t": f"curl -sS http://localhost:{host.port}/trusted"}, {"KETCH_TRUST_PROJECT": "1"})
    assert trusted.returncode == 0, trusted.stderr
    assert results["t"] == "test host says hello to /trusted"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            'allow = ["bad host!"]',
            "[sandbox.network] allow: 'bad host!' is not a host; give a name (pypi.org), *.suffix (*.github.com) "
            "or an IP address, with an optional :port",
        ),
        ('deny = ["a.test:99999"]', "[sandbox.network] deny: port 99999 of 'a.test:99999' is not in 1-65535"),
        (
            'credentials = { "*.x.test" = { header = "A", env = "B" } }',
            "[sandbox.network.credentials] '*.x.test' is not a host name; give one exact host (api.github.com)",
        ),
        (
            'credentials = { "x.test" = { header = "A", env = "B", value = "Bearer ${C}" } }',
            "[sandbox.network.credentials] value 'Bearer ${C}' must hold ${B} (the variable named by env) "
            "and no other variable",
        ),
    ],
)
def test_bad_network_settings_are_one_line_errors(env: Env, text: str, message: str) -> None:
    path = env.user_config(f"[sandbox.network]\n{text}\n")
    proc = env.run("run", "--model", f"scripted:{env.script(['x'])}", "go")
    assert proc.returncode == 2
    assert proc.stderr == f"ketch: user config {path}: {message}\n"


def test_unknown_network_keys_are_errors(env: Env) -> None:
    path = env.user_config('[sandbox.network]\nallowed = ["x.test"]\n')
    proc = env.run("run", "--model", f"scripted:{env.script(['x'])}", "go")
    assert proc.returncode == 2
    assert proc.stderr == f"ketch: {path}: Object contains unknown field `allowed` - at `$.sandbox.network`\n"


def test_the_command_sees_the_proxy_variables_and_socket(env: Env) -> None:
    env.user_config('[sandbox.network]\nallow = ["localhost"]\n')
    proc, results = _bash(env, {"s": "ls /run; env | grep -i _proxy= | sed 's/:[0-9]*$/:PORT/' | sort"})
    assert results["s"] == "\n".join(
        ["ketch-proxy.sock", "ALL_PROXY=http://127.0.0.1:PORT", "HTTPS_PROXY=http://127.0.0.1:PORT",
         "HTTP_PROXY=http://127.0.0.1:PORT", "NO_PROXY=", "all_proxy=http://127.0.0.1:PORT",
         "http_proxy=http://127.0.0.1:PORT", "https_proxy=http://127.0.0.1:PORT", "no_proxy="]
    )
    assert json.loads(proc.stdout.splitlines()[-1])["type"] == "result"


def _server_certificate(folder: Path, names: list[str]) -> Path:
    """A self-signed certificate (and its key, in one file) for ``names``."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test host")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    folder.mkdir()
    (folder / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / "key.pem").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return folder


@pytest.fixture
def tls_host(tmp_path: Path) -> Iterator[tuple[Host, Path, str]]:
    import ssl

    alias = _loopback_alias()
    certs = _server_certificate(tmp_path / "work" / "certs", ["localhost", alias])  # the sandbox sees the workspace
    record = Host(0)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            record.seen.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
            body = f"tls host says hello to {self.path}".encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certs / "cert.pem", certs / "key.pem")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    record.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield record, certs / "cert.pem", alias
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_https_credentials_through_the_runs_ca_and_other_hosts_tunnelled(
    env: Env, tls_host: tuple[Host, Path, str], tmp_path: Path
) -> None:
    host, cert, alias = tls_host
    token = "canary-" + secrets.token_hex(16)
    env.user_config(
        f'[sandbox.network]\nallow = ["localhost", "{alias}"]\n'
        '[sandbox.network.credentials]\nlocalhost = { header = "Authorization", env = "CANARY_CRED", value = "Bearer ${CANARY_CRED}" }\n'
    )
    port = host.port
    # ketch itself trusts the test host's certificate; the sandbox trusts the run's CA instead
    extra = {"CANARY_CRED": token, "SSL_CERT_FILE": str(cert), "XDG_DATA_HOME": str(tmp_path / "data")}
    proc, results = _bash(
        env,
        {
            "cred": f"curl -sS https://localhost:{port}/tls",
            "bundle": "echo $SSL_CERT_FILE $CURL_CA_BUNDLE $REQUESTS_CA_BUNDLE $NODE_EXTRA_CA_CERTS $GIT_SSL_CAINFO; "
            "grep -c 'BEGIN CERTIFICATE' /run/ketch-ca.pem >/dev/null && echo has-certs",
            "py": "python3 -I -c 'import urllib.request;print(urllib.request.urlopen(\"https://localhost:"
            f"{port}/py\").read().decode())'",
            # not credentialed: an untouched tunnel, the host's own certificate (trusted alone here)
            "tunnel": f"curl -sS --cacert {cert} https://{alias}:{port}/tunnel",
            # credentialed: the run's CA's certificate, which the host's own does not verify
            "ca": f"curl -sS --cacert {cert} https://localhost:{port}/no 2>&1 | head -1 | cut -d: -f1-2; echo exit=${{PIPESTATUS[0]}}",
        },
        extra,
    )
    assert proc.returncode == 0, proc.stderr
    assert results["cred"] == "tls host says hello to /tls"
    assert results["bundle"] == " ".join(["/run/ketch-ca.pem"] * 5) + "\nhas-certs"
    assert results["py"] == "tls host says hello to /py"
    assert results["tunnel"] == "tls host says hello to /tunnel"
    assert results["ca"] == "curl: (60) SSL certificate problem\nexit=60"
    seen = dict(host.seen)
    assert seen["/tls"]["authorization"] == f"Bearer {token}"
    assert seen["/py"]["authorization"] == f"Bearer {token}"
    assert "authorization" not in seen["/tunnel"]
    assert "/no" not in seen
    assert token not in proc.stdout and token not in proc.stderr
    for path in tmp_path.rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert token.encode() not in path.read_bytes(), path


# -- the interactive terminal asks about a host not on the list ------------------------------


def _ask_session(env: Env, terminals: list[Any], commands: dict[str, str]) -> Any:
    """The interactive ``ketch`` in a pseudo-terminal, its scripted model calling bash
    once per command (one turn each), then ``all done``; the prompt is sent."""
    from clihelp import Terminal
    from clihelp import call_reply
    from clihelp import text_reply

    script = env.script([*(call_reply((cid, "bash", {"command": cmd})) for cid, cmd in commands.items()), text_reply("all done")])
    term = Terminal(env, "--permission-mode", "accept-edits", "--model", f"scripted:{script}")
    terminals.append(term)
    term.expect("/help for commands")
    term.sendline("go")
    return term


def test_interactive_allow_once_reaches_an_unlisted_host_for_the_session(
    env: Env, host: Host, terminals: list[Any]
) -> None:
    env.user_config('[sandbox.network]\nallow = ["localhost"]\n')
    alias, port = _loopback_alias(), host.port
    term = _ask_session(
        env, terminals, {"c1": f"curl -sS http://{alias}:{port}/once", "c2": f"curl -sS http://{alias}:{port}/again"}
    )
    term.expect(rf"⚠ a sandboxed command wants to reach {alias}:{port} \(not in \[sandbox\.network\] allow\)")
    term.expect(rf"'y' allows it for this session, 'a' always allows {alias}")
    term.expect(r"Allow\? \[y\] once  \[a\] always  \[n\] deny")
    term.sendline("y")
    term.expect("test host says hello to /once")
    between = term.expect("test host says hello to /again")
    assert "wants to reach" not in between  # allowed for the session: not asked again
    term.expect("all done")
    term.sendline("/exit")
    assert term.wait_exit() == 0
    assert [path for path, _ in host.seen] == ["/once", "/again"]
    assert "allow = [\"localhost\"]\n" in (env.xdg / "ketch" / "config.toml").read_text()  # nothing saved


def test_interactive_always_reaches_the_host_and_saves_it(env: Env, host: Host, terminals: list[Any]) -> None:
    import tomllib

    config = env.user_config('[sandbox.network]\nallow = ["localhost"]\n')
    alias, port = _loopback_alias(), host.port
    term = _ask_session(env, terminals, {"c1": f"curl -sS http://{alias}:{port}/always"})
    term.expect(rf"wants to reach {alias}:{port}")
    term.expect(r"Allow\? \[y\] once")
    term.sendline("a")
    term.expect(r"Save the rule: \[s\] this session only  \[u\] user  \[p\] project  \[l\] local")
    term.sendline("u")
    term.expect(rf"saved {alias} to \[sandbox\.network\] allow in .*config\.toml")
    term.expect("test host says hello to /always")
    term.expect("all done")
    term.sendline("/exit")
    assert term.wait_exit() == 0
    assert [path for path, _ in host.seen] == ["/always"]
    assert tomllib.loads(config.read_text())["sandbox"]["network"]["allow"] == ["localhost", alias]


def test_interactive_deny_refuses_and_a_denied_host_is_never_asked(env: Env, host: Host, terminals: list[Any]) -> None:
    env.user_config('[sandbox.network]\nallow = ["localhost"]\ndeny = ["127.0.0.1"]\n')
    alias, port = _loopback_alias(), host.port
    term = _ask_session(
        env,
        terminals,
        {"c1": f"curl -sS http://{alias}:{port}/no", "c2": f"curl -sS http://127.0.0.1:{port}/denied"},
    )
    term.expect(rf"wants to reach {alias}:{port}")
    term.expect(r"Allow\? \[y\] once")
    term.sendline("n")
    term.expect(re.escape(_refused(alias)))
    between = term.expect(re.escape("ketch sandbox: host '127.0.0.1' is denied by [sandbox.network] deny (127.0.0.1)"))
    assert "wants to reach" not in between
    term.expect("all done")
    term.sendline("/exit")
    assert term.wait_exit() == 0
    assert host.seen == []
