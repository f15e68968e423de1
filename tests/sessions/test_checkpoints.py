"""White-box test: imports ketch implementation modules (private) directly.

File checkpoints recorded around the real write, edit and bash tools run by the loop,
and file rewind with ``restore_files``: byte-identical restores, deletions, conflicts
with changes made outside the agent, dedup, skipped big files, symlink escapes."""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path
from typing import Any

import pytest

from ketch.llm import ToolCall
from ketch.llm import ToolResultMessage
from ketch.loop import Conversation
from ketch.loop import LoopConfig
from ketch.loop import Tool
from ketch.loop import ToolContext
from ketch.loop import run_loop
from ketch.sessions._checkpoints import FileCheckpoints
from ketch.sessions._checkpoints import RewindReport
from ketch.sessions._checkpoints import restore_files
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call
from ketch.tools import BashTool
from ketch.tools import EditTool
from ketch.tools import ReadTool
from ketch.tools import Workspace
from ketch.tools import WriteTool


def sha(data: bytes | str) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


ELSEWHERE = "/nonexistent-ketch-test/elsewhere.txt"


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


class MemoryBlobs:
    """An in-memory blob store: sha256 keys, one copy per content; logs every put."""

    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}
        self.puts: list[str] = []
        self.fail_puts = False

    async def put_blob(self, data: bytes) -> str:
        if self.fail_puts:
            raise OSError("disk full")
        digest = sha(data)
        self.puts.append(digest)
        self.blobs.setdefault(digest, bytes(data))
        return digest

    async def get_blob(self, digest: str) -> bytes:
        return self.blobs[digest]


class Rig:
    """The built-in file tools on one workspace, run by the loop with the checkpoint middleware."""

    def __init__(self, root: Path, **options: Any) -> None:
        self.root = root
        self.blobs = MemoryBlobs()
        self.records: list[dict[str, Any]] = []
        self.checkpoints = FileCheckpoints(root, self.blobs, record=self._record, **options)
        ws = Workspace(root)
        self.tools: list[Tool] = [ReadTool(ws), WriteTool(ws), EditTool(ws), BashTool(ws)]
        self.fail_records = False

    async def _record(self, payload: dict[str, Any]) -> None:
        if self.fail_records:
            raise RuntimeError("store closed")
        self.records.append(payload)

    async def run(self, *calls: ToolCall) -> list[tuple[str, str, bool]]:
        """Run each call in its own turn; the (call id, text, is_error) of every result."""
        model = ScriptedModel([*(reply(c) for c in calls), "done"])
        conversation = Conversation(tools=self.tools)
        config: LoopConfig[None] = LoopConfig(model=model, middlewares=[self.checkpoints.middleware])
        await run_loop("go", conversation, config).result()
        return [
            (m.tool_call_id, m.text, m.is_error) for m in conversation.messages if isinstance(m, ToolResultMessage)
        ]

    def put(self, name: str, data: bytes, mode: int = 0o644) -> Path:
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        path.chmod(mode)
        return path

    def restore(self) -> Any:
        return restore_files(self.root, self.records, self.blobs)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root.resolve()


@pytest.fixture
def rig(root: Path) -> Rig:
    return Rig(root)


def ok(results: list[tuple[str, str, bool]]) -> None:
    assert [r for r in results if r[2]] == []


