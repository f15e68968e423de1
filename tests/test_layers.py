"""White-box test: imports ketch implementation modules (private) directly.

The import layers the README's architecture section promises, read from the source.

Every ``import`` counts, also those inside functions and under ``TYPE_CHECKING``. Parts are
named without a leading underscore (``_schema`` is "schema"), so making a module private
does not change its layer.
"""

from __future__ import annotations

import ast
from pathlib import Path

import ketch

SRC = Path(ketch.__file__).parent

# What each layer may import of ketch (parts not listed may import any part but cli).
ALLOWED: dict[str, set[str]] = {
    "lazy": set(),  # the PEP 562 helper of the package faces
    "paths": set(),  # how a model's path names a workspace file: tools, rules, sandbox
    "proc": set(),  # process groups of the tools, hooks and tasks
    "schema": set(),
    "sandbox": {"paths"},
    "shell": set(),
    "client": set(),  # embeddable next to any ketch install: the standard library only
    "llm": {"lazy", "schema"},
    "loop": {"llm", "schema"},
    "agent": {"llm", "loop", "schema"},
    # Capabilities, each on the faces of what it builds on (and of no capability it
    # does not need):
    "teams": {"ketch", "llm", "loop"},
    "tasks": {"ketch", "llm", "loop", "proc"},
    "subagents": {"ketch", "llm", "loop", "permissions", "sessions", "tasks"},
    "telemetry": {"ketch", "llm", "loop"},
    "server": {"ketch", "llm", "sandbox", "sessions"},
    "temporal": {"ketch", "lazy", "llm", "loop", "sessions", "tools"},  # tools: the exactly-once journal
}


def _part(dotted: list[str]) -> str:
    """The top-level part of ``ketch.<part>...`` without its leading underscore."""
    if len(dotted) == 1:
        return "ketch"
    name = dotted[1]
    return name[1:] if name.startswith("_") and not name.startswith("__") else name


def _is_module(dotted: list[str]) -> bool:
    """Whether ``ketch.<...>`` names a module or package (not a name inside one)."""
    path = SRC.joinpath(*dotted[1:])
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def _imports() -> dict[str, set[str]]:
    """For each part, the other parts of ketch it imports."""
    graph: dict[str, set[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        dotted = ["ketch", *path.relative_to(SRC).with_suffix("").parts]
        package = dotted if path.name == "__init__.py" else dotted[:-1]
        if path.name == "__init__.py":
            dotted = dotted[:-1]
        part = _part(dotted)
        found = graph.setdefault(part, set())
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[list[str]] = []
            if isinstance(node, ast.Import):
                targets = [alias.name.split(".") for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level:
                base = package[: len(package) - node.level + 1]
                if node.module:
                    targets = [[*base, *node.module.split(".")]]
                else:  # ``from .. import Agent`` imports a name of the package, ``from . import _x`` a module
                    targets = [[*base, alias.name] if _is_module([*base, alias.name]) else base for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                targets = [node.module.split(".")]
            for target in targets:
                if target[0] == "ketch" and _part(target) != part:
                    found.add(_part(target))
    return graph


def test_the_graph_reads_every_part() -> None:
    graph = _imports()
    assert {"schema", "llm", "loop", "agent", "tools", "sandbox", "cli"} <= graph.keys()
    assert graph["loop"] >= {"llm", "schema"}
    assert graph["tools"] >= {"loop", "schema"}


def test_lower_layers_import_only_what_is_below_them() -> None:
    graph = _imports()
    wrong = {part: sorted(graph[part] - allowed) for part, allowed in ALLOWED.items() if graph[part] - allowed}
    assert wrong == {}


def test_the_schema_package_imports_nothing_else_of_ketch() -> None:
    assert _imports()["schema"] == set()


def test_nothing_imports_the_cli_and_there_is_no_cycle() -> None:
    graph = _imports()
    assert sorted(part for part, targets in graph.items() if "cli" in targets) == ["__main__"]
    cycles: list[list[str]] = []

    def visit(part: str, trail: list[str]) -> None:
        for target in sorted(graph.get(part, ())):
            if target == trail[0]:
                cycles.append([*trail, target])
            elif target not in trail and target != "ketch":
                visit(target, [*trail, target])

    for part in sorted(graph):
        if part != "ketch":
            visit(part, [part])
    assert cycles == []


# Capabilities use what is below them through its public faces (ketch, ketch.llm, ketch.loop,
# ketch.tools ...), never another package's implementation modules. The listed exceptions are
# the names the faces do not export on purpose: window accounting, which ketch.context
# re-exports from the llm layer, and the command's (cli's) use of internals it alone needs.
CORE = {"ketch", "llm", "loop", "agent", "lazy", "paths", "proc", "schema", "shell", "sandbox", "__main__"}
PRIVATE_ALLOWED: dict[str, set[str]] = {
    "context": {"ketch.llm._tokens"},
    "cli": {
        "ketch.llm._http",
        "ketch.llm._messages",
        "ketch.llm._model",
        "ketch.llm._providers.anthropic",
        "ketch.llm._providers.local",
        "ketch.llm._registry",
        "ketch.llm._resolve",
        "ketch.llm._tokens",
        "ketch.loop._run",
        "ketch.sessions._export",
        "ketch.tools._bash",
    },
}


def _private_imports() -> dict[str, set[str]]:
    """For each capability part, the implementation modules of other parts it imports."""
    found: dict[str, set[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        dotted = ["ketch", *path.relative_to(SRC).with_suffix("").parts]
        package = dotted[:-1]
        part = _part(dotted[:-1] if path.name == "__init__.py" else dotted)
        if part in CORE or part == "testing":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom) or not node.module:
                continue
            base = package[: len(package) - node.level + 1] if node.level else []
            target = [*base, *node.module.split(".")]
            if target[0] != "ketch" or _part(target) == part or _part(target) in {"lazy", "paths", "proc", "schema", "shell"}:
                continue
            if any(piece.startswith("_") for piece in target[1:]):
                found.setdefault(part, set()).add(".".join(target))
    return found


def test_capabilities_use_only_the_faces_of_other_packages() -> None:
    found = _private_imports()
    assert "cli" in found  # the reader sees relative imports
    wrong = {part: sorted(mods - PRIVATE_ALLOWED.get(part, set())) for part, mods in found.items()}
    assert {part: mods for part, mods in wrong.items() if mods} == {}
