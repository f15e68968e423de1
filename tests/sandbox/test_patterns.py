"""White-box test: ``ketch._paths``, the path patterns the permission rules and the
sandbox share, expanded to the paths a sandbox hides or keeps read-only."""

from __future__ import annotations

from pathlib import Path

from ketch._paths import expand_pattern
from ketch._paths import pattern_base


def _tree(root: Path) -> None:
    for rel in (".env", "a/.env", ".hidden/b/.env", "a/key.pem", "a/b/c.pem", "x1.txt", "x2.txt", "xy.txt"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("x")
    (root / "private").mkdir()
    (root / "private" / "in.pem").write_text("x")
    (root / "outside").mkdir()
    (root / "outside" / ".env").write_text("x")
    (root / "link").symlink_to(root / "outside")  # a folder link: listed, never searched


def test_patterns_name_the_existing_top_most_paths(tmp_path: Path) -> None:
    root = tmp_path.resolve()
    _tree(root)
    r = str(root)
    assert expand_pattern(f"{r}/**/.env") == [f"{r}/.env", f"{r}/.hidden/b/.env", f"{r}/a/.env", f"{r}/outside/.env"]
    assert expand_pattern(f"{r}/a/**/*.pem") == [f"{r}/a/b/c.pem", f"{r}/a/key.pem"]
    assert expand_pattern(f"{r}/x[12].txt") == [f"{r}/x1.txt", f"{r}/x2.txt"]
    assert expand_pattern(f"{r}/x?.txt") == [f"{r}/x1.txt", f"{r}/x2.txt", f"{r}/xy.txt"]
    assert expand_pattern(f"{r}/*.pem") == []  # one level only
    assert expand_pattern(f"{r}/l*") == [f"{r}/link"]
    # a folder's contents: the folder itself, whose subtree it stands for
    assert expand_pattern(f"{r}/private/**") == [f"{r}/private"]
    assert expand_pattern(f"{r}/**/private/**") == [f"{r}/private"]
    assert expand_pattern(f"{r}/a") == [f"{r}/a"]
    assert expand_pattern(f"{r}/missing") == []
    assert expand_pattern(f"{r}/missing/**/x") == []


def test_the_folder_a_pattern_lies_in() -> None:
    assert pattern_base("/w/src/**") == "/w/src"
    assert pattern_base("/w/**/.env") == "/w"
    assert pattern_base("/w/a*/b") == "/w"
    assert pattern_base("/*.pem") == "/"
    assert pattern_base("/w/x.md") == "/w/x.md"


def test_escaped_characters_are_themselves(tmp_path: Path) -> None:
    from ketch._paths import could_contain
    from ketch._paths import glob_escape
    from ketch._paths import glob_regex
    from ketch._paths import has_wildcard
    from ketch._paths import names_path

    root = (tmp_path / "p[1]*?").resolve()
    (root / "a").mkdir(parents=True)
    (root / ".env").write_text("x")
    (tmp_path / "p1xy").mkdir()
    (tmp_path / "p1xy" / ".env").write_text("x")  # what the name would match as a pattern
    r = str(root)
    e = glob_escape(r)
    assert e.endswith("/p[[]1][*][?]")
    assert not has_wildcard(e) and has_wildcard(e + "/*.env")
    assert pattern_base(e + "/a/*.pem") == f"{r}/a"
    assert pattern_base(e + "/.env") == f"{r}/.env"
    assert expand_pattern(e + "/.env") == [f"{r}/.env"]
    assert expand_pattern(e + "/.e?v") == [f"{r}/.env"]
    assert names_path(e + "/.env", f"{r}/.env") and not names_path(e + "/.env", f"{tmp_path.resolve()}/p1xy/.env")
    assert could_contain(e + "/a/*.pem", f"{r}/a") and not could_contain(e + "/a/*.pem", f"{tmp_path.resolve()}/p1xy/a")
    # a "**" inside a name spans folders from there on: what comes before it must match
    assert could_contain("a**", "abc") and could_contain("a**/k", "a/b") and not could_contain("a**", "b")
    assert could_contain("x**y/k", "xz") and not could_contain("x**y/k", "zx") and could_contain("**/k", "b")
    # a set holding "/" is no set: a name never holds "/"
    assert glob_regex("a[/]b").fullmatch("a/b") is None and glob_regex("a[/]b").fullmatch("a[/]b")