async def test_rewind_after_write_edit_and_sed_restores_byte_identical_files(rig: Rig, root: Path) -> None:
    a0 = b"alpha\nsecond line\n"
    b0 = b"\xef\xbb\xbfbeta one\r\nbeta two\r\n"
    c0 = b"gamma one\nno newline at the end"
    rig.put("a.txt", a0)
    rig.put("sub/b.txt", b0, 0o600)
    rig.put("c.sh", c0, 0o755)
    ok(
        await rig.run(
            tool_call("read", {"path": "a.txt"}, id="r1"),
            tool_call("write", {"path": "a.txt", "content": "replaced\n"}, id="w1"),
            tool_call("read", {"path": "sub/b.txt"}, id="r2"),
            tool_call("edit", {"path": "sub/b.txt", "old_string": "beta one", "new_string": "BETA"}, id="e1"),
            tool_call("bash", {"command": "sed -i 's/one/ONE/' c.sh"}, id="b1"),
            tool_call("write", {"path": "new/d.txt", "content": "created\n"}, id="w2"),
        )
    )
    b1 = b"\xef\xbb\xbfBETA\r\nbeta two\r\n"
    c1 = b"gamma ONE\nno newline at the end"
    assert (root / "sub/b.txt").read_bytes() == b1
    assert (root / "c.sh").read_bytes() == c1
    assert rig.records == [
        {
            "tool_call_id": "w1",
            "files": [{"path": "a.txt", "before": sha(a0), "after": sha("replaced\n"), "mode": 0o644}],
            "skipped": [],
        },
        {
            "tool_call_id": "e1",
            "files": [{"path": "sub/b.txt", "before": sha(b0), "after": sha(b1), "mode": 0o600}],
            "skipped": [],
        },
        {"tool_call_id": "b1", "files": [{"path": "c.sh", "before": sha(c0), "after": sha(c1), "mode": 0o755}], "skipped": []},
        {"tool_call_id": "w2", "files": [{"path": "new/d.txt", "before": None, "after": sha("created\n")}], "skipped": []},
    ]
    report = await rig.restore()
    assert report == RewindReport(restored=["a.txt", "c.sh", "sub/b.txt"], deleted=["new/d.txt"], conflicts=[], skipped=[])
    assert (root / "a.txt").read_bytes() == a0
    assert (root / "sub/b.txt").read_bytes() == b0
    assert (root / "c.sh").read_bytes() == c0
    assert not (root / "new/d.txt").exists()
    assert [(root / n).stat().st_mode & 0o777 for n in ("a.txt", "sub/b.txt", "c.sh")] == [0o644, 0o600, 0o755]
    assert names(root) == ["a.txt", "c.sh", "new", "sub"]
    assert names(root / "sub") == ["b.txt"]
    # a second rewind of the same checkpoints finds everything already in place
    assert await rig.restore() == RewindReport()


async def test_several_changes_to_one_file_go_back_to_the_earliest_content(rig: Rig, root: Path) -> None:
    rig.put("a.txt", b"v0\n")
    ok(
        await rig.run(
            tool_call("read", {"path": "a.txt"}, id="r1"),
            tool_call("write", {"path": "a.txt", "content": "v1\n"}, id="w1"),
            tool_call("edit", {"path": "a.txt", "old_string": "v1", "new_string": "v2"}, id="e1"),
            tool_call("bash", {"command": "printf 'v3\\n' > a.txt"}, id="b1"),
        )
    )
    assert [r["files"] for r in rig.records] == [
        [{"path": "a.txt", "before": sha("v0\n"), "after": sha("v1\n"), "mode": 0o644}],
        [{"path": "a.txt", "before": sha("v1\n"), "after": sha("v2\n"), "mode": 0o644}],
        [{"path": "a.txt", "before": sha("v2\n"), "after": sha("v3\n"), "mode": 0o644}],
    ]
    assert await restore_files(root, rig.records[1:], rig.blobs) == RewindReport(restored=["a.txt"])
    assert (root / "a.txt").read_bytes() == b"v1\n"
    # the rewound checkpoints are gone from the session; rewinding further uses the rest
    assert await restore_files(root, rig.records[:1], rig.blobs) == RewindReport(restored=["a.txt"])
    assert (root / "a.txt").read_bytes() == b"v0\n"
    # passing the rewound ones again finds a.txt not as the last of them left it
    assert await restore_files(root, rig.records, rig.blobs) == RewindReport()
    (root / "a.txt").write_bytes(b"v2\n")
    assert await restore_files(root, rig.records, rig.blobs) == RewindReport(conflicts=["a.txt"])


