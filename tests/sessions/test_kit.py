"""Both shipped stores pass the public conformance kit."""

from __future__ import annotations

from pathlib import Path

import pytest

from ketch.sessions import JsonlStore
from ketch.sessions import SessionStore
from ketch.sessions import SqliteStore
from ketch.sessions.conformance import CHECKS
from ketch.sessions.conformance import Check
from ketch.sessions.conformance import StoreFactory
from ketch.sessions.conformance import check_store


def _factories(tmp_path: Path) -> dict[str, StoreFactory]:
    return {
        "jsonl": lambda: JsonlStore(tmp_path / "sessions"),
        "jsonl-fsync": lambda: JsonlStore(tmp_path / "sessions", fsync="always"),
        "sqlite": lambda: SqliteStore(tmp_path / "sessions.db"),
    }


@pytest.mark.parametrize("kind", ["jsonl", "jsonl-fsync", "sqlite"])
@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.name)
async def test_store_passes_check(kind: str, check: Check, tmp_path: Path) -> None:
    await check(_factories(tmp_path)[kind])


async def test_checks_share_one_storage(tmp_path: Path) -> None:
    # Checks do not need an empty store: the whole kit twice over the same database.
    await check_store(lambda: SqliteStore(tmp_path / "shared.db"))
    await check_store(lambda: SqliteStore(tmp_path / "shared.db"))


async def test_a_broken_store_fails_with_a_message_naming_the_check(tmp_path: Path) -> None:
    class Forgetful(JsonlStore):
        """Loses the last entry on load."""

        async def load(self, session_id: str) -> list:  # type: ignore[type-arg]
            return (await super().load(session_id))[:-1]

    def make() -> SessionStore:
        return Forgetful(tmp_path / "broken")

    with pytest.raises(AssertionError) as caught:
        await check_store(make)
    lines = str(caught.value).splitlines()
    assert lines[0] == "7 of 13 session store checks failed:"
    assert [line.split(":")[0] for line in lines[1:]] == [
        "- round_trip",
        "- ordering",
        "- concurrent_sessions",
        "- reopen",
        "- closed_writer",
        "- fork_isolation",
        "- delete",
    ]
    assert lines[1].startswith(
        "- round_trip: load while the writer is open: got 14 items, expected 15; first difference at index 14: "
        "expected Entry(id="
    )
    assert lines[1].endswith(", got nothing")
    assert lines[2] == "- ordering: entries loaded: expected 351, got 350"


@pytest.mark.parametrize("sync", [True, False], ids=["sync close", "async close"])
async def test_the_kit_closes_every_store_it_made(sync: bool, tmp_path: Path) -> None:
    made: list[JsonlStore] = []
    closed: list[JsonlStore] = []

    class Closing(JsonlStore):
        def close(self) -> None:
            closed.append(self)

    class AsyncClosing(JsonlStore):
        async def close(self) -> None:
            closed.append(self)

    def make() -> SessionStore:
        made.append((Closing if sync else AsyncClosing)(tmp_path / "sessions"))
        return made[-1]

    await check_store(make)
    assert len(made) >= len(CHECKS)  # every check makes at least one
    assert closed == made
