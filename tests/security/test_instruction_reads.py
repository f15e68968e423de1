"""Instruction files (AGENTS.md, CLAUDE.md) and their imports are reads that obey the
read rules: they stay inside the project (no symlink out, no /proc, no device, no FIFO),
honour Read deny rules and never carry ketch's own environment, trusted or not, from
the root or a sub-folder. Black-box through the ``ketch`` command, as root and as an
unprivileged user: no canary reaches the provider and the run ends normally."""

from __future__ import annotations

import os
from collections.abc import Callable
from collections.abc import Iterator
from typing import Any

import pytest

from .cliharness import CANARIES
from .cliharness import USERS
from .cliharness import Ketch
from .cliharness import fake_server
from .cliharness import tally


@pytest.fixture(params=USERS)
def ketch(request: pytest.FixtureRequest) -> Iterator[Ketch]:
    k = Ketch(request.param)
    yield k
    k.cleanup()


@pytest.fixture
def fake() -> Iterator[Any]:
    server = fake_server()
    yield server
    server.close()


def _link(target: str, name: str = "AGENTS.md") -> Callable[[Ketch], None]:
    def plant(k: Ketch) -> None:
        path = k.work / name
        path.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target.replace("~", str(k.home)).replace("{xdg}", str(k.xdg)), path)

    return plant


def _text(name: str, text: str) -> Callable[[Ketch], None]:
    def plant(k: Ketch) -> None:
        k.write(name, text)

    return plant


def _fifo(k: Ketch) -> None:
    os.mkfifo(k.work / "AGENTS.md")


def _chain_out(k: Ketch) -> None:
    k.write("AGENTS.md", "See @docs/a.md\n")
    k.write("docs/a.md", "See @b.md\n")
    os.symlink(k.home / ".ssh" / "id_rsa", k.work / "docs" / "b.md")


def _denied(k: Ketch) -> None:
    k.write("AGENTS.md", "See @secret.md\n")
    k.write("secret.md", CANARIES[0])
    k.user_config(k.xdg.joinpath("ketch", "config.toml").read_text() + '[permissions]\ndeny = ["Read(secret.md)"]\n')


ATTACKS: dict[str, tuple[Callable[[Ketch], None], str]] = {
    "agents-md-links-to-the-ssh-key": (_link("~/.ssh/id_rsa"), ""),
    "agents-md-links-to-proc-self-environ": (_link("/proc/self/environ"), ""),
    "claude-md-links-to-dev-zero": (_link("/dev/zero", "CLAUDE.md"), ""),
    "claude-md-links-to-the-user-config": (_link("{xdg}/ketch/config.toml", "CLAUDE.md"), ""),
    "agents-md-is-a-fifo": (_fifo, ""),
    "sub-folder-agents-md-links-to-the-ssh-key": (_link("~/.ssh/id_rsa", "sub/AGENTS.md"), "sub"),
    "sub-folder-claude-md-links-to-proc": (_link("/proc/self/environ", "sub/CLAUDE.md"), "sub"),
    "import-of-proc-self-environ": (_text("AGENTS.md", "@/proc/self/environ\n"), ""),
    "import-of-proc-1-environ": (_text("AGENTS.md", "@/proc/1/environ @/proc/self/cmdline\n"), ""),
    "import-of-the-ssh-key": (_text("AGENTS.md", "@~/.ssh/id_rsa\n"), ""),
    "import-of-the-user-config-with-a-key": (_text("AGENTS.md", "@../home/.config/ketch/config.toml\n"), ""),
    "import-chain-ending-outside": (_chain_out, ""),
    "import-of-a-read-denied-file": (_denied, ""),
}


@pytest.mark.parametrize("trusted", [pytest.param(False, id="untrusted"), pytest.param(True, id="trusted")])
@pytest.mark.parametrize("name", list(ATTACKS))
def test_instruction_files_leak_nothing(ketch: Ketch, fake: Any, name: str, trusted: bool) -> None:
    ketch.use_fake(fake, extra=f'[providers.mine]\nbase_url = "http://127.0.0.1:9/v1"\napi_key = "{CANARIES[2]}"\n')
    plant, sub = ATTACKS[name]
    plant(ketch)
    cwd = ketch.work / sub
    cwd.mkdir(parents=True, exist_ok=True)
    proc = ketch.run("run", *(["--trust-project"] if trusted else []), "hi", cwd=cwd, timeout=60)
    sent = fake.received()
    leaked = [c for c in CANARIES if c in sent + proc.stdout + proc.stderr]
    tally(f"instructions: {name} [{'trusted' if trusted else 'untrusted'}, {ketch.user}]", leaked=leaked)
    assert leaked == []
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "Hi from the fake.\n", "")
    assert len(fake.requests) == 1


def test_a_link_inside_the_project_and_the_users_own_imports_still_work(ketch: Ketch, fake: Any) -> None:
    ketch.use_fake(fake)
    ketch.write("AGENTS.real.md", "Use tabs. @docs/style.md\n")
    ketch.write("docs/style.md", "Short lines.\n")
    os.symlink("AGENTS.real.md", ketch.work / "CLAUDE.md")
    ketch.write("notes/mine.md", "Answer in French.\n", root=ketch.home)
    ketch.write("AGENTS.md", "@~/notes/mine.md\n", root=ketch.xdg / "ketch")
    proc = ketch.run("run", "hi")
    assert (proc.returncode, proc.stderr) == (0, "")
    sent = fake.received()
    assert all(text in sent for text in ("Use tabs.", "Short lines.", "Answer in French."))
