"""The documentation site: it builds strictly, its API reference documents every public
name, and the user-facing files keep their promises (links that resolve, a short README,
no internal issue numbers).

scripts/test.sh builds the site once (``mkdocs build --strict``) and points
``KETCH_DOCS_SITE`` at it; without that variable the site is built here, in a
temporary folder.
"""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "api"))

from snapshot import FACES  # noqa: E402  (the faces the API snapshot records)

# The reference page of each face (docs/reference/<page>.md).
PAGES = {
    "ketch": "ketch",
    "ketch.llm": "llm",
    "ketch.loop": "loop",
    "ketch.tools": "tools",
    "ketch.context": "context",
    "ketch.permissions": "permissions",
    "ketch.sandbox": "sandbox",
    "ketch.hooks": "hooks",
    "ketch.mcp": "mcp",
    "ketch.sessions": "sessions",
    "ketch.sessions.conformance": "sessions-conformance",
    "ketch.testing": "testing",
    "ketch.client": "client",
    "ketch.teams": "teams",
    "ketch.tasks": "tasks",
    "ketch.subagents": "subagents",
    "ketch.skills": "skills",
    "ketch.telemetry": "telemetry",
    "ketch.server": "server",
    "ketch.temporal": "temporal",
    "ketch.memory": "memory",
    "ketch.web": "web",
    "ketch.evals": "evals",
    "ketch.worktrees": "worktrees",
}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    built = os.environ.get("KETCH_DOCS_SITE")
    if built:
        path = Path(built)
        if not path.is_absolute():
            path = ROOT / path
        assert (path / "objects.inv").is_file(), f"KETCH_DOCS_SITE={built} holds no built site"
        yield path
        return
    path = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(path)],
        cwd=ROOT, capture_output=True, text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}\n{done.stderr}"
    yield path


def test_every_face_has_a_reference_page() -> None:
    assert sorted(set(FACES)) == sorted(PAGES)
    for face, page in PAGES.items():
        text = (ROOT / "docs" / "reference" / f"{page}.md").read_text()
        assert f"::: {face}\n" in text, f"docs/reference/{page}.md does not document {face}"


@pytest.mark.parametrize("face", sorted(PAGES))
def test_the_reference_documents_every_public_name(site: Path, face: str) -> None:
    html = (site / "reference" / PAGES[face] / "index.html").read_text()
    anchors = set(re.findall(r'id="([^"]+)"', html))
    names = importlib.import_module(face).__all__
    missing = [name for name in names if f"{face}.{name}" not in anchors]
    assert missing == [], f"{face}: not in the API reference: {missing}"


def test_the_objects_inventory_lists_every_public_name(site: Path) -> None:
    import zlib

    raw = (site / "objects.inv").read_bytes()
    header, _, body = raw.partition(b"zlib.\n")
    assert header.startswith(b"# Sphinx inventory version 2")
    listed = {line.split(" ", 1)[0] for line in zlib.decompress(body).decode().splitlines()}
    missing = [f"{face}.{name}" for face in PAGES for name in importlib.import_module(face).__all__
               if f"{face}.{name}" not in listed]
    assert missing == []


def test_incoming_notes_are_not_published(site: Path) -> None:
    assert not (site / "_incoming").exists()


# -- the user-facing files ----------------------------------------------------------------

def user_facing_files() -> list[Path]:
    docs = [p for p in (ROOT / "docs").rglob("*.md") if "_incoming" not in p.relative_to(ROOT / "docs").parts]
    return sorted([ROOT / "README.md", ROOT / "CHANGELOG.md", *docs, *(ROOT / "examples").rglob("*")])


def test_no_internal_issue_numbers_in_user_facing_files() -> None:
    pattern = re.compile(r"\bissues? #?\d+", re.IGNORECASE)
    found = [f"{path.relative_to(ROOT)}: {m.group(0)}"
             for path in user_facing_files() if path.is_file() and path.suffix in (".md", ".py")
             for m in pattern.finditer(path.read_text())]
    assert found == []


def test_the_readme_is_a_doorway() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; the manual lives in docs/"


LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")


@pytest.mark.parametrize("name", ["README.md", "CHANGELOG.md", "examples/README.md", "docs/_incoming/README.md"])
def test_relative_links_resolve(name: str) -> None:
    path = ROOT / name
    broken = []
    for m in LINK.finditer(path.read_text()):
        target = m.group("target").split("#", 1)[0]
        if not target or re.match(r"[a-z]+:", target):
            continue
        if not (path.parent / target).exists():
            broken.append(m.group("target"))
    assert broken == []
