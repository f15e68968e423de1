"""White-box test: imports ketch implementation modules (private) directly.

``ketch eval`` on the embedded model scores the answer ``ketch run`` prints: a run that
ends with the model's routed call has the call's result as its answer (its last
assistant message has no text). The embedded model is a scripted one reporting the
embedded model's provider and id (``build_model`` patched), so the routed path runs as
with ``--model local``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from ketch.cli import _factory
from ketch.cli._eval import eval_command
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call

DATASET = {
    "name": "routed",
    "cases": [
        {"name": "list", "input": "What files are in this folder?", "expected": "(empty folder)"},
        {
            "name": "create",
            "input": "Create hello.txt with hi",
            "expected": "Created hello.txt (3 bytes, 1 line).",
        },
    ],
}


def test_the_answer_of_a_routed_run_is_scored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    replies: dict[str, Any] = {
        "ls": reply(tool_call("ls", {"path": "."})),
        "write": reply(tool_call("write", {"path": "hello.txt", "content": "hi\n"})),
    }
    models: list[ScriptedModel] = []

    def embedded(spec: str, settings: Any) -> ScriptedModel:
        assert spec == "local"
        # one model for every trial, as for --model local: its replies follow the cases' order
        model = ScriptedModel([replies["ls"], replies["write"]], provider="local", api="local", id="smollm2")
        models.append(model)
        return model

    monkeypatch.setattr(_factory, "build_model", embedded)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for name in [n for n in os.environ if n.endswith("_API_KEY") or n == "KETCH_TEST_SCRIPT"]:
        monkeypatch.delenv(name)
    (tmp_path / "ds.json").write_text(json.dumps(DATASET))

    code = eval_command(
        [
            "ds.json",
            "--model",
            "local",
            "--concurrency",
            "1",
            "--permission-mode",
            "accept-edits",
            "--workspace",
            "ws",
            "--json",
            "r.json",
        ]
    )

    out = capsys.readouterr().out
    assert code == 0, out
    [model] = models
    assert [[t.name for t in r.tools] for r in model.requests] == [["ls"], ["write"]]  # routed, one call each
    results = json.loads((tmp_path / "r.json").read_text())["results"]
    assert [(r["case"], r["passed"], r["text"], r["turns"]) for r in results] == [
        ("list", True, "(empty folder)", 1),
        ("create", True, "Created hello.txt (3 bytes, 1 line).", 1),
    ]
    assert (tmp_path / "ws" / "001-create" / "0" / "hello.txt").read_text() == "hi\n"
    assert out.splitlines()[-1] == "pass@1 1.000"
