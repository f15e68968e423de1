"""Plugins for the ``ketch`` command: Claude Code's plugin layout, installed per user.

A plugin is a folder (or a git repository) laid out as Claude Code plugins are::

    my-plugin/
      .claude-plugin/plugin.json   # {"name": "my-plugin", "version": ..., "description": ...}
      skills/NAME/SKILL.md         # Agent Skills (ketch.skills)
      commands/NAME.md             # custom slash commands (ketch.cli._commands)
      agents/NAME.md               # subagent files (ketch.subagents)
      hooks/hooks.json             # lifecycle hooks, once the plugin is trusted
      .mcp.json                    # MCP servers, once the plugin is trusted

``ketch plugin add PATH|GIT_URL`` copies the folder (or clones the repository) into
``<user config dir>/plugins/NAME`` and records it, enabled, in ``plugins.json`` there;
``list``, ``remove NAME``, ``enable NAME``, ``disable NAME``. An enabled plugin's skills,
commands and agents load after the user's own (a project's replace a plugin's of the
same name). Its hooks and MCP servers run commands, so, like a project's, they need trust:
``ketch plugin add --trust`` or ``ketch plugin trust NAME`` (``untrust`` takes it back);
``${CLAUDE_PLUGIN_ROOT}`` in a hook or server entry is the plugin's folder, a plugin's
hooks run after the user's and before the project's, and a server the user's
``.mcp.json`` names too is the user's. The parts ketch does not load (the hooks and MCP
servers of an untrusted plugin, hook events ketch does not have, LSP servers, output styles, manifest keys it does
not know) are named when the plugin is added and by ``ketch plugin list``; the rest of
the plugin works.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._dirs import config_dir

PLUGINS_DIR = "plugins"
REGISTRY = "plugins.json"
MANIFEST = Path(".claude-plugin") / "plugin.json"
LOADED = {"skills": "skills", "commands": "commands", "agents": "agents"}
MANIFEST_KEYS = ("name", "version", "description", "author", "homepage", "repository", "license", "keywords")
SKIPPED_KEYS = ("hooks", "mcpServers", "lspServers", "outputStyles", "commands", "agents", "skills")
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")


class PluginError(ValueError):
    """A plugin that cannot be added or changed (one line)."""


@dataclass(frozen=True, slots=True)
class Plugin:
    """An installed plugin: its name, folder, source, whether it is enabled, manifest."""

    name: str
    path: Path
    source: str
    enabled: bool
    manifest: Mapping[str, Any]
    trusted: bool = False

    def skipped(self) -> list[str]:
        """What of the plugin ketch does not load, each as ``what (where)``."""
        out = []
        hooks_file = self.path / "hooks" / "hooks.json"
        if hooks_file.is_file() and not self.trusted:
            out.append(f"hooks (hooks/hooks.json): they run commands, trust the plugin first (ketch plugin trust {self.name})")
        elif hooks_file.is_file():
            _, unknown = _hook_events(hooks_file)
            out.extend(f"hook event {e!r} (hooks/hooks.json): ketch has no such event" for e in unknown)
        if (self.path / ".mcp.json").is_file() and not self.trusted:
            out.append(f"MCP servers (.mcp.json): they run commands, trust the plugin first (ketch plugin trust {self.name})")
        for key in self.manifest:
            if key in SKIPPED_KEYS:
                out.append(f"manifest key {key!r}: custom paths and inline definitions are not supported yet")
            elif key not in MANIFEST_KEYS:
                out.append(f"manifest key {key!r}: unknown")
        return out


def plugins_home(environ: Mapping[str, str] | None = None) -> Path:
    """``<user config dir>/plugins``."""
    return config_dir(environ) / PLUGINS_DIR


def _registry(environ: Mapping[str, str] | None) -> dict[str, dict[str, Any]]:
    try:
        data = json.loads((config_dir(environ) / REGISTRY).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    plugins = data.get("plugins") if isinstance(data, dict) else None
    return {k: v for k, v in plugins.items() if isinstance(v, dict)} if isinstance(plugins, dict) else {}


def _save(registry: Mapping[str, Any], environ: Mapping[str, str] | None) -> None:
    path = config_dir(environ) / REGISTRY
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"plugins": dict(sorted(registry.items()))}, indent=2) + "\n", encoding="utf-8")


def read_manifest(folder: Path) -> dict[str, Any]:
    """The plugin manifest of ``folder``; :class:`PluginError` naming the file and field."""
    file = folder / MANIFEST
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except OSError:
        raise PluginError(f"{folder}: no plugin manifest ({MANIFEST} is missing)") from None
    except ValueError as exc:
        raise PluginError(f"{file}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise PluginError(f"{file}: the manifest must be a JSON object")
    name = data.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise PluginError(
            f"{file}: 'name' must be lowercase letters, digits, '.', '_' and '-' (got {name!r})"
        )
    return data


def installed(environ: Mapping[str, str] | None = None) -> list[Plugin]:
    """The installed plugins (sorted by name); one whose folder or manifest is gone is left out."""
    out = []
    for name, entry in _registry(environ).items():
        path = plugins_home(environ) / name
        try:
            manifest = read_manifest(path)
        except PluginError:
            continue
        enabled = entry.get("enabled", True) is not False
        out.append(Plugin(name, path, str(entry.get("source", "")), enabled, manifest, entry.get("trusted") is True))
    return sorted(out, key=lambda p: p.name)


def plugin_directories(kind: str, environ: Mapping[str, str] | None = None) -> list[tuple[Path, str]]:
    """The ``kind`` folders (``skills``, ``commands``, ``agents``) of the enabled
    plugins, each with its origin ``plugin NAME``."""
    return [(p.path / LOADED[kind], f"plugin {p.name}") for p in installed(environ) if p.enabled]


ROOT_VARIABLES = ("${CLAUDE_PLUGIN_ROOT}", "${KETCH_PLUGIN_ROOT}")


def _rooted(value: Any, root: str) -> Any:
    """``value`` with ``${CLAUDE_PLUGIN_ROOT}`` (and ``${KETCH_PLUGIN_ROOT}``) replaced by ``root``."""
    if isinstance(value, str):
        for variable in ROOT_VARIABLES:
            value = value.replace(variable, root)
        return value
    if isinstance(value, list):
        return [_rooted(v, root) for v in value]
    if isinstance(value, dict):
        return {k: _rooted(v, root) for k, v in value.items()}
    return value


def plugin_mcp_servers(
    read_mcp_json: Callable[[Path], dict[str, Any]], environ: Mapping[str, str] | None = None
) -> list[tuple[str, dict[str, Any], Path]]:
    """The MCP servers of the enabled and trusted plugins' ``.mcp.json`` files, each read
    by ``read_mcp_json`` (which raises for a bad file), as ``(name, entry, file)`` with the
    plugin's folder put in for ``${CLAUDE_PLUGIN_ROOT}``."""
    out = []
    for plugin in installed(environ):
        if plugin.enabled and plugin.trusted:
            file = plugin.path / ".mcp.json"
            for name, entry in read_mcp_json(file).get("mcpServers", {}).items():
                out.append((name, _rooted(entry, str(plugin.path)), file))
    return out


