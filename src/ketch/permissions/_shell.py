"""A small, conservative bash parser: the simple commands a command line runs.

It understands quoting and escapes, the list and pipeline operators, subshells and
brace groups, ``if``/``for``/``while``/``until``/``case``, redirections and variable
assignments, and unwraps wrappers (``env``, ``command``, ``builtin``, ``exec``, ``time``,
``nice``, ``nohup``, ``timeout``, ``sudo``, ``xargs``, ``find -exec``, ``bash -c`` …).

What it cannot resolve statically (expansions, substitutions, ``eval``, functions,
heredocs, arithmetic, unknown syntax) makes the command *unresolved*: such a command
never matches an allow rule, and matches a deny rule on any word it might contain.
Nothing here runs a command or touches the filesystem.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field

from .._shell import matching_paren

_OPERATORS = ("&&", "||", ";;&", ";;", ";&", "|&", ";", "|", "&", "(", ")", "\n")
_REDIRECTS = ("&>>", "<<<", "<<-", "<<", ">>", "<&", ">&", "<>", ">|", "&>", "<", ">")
_RESERVED_START = {
    "if",
    "then",
    "elif",
    "else",
    "fi",
    "do",
    "done",
    "while",
    "until",
    "for",
    "case",
    "esac",
    "in",
    "{",
    "}",
    "!",
    "select",
    "function",
    "[[",
    "]]",
    "coproc",
    "time",
}
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\[[^\]]*\])?\+?=")
_SAFE_BIN_DIRS = ("/bin", "/usr/bin", "/usr/local/bin", "/sbin", "/usr/sbin", "/usr/local/sbin")
# Names that change how later commands resolve, or evaluate strings as code.
_POISON = {
    "alias",
    "shopt",
    "enable",
    "hash",
    "declare",
    "typeset",
    "export",
    "readonly",
    "local",
    "let",
    "eval",
    "trap",
    "mapfile",
    "readarray",
    "read",
}
_SHELLS = {"bash", "sh", "zsh", "dash", "ksh", "mksh", "ash", "busybox"}
# Commands that run another command given in their arguments, with options this parser
# does not read: what they run is unresolved (deny rules then look at every word).
_OPAQUE_WRAPPERS = {
    "setsid", "stdbuf", "ionice", "chrt", "taskset", "unbuffer", "flock", "watch", "script",
    "strace", "ltrace", "valgrind", "firejail", "systemd-run", "runuser", "su", "chroot",
    "unshare", "nsenter", "prlimit", "faketime", "pkexec", "parallel", "entr", "caffeinate",
}


class _Unsupported(Exception):
    """Syntax this parser does not handle; the caller treats the input as unresolved."""


@dataclass(slots=True)
class _Word:
    text: str  # the value after quote removal (expansions kept as written)
    raw: str  # as written
    literal: bool  # no expansion of any kind
    inner: list[str] = field(default_factory=list)  # command/process substitution bodies
    glob: bool = False  # an unquoted * ? [ : bash may expand the word into file names


@dataclass(frozen=True, slots=True)
class SimpleCommand:
    """One simple command as the shell runs it.

    ``words`` is the command name and its arguments after unwrapping wrappers (the name
    as written; see :attr:`name`). ``resolved`` is False when something in it cannot be
    known statically; ``open_args`` when more arguments are appended at run time
    (``xargs``); ``writes`` when it redirects output to a file; ``text`` is the source
    text it came from (for deny matching of unresolved commands).
    """

    words: tuple[str, ...]
    resolved: bool = True
    open_args: bool = False
    writes: bool = False
    text: str = ""

    @property
    def name(self) -> str:
        """The command name normalised: the base name of a path (``/bin/rm`` -> ``rm``)."""
        return command_basename(self.words[0]) if self.words else ""


def command_basename(word: str) -> str:
    """``/usr/bin/rm`` -> ``rm``; leading backslashes were already removed by quoting."""
    return os.path.basename(word.rstrip("/")) if "/" in word else word


def trusted_name(word: str) -> str | None:
    """The name an allow rule may match: the word itself when it has no ``/``, or the base
    name of a command in a standard system directory; None otherwise."""
    if "/" not in word:
        return word
    head, base = os.path.split(word)
    return base if os.path.normpath(head) in _SAFE_BIN_DIRS and base else None


_WORDISH = re.compile(r"[^\s;&|()<>'\"`$={}\\]+")


def possible_names(text: str) -> set[str]:
    """Every word in ``text`` that might name a command (quotes and escapes ignored)."""
    cleaned = text.replace("\\", "")
    names = set()
    for m in _WORDISH.finditer(cleaned):
        word = m.group(0)
        names.add(word)
        names.add(command_basename(word))
    return names


# -- tokenizer -------------------------------------------------------------------------------
@dataclass(slots=True)
class _Tok:
    kind: str  # "word", "op", "redir"
    value: str
    word: _Word | None = None
    fd: str = ""


class _Lexer:
    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0
        self.n = len(text)

    def tokens(self) -> list[_Tok]:
        out: list[_Tok] = []
        s = self.s
        while True:
            # skip blanks and line continuations
            while self.i < self.n:
                c = s[self.i]
                if c in " \t":
                    self.i += 1
                elif s.startswith("\\\n", self.i):
                    self.i += 2
                else:
                    break
            if self.i >= self.n:
                return out
            c = s[self.i]
            if c == "#":
                while self.i < self.n and s[self.i] != "\n":
                    self.i += 1
                continue
            if s.startswith("((", self.i) or s.startswith("$((", self.i):
                raise _Unsupported("arithmetic")
            if c in "<>" and s.startswith("(", self.i + 1):
                raise _Unsupported("process substitution")
            op = None if s.startswith("&>", self.i) else next((o for o in _OPERATORS if s.startswith(o, self.i)), None)
            if op is not None:
                self.i += len(op)
                out.append(_Tok("op", op))
                continue
            redir = next((r for r in _REDIRECTS if s.startswith(r, self.i)), None)
            if redir is not None:
                self.i += len(redir)
                out.append(_Tok("redir", redir))
                continue
            start = self.i
            word = self._word()
            # an fd number right before a redirection: 2>file
            if (
                word.literal
                and word.raw.isdigit()
                and self.i < self.n
                and any(s.startswith(r, self.i) for r in _REDIRECTS)
                and self.i == start + len(word.raw)
            ):
                redir = next(r for r in _REDIRECTS if s.startswith(r, self.i))
                self.i += len(redir)
                out.append(_Tok("redir", redir, fd=word.raw))
                continue
            out.append(_Tok("word", word.text, word))

    def _word(self) -> _Word:
        s, start = self.s, self.i
        text: list[str] = []
        literal = True
        glob = False
        bracket = False  # an unquoted [ seen: a later ] makes a bracket expression
        inner: list[str] = []
        while self.i < self.n:
            c = s[self.i]
            if c in " \t\n;&|()<>":
                break
            if c == "\\":
                if self.i + 1 >= self.n:
                    self.i += 1
                    continue
                nxt = s[self.i + 1]
                self.i += 2
                if nxt != "\n":
                    text.append(nxt)
                continue
            if c == "'":
                end = s.find("'", self.i + 1)
                if end < 0:
                    raise _Unsupported("unterminated quote")
                text.append(s[self.i + 1 : end])
                self.i = end + 1
                continue
            if c == '"':
                self.i += 1
                while True:
                    if self.i >= self.n:
                        raise _Unsupported("unterminated quote")
                    d = s[self.i]
                    if d == '"':
                        self.i += 1
                        break
                    if d == "\\" and self.i + 1 < self.n and s[self.i + 1] in '$`"\\\n':
                        if s[self.i + 1] != "\n":
                            text.append(s[self.i + 1])
                        self.i += 2
                        continue
                    if d == "`" or d == "$":
                        if not self._expansion(text, inner, in_quotes=True):
                            literal = False
                        continue
                    text.append(d)
                    self.i += 1
                continue
            if c == "$" or c == "`":
                if s.startswith("$'", self.i) or s.startswith('$"', self.i):
                    raise _Unsupported("ANSI-C or locale quoting")
                if not self._expansion(text, inner, in_quotes=False):
                    literal = False
                continue
            if c == "{" and self._brace_expansion():
                raise _Unsupported("brace expansion")
            if c in "*?" or (c == "]" and bracket):
                glob = True
            bracket |= c == "["
            text.append(c)
            self.i += 1
        raw = s[start : self.i]
        value = "".join(text)
        if not literal:
            value = raw  # keep the expansion as written
        return _Word(value, raw, literal, inner, glob)

    def _brace_expansion(self) -> bool:
        s = self.s
        depth = 0
        j = self.i
        while j < self.n and s[j] not in " \t\n;&|<>()":
            if s[j] == "{":
                depth += 1
            elif s[j] == "}":
                depth -= 1
                if depth == 0:
                    body = s[self.i + 1 : j]
                    return "," in body or ".." in body
            j += 1
        return False

    def _expansion(self, text: list[str], inner: list[str], *, in_quotes: bool) -> bool:
        """At ``$`` or a backtick: appends its literal text to ``text`` and any substitution
        body to ``inner``; False when it is an expansion (the word is not literal)."""
        lit, body = self._dollar_or_backtick(in_quotes=in_quotes)
        if body is not None:
            inner.append(body)
        if lit is None:
            return False
        text.append(lit)
        return True

    def _dollar_or_backtick(self, *, in_quotes: bool) -> tuple[str | None, str | None]:
        """At ``$`` or a backtick: (literal text or None for an expansion, substitution body)."""
        s = self.s
        c = s[self.i]
        if c == "`":
            end = self.i + 1
            while end < self.n and s[end] != "`":
                end += 2 if s[end] == "\\" else 1
            if end >= self.n:
                raise _Unsupported("unterminated backtick")
            body = s[self.i + 1 : end].replace("\\`", "`").replace("\\\\", "\\")
            self.i = end + 1
            return None, body
        nxt = s[self.i + 1] if self.i + 1 < self.n else ""
        if nxt == "(":
            end = matching_paren(s, self.i + 1)
            if end < 0:
                raise _Unsupported("unterminated command substitution")
            body = s[self.i + 2 : end]
            self.i = end + 1
            return None, body
        if nxt == "{":
            end = s.find("}", self.i + 2)
            if end < 0:
                raise _Unsupported("unterminated parameter expansion")
            body = s[self.i + 2 : end]
            self.i = end + 1
            # ${x:-$(cmd)} and friends: the substitutions inside run
            inner = _substitutions(body)
            return None, "\n".join(inner) if inner else None
        m = _NAME.match(s, self.i + 1)
        if m is not None:
            self.i = m.end()
            return None, None
        if nxt and nxt in "@*#?$!-0123456789":
            self.i += 2
            return None, None
        self.i += 1
        return "$", None


def _substitutions(text: str) -> list[str]:
    """The bodies of the ``$(…)`` and backtick substitutions in ``text``."""
    out: list[str] = []
    i = 0
    while i < len(text):
        if text.startswith("$(", i):
            end = matching_paren(text, i + 1)
            if end < 0:
                out.append(text[i + 2 :])
                break
            out.append(text[i + 2 : end])
            i = end + 1
        elif text[i] == "`":
            end = text.find("`", i + 1)
            out.append(text[i + 1 : end] if end > 0 else text[i + 1 :])
            if end < 0:
                break
            i = end + 1
        else:
            i += 1
    return out


# -- parser ----------------------------------------------------------------------------------
class _Parser:
    def __init__(self, text: str, depth: int) -> None:
        self.text = text
        self.toks = _Lexer(text).tokens()
        self.i = 0
        self.depth = depth
        self.out: list[SimpleCommand] = []

    def parse(self) -> list[SimpleCommand]:
        self._list(stop=())
        if self.i < len(self.toks):
            raise _Unsupported(f"unexpected {self.toks[self.i].value!r}")
        return self.out

    def _peek(self) -> _Tok | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def _is_word(self, value: str) -> bool:
        t = self._peek()
        return (
            t is not None
            and t.kind == "word"
            and t.word is not None
            and t.word.literal
            and t.value == value
            and t.word.raw == value
        )

    def _expect_word(self, value: str) -> None:
        if not self._is_word(value):
            raise _Unsupported(f"expected {value!r}")
        self.i += 1

    def _skip_separators(self) -> None:
        while (t := self._peek()) is not None and t.kind == "op" and t.value in (";", "\n", "&"):
            self.i += 1

    def _list(self, stop: tuple[str, ...]) -> None:
        """Commands separated by ; & && || | newlines until a stop word or ``)``."""
        while True:
            self._skip_separators()
            t = self._peek()
            if t is None:
                return
            if t.kind == "op" and t.value in (")", ";;", ";&", ";;&"):
                return
            if t.kind == "word" and t.value in stop and t.word is not None and t.word.literal:
                return
            self._command()
            t = self._peek()
            if t is None:
                return
            if t.kind == "op" and t.value in ("&&", "||", "|", "|&", ";", "&", "\n"):
                self.i += 1
                continue
            if t.kind == "op" and t.value in (")", ";;", ";&", ";;&"):
                return
            if t.kind == "word" and t.value in stop:
                return
            raise _Unsupported(f"unexpected {t.value!r}")

    def _command(self) -> None:
        t = self._peek()
        assert t is not None
        if t.kind == "op" and t.value == "(":
            self.i += 1
            self._list(stop=())
            self._expect_op(")")
            self._trailing_redirects()
            return
        if t.kind == "word" and t.word is not None and t.word.literal and t.word.raw == t.value:
            v = t.value
            if v == "!":
                self.i += 1
                self._command()
                return
            if v == "{":
                self.i += 1
                self._list(stop=("}",))
                self._expect_word("}")
                self._trailing_redirects()
                return
            if v in ("if", "while", "until"):
                self._compound(v)
                return
            if v == "for" or v == "select":
                self._for()
                return
            if v == "case":
                self._case()
                return
            if v == "time":
                self.i += 1
                if self._is_word("-p"):
                    self.i += 1
                self._command()
                return
            if v in ("function", "[[", "coproc", "select"):
                raise _Unsupported(v)
            if v in ("then", "elif", "else", "fi", "do", "done", "esac", "}", "in", "]]"):
                raise _Unsupported(f"unexpected {v!r}")
        self._simple()

    def _expect_op(self, value: str) -> None:
        t = self._peek()
        if t is None or t.kind != "op" or t.value != value:
            raise _Unsupported(f"expected {value!r}")
        self.i += 1

    def _trailing_redirects(self) -> None:
        writes = False
        while (t := self._peek()) is not None and t.kind == "redir":
            writes |= self._redirect()
        if writes:
            self.out.append(SimpleCommand((), resolved=False, writes=True, text=self.text))

    def _compound(self, kind: str) -> None:
        self.i += 1
        if kind == "if":
            self._list(stop=("then",))
            self._expect_word("then")
            self._list(stop=("elif", "else", "fi"))
            while self._is_word("elif"):
                self.i += 1
                self._list(stop=("then",))
                self._expect_word("then")
                self._list(stop=("elif", "else", "fi"))
            if self._is_word("else"):
                self.i += 1
                self._list(stop=("fi",))
            self._expect_word("fi")
        else:
            self._list(stop=("do",))
            self._expect_word("do")
            self._list(stop=("done",))
            self._expect_word("done")
        self._trailing_redirects()

    def _for(self) -> None:
        self.i += 1
        t = self._peek()
        if t is None or t.kind != "word" or t.word is None or not _NAME.fullmatch(t.value):
            raise _Unsupported("for without a name")
        self.i += 1
        self._skip_newlines()
        if self._is_word("in"):
            self.i += 1
            while (t := self._peek()) is not None and t.kind == "word":
                self._note_word(t)
                self.i += 1
        self._skip_separators()
        self._expect_word("do")
        self._list(stop=("done",))
        self._expect_word("done")
        self._trailing_redirects()

    def _skip_newlines(self) -> None:
        while (t := self._peek()) is not None and t.kind == "op" and t.value == "\n":
            self.i += 1

    def _case(self) -> None:
        self.i += 1
        t = self._peek()
        if t is None or t.kind != "word":
            raise _Unsupported("case without a word")
        self._note_word(t)
        self.i += 1
        self._skip_newlines()
        self._expect_word("in")
        while True:
            self._skip_newlines()
            if self._is_word("esac"):
                self.i += 1
                break
            if (t := self._peek()) is not None and t.kind == "op" and t.value == "(":
                self.i += 1
            # patterns: word ( | word )* )
            while True:
                t = self._peek()
                if t is None or t.kind != "word":
                    raise _Unsupported("case pattern")
                self._note_word(t)
                self.i += 1
                t = self._peek()
                if t is not None and t.kind == "op" and t.value == "|":
                    self.i += 1
                    continue
                break
            self._expect_op(")")
            self._list(stop=("esac",))
            t = self._peek()
            if t is not None and t.kind == "op" and t.value in (";;", ";&", ";;&"):
                self.i += 1
        self._trailing_redirects()

    def _note_word(self, t: _Tok) -> None:
        """A word that is expanded but not run as a command: substitutions inside it run."""
        assert t.word is not None
        if not t.word.literal:
            self.out.append(SimpleCommand((), resolved=False, text=t.word.raw))
        for body in t.word.inner:
            self._nested(body)

    def _nested(self, body: str) -> None:
        for cmd in parse_command(body, _depth=self.depth + 1):
            self.out.append(cmd)

    def _redirect(self) -> bool:
        """Consume one redirection; True when it may write a file."""
        t = self._peek()
        assert t is not None and t.kind == "redir"
        op = t.value
        self.i += 1
        if op in ("<<", "<<-"):
            raise _Unsupported("heredoc")
        target = self._peek()
        if target is None or target.kind != "word" or target.word is None:
            raise _Unsupported("redirection without a target")
        self.i += 1
        word = target.word
        for body in word.inner:
            self._nested(body)
        if not word.literal:
            self.out.append(SimpleCommand((), resolved=False, text=word.raw))
            return True
        if op in ("<", "<<<"):
            return False
        if op in ("<&", ">&") and (word.text.isdigit() or word.text == "-"):
            return False
        return word.text != "/dev/null"

    def _simple(self) -> None:
        words: list[_Word] = []
        writes = False
        resolved = True
        start_tok = self.i
        while (t := self._peek()) is not None and t.kind in ("word", "redir"):
            if t.kind == "redir":
                writes |= self._redirect()
                continue
            assert t.word is not None
            # `name() {` function definitions
            nxt = self.toks[self.i + 1] if self.i + 1 < len(self.toks) else None
            if not words and nxt is not None and nxt.kind == "op" and nxt.value == "(":
                raise _Unsupported("function definition")
            words.append(t.word)
            self.i += 1
        if self.i == start_tok:
            raise _Unsupported("empty command")
        text = " ".join(w.raw for w in words)
        for w in words:
            for body in w.inner:
                self._nested(body)
            if not w.literal or w.inner:
                resolved = False
            elif any(marker in w.text for marker in ("$(", "`", "${")):
                resolved = False  # code-bearing text some builtins evaluate (test -v, printf -v, ${x@P})
        # leading assignments
        k = 0
        while k < len(words) and _ASSIGN.match(words[k].raw):
            k += 1
        assigned = k > 0
        rest = words[k:]
        if not rest:
            self.out.append(SimpleCommand((), resolved=False, writes=writes, text=text))
            return
        if assigned:
            resolved = False  # X=… cmd: the environment may change what cmd does
        if not rest[0].literal or rest[0].glob:
            resolved = False  # the command name itself is an expansion (or a file-name pattern)
        values = [w.text for w in rest]
        self._emit(values, resolved=resolved, writes=writes, text=text)

    def _emit(
        self, values: list[str], *, resolved: bool, writes: bool, text: str, open_args: bool = False
    ) -> None:
        if self.depth > 8:
            raise _Unsupported("nesting too deep")
        unwrapped = _unwrap(values)
        if unwrapped is None:
            self.out.append(
                SimpleCommand(tuple(values), resolved=False, writes=writes, text=text, open_args=open_args)
            )
            return
        kind, inner, extra_resolved = unwrapped
        if kind == "shell":
            # bash <<< 'rm -rf x', echo rm -rf x | sh: what runs is in text this command does
            # not hold, so deny rules see the whole input
            self.out.append(SimpleCommand(tuple(values), resolved=False, writes=writes, text=self.text))
            return
        if kind == "none":
            name = command_basename(values[0]) if values else ""
            if name in _POISON or _evaluates_names(name, values[1:]):
                resolved = False
                if name in ("eval", "trap") and len(values) > 1:
                    try:
                        self._nested(" ".join(values[1:]) if name == "eval" else values[1])
                    except _Unsupported:
                        pass
            self.out.append(
                SimpleCommand(tuple(values), resolved=resolved, writes=writes, text=text, open_args=open_args)
            )
            return
        if kind == "script":
            # sh -c STRING: the string is parsed on its own
            if not resolved:
                self.out.append(SimpleCommand(tuple(values), resolved=False, writes=writes, text=text))
                return
            for cmd in parse_command(inner[0], _depth=self.depth + 1):
                self.out.append(cmd)
            if writes:
                self.out.append(SimpleCommand((), resolved=False, writes=True, text=text))
            return
        if kind == "find":
            # the find command itself, and every -exec command
            find_words, execs = inner[0], inner[1:]
            self.out.append(
                SimpleCommand(tuple(find_words.split("\0")), resolved=resolved, writes=writes, text=text)
            )
            for ex in execs:
                self._emit(ex.split("\0"), resolved=resolved, writes=False, text=text)
            return
        if not inner:
            self.out.append(SimpleCommand(tuple(values), resolved=resolved, writes=writes, text=text))
            return
        self._emit(
            inner,
            resolved=resolved and extra_resolved,
            writes=writes,
            text=text,
            open_args=open_args or kind == "xargs",
        )


def _evaluates_names(name: str, args: list[str]) -> bool:
    """``test -v NAME``, ``[ -v NAME ]``, ``printf -v NAME``: bash evaluates array subscripts
    in NAME as arithmetic, which runs command substitutions hidden in plain text."""
    if name in ("test", "[", "[["):
        return "-v" in args or "-R" in args or any("[" in a for a in args)
    if name == "printf":
        return any(a.startswith("-v") for a in args)
    return False


_Unwrapped = tuple[str, list[str], bool] | None
"""What stripping one wrapper gives: (kind, inner words, still resolved), or None when
the wrapper's options are not understood."""


