"""``ketch eval`` on scripted models: the table, JSON and HTML reports, resume, workspaces,
``ketch eval compare`` and bad input."""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from clihelp import Env
from clihelp import Terminal

DATASET = """\
name: math
cases:
  - {name: two-plus-two, input: "2+2?", expected: "4"}
  - {name: xss, input: "<script>alert(1)</script> 1+3?", expected: "4"}
  - {name: three, input: "1+2?", expected: "3"}
"""


def dataset(env: Env) -> str:
    path = env.work / "ds.yaml"
    path.write_text(DATASET)
    return str(path)


def test_a_run_prints_a_table_and_writes_json_and_html(env: Env) -> None:
    script = env.script(["4"])
    proc = env.run(
        "eval",
        dataset(env),
        "--model",
        f"scripted:{script}",
        "--trials",
        "2",
        "--json",
        "r.json",
        "--html",
        "r.html",
    )
    assert proc.returncode == 1, proc.stderr
    rows = [line.rstrip() for line in proc.stdout.splitlines()]
    assert rows[0] == f"math on scripted:{script}"
    body = [r for r in rows if r.startswith("│")]
    assert [[cell.strip() for cell in r.strip("│").split("│")] for r in body] == [
        ["two-plus-two", "2/2", "1", body[0].split("│")[4].strip(), ""],
        ["xss", "2/2", "1", body[1].split("│")[4].strip(), ""],
        ["three", "0/2", "1", body[2].split("│")[4].strip(), "exact_match: expected '3', got '4'"],
    ]
    assert rows[-1] == "pass@1 0.667  pass@2 0.667  pass^2 0.667"
    report = json.loads((env.work / "r.json").read_text())
    assert (report["dataset"], report["trials"], report["model"]) == ("math", 2, f"scripted:{script}")
    assert [(r["case"], r["trial"], r["passed"]) for r in report["results"]] == [
        ("two-plus-two", 0, True),
        ("two-plus-two", 1, True),
        ("xss", 0, True),
        ("xss", 1, True),
        ("three", 0, False),
        ("three", 1, False),
    ]
    assert [m["role"] for m in report["results"][0]["messages"]] == ["user", "assistant"]
    page = (env.work / "r.html").read_text()
    assert "<script" not in page
    assert page.count("&lt;script&gt;alert(1)&lt;/script&gt; 1+3?") == 2  # the transcript of each trial
    assert "Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\"" in page
    assert "exact_match: fail — expected &#x27;3&#x27;, got &#x27;4&#x27;" in page


def test_compare_lists_the_changed_cases(env: Env) -> None:
    ds = dataset(env)
    assert env.run("eval", ds, "--model", f"scripted:{env.script(['4'])}", "--json", "a.json").returncode == 1
    assert (
        env.run(
            "eval", ds, "--model", f"scripted:{env.script(['3'], 'b.json')}", "--json", "b.json"
        ).returncode
        == 1
    )
    proc = env.run("eval", "compare", "a.json", "b.json")
    assert proc.returncode == 1
    assert proc.stdout.splitlines() == [
        "regressed two-plus-two  1/1 -> 0/1",
        "regressed xss           1/1 -> 0/1",
        "improved  three         0/1 -> 1/1",
        "1 improved, 2 regressed",
    ]
    same = env.run("eval", "compare", "a.json", "a.json")
    assert (same.returncode, same.stdout) == (0, "No case changed (3 cases).\n")


def test_resume_skips_the_trials_in_the_results_file(env: Env) -> None:
    ds = dataset(env)
    first = env.run("eval", ds, "--model", f"scripted:{env.script(['4'])}", "--resume", "done.jsonl")
    assert first.returncode == 1
    assert len((env.work / "done.jsonl").read_text().splitlines()) == 3
    # a model that would answer otherwise: nothing is asked of it, the results are the file's
    again = env.run(
        "eval", ds, "--model", f"scripted:{env.script(['3'], 'other.json')}", "--resume", "done.jsonl"
    )
    assert again.returncode == 1
    assert "exact_match: expected '3', got '4'" in again.stdout
    assert again.stdout.splitlines()[-1] == "pass@1 0.667"
    assert len((env.work / "done.jsonl").read_text().splitlines()) == 3


