"""The released API: an accidental change to a public name or signature fails the build."""

from __future__ import annotations

import difflib

from .snapshot import SNAPSHOT
from .snapshot import snapshot


def test_public_api_matches_the_released_snapshot() -> None:
    now = snapshot()
    released = SNAPSHOT.read_text()
    diff = "".join(difflib.unified_diff(released.splitlines(True), now.splitlines(True), "released", "now"))
    assert not diff, (
        "The public API changed. If that is deliberate, run 'python tests/api/snapshot.py --write' "
        "and record the change in CHANGELOG.md (with how to upgrade).\n" + diff
    )


def test_every_public_name_is_documented() -> None:
    import importlib
    import inspect

    from .snapshot import FACES

    missing = []
    for face in FACES:
        module = importlib.import_module(face)
        for name in module.__all__:
            obj = getattr(module, name)
            if (inspect.isclass(obj) or inspect.isfunction(obj)) and not inspect.getdoc(obj):
                missing.append(f"{face}.{name}")
    assert missing == []


def test_the_package_knows_its_version() -> None:
    from importlib.metadata import version

    import ketch

    assert ketch.__version__ == version("ketch")