async def test_bash_creating_and_deleting_files_is_undone(rig: Rig, root: Path) -> None:
    rig.put("keep.sh", b"#!/bin/sh\necho hi\n", 0o755)
    rig.put("deep/dir/gone.bin", bytes(range(256)), 0o640)
    rig.put(".git/HEAD", b"ref: refs/heads/main\n")
    ok(
        await rig.run(
            tool_call(
                "bash",
                {"command": "rm keep.sh deep/dir/gone.bin && mkdir -p out && echo made > out/new.txt && echo x > .git/HEAD"},
                id="b1",
            )
        )
    )
    assert rig.records == [
        {
            "tool_call_id": "b1",
            "files": [
                {"path": "deep/dir/gone.bin", "before": sha(bytes(range(256))), "after": None, "mode": 0o640},
                {"path": "keep.sh", "before": sha("#!/bin/sh\necho hi\n"), "after": None, "mode": 0o755},
                {"path": "out/new.txt", "before": None, "after": sha("made\n")},
            ],
            "skipped": [],
        }
    ]
    report = await rig.restore()
    assert report == RewindReport(restored=["deep/dir/gone.bin", "keep.sh"], deleted=["out/new.txt"])
    assert (root / "keep.sh").read_bytes() == b"#!/bin/sh\necho hi\n"
    assert (root / "keep.sh").stat().st_mode & 0o777 == 0o755
    assert (root / "deep/dir/gone.bin").read_bytes() == bytes(range(256))
    assert (root / "deep/dir/gone.bin").stat().st_mode & 0o777 == 0o640
    assert not (root / "out/new.txt").exists()
    assert (root / ".git/HEAD").read_bytes() == b"x\n"  # ignored folder: not checkpointed


async def test_a_failing_bash_command_is_still_checkpointed(rig: Rig, root: Path) -> None:
    results = await rig.run(tool_call("bash", {"command": "echo partial > p.txt; exit 3"}, id="b1"))
    assert [(r[0], r[2]) for r in results] == [("b1", True)]
    assert rig.records == [
        {"tool_call_id": "b1", "files": [{"path": "p.txt", "before": None, "after": sha("partial\n")}], "skipped": []}
    ]
    assert await rig.restore() == RewindReport(deleted=["p.txt"])
    assert names(root) == []


async def test_rewind_recreates_a_folder_bash_removed(rig: Rig, root: Path) -> None:
    rig.put("pkg/mod.py", b"print(1)\n")
    ok(await rig.run(tool_call("bash", {"command": "rm -r pkg"}, id="b1")))
    assert await rig.restore() == RewindReport(restored=["pkg/mod.py"])
    assert (root / "pkg/mod.py").read_bytes() == b"print(1)\n"


async def test_a_file_changed_outside_the_agent_is_reported_and_left_alone(rig: Rig, root: Path) -> None:
    rig.put("a.txt", b"original a\n")
    rig.put("b.txt", b"original b\n")
    ok(
        await rig.run(
            tool_call("read", {"path": "a.txt"}, id="r1"),
            tool_call("write", {"path": "a.txt", "content": "agent a\n"}, id="w1"),
            tool_call("bash", {"command": "echo 'agent b' > b.txt && echo c > c.txt"}, id="b1"),
        )
    )
    (root / "a.txt").write_bytes(b"the user's own change\n")
    (root / "c.txt").write_bytes(b"c, and the user's line\n")
    report = await rig.restore()
    assert report == RewindReport(restored=["b.txt"], conflicts=["a.txt", "c.txt"])
    assert (root / "a.txt").read_bytes() == b"the user's own change\n"
    assert (root / "c.txt").read_bytes() == b"c, and the user's line\n"
    assert (root / "b.txt").read_bytes() == b"original b\n"


async def test_a_file_the_user_already_reverted_is_neither_restored_nor_a_conflict(rig: Rig, root: Path) -> None:
    rig.put("a.txt", b"one\n")
    ok(
        await rig.run(
            tool_call("read", {"path": "a.txt"}, id="r1"),
            tool_call("write", {"path": "a.txt", "content": "two\n"}, id="w1"),
            tool_call("write", {"path": "n.txt", "content": "new\n"}, id="w2"),
        )
    )
    (root / "a.txt").write_bytes(b"one\n")
    (root / "n.txt").unlink()
    assert await rig.restore() == RewindReport()
    assert (root / "a.txt").read_bytes() == b"one\n"
    assert not (root / "n.txt").exists()