def _unwrap(words: list[str]) -> _Unwrapped:
    """Strip one wrapper. Returns (kind, inner words, still resolved), ("none", …) when the
    command is no wrapper, or None when a wrapper's options are not understood."""
    if not words:
        return "none", [], True
    name = command_basename(words[0])
    args = words[1:]
    unwrap = _UNWRAPPERS.get(name)
    if unwrap is not None:
        return unwrap(name, words, args)
    if name in _SHELLS:
        return _unwrap_shell(name, args)
    if name in _OPAQUE_WRAPPERS:
        return None  # runs another command whose place in the words this parser does not know
    return "none", [], True


def _unwrap_builtin(name: str, words: list[str], args: list[str]) -> _Unwrapped:
    """``command``, ``builtin``, ``nohup``, ``exec``."""
    i = 0
    while i < len(args) and args[i].startswith("-") and args[i] != "--":
        opt = args[i]
        if name == "command" and opt in ("-v", "-V"):
            return "none", [], True  # a lookup, not a run
        if name == "exec" and opt == "-a":
            i += 2
            continue
        if name in ("command", "exec") and set(opt[1:]) <= set("pcl"):
            i += 1
            continue
        return None
    if i < len(args) and args[i] == "--":
        i += 1
    return "wrap", args[i:], True