def _hook_events(file: Path) -> tuple[dict[str, Any], list[str]]:
    """The ``hooks`` object of a plugin's ``hooks/hooks.json`` with only the events ketch
    has, and the events left out; :class:`PluginError` for a bad file."""
    from ..hooks import HOOK_EVENTS

    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise PluginError(f"{file}: cannot read the plugin's hooks ({exc})") from None
    hooks = data.get("hooks") if isinstance(data, dict) else None
    if not isinstance(hooks, dict):
        raise PluginError(f'{file}: expected a JSON object with "hooks"')
    known = {k: v for k, v in hooks.items() if k in HOOK_EVENTS}
    return known, [k for k in hooks if k not in HOOK_EVENTS]


def plugin_hooks(environ: Mapping[str, str] | None = None) -> list[tuple[dict[str, Any], str]]:
    """The hooks of the enabled and trusted plugins (each the Claude-Code-shaped
    ``hooks`` object with ``${CLAUDE_PLUGIN_ROOT}`` put in, and its origin); events
    ketch does not have are left out (``ketch plugin list`` names them); a bad hooks file
    is a :class:`PluginError` naming it."""
    out = []
    for plugin in installed(environ):
        file = plugin.path / "hooks" / "hooks.json"
        if plugin.enabled and plugin.trusted and file.is_file():
            hooks, _ = _hook_events(file)
            if hooks:
                out.append((_rooted(hooks, str(plugin.path)), f"plugin {plugin.name} {file}"))
    return out


def _is_url(source: str) -> bool:
    return "://" in source or source.startswith("git@") or source.endswith(".git")


