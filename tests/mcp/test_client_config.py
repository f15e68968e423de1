"""The .mcp.json shape: loading from files and dicts, ${VAR} expansion, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ketch.mcp import MCPConfigError
from ketch.mcp import MCPServerConfig
from ketch.mcp import load_mcp_json


def test_a_file_in_the_common_shape(tmp_path: Path) -> None:
    path = tmp_path / ".mcp.json"
    path.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "time": {"command": "uvx", "args": ["mcp-server-time"], "env": {"TZ": "UTC"}},
                    "docs": {"type": "http", "url": "https://example.com/mcp", "headers": {"X-Key": "k"}},
                    "old": {"type": "sse", "url": "http://127.0.0.1:3001/sse"},
                    "guess": {"url": "http://127.0.0.1:1/mcp"},
                }
            }
        )
    )
    configs = load_mcp_json(path)
    assert list(configs) == ["time", "docs", "old", "guess"]
    assert configs["time"] == MCPServerConfig(name="time", command="uvx", args=("mcp-server-time",), env={"TZ": "UTC"})
    assert configs["docs"] == MCPServerConfig(
        name="docs", type="http", url="https://example.com/mcp", headers={"X-Key": "k"}
    )
    assert configs["old"].type == "sse"
    assert configs["guess"].type == "http"


def test_variables_are_expanded_with_defaults() -> None:
    environ = {"TOKEN": "s3cret", "HOST": "127.0.0.1"}
    configs = load_mcp_json(
        {
            "mcpServers": {
                "api": {
                    "type": "http",
                    "url": "http://${HOST}:${PORT:-8080}/mcp",
                    "headers": {"Authorization": "Bearer ${TOKEN}"},
                },
                "tool": {"command": "${BIN:-/usr/bin/tool}", "args": ["--key=${TOKEN}"], "env": {"K": "${TOKEN}"}},
            }
        },
        environ=environ,
    )
    assert configs["api"].url == "http://127.0.0.1:8080/mcp"
    assert configs["api"].headers == {"Authorization": "Bearer s3cret"}
    assert configs["tool"].command == "/usr/bin/tool"
    assert configs["tool"].args == ("--key=s3cret",)
    assert configs["tool"].env == {"K": "s3cret"}


def test_secrets_stay_out_of_the_repr() -> None:
    configs = load_mcp_json(
        {
            "mcpServers": {
                "api": {"url": "http://127.0.0.1:1/mcp", "headers": {"Authorization": "Bearer s3cret"}},
                "tool": {"command": "tool", "env": {"KEY": "s3cret"}},
            }
        }
    )
    assert repr(configs["api"]) == (
        "MCPServerConfig(name='api', type='http', url='http://127.0.0.1:1/mcp', headers=<1 hidden>)"
    )
    assert repr(configs["tool"]) == "MCPServerConfig(name='tool', type='stdio', command='tool', args=[], env=<1 hidden>)"


def test_values_from_the_environment_stay_out_of_reprs_and_errors() -> None:
    environ = {"GH_TOKEN": "ghp_LEAKCHECK0123", "DOCS_KEY": "dk-LEAKCHECK-4567"}
    configs = load_mcp_json(
        {
            "mcpServers": {
                "gh": {"command": "gh-mcp", "args": ["--token", "${GH_TOKEN}"]},
                "docs": {"url": "https://docs.example/mcp?api_key=${DOCS_KEY}"},
            }
        },
        environ=environ,
    )
    assert configs["gh"].args == ("--token", "ghp_LEAKCHECK0123")  # the server still gets it
    assert repr(configs["gh"]) == "MCPServerConfig(name='gh', type='stdio', command='gh-mcp', args=['--token', '***'])"
    assert repr(configs["docs"]) == "MCPServerConfig(name='docs', type='http', url='https://docs.example/mcp?api_key=***')"
    with pytest.raises(MCPConfigError) as info:
        load_mcp_json({"mcpServers": {"x": {"url": "ftp://h/?k=${DOCS_KEY}"}}}, environ=environ)
    assert str(info.value) == "MCP server 'x': url 'ftp://h/?k=***' must start with http:// or https://"


def test_credentials_written_literally_stay_out_of_the_repr() -> None:
    configs = load_mcp_json(
        {
            "mcpServers": {
                "a": {
                    "command": "srv",
                    "args": ["--api-key", "sk-LITERAL0123", "--auth-token=tok-LITERAL", "--keyboard", "us", "--client_secret", "cs-LITERAL",
                             "--token", "--verbose", "https://me:pw-LITERAL@git.example/repo"],
                },
                "b": {"url": "https://me:pw-LITERAL@mcp.example/v1"},
            }
        },
        environ={},
    )
    assert repr(configs["a"]) == (
        "MCPServerConfig(name='a', type='stdio', command='srv', args=['--api-key', '***', '--auth-token=***', "
        "'--keyboard', 'us', '--client_secret', '***', '--token', '--verbose', 'https://***@git.example/repo'])"
    )
    assert repr(configs["b"]) == "MCPServerConfig(name='b', type='http', url='https://***@mcp.example/v1')"
    assert configs["a"].args[1] == "sk-LITERAL0123"  # the server still gets it


@pytest.mark.parametrize(
    ("servers", "message"),
    [
        ({"a": {"command": "x", "args": ["${NOPE}"]}},
         "MCP server 'a': args[0] uses ${NOPE}, which is not set (set it, or write ${NOPE:-default})"),
        ({"a": {"type": "websocket", "url": "ws://x"}},
         "MCP server 'a': unknown type 'websocket' (allowed: stdio, http, sse)"),
        ({"a": {"type": "stdio"}}, "MCP server 'a': a stdio server needs a non-empty 'command'"),
        ({"a": {"type": "sse"}}, "MCP server 'a': an sse server needs a 'url'"),
        ({"a": {"url": "ftp://x"}}, "MCP server 'a': url 'ftp://x' must start with http:// or https://"),
        ({"a": {"command": "x", "args": "--flag"}}, 'MCP server \'a\': args must be a list of strings, got "--flag"'),
        ({"a": {"command": "x", "args": [1]}}, "MCP server 'a': args[0] must be a string, got 1"),
        # env and headers hold tokens: an error names the kind of value, never the value
        ({"a": {"command": "x", "env": ["A=sk-1234"]}}, "MCP server 'a': env must be an object of strings, got a list"),
        ({"a": {"url": "http://x", "headers": {"A": ["sk-1234"]}}}, "MCP server 'a': headers.A must be a string, got a list"),
        ({"a": {"command": "x", "timeout": "5"}}, "MCP server 'a': timeout must be a positive number, got \"5\""),
        ({"a": {"command": "x", "timeout": 0}}, "MCP server 'a': timeout must be a positive number, got 0"),
        ({"a": {"command": "x", "disabled": "no"}}, "MCP server 'a': disabled must be true or false, got \"no\""),
        ({"a": {"command": "x", "autoApprove": "read"}},
         "MCP server 'a': autoApprove must be a list of tool names, got \"read\""),
        ({"a": {"command": "x", "disabledTools": [1]}},
         "MCP server 'a': disabledTools must be a list of tool names, got [1]"),
        ({"a": {"command": "x", "trustAnnotations": "yes"}},
         "MCP server 'a': trustAnnotations must be true or false, got \"yes\""),
        ({"a b": {"command": "x"}}, "MCP server name 'a b' must be letters, digits, '_', '-' or '.'"),
        ({"a__b": {"command": "x"}},
         "MCP server name 'a__b' must not contain '__' (it separates names in mcp__server__tool)"),
        ({"a": "x"}, "MCP server 'a': the entry must be an object, got a string"),
    ],
)
def test_bad_entries_are_one_line_errors_naming_the_value(servers: dict[str, object], message: str) -> None:
    with pytest.raises(MCPConfigError) as info:
        load_mcp_json({"mcpServers": servers}, environ={})
    assert str(info.value) == message


def test_bad_files(tmp_path: Path) -> None:
    missing = tmp_path / "none.json"
    with pytest.raises(MCPConfigError) as info:
        load_mcp_json(missing)
    assert str(info.value) == f"{missing}: cannot read (No such file or directory)"
    broken = tmp_path / "broken.json"
    broken.write_text('{"mcpServers": {')
    with pytest.raises(MCPConfigError) as info:
        load_mcp_json(broken)
    assert str(info.value) == f"{broken}: not valid JSON (Expecting property name enclosed in double quotes at line 1)"
    with pytest.raises(MCPConfigError) as info:
        load_mcp_json({"mcpServers": []})
    assert str(info.value) == 'MCP config: "mcpServers" must be an object, got a list'
    assert load_mcp_json({}) == {}


# -- the keys other clients write ----------------------------------------------------------------


def test_the_keys_cline_kilo_kiro_and_claude_code_write_are_read(caplog: pytest.LogCaptureFixture) -> None:
    configs = load_mcp_json(
        {
            "mcpServers": {
                "cline": {"command": "srv", "disabled": False, "timeout": 60, "alwaysAllow": ["read", "list"],
                          "transportType": "stdio"},
                "kilo": {"type": "streamable-http", "url": "https://k.example/mcp", "alwaysAllow": ["*"], "timeout": 1800},
                "kiro": {"command": "srv", "env": {"K": "${KIRO_KEY}"}, "autoApprove": ["a"], "disabledTools": ["b"]},
                "claude": {"type": "http", "url": "https://c.example/mcp", "headers": {"X": "${H:-h}"}, "timeout": 120000},
                "net": {"command": "srv", "networkTimeout": 90000},
            }
        },
        environ={"KIRO_KEY": "kk-1234"},
    )
    assert caplog.records == []  # nothing unknown
    assert [(c.type, c.timeout, c.auto_approve, c.disabled_tools) for c in configs.values()] == [
        ("stdio", 60.0, ("read", "list"), ()),
        ("http", 1800.0, ("*",), ()),
        ("stdio", None, ("a",), ("b",)),
        ("http", 120.0, (), ()),
        ("stdio", 90.0, (), ()),
    ]
    assert configs["kiro"].env == {"K": "kk-1234"}
    assert configs["claude"].headers == {"X": "h"}
    assert configs["cline"].auto_approve_rules == ("mcp__cline__read", "mcp__cline__list")
    assert configs["kilo"].auto_approve_rules == ("mcp__kilo",)  # every tool of the server


def test_a_disabled_entry_is_not_expanded_nor_checked() -> None:
    configs = load_mcp_json(
        {"mcpServers": {"off": {"url": "${UNSET_URL}", "headers": {"A": "${UNSET}"}, "disabled": True},
                        "bare": {"disabled": True}}},
        environ={},
    )
    assert (configs["off"].disabled, configs["off"].url, configs["off"].headers) == (True, "${UNSET_URL}", {})
    assert (configs["bare"].disabled, configs["bare"].command) == (True, None)
    assert repr(configs["bare"]) == "MCPServerConfig(name='bare', type='stdio', command=None, args=[], disabled)"


def test_an_unknown_key_is_kept_aside_and_logged_once_naming_it(caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    path = tmp_path / ".mcp.json"
    path.write_text(json.dumps({"mcpServers": {"a": {"command": "x", "fooBar": 1, "zip": True}}}))
    with caplog.at_level("WARNING", logger="ketch.mcp"):
        configs = load_mcp_json(path)
    assert configs["a"].ignored_keys == ("fooBar", "zip")
    assert configs["a"] == MCPServerConfig(name="a", command="x")  # nothing else changes
    assert [r.getMessage() for r in caplog.records] == [
        f"{path}: MCP server 'a': unknown key 'fooBar' ignored",
        f"{path}: MCP server 'a': unknown key 'zip' ignored",
    ]