async def test_the_same_content_is_stored_once(rig: Rig, root: Path) -> None:
    ok(
        await rig.run(
            tool_call("write", {"path": "x.txt", "content": "same\n"}, id="w1"),
            tool_call("write", {"path": "y.txt", "content": "same\n"}, id="w2"),
            tool_call("bash", {"command": "cp x.txt z.txt && cp y.txt w.txt"}, id="b1"),
        )
    )
    assert rig.blobs.puts == [sha("same\n")]
    assert rig.blobs.blobs == {sha("same\n"): b"same\n"}
    assert [r["files"] for r in rig.records] == [
        [{"path": "x.txt", "before": None, "after": sha("same\n")}],
        [{"path": "y.txt", "before": None, "after": sha("same\n")}],
        [{"path": "w.txt", "before": None, "after": sha("same\n")}, {"path": "z.txt", "before": None, "after": sha("same\n")}],
    ]


async def test_read_only_calls_record_nothing(rig: Rig, root: Path) -> None:
    rig.put("a.txt", b"hello\n")
    results = await rig.run(
        tool_call("write", {"path": "a.txt", "content": "unread overwrite\n"}, id="w1"),
        tool_call("bash", {"command": "cat a.txt | wc -l"}, id="b1"),
        tool_call("bash", {"command": "ls && grep -n hello a.txt"}, id="b2"),
        tool_call("read", {"path": "a.txt"}, id="r1"),
    )
    assert results == [
        ("w1", "a.txt has not been read yet. Read it with the read tool before you overwrite it.", True),
        ("b1", "1", False),
        ("b2", "a.txt\n1:hello", False),
        ("r1", results[3][1], False),
    ]
    assert rig.records == []
    assert rig.blobs.puts == [sha("hello\n")]  # saved before the write, which then refused
    assert (root / "a.txt").read_bytes() == b"hello\n"


async def test_a_file_above_the_limit_is_skipped_and_reported(root: Path) -> None:
    rig = Rig(root, max_file_bytes=16)
    rig.put("huge.log", b"0123456789" * 3)
    rig.put("small.txt", b"small\n")
    ok(
        await rig.run(
            tool_call("write", {"path": "big.txt", "content": "x" * 17}, id="w1"),
            tool_call("bash", {"command": "echo more >> huge.log"}, id="b1"),
            tool_call("bash", {"command": "echo changed > small.txt"}, id="b2"),
        )
    )
    assert rig.records == [
        {"tool_call_id": "w1", "files": [], "skipped": ["big.txt"]},
        {"tool_call_id": "b1", "files": [], "skipped": ["huge.log"]},
        {
            "tool_call_id": "b2",
            "files": [{"path": "small.txt", "before": sha("small\n"), "after": sha("changed\n"), "mode": 0o644}],
            "skipped": [],
        },
    ]
    assert sha(b"0123456789" * 3) not in rig.blobs.blobs
    report = await rig.restore()
    assert report == RewindReport(restored=["small.txt"], skipped=["big.txt", "huge.log"])
    assert (root / "big.txt").read_bytes() == b"x" * 17
    assert (root / "huge.log").read_bytes() == b"0123456789" * 3 + b"more\n"
    assert (root / "small.txt").read_bytes() == b"small\n"


