"""The conservative bash parser: which simple commands a command line runs."""

from __future__ import annotations

import pytest

from ketch.permissions import SimpleCommand
from ketch.permissions import parse_command


def _words(text: str) -> list[tuple[tuple[str, ...], bool]]:
    return [(c.words, c.resolved) for c in parse_command(text)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("git status", [(("git", "status"), True)]),
        ("a && b || c; d | e & f\ng", [(("a",), True), (("b",), True), (("c",), True), (("d",), True), (("e",), True), (("f",), True), (("g",), True)]),
        ("echo 'a b' \"c d\" e\\ f", [(("echo", "a b", "c d", "e f"), True)]),
        ("echo \"a\\\"b\" 'it''s'", [(("echo", 'a"b', "its"), True)]),
        ("(a; b) && { c; }", [(("a",), True), (("b",), True), (("c",), True)]),
        ("if a; then b; elif c; then d; else e; fi", [(("a",), True), (("b",), True), (("c",), True), (("d",), True), (("e",), True)]),
        ("for x in 1 2; do a; done", [(("a",), True)]),
        ("while a; do b; done; until c; do d; done", [(("a",), True), (("b",), True), (("c",), True), (("d",), True)]),
        ("case x in a|b) c;; *) d;; esac", [(("c",), True), (("d",), True)]),
        ("! a", [(("a",), True)]),
        ("a # comment; rm x", [(("a",), True)]),
        ("a \\\n b", [(("a", "b"), True)]),
        ("env -u HOME A=1 -- b c", [(("b", "c"), False)]),
        ("env b c", [(("b", "c"), True)]),
        ("command -p b", [(("b",), True)]),
        ("command -v b", [(("command", "-v", "b"), True)]),
        ("builtin cd x", [(("cd", "x"), True)]),
        ("exec -a name b", [(("b",), True)]),
        ("time -p b", [(("b",), True)]),
        ("nice -n 10 b", [(("b",), True)]),
        ("nohup b &", [(("b",), True)]),
        ("timeout -s KILL --preserve-status 5s b", [(("b",), True)]),
        ("xargs -I {} -P 4 b {}", [(("b", "{}"), True)]),
        ("xargs", [(("echo",), True)]),
        ("find . -type f -exec b {} \\; -ok c {} +", [(("find", ".", "-type", "f", "-exec", "-ok"), True), (("b", "{}"), True), (("c", "{}"), True)]),
        ("bash -c 'a; b'", [(("a",), True), (("b",), True)]),
        ("bash script.sh", [(("bash", "script.sh"), False)]),  # the script's commands are not known
        ("env -S 'rm x' y", [(("env", "-S", "rm x", "y"), False)]),
        ("echo $HOME", [(("echo", "$HOME"), False)]),
        ("$(a) b", [(("a",), True), (("$(a)", "b"), False)]),
        ("echo ${x:-$(a)}", [(("a",), True), (("echo", "${x:-$(a)}"), False)]),
        ("echo $((1+2))", [((), False)]),
        ("cat <(a)", [((), False)]),
        ("cat <<EOF\nx\nEOF", [((), False)]),
        ("f() { a; }", [((), False)]),
        ("function f { a; }", [((), False)]),
        ("echo {a,b}", [((), False)]),
        ("echo $'\\x41'", [((), False)]),
        ("[[ -f x ]]", [((), False)]),
        ("if a; then b", [((), False)]),
        ("echo 'unterminated", [((), False)]),
        ("a=1", [((), False)]),
        ("declare -x A=1", [(("declare", "-x", "A=1"), False)]),
        ("printf -v 'a[$(id)]' x", [(("printf", "-v", "a[$(id)]", "x"), False)]),
        ("[ -f x ]", [(("[", "-f", "x", "]"), True)]),
        # a command name bash may expand into file names is not known
        ("/bin/r[m] -rf build", [(("/bin/r[m]", "-rf", "build"), False)]),
        ("r? x; ls *.py; '[m]' x", [(("r?", "x"), False), (("ls", "*.py"), True), (("[m]", "x"), True)]),
        # a shell reading its code from stdin or a file, a wrapper whose options are not read
        ("bash <<< 'rm -rf x'", [(("bash",), False)]),
        ("echo rm -rf x | sh", [(("echo", "rm", "-rf", "x"), True), (("sh",), False)]),
        ("setsid rm -rf x", [(("setsid", "rm", "-rf", "x"), False)]),
    ],
)
def test_parse(text: str, expected: list[tuple[tuple[str, ...], bool]]) -> None:
    assert _words(text) == expected


def test_redirections() -> None:
    writes = {c.words: c.writes for c in parse_command("a > f; b 2>&1; c < in; d &>/dev/null; e >> log; f 2> err; g >&2")}
    assert writes == {("a",): True, ("b",): False, ("c",): False, ("d",): False, ("e",): True, ("f",): True, ("g",): False}
    assert parse_command("xargs b")[0] == SimpleCommand(("b",), open_args=True, text="xargs b")
    assert parse_command("/bin/rm x")[0].name == "rm"


def test_deep_nesting_is_unresolved_not_a_crash() -> None:
    text = "bash -c " + "'" * 0 + "\"$(" * 50 + "a" + ")\"" * 50
    assert all(not c.resolved or c.words for c in parse_command(text))
    deep = "a"
    for _ in range(20):
        deep = f"sh -c {deep!r}"
    cmds = parse_command(deep)
    assert cmds and not any(c.resolved and c.words == ("a",) for c in cmds[1:])


@pytest.mark.parametrize(
    "command",
    [
        "/bin/r[m] -rf build",
        "/usr/bin/r? -rf build",
        "setsid rm -rf build",
        "stdbuf -o0 rm -rf build",
        "bash <<< 'rm -rf build'",
        "echo rm -rf build | sh",
        "echo rm -rf build | bash -s",
    ],
)
def test_a_bash_deny_rule_is_not_talked_around(command: str) -> None:
    from ketch.permissions import Rule

    rule = Rule.parse("Bash(rm:*)")
    assert rule.denies("bash", {"command": command}, "/tmp", parse_command(command))
    assert not rule.denies("bash", {"command": "git status"}, "/tmp", parse_command("git status"))