def test_each_trial_runs_in_its_own_workspace(env: Env) -> None:
    script = env.script(
        [
            {"blocks": [{"type": "tool_call", "id": "c1", "name": "ls", "args": {"path": "."}}]},
            "4",
        ]
    )
    (env.work / "secret.txt").write_text("not for the eval")
    proc = env.run(
        "eval", dataset(env), "--model", f"scripted:{script}", "--workspace", "ws", "--trials", "1"
    )
    assert proc.returncode == 1, proc.stderr
    assert sorted(p.name for p in (env.work / "ws").iterdir()) == ["000-two-plus-two", "001-xss", "002-three"]
    report_run = env.run("eval", dataset(env), "--model", f"scripted:{script}", "--json", "r.json")
    assert report_run.returncode == 1
    results = json.loads((env.work / "r.json").read_text())["results"]
    listing = next(m for m in results[0]["messages"] if m["role"] == "tool_result")
    assert "is_error" not in listing  # not an error (left out when false)
    assert "ds.yaml" not in json.dumps(listing)
    assert "secret.txt" not in json.dumps(listing)


def test_bad_input_names_the_problem(env: Env) -> None:
    missing = env.run("eval", "nope.json")
    assert (missing.returncode, missing.stdout) == (2, "")
    assert missing.stderr.startswith(
        "ketch eval: nope.json: cannot read the dataset: No such file or directory"
    )
    (env.work / "bad.json").write_text(json.dumps({"name": "x", "cases": [{"name": "a", "inptu": "?"}]}))
    bad = env.run("eval", "bad.json")
    assert bad.returncode == 2
    assert bad.stderr == "ketch eval: bad.json: Object contains unknown field `inptu` - at `$.cases[0]`\n"
    model = env.run("eval", dataset(env), "--model", "nosuch:thing")
    assert model.returncode == 2
    assert model.stderr.startswith("ketch eval: cannot use model 'nosuch:thing'")
    trials = env.run("eval", dataset(env), "--trials", "0")
    assert trials.returncode == 2
    assert "--trials: expected a positive integer, got '0'" in trials.stderr
    compare = env.run("eval", "compare", "a.json", "b.json")
    assert compare.returncode == 2
    assert compare.stderr.startswith("ketch eval: a.json: cannot read the report: No such file or directory")