async def test_restore_never_writes_through_a_symlink_or_out_of_the_root(tmp_path: Path, root: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "target.txt").write_bytes(b"outside file\n")
    (root / "link").symlink_to(outside)
    (root / "flink").symlink_to(outside / "target.txt")
    blobs = MemoryBlobs()
    evil = await blobs.put_blob(b"evil\n")
    payload = {
        "tool_call_id": "c1",
        "files": [
            {"path": "link/evil.txt", "before": evil, "after": None},
            {"path": "link/target.txt", "before": evil, "after": sha("outside file\n")},
            {"path": "flink", "before": evil, "after": sha("outside file\n")},
            {"path": "../escape.txt", "before": evil, "after": None},
            {"path": str(tmp_path / "abs.txt"), "before": evil, "after": None},
            {"path": "a/./b.txt", "before": evil, "after": None},
        ],
        "skipped": [],
    }
    report = await restore_files(root, [payload], blobs)
    assert report == RewindReport(
        conflicts=sorted(["link/evil.txt", "link/target.txt", "flink", "../escape.txt", str(tmp_path / "abs.txt"), "a/./b.txt"])
    )
    assert names(outside) == ["target.txt"]
    assert (outside / "target.txt").read_bytes() == b"outside file\n"
    assert names(tmp_path) == ["outside", "ws"]
    assert names(root) == ["flink", "link"]


async def test_bash_through_a_symlinked_folder_is_not_checkpointed_outside_the_root(tmp_path: Path, rig: Rig, root: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "link").symlink_to(outside)
    ok(await rig.run(tool_call("bash", {"command": "echo hi > link/file.txt"}, id="b1")))
    assert rig.records == []
    assert (outside / "file.txt").read_bytes() == b"hi\n"


async def test_a_write_outside_the_root_is_reported_as_skipped(tmp_path: Path, root: Path) -> None:
    extra = (tmp_path / "extra").resolve()
    extra.mkdir()
    rig = Rig(root)
    for t in rig.tools:
        t.workspace.allow_root(extra)  # type: ignore[attr-defined]
    ok(await rig.run(tool_call("write", {"path": str(extra / "x.txt"), "content": "x\n"}, id="w1")))
    assert rig.records == [{"tool_call_id": "w1", "files": [], "skipped": [str(extra / "x.txt")]}]
    assert rig.blobs.puts == []


async def test_a_failing_blob_store_never_fails_the_call(rig: Rig, root: Path, caplog: pytest.LogCaptureFixture) -> None:
    rig.put("a.txt", b"before\n")
    rig.blobs.fail_puts = True
    with caplog.at_level(logging.WARNING, logger="ketch.sessions"):
        results = await rig.run(
            tool_call("read", {"path": "a.txt"}, id="r1"),
            tool_call("write", {"path": "a.txt", "content": "after\n"}, id="w1"),
        )
    assert results[1] == ("w1", "Overwrote a.txt (6 bytes, 1 line).", False)
    assert rig.records == [{"tool_call_id": "w1", "files": [], "skipped": ["a.txt"]}]
    before, after = sha("before\n")[:12], sha("after\n")[:12]
    assert [r.getMessage() for r in caplog.records] == [
        f"checkpoint: cannot save content {before}: disk full",
        f"checkpoint: cannot save content {after}: disk full",
    ]
    assert await rig.restore() == RewindReport(skipped=["a.txt"])
    assert (root / "a.txt").read_bytes() == b"after\n"


async def test_a_failing_record_never_fails_the_call(rig: Rig, root: Path, caplog: pytest.LogCaptureFixture) -> None:
    rig.fail_records = True
    with caplog.at_level(logging.WARNING, logger="ketch.sessions"):
        results = await rig.run(tool_call("write", {"path": "n.txt", "content": "new\n"}, id="w1"))
    assert results == [("w1", "Created n.txt (4 bytes, 1 line).", False)]
    assert [r.getMessage() for r in caplog.records] == ["checkpoint: recording w1 failed: store closed"]


class Touching(Tool):
    """A custom tool that declares the files it changes (``touched_paths``)."""

    def __init__(self, root: Path) -> None:
        super().__init__("stamp", "", {"type": "object", "properties": {"name": {"type": "string"}}})
        self.root = root

    def touched_paths(self, args: dict[str, Any]) -> list[str]:
        return [args["name"], ELSEWHERE]

    async def execute(self, args: dict[str, Any], ctx: ToolContext[Any]) -> str:
        (self.root / args["name"]).write_bytes(b"stamped\n")
        return "ok"


