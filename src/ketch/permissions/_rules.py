"""Permission rules: ``Tool``, ``Tool(specifier)``, ``mcp__server``, ``mcp__server__tool``.

Specifiers: for bash, a command (``Bash(git status)``: exactly that command;
``Bash(npm run test:*)``: that command followed by anything); for file tools, a
gitignore-style path pattern (``Edit(src/**)``, ``Read(./.env)``, ``Read(~/.ssh/**)``,
``Read(//etc/**)`` for an absolute path).
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterable
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from functools import lru_cache
from typing import Any

from .._paths import could_contain
from .._paths import glob_escape
from .._paths import glob_regex
from .._paths import has_wildcard
from .._paths import join_in_root
from .._paths import link_targets
from .._paths import pattern_base
from .._paths import resolve_base
from .._paths import within
from ._shell import SimpleCommand
from ._shell import _Lexer
from ._shell import _Unsupported
from ._shell import command_basename
from ._shell import possible_names
from ._shell import trusted_name

RULE_FORMS = (
    "expected Tool, Tool(specifier) or mcp__server[__tool], e.g. Bash(git status), "
    "Bash(npm run test:*), Edit(src/**), Read(./.env), mcp__github"
)
_RULE = re.compile(r"^\s*([A-Za-z0-9_.\-]+)\s*(?:\((.*)\))?\s*$", re.DOTALL)

TOOL_FAMILIES: Mapping[str, frozenset[str]] = {
    "edit": frozenset({"edit", "write"}),
    "read": frozenset({"read", "grep", "find", "ls"}),
}
"""The tools a rule naming the key covers (``Edit(...)`` covers every file-editing tool,
``Read(...)`` every file-reading one); any other rule names one tool."""

PATH_TOOLS = frozenset({"read", "write", "edit", "grep", "find", "ls"})
_FILE_RULE_TOOLS = PATH_TOOLS | TOOL_FAMILIES.keys()
_SHELL_TOOLS = frozenset({"bash"})
_LISTS = frozenset({"grep", "find", "ls"})  # the tools that show a folder's file names


def rule_subject(tool_name: str, args: Mapping[str, Any]) -> str | None:
    """What a rule specifier is matched against: ``command`` for bash, else ``path``
    (``"."`` for the search and listing tools, which default to the workspace)."""
    name = tool_name.lower()
    if name in _SHELL_TOOLS:
        value = args.get("command")
        return value if isinstance(value, str) else None
    value = args.get("path")
    if isinstance(value, str) and value:
        return value
    if name in ("grep", "find", "ls"):
        return "."
    return None


@dataclass(frozen=True, slots=True)
class _BashPattern:
    words: tuple[str, ...]
    prefix: bool


@lru_cache(maxsize=512)
def _bash_pattern(spec: str) -> _BashPattern:
    text = spec.strip()
    prefix = False
    if text.endswith(":*"):
        text, prefix = text[:-2].rstrip(), True
    try:
        toks = _Lexer(text).tokens()
    except _Unsupported as exc:
        raise ValueError(str(exc)) from None
    words: list[str] = []
    for t in toks:
        if t.kind != "word" or t.word is None or not t.word.literal:
            raise ValueError("a bash specifier is one simple command without operators or expansions")
        words.append(t.word.text)
    if words and words[-1] == "*":
        words.pop()
        prefix = True
    elif words and words[-1].endswith("*") and not words[-1].endswith("\\*"):
        words[-1] = words[-1][:-1]
        if not words[-1]:
            words.pop()
        prefix = True
    if not words:
        raise ValueError("a bash specifier needs a command")
    return _BashPattern(tuple(words), prefix)


_GLOBBY = re.compile(r"[*?\[]")


def _word_matches(pattern: str, word: str) -> bool:
    return fnmatch.fnmatchcase(word, pattern) if any(c in pattern for c in "*?[") else word == pattern


# Options that mean the same as a short flag, for the commands deny rules most often name.
_FLAG_ALIASES: Mapping[str, Mapping[str, str]] = {
    "rm": {"R": "r", "--recursive": "r", "--force": "f", "--dir": "d"},
    "cp": {"R": "r", "--recursive": "r", "--force": "f"},
    "git": {"--force": "f", "--force-with-lease": "f"},
    "chmod": {"--recursive": "R"},
    "chown": {"--recursive": "R"},
}


def _split_options(words: Iterable[str], name: str = "") -> tuple[set[str], set[str], list[str]]:
    aliases = _FLAG_ALIASES.get(name, {})
    shorts: set[str] = set()
    longs: set[str] = set()
    positional: list[str] = []
    options_done = False
    for w in words:
        if not options_done and w == "--":
            options_done = True
        elif not options_done and w.startswith("--") and len(w) > 2:
            key = w.split("=", 1)[0]
            if key in aliases:
                shorts.add(aliases[key])
            else:
                longs.update((w, key))
        elif not options_done and re.fullmatch(r"-[A-Za-z]+", w):
            shorts.update(aliases.get(c, c) for c in w[1:])
        else:
            positional.append(w)
    return shorts, longs, positional


def _subsequence(want: list[str], have: list[str]) -> bool:
    it = iter(have)
    return all(any(_word_matches(w, h) for h in it) for w in want)


def _bash_allows(p: _BashPattern, cmd: SimpleCommand) -> bool:
    if not cmd.resolved or cmd.writes or not cmd.words:
        return False
    head = p.words[0]
    name = cmd.words[0] if "/" in head else trusted_name(cmd.words[0])
    if name is None or not _word_matches(head, name):
        return False
    rest, want = cmd.words[1:], p.words[1:]
    if p.prefix:
        if len(rest) < len(want):
            return False
    elif len(rest) != len(want) or cmd.open_args:
        return False
    return all(_word_matches(w, r) for w, r in zip(want, rest, strict=False))


def _bash_denies(p: _BashPattern, cmd: SimpleCommand) -> bool:
    head = command_basename(p.words[0])
    if not cmd.resolved or cmd.open_args:
        names = possible_names(cmd.text)
        names.update(command_basename(w) for w in cmd.words)
        # a word that is a file-name pattern (r[m], /bin/r?) may name the command too
        return any(_word_matches(head, n) or (_GLOBBY.search(n) and fnmatch.fnmatchcase(head, n)) for n in names)
    if not cmd.words or not _word_matches(head, command_basename(cmd.words[0])):
        return False
    rest, want = cmd.words[1:], p.words[1:]
    # literally
    if (len(rest) >= len(want) if p.prefix else len(rest) == len(want)) and all(
        _word_matches(w, r) for w, r in zip(want, rest, strict=False)
    ):
        return True
    # options in any order, clustered or spelled out (-rf == -fr == -r -f == --recursive --force),
    # and for prefix rules options between the words (git -C dir push --force)
    name = command_basename(cmd.words[0])
    want_short, want_long, want_pos = _split_options(want, name)
    have_short, have_long, have_pos = _split_options(rest, name)
    if not (want_short <= have_short and want_long <= have_long):
        return False
    if p.prefix:
        return _subsequence(want_pos, have_pos)
    return len(have_pos) == len(want_pos) and all(_word_matches(w, h) for w, h in zip(want_pos, have_pos, strict=True))


# -- paths -----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _PathPattern:
    pattern: str  # normalised: absolute ("/…") or workspace-relative
    absolute: bool


def _path_pattern(spec: str) -> _PathPattern:
    text = spec.strip()
    if not text:
        raise ValueError("empty path pattern")
    if text.startswith("//"):
        return _PathPattern(resolve_base(os.path.normpath("/" + text[2:].lstrip("/"))), True)
    if text == "~" or text.startswith("~/"):
        home = glob_escape(os.path.expanduser("~"))
        return _PathPattern(resolve_base(os.path.normpath(home + text[1:])), True)
    anchored = text.startswith(("/", "./")) or "/" in text.rstrip("/")
    text = text.removeprefix("./").lstrip("/").rstrip("/")
    norm = os.path.normpath(text) if text else "."
    if norm.startswith(".."):
        raise ValueError("a workspace path pattern cannot leave the workspace (use //absolute or ~/ paths)")
    if not anchored:
        norm = "**/" + norm
    return _PathPattern(norm, False)


def absolute_pattern(rule: Rule, root: str) -> str | None:
    """A path rule's pattern made absolute (a workspace-relative one taken from ``root``),
    None for a rule without a path specifier."""
    if rule.specifier is None or rule.tool in _SHELL_TOOLS or rule.tool.startswith("mcp__"):
        return None
    p = _path_pattern(rule.specifier)
    if p.absolute:
        return p.pattern
    base = glob_escape(root)  # a folder named proj[1] is no character set
    return base if p.pattern == "." else os.path.join(base, p.pattern)


def workspace_pattern(pattern: str, root: str) -> str | None:
    """An absolute pattern as a pattern relative to ``root`` when everything it can name
    lies inside ``root`` (its part before the first wildcard does), else None."""
    escaped = glob_escape(root)
    if not within(pattern_base(pattern), root) or pattern == escaped:
        return None
    return _relative(pattern, escaped)


def _ancestors(path: str) -> list[str]:
    """``a/b/c`` -> [a/b/c, a/b, a]; an absolute path keeps its root."""
    out = [path]
    while True:
        parent = os.path.dirname(path)
        if not parent or parent == path or parent == "/":
            return out
        out.append(parent)
        path = parent


def _path_matches(p: _PathPattern, candidates: Iterable[str]) -> bool:
    if p.pattern in (".", "/"):  # the workspace (./) or the filesystem (//): all below
        return any(True for _ in candidates)
    regex = glob_regex(p.pattern)
    for candidate in candidates:
        if candidate == ".":  # the workspace itself has no name a pattern could match
            continue
        if any(regex.fullmatch(a) for a in _ancestors(candidate)):
            return True
    return False


@dataclass(frozen=True, slots=True)
class ResolvedPath:
    """A call's path, absolute, three ways, and their workspace-relative forms (None when
    outside the workspace): ``real``, the file the workspace tools touch (``..`` taken
    first, then symlinks followed); ``followed``, the file the kernel opens for the path
    as written (symlinks followed as they come, then ``..``), which a tool that opens the
    path itself touches; and ``lexical``, the path as written, normalised."""

    real: str
    lexical: str
    real_rel: str | None
    lexical_rel: str | None
    followed: str
    followed_rel: str | None

    @property
    def relative(self) -> list[str]:
        """Every workspace-relative form there is (for deny rules: any may match)."""
        return [c for c in (self.real_rel, self.followed_rel, self.lexical_rel) if c is not None]


def resolve_path(subject: str, root: str) -> ResolvedPath:
    """Resolve ``subject`` against the workspace ``root`` (which must be a real path)."""
    joined = join_in_root(root, subject)
    lexical = os.path.normpath(joined)
    real = os.path.realpath(lexical)
    followed = os.path.realpath(joined)

    return ResolvedPath(
        real, lexical, _relative(real, root), _relative(lexical, root), followed, _relative(followed, root)
    )


def _relative(path: str, root: str) -> str | None:
    """``path`` relative to ``root`` (``.`` for the root itself), None when outside it."""
    if path == root:
        return "."
    return path[len(root.rstrip(os.sep)) + 1 :] if within(path, root) else None


# -- rules -----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Rule:
    """A permission rule: a tool name (lowercase) and an optional specifier.

    ``text`` is the rule as written and ``source`` where it came from (``user``,
    ``project``, ``local``, ``code``, ``session``, ``flag``); neither takes part in
    equality.
    """

    tool: str
    specifier: str | None = None
    text: str = field(default="", compare=False)
    source: str = field(default="code", compare=False)

    @classmethod
    def parse(cls, text: str, source: str = "code") -> Rule:
        """Parse a rule string; ``ValueError`` (one line naming the rule and the allowed
        forms) for anything else."""
        m = _RULE.match(text) if isinstance(text, str) else None
        if m is None:
            raise ValueError(f"Invalid permission rule {text!r}: {RULE_FORMS}")
        tool = m.group(1).lower()
        spec = m.group(2)
        spec = spec.strip() if spec is not None else None
        spec = spec or None
        if spec is not None:
            try:
                if tool in _SHELL_TOOLS:
                    _bash_pattern(spec)
                elif tool in PATH_TOOLS or tool in TOOL_FAMILIES:
                    _path_pattern(spec)
                elif tool.startswith("mcp__"):
                    raise ValueError("mcp rules take no specifier")
            except ValueError as exc:
                raise ValueError(f"Invalid permission rule {text!r}: {exc}; {RULE_FORMS}") from None
        return cls(tool, spec, text.strip(), source)

    def __str__(self) -> str:
        if self.text:
            return self.text
        return self.tool if self.specifier is None else f"{self.tool}({self.specifier})"

    def covers_tool(self, tool_name: str) -> bool:
        """Whether this rule is about ``tool_name`` at all (case-insensitive)."""
        name = tool_name.lower()
        if self.tool.startswith("mcp__"):
            server = self.tool.removesuffix("__*")
            return name == server or name.startswith(server + "__")
        family = TOOL_FAMILIES.get(self.tool)
        return name in family if family is not None else name == self.tool

    def allows(
        self,
        tool_name: str,
        args: Mapping[str, Any],
        root: str | None,
        commands: list[SimpleCommand] | None = None,
    ) -> bool:
        """As an allow rule: whether it covers this call. For bash every simple command
        must match; an unresolved command never does. A path must resolve inside the
        workspace for a workspace-relative pattern."""
        return self._matches(tool_name, args, root, commands, deny=False)

    def denies(
        self,
        tool_name: str,
        args: Mapping[str, Any],
        root: str | None,
        commands: list[SimpleCommand] | None = None,
    ) -> bool:
        """As a deny (or ask) rule: whether it covers this call. For bash any simple command
        matching is enough, and an unresolved one matches on any word that might name the
        command; paths match resolved or as written."""
        return self._matches(tool_name, args, root, commands, deny=True)

    def _matches(
        self,
        tool_name: str,
        args: Mapping[str, Any],
        root: str | None,
        commands: list[SimpleCommand] | None,
        *,
        deny: bool,
    ) -> bool:
        """:meth:`allows` (every simple command must match) or :meth:`denies` (any one is
        enough; paths also match as written, and grep also by the folders it searches)."""
        if not self.covers_tool(tool_name):
            return False
        if self.specifier is None:
            return True
        subject = rule_subject(tool_name, args)
        if subject is None:
            return False
        if tool_name.lower() in _SHELL_TOOLS:
            p = _bash_pattern(self.specifier)
            cmds = commands if commands is not None else _commands(subject)
            if deny:
                return any(_bash_denies(p, c) for c in cmds)
            return bool(cmds) and all(_bash_allows(p, c) for c in cmds)
        name = tool_name.lower()
        return self._path(subject, root, deny=deny, searches=deny and name == "grep", lists=deny and name in _LISTS)

    def _path(self, subject: str, root: str | None, *, deny: bool, searches: bool = False, lists: bool = False) -> bool:
        assert self.specifier is not None
        p = _path_pattern(self.specifier)
        if lists and p.pattern.endswith("/**") and len(p.pattern) > 3:
            # a folder whose contents may not be read may not be listed either
            p = _PathPattern(p.pattern[:-3], p.absolute)
        base = root if root is not None else os.path.realpath(os.getcwd())
        r = resolve_path(subject, base)
        if deny and not p.absolute:
            # a pattern through a symlinked folder of the workspace (lnk/b.txt, lnk -> d)
            # also names the file as the tools resolve it (d/b.txt), and a wildcard one
            # what the symlinks it names lead to (**/keys/** with keys -> vault: vault)
            return any(self._denies(q, r, searches) for q in _with_resolved(p, base)) or _in_link_target(
                p, base, r, searches
            )
        if p.absolute:
            if deny:
                return self._denies(p, r, searches)
            return _path_matches(p, (r.real,)) and _path_matches(p, (r.followed,))
        # allow: the file the tools touch and the one the kernel would open must both be
        # inside the workspace and match (they differ only through a symlink and "..")
        return (
            r.real_rel is not None
            and r.followed_rel is not None
            and _path_matches(p, (r.real_rel,))
            and _path_matches(p, (r.followed_rel,))
        )

    @staticmethod
    def _denies(p: _PathPattern, r: ResolvedPath, searches: bool) -> bool:
        if searches and (os.path.isdir(r.real) or os.path.isdir(r.followed)):
            # a content search of a folder reads every file below it
            folders = (r.real, r.followed, r.lexical) if p.absolute else r.relative
            if any(could_contain(p.pattern, folder) for folder in folders):
                return True
        return _path_matches(p, (r.real, r.followed, r.lexical) if p.absolute else r.relative)


def _with_resolved(p: _PathPattern, root: str) -> list[_PathPattern]:
    """A workspace-relative pattern, and the same with its part before the first wildcard
    resolved when that leads elsewhere in the workspace."""
    if p.pattern == ".":
        return [p]
    escaped = glob_escape(root)
    full = os.path.join(escaped, p.pattern)
    real = resolve_base(full)
    relative = _relative(real, escaped) if real != full else None
    return [p] if relative in (None, ".") else [p, _PathPattern(relative, False)]


def _in_link_target(p: _PathPattern, root: str, r: ResolvedPath, searches: bool) -> bool:
    """Whether the call's path lies in where a symlink the wildcard pattern names leads
    (:func:`~ketch._paths.link_targets`; real paths, matched without a pattern), or for
    a content search (``searches``) of a folder, whether such a place lies below it."""
    if not has_wildcard(p.pattern):
        return False
    targets = link_targets(os.path.join(glob_escape(root), p.pattern))
    if not targets:
        return False
    forms = (r.real, r.followed, r.lexical)
    if any(within(form, t) for t in targets for form in forms):
        return True
    if not searches:
        return False
    folders = [form for form in forms if os.path.isdir(form)]
    return any(within(t, folder) for t in targets for folder in folders)


def search_links(rules: Iterable[Rule], root: str | None) -> None:
    """Search again where the symlinks the rules' workspace-relative wildcard patterns
    name lead (:func:`~ketch._paths.link_targets`), as a new engine starts (``root``
    None: the current directory; one that is gone searches nothing)."""
    patterns = [
        p.pattern
        for p in (_path_pattern(r.specifier) for r in rules if r.specifier is not None and r.tool in _FILE_RULE_TOOLS)
        if not p.absolute and has_wildcard(p.pattern)
    ]
    if not patterns:
        return
    try:
        escaped = glob_escape(root if root is not None else os.path.realpath(os.getcwd()))
    except OSError:
        return
    for pattern in patterns:
        link_targets(os.path.join(escaped, pattern), search=True)


def _commands(command: str) -> list[SimpleCommand]:
    from ._shell import parse_command

    return parse_command(command)


def parse_rules(items: Iterable[str | Rule], source: str = "code") -> list[Rule]:
    """Rules from strings or :class:`Rule` objects (``ValueError`` for a bad string)."""
    return [r if isinstance(r, Rule) else Rule.parse(r, source) for r in items]