def test_otel_endpoint_sends_the_eval_spans(env: Env) -> None:
    """A collector on loopback gets the eval's spans (the run, each case, each evaluator)
    with the agents' spans inside them."""
    import threading
    from http.server import BaseHTTPRequestHandler
    from http.server import ThreadingHTTPServer

    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    received: list[bytes] = []

    class Collector(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if self.path == "/v1/traces":
                received.append(body)
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        proc = env.run(
            "eval", dataset(env), "--model", f"scripted:{env.script(['4'])}", "--otel-endpoint", url
        )
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    assert proc.returncode == 1, proc.stderr
    spans = {}
    for body in received:
        request = ExportTraceServiceRequest.FromString(body)
        for rs in request.resource_spans:
            for ss in rs.scope_spans:
                for s in ss.spans:
                    attrs = {a.key: a.value for a in s.attributes}
                    spans.setdefault(s.name, []).append((s, attrs))
    assert sorted((name, len(found)) for name, found in spans.items()) == [
        ("chat scripted-model", 3),
        ("eval math", 1),
        ("eval_case three", 1),
        ("eval_case two-plus-two", 1),
        ("eval_case xss", 1),
        ("evaluate exact_match", 3),
        ("invoke_agent ketch", 3),
    ]
    _, attrs = spans["eval_case three"][0]
    assert (attrs["ketch.eval.case"].string_value, attrs["ketch.eval.passed"].bool_value) == ("three", False)
    verdicts = sorted(
        (
            a["ketch.eval.case"].string_value,
            a["ketch.eval.passed"].bool_value,
            a["ketch.eval.reason"].string_value,
        )
        for _, a in spans["evaluate exact_match"]
    )
    assert verdicts == [
        ("three", False, "expected '3', got '4'"),
        ("two-plus-two", True, ""),
        ("xss", True, ""),
    ]
    agent_parents = sorted(s.parent_span_id for s, _ in spans["invoke_agent ketch"])
    assert agent_parents == sorted(
        s.span_id for name in spans if name.startswith("eval_case") for s, _ in spans[name]
    )


def test_a_progress_bar_on_a_terminal(env: Env, terminals: list[Terminal]) -> None:
    term = Terminal(env, "eval", dataset(env), "--model", f"scripted:{env.script(['4'])}", "--trials", "2")
    terminals.append(term)
    term.expect(r"eval [^\r]*0/6[^\r]* 0 failed")  # drawn as it starts
    term.expect(r"eval [^\r]*6/6[^\r]* 2 failed")  # and as it ends, before the table
    assert term.wait_exit() == 1
    screen = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", term.seen)
    assert "│ three        │ 0/2    │" in screen
    assert "pass@1 0.667  pass@2 0.667  pass^2 0.667" in screen


@pytest.fixture
def project() -> Iterator[Path]:
    """A project directory outside /tmp (the sandbox gives bash a /tmp of its own, so a
    write there would not show a refusal), removed after the test."""
    for candidate in (os.environ.get("XDG_CACHE_HOME"), str(Path.home() / ".cache"), os.getcwd()):
        if candidate:
            try:
                Path(candidate).mkdir(parents=True, exist_ok=True)
                where = Path(tempfile.mkdtemp(prefix="ketch-eval-project-", dir=candidate)).resolve()
                break
            except OSError:
                continue
    else:
        raise RuntimeError("no writable directory outside /tmp for the test")
    try:
        yield where
    finally:
        shutil.rmtree(where, ignore_errors=True)


def test_bash_in_a_trial_works_in_its_directory_and_cannot_write_outside_it(env: Env, project: Path) -> None:
    """Each trial's bash runs in the OS sandbox rooted in the trial's own directory: a
    relative write lands there, never in the directory the command ran from, and a write
    into that directory is refused by the sandbox (read-only), not by a permission rule."""
    script = env.script(
        [
            {"blocks": [{"type": "tool_call", "id": "c1", "name": "bash", "args": {"command": "pwd > where.txt"}}]},
            {
                "blocks": [
                    {
                        "type": "tool_call",
                        "id": "c2",
                        "name": "bash",
                        "args": {"command": f"echo escaped > {project}/escaped.txt"},
                    }
                ]
            },
            "done",
        ]
    )
    (project / "ds.yaml").write_text("name: sandboxed\ncases:\n  - {name: write files, input: go, expected: done}\n")
    proc = env.run(
        "eval",
        "ds.yaml",
        "--model",
        f"scripted:{script}",
        "--permission-mode",
        "accept-edits",
        "--workspace",
        "ws",
        "--trials",
        "2",
        "--json",
        "r.json",
        cwd=project,
    )
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in project.iterdir()) == ["ds.yaml", "r.json", "ws"]
    case_dir = project / "ws" / "000-write_files"
    assert sorted(p.name for p in case_dir.iterdir()) == ["0", "1"]
    for trial in ("0", "1"):
        where = case_dir / trial
        assert sorted(p.name for p in where.iterdir()) == ["where.txt"]
        assert (where / "where.txt").read_text() == f"{where}\n"
    results = json.loads((project / "r.json").read_text())["results"]
    assert [(r["trial"], r["passed"]) for r in results] == [(0, True), (1, True)]
    for r in results:
        outputs = {
            m["tool_call_id"]: (m.get("is_error", False), m["content"][0]["text"])
            for m in r["messages"]
            if m["role"] == "tool_result"
        }
        assert outputs["c1"] == (False, "(no output)")
        assert outputs["c2"] == (
            True,
            f"{shutil.which('bash')}: line 1: {project}/escaped.txt: Read-only file system\n\n"
            "[Command exited with code 1.]\n\n"
            "[sandbox: the filesystem outside the workspace is read-only; write in the workspace or /tmp]",
        )
