"""``ketch run -o text`` on a terminal: one dim ``→ <tool> <main argument>`` line on stderr
per tool call as it starts, before the answer."""

from __future__ import annotations

import re

import pytest
from clihelp import Env
from clihelp import Terminal
from clihelp import call_reply
from clihelp import text_reply


def test_each_tool_call_shows_one_line_with_its_main_argument(env: Env, terminals: list[Terminal]) -> None:
    (env.work / "src").mkdir()
    (env.work / "notes.txt").write_text("hello\n")
    long_name = "d" * 150
    script = env.script(
        [
            call_reply(("c1", "ls", {})),
            call_reply(("c2", "ls", {"path": "src", "limit": 5})),
            call_reply(("c3", "read", {"path": "notes.txt"})),
            call_reply(("c4", "grep", {"pattern": "hel+o\nsecond line", "path": "."})),
            call_reply(("c5", "find", {"pattern": long_name})),
            text_reply("Done."),
        ]
    )
    term = Terminal(env, "run", "--model", f"scripted:{script}", "look around")
    terminals.append(term)
    term.expect("Done.")
    assert term.wait_exit() == 0
    shown = [re.sub(r"\x1b\[[0-9;]*m", "", line).strip() for line in term.seen.splitlines()]
    calls = [line for line in shown if line.startswith("→")]
    assert calls == [
        "→ ls .",
        "→ ls src",
        "→ read notes.txt",
        "→ grep hel+o …",
        f"→ find {'d' * 72} …",
    ]
    assert shown.index("→ find " + "d" * 72 + " …") < shown.index("Done.")


def test_without_a_terminal_stderr_stays_quiet(env: Env) -> None:
    script = env.script([call_reply(("c1", "ls", {"path": "."})), text_reply("Done.")])
    proc = env.run("run", "--model", f"scripted:{script}", "look")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "Done.\n", "")


def test_each_tool_result_shows_its_first_lines_under_the_call(env: Env, terminals: list[Terminal]) -> None:
    (env.work / "src").mkdir()
    (env.work / "notes.txt").write_text("".join(f"line {i}\n" for i in range(1, 7)))
    script = env.script(
        [
            call_reply(("c1", "ls", {})),
            call_reply(("c2", "read", {"path": "notes.txt"})),
            call_reply(("c3", "read", {"path": "missing.txt"})),
            text_reply("Done."),
        ]
    )
    term = Terminal(env, "run", "--model", f"scripted:{script}", "look around")
    terminals.append(term)
    term.expect("Done.")
    assert term.wait_exit() == 0
    shown = [re.sub(r"\x1b\[[0-9;]*m", "", line).rstrip() for line in term.seen.splitlines()]
    start = shown.index("→ ls .")
    assert shown[start : shown.index("Done.")] == [
        "→ ls .",
        "  ⎿ notes.txt",
        "    src/",
        "→ read notes.txt",
        "  ⎿      1\tline 1",
        "         2\tline 2",
        "         3\tline 3",
        "         4\tline 4",
        "    … +2 lines",
        "→ read missing.txt",
        "  ⎿ error: File not found: missing.txt",
    ]


@pytest.mark.parametrize(
    ("n", "text"),
    [(0, "0"), (950, "950"), (1000, "1k"), (8192, "8.2k"), (12_345, "12.3k"), (200_000, "200k"),
     (999_949, "999.9k"), (999_950, "1M"), (1_048_576, "1M"), (1_500_000, "1.5M")],
)
def test_one_token_count_format(n: int, text: str) -> None:
    """White-box: the status line, the compaction notice and the models table share it."""
    from ketch.cli._render import format_tokens

    assert format_tokens(n) == text
