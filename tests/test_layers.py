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
    "schema": set(),
    "sandbox": set(),
    "shell": set(),
    "llm": {"schema"},
    "loop": {"llm", "schema"},
    "agent": {"llm", "loop", "schema"},
    "temporal": {"llm", "loop", "sessions"},
}


def _part(dotted: list[str]) -> str:
    """The top-level part of ``ketch.<part>...`` without its leading underscore."""
    if len(dotted) == 1:
        return "ketch"
    name = dotted[1]
    return name[1:] if name.startswith("_") and not name.startswith("__") else name


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
                else:
                    targets = [[*base, alias.name] for alias in node.names]
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