def _unwrap_time(name: str, words: list[str], args: list[str]) -> _Unwrapped:
    i = 1 if args[:1] == ["-p"] else 0
    return "wrap", args[i:], True


def _unwrap_env(name: str, words: list[str], args: list[str]) -> _Unwrapped:
    i = 0
    clean = True
    while i < len(args):
        a = args[i]
        if a in ("-i", "-", "--ignore-environment", "-0", "--null", "-v", "--debug"):
            clean = False
            i += 1
        elif a in ("-u", "--unset", "-C", "--chdir"):
            clean = False
            i += 2
        elif a.startswith(("--unset=", "--chdir=")) or (a.startswith(("-u", "-C")) and len(a) > 2):
            clean = False
            i += 1
        elif a == "--":
            i += 1
            break
        elif a.startswith("-"):
            return None  # -S and unknown options: not understood
        elif _ASSIGN.match(a):
            clean = False
            i += 1
        else:
            break
    return "wrap", args[i:], clean


def _unwrap_nice(name: str, words: list[str], args: list[str]) -> _Unwrapped:
    i = 0
    if i < len(args) and args[i] in ("-n", "--adjustment"):
        i += 2
    elif i < len(args) and (args[i].startswith("--adjustment=") or re.fullmatch(r"-n?-?\d+", args[i])):
        i += 1
    return "wrap", args[i:], True