def add(source: str, environ: Mapping[str, str] | None = None, *, trusted: bool = False) -> Plugin:
    """Install the plugin at ``source`` (a folder, or a git URL cloned with ``git``);
    ``trusted``: its hooks and MCP servers may run."""
    home = plugins_home(environ)
    home.mkdir(parents=True, exist_ok=True)
    staging = home / ".adding"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        if _is_url(source):
            done = subprocess.run(
                ["git", "clone", "--quiet", "--depth", "1", source, str(staging)],
                capture_output=True, text=True, stdin=subprocess.DEVNULL,
            )
            if done.returncode != 0:
                why = (done.stderr.strip().splitlines() or ["git clone failed"])[-1]
                raise PluginError(f"cannot clone {source}: {why}")
            shutil.rmtree(staging / ".git", ignore_errors=True)
        else:
            folder = Path(source).expanduser()
            if not folder.is_dir():
                raise PluginError(f"{source}: not a folder or a git URL")
            read_manifest(folder)
            shutil.copytree(folder, staging, symlinks=True, ignore=shutil.ignore_patterns(".git"))  # links stay links (never their targets' content)
        manifest = read_manifest(staging)
        name = manifest["name"]
        registry = _registry(environ)
        if name in registry:
            raise PluginError(f"a plugin named {name!r} is installed already (ketch plugin remove {name} first)")
        target = home / name
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    registry[name] = {"source": source, "enabled": True, "trusted": trusted}
    _save(registry, environ)
    return Plugin(name, target, source, True, manifest, trusted)


def _named(name: str, environ: Mapping[str, str] | None) -> dict[str, dict[str, Any]]:
    registry = _registry(environ)
    if name not in registry:
        have = ", ".join(sorted(registry)) or "none"
        raise PluginError(f"no plugin named {name!r} (installed: {have})")
    return registry


def remove(name: str, environ: Mapping[str, str] | None = None) -> None:
    """Uninstall the plugin ``name`` (its folder and its entry)."""
    registry = _named(name, environ)
    del registry[name]
    _save(registry, environ)
    shutil.rmtree(plugins_home(environ) / name, ignore_errors=True)


def set_flag(name: str, flag: str, value: bool, environ: Mapping[str, str] | None = None) -> None:
    """Set ``enabled`` or ``trusted`` of the plugin ``name``."""
    registry = _named(name, environ)
    registry[name][flag] = value
    _save(registry, environ)


def _contents(plugin: Plugin) -> str:
    parts = []
    for kind in LOADED:
        folder = plugin.path / kind
        if kind == "skills":
            n = sum(1 for p in folder.glob("*/SKILL.md")) if folder.is_dir() else 0
        else:
            n = sum(1 for _ in folder.rglob("*.md")) if folder.is_dir() else 0
        if n:
            parts.append(f"{n} {kind[:-1] if n == 1 else kind}")
    return ", ".join(parts) or "nothing ketch loads"


def plugin_command(argv: Sequence[str]) -> int:
    """``ketch plugin add [--trust] PATH|GIT_URL | list | remove | enable | disable | trust | untrust NAME``."""
    from ._args import OneLineParser

    parser = OneLineParser(prog="ketch plugin", description="plugins (Claude Code's plugin layout)")
    sub = parser.add_subparsers(dest="action", required=True)
    adding = sub.add_parser("add", help="install a plugin from a folder or a git URL")
    adding.add_argument("source")
    adding.add_argument("--trust", action="store_true", help="let its hooks and MCP servers run (they run commands)")
    sub.add_parser("list", help="the installed plugins")
    for action in ("remove", "enable", "disable", "trust", "untrust"):
        sub.add_parser(action, help=f"{action} an installed plugin").add_argument("name")
    args = parser.parse_args(list(argv))
    try:
        if args.action == "add":
            plugin = add(args.source, trusted=args.trust)
            print(f"added plugin {plugin.name} ({_contents(plugin)}) to {plugin.path}")
            for line in plugin.skipped():
                print(f"ketch: plugin {plugin.name}: skipped {line}", file=sys.stderr)
        elif args.action == "list":
            plugins = installed()
            if not plugins:
                print("no plugins installed (ketch plugin add PATH|GIT_URL adds one)")
            for p in plugins:
                state = ("enabled" if p.enabled else "disabled") + (", trusted" if p.trusted else "")
                print(f"{p.name}  [{state}] {_contents(p)}  from {p.source}")
                for line in p.skipped():
                    print(f"    skipped: {line}")
        elif args.action == "remove":
            remove(args.name)
            print(f"removed plugin {args.name}")
        elif args.action in ("trust", "untrust"):
            set_flag(args.name, "trusted", args.action == "trust")
            print(f"{args.action}ed plugin {args.name}")
        else:
            set_flag(args.name, "enabled", args.action == "enable")
            print(f"{args.action}d plugin {args.name}")
    except PluginError as exc:
        print(f"ketch: {exc}", file=sys.stderr)
        return 2
    return 0
