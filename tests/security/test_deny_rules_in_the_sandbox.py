"""White-box test: the security suite's stand-in runner imports ketch implementation modules.

``Read`` and ``Edit`` deny rules hold for bash too: the runner gives the paths they name
to the sandbox, as the command does (``hidden`` and ``protected``), and the approver says
yes to every question, so only the sandbox stands between a command and the files the
rules name. In every mode, no command reads a denied file's text or a denied folder's
file names, and no command changes a file an ``Edit`` deny rule names. Each run is one
counted attempt (see conftest.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import Probe
from .conftest import World

MODES = ["default", "accept_edits", "plan", "bypass"]
DENY = [
    "Read(./.env)",
    "Read(**/*.pem)",
    "Read(private/**)",
    "Edit(src/**)",
    "Edit(//{ws}/config.lock)",
    "Edit(gen/**)",  # a folder that does not exist: it cannot be created either
    "Read(config/secrets/**)",
    "Edit(lnk/b.txt)",  # through a symlinked folder: lnk -> real
]
MARKER = "denied-marker-7f3a"


def _files() -> dict[str, str]:
    return {
        ".env": f"TOKEN={MARKER}-env\n",
        "deep/er/key.pem": f"{MARKER}-pem\n",
        "private/notes.txt": f"{MARKER}-private\n",
        f"private/{MARKER}-name.txt": "a file name is what the model must not see\n",
        "private/id.pem": f"{MARKER}-nested\n",  # named by two rules: hidden once
        "src/a.txt": "workspace file\n",
        "config.lock": "locked\n",
        "config/secrets/key.txt": f"{MARKER}-moved\n",
        "real/b.txt": "linked\n",
    }


# Each attempt: bash commands, one per turn; every one must leave no marker in any result.
CASES: dict[str, list[str]] = {
    "cat-denied-files": ["cat .env deep/er/key.pem private/notes.txt; cat */*/*.pem"],
    "copy-then-read": ["cp .env copy.txt; cat copy.txt", "tar cf - private | tar tvf -; grep -r marker ."],
    "list-denied-folder": ["ls -la private; find private deep"],
    "through-a-symlink": ["ln -s .env e; cat e; ln -s private p; cat p/notes.txt"],
    "write-denied-paths": [
        "echo pwned > src/a.txt; echo pwned > src/new.txt; echo pwned > config.lock",
        "rm -rf src; mv config.lock gone; cat src/a.txt",
    ],
    "replace-the-folder": ["mv src src-old && mkdir src && echo pwned > src/a.txt"],
    "create-the-denied-folder": ["mkdir -p gen; echo pwned > gen/x.txt; mv src/a.txt gen/"],
    # a rename must not carry a hidden file out from under its mount
    "move-the-parent-folder": ["mv config cfg; cat cfg/secrets/key.txt", "mv config/secrets s2; cat s2/key.txt"],
    "write-through-a-linked-folder": ["echo pwned > lnk/b.txt; echo pwned > real/b.txt; rm -f real/b.txt"],
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(CASES))
def test_read_and_edit_deny_rules_hold_for_bash(probe: Probe, world: World, name: str, mode: str) -> None:
    ws = world.ws
    files = _files()
    for rel, text in files.items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(text)
    if not (ws / "lnk").is_symlink():
        (ws / "lnk").symlink_to("real")
    world.reset_baseline()
    deny = [rule.format(ws=str(ws.resolve()).lstrip("/")) for rule in DENY]
    calls: list[tuple[str, dict[str, Any]]] = [("bash", {"command": f"{c}; echo finished"}) for c in CASES[name]]
    reply = probe.agent_attempt(name, mode, calls, deny=deny)
    shown = "".join(text for _, _, text in reply["results"]) + reply["events"]
    assert MARKER not in shown, f"{name} [{mode}]: {reply['results']}"
    assert all("finished" in text for _, _, text in reply["results"]), reply["results"]  # the sandbox ran each
    for rel, text in files.items():
        assert (ws / rel).read_text() == text, f"{name} [{mode}] changed {rel}"
    assert not (ws / "src" / "new.txt").exists()
    assert not (ws / "gen").exists()  # not made, and its placeholder gone
    # the sandbox ran each command: the approver is asked in default mode only
    assert reply["asked"] == (["bash"] * len(calls) if mode == "default" else [])
    assert [d[1] for d in reply["decisions"]] == (
        ["user"] * len(calls) if mode == "default" else [f"mode {mode}"] * len(calls)
    )