def _unwrap_timeout(name: str, words: list[str], args: list[str]) -> _Unwrapped:
    i = 0
    while i < len(args) and args[i].startswith("-"):
        a = args[i]
        if a in ("-k", "-s", "--kill-after", "--signal"):
            i += 2
        elif a in ("--preserve-status", "--foreground", "-v", "--verbose") or a.startswith(
            ("--kill-after=", "--signal=")
        ):
            i += 1
        elif a.startswith(("-k", "-s")):
            i += 1
        else:
            return None
    if i >= len(args):
        return "wrap", [], True
    return "wrap", args[i + 1 :], True  # skip the duration


def _unwrap_sudo(name: str, words: list[str], args: list[str]) -> _Unwrapped:
    """``sudo``, ``doas``."""
    i = 0
    while i < len(args) and args[i].startswith("-"):
        a = args[i]
        if a == "--":
            i += 1
            break
        if a in ("-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U", "-T"):
            i += 2
        elif re.fullmatch(r"-[AbEHiKklnPSsV]+", a) or a.startswith("--"):
            i += 1
        else:
            return None
    return "wrap", args[i:], False


def _unwrap_xargs(name: str, words: list[str], args: list[str]) -> _Unwrapped:
    i = 0
    takes = {"-I", "-L", "-n", "-P", "-s", "-d", "-E", "-a"}
    while i < len(args) and args[i].startswith("-"):
        a = args[i]
        if a == "--":
            i += 1
            break
        if a in takes:
            i += 2
        elif (
            a.startswith("--")
            or a[:2] in takes
            or a[:2] in ("-i", "-l", "-e")
            or re.fullmatch(r"-[0rtpxo]+", a)
        ):
            i += 1
        else:
            return None
    inner = args[i:] or ["echo"]
    return "xargs", inner, True