async def test_a_tool_declaring_touched_paths_is_checkpointed(rig: Rig, root: Path) -> None:
    rig.put("s.txt", b"plain\n")
    rig.tools.append(Touching(root))
    ok(await rig.run(tool_call("stamp", {"name": "s.txt"}, id="t1")))
    assert rig.records == [
        {
            "tool_call_id": "t1",
            "files": [{"path": "s.txt", "before": sha("plain\n"), "after": sha("stamped\n"), "mode": 0o644}],
            "skipped": [ELSEWHERE],
        }
    ]
    assert await rig.restore() == RewindReport(restored=["s.txt"], skipped=[ELSEWHERE])
    assert (root / "s.txt").read_bytes() == b"plain\n"


async def test_a_same_size_change_keeping_the_modification_time_is_seen_when_recent(rig: Rig, root: Path) -> None:
    """A coarse file-system clock can give two writes in one tick the same mtime: a file
    modified recently is read again, not trusted by its (mtime, size, inode)."""
    rig.put("a.txt", b"a")
    mtime = (root / "a.txt").stat().st_mtime_ns
    stamp = f"@{mtime // 1_000_000_000}.{mtime % 1_000_000_000:09d}"
    old = 1_000_000_000_000_000_000
    rig.put("old.txt", b"o")
    os.utime(root / "old.txt", ns=(old, old))
    ok(
        await rig.run(
            tool_call("bash", {"command": "echo first"}, id="b0"),
            tool_call("bash", {"command": f"printf b > a.txt && touch -d {stamp} a.txt"}, id="b1"),
            tool_call("bash", {"command": "printf p > old.txt"}, id="b2"),
        )
    )
    assert (root / "a.txt").stat().st_mtime_ns == mtime
    assert rig.records == [
        {"tool_call_id": "b1", "files": [{"path": "a.txt", "before": sha("a"), "after": sha("b"), "mode": 0o644}], "skipped": []},
        {"tool_call_id": "b2", "files": [{"path": "old.txt", "before": sha("o"), "after": sha("p"), "mode": 0o644}], "skipped": []},
    ]


async def test_malformed_payloads_are_ignored(root: Path, caplog: pytest.LogCaptureFixture) -> None:
    (root / "a.txt").write_bytes(b"now\n")
    blobs = MemoryBlobs()
    with caplog.at_level(logging.WARNING, logger="ketch.sessions"):
        report = await restore_files(
            root,
            [{"files": "nope"}, {"tool_call_id": "x", "files": [{"path": 3}], "skipped": []}],
            blobs,
        )
    assert report == RewindReport()
    assert [r.getMessage() for r in caplog.records] == [
        "rewind: ignoring a malformed checkpoint payload",
        "rewind: ignoring a malformed checkpoint file record {'path': 3}",
    ]
    assert (root / "a.txt").read_bytes() == b"now\n"


async def test_hidden_files_are_never_read_or_saved(root: Path) -> None:
    """What the bash sandbox hides (files that may hold keys) stays out of the blob store:
    a bash snapshot leaves it out, and a write to it is skipped, not saved."""
    rig = Rig(root, hidden=[root / ".env", root / "**" / "*.pem"])
    rig.put(".env", b"TOKEN=sk-test-LEAKCHECK-0123\n")
    rig.put("keys/id.pem", b"sk-test-LEAKCHECK-pem\n")
    rig.put("a.txt", b"a\n")
    ok(
        await rig.run(
            tool_call("bash", {"command": "echo b > a.txt"}, id="b1"),
            tool_call("read", {"path": ".env"}, id="r1"),  # no engine here: the write needs it
            tool_call("write", {"path": ".env", "content": "TOKEN=new\n"}, id="w1"),
        )
    )
    assert rig.records == [
        {
            "tool_call_id": "b1",
            "files": [{"path": "a.txt", "before": sha("a\n"), "after": sha("b\n"), "mode": 0o644}],
            "skipped": [],
        },
        {"tool_call_id": "w1", "files": [], "skipped": [".env"]},
    ]
    assert not any(b"LEAKCHECK" in data for data in rig.blobs.blobs.values())