def _unwrap_find(name: str, words: list[str], args: list[str]) -> _Unwrapped:
    find_words = [words[0]]
    execs: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("-exec", "-execdir", "-ok", "-okdir"):
            j = i + 1
            while j < len(args) and args[j] not in (";", "+"):
                j += 1
            if j >= len(args) or j == i + 1:
                return None
            execs.append("\0".join(args[i + 1 : j]))
            find_words.append(a)
            i = j + 1
            continue
        find_words.append(a)
        i += 1
    if not execs:
        return "none", [], True
    return "find", ["\0".join(find_words), *execs], True


def _unwrap_shell(name: str, args: list[str]) -> _Unwrapped:
    """A shell (:data:`_SHELLS`): its ``-c`` script, else code from stdin or a file."""
    i = 0
    rest = args
    if name == "busybox":
        if not args or command_basename(args[0]) not in _SHELLS:
            return "wrap", args, True
        rest = args[1:]
    while i < len(rest) and rest[i].startswith(("-", "+")) and rest[i] not in ("-", "--"):
        a = rest[i]
        if a in ("-o", "+o", "-O", "+O", "--rcfile", "--init-file"):
            i += 2
            continue
        if not a.startswith("--") and "c" in a[1:]:
            if i + 1 >= len(rest):
                return None
            return "script", [rest[i + 1]], True
        i += 1
    return "shell", [], False  # the code comes from stdin or a file: not known here


_UNWRAPPERS: dict[str, Callable[[str, list[str], list[str]], _Unwrapped]] = {
    "command": _unwrap_builtin,
    "builtin": _unwrap_builtin,
    "nohup": _unwrap_builtin,
    "exec": _unwrap_builtin,
    "time": _unwrap_time,
    "env": _unwrap_env,
    "nice": _unwrap_nice,
    "timeout": _unwrap_timeout,
    "sudo": _unwrap_sudo,
    "doas": _unwrap_sudo,
    "xargs": _unwrap_xargs,
    "find": _unwrap_find,
}
"""The wrappers :func:`_unwrap` strips, by command name (shells apart)."""


def parse_command(text: str, *, _depth: int = 0) -> list[SimpleCommand]:
    """Every simple command ``text`` runs, as a real shell parser sees it.

    Never raises: input the parser does not understand comes back as one unresolved
    command carrying the whole text.
    """
    if _depth > 8:
        return [SimpleCommand((), resolved=False, text=text)]
    try:
        return _Parser(text, _depth).parse()
    except Exception:  # _Unsupported, and anything unforeseen: unresolved, never a crash
        return [SimpleCommand((), resolved=False, text=text)]
