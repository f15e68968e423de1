"""``ketch eval``: run the command's agent over a dataset and report, or compare two runs.

::

    ketch eval DATASET [--model M] [--trials K] [--concurrency N] [--json OUT] [--html OUT]
                       [--resume FILE] [--workspace DIR] [--max-turns N] [--otel-endpoint URL]
    ketch eval compare BEFORE.json AFTER.json

Each trial runs the same agent ``ketch run`` builds (settings, tools, permissions: a call
that needs approval is denied) in its own empty directory: under ``--workspace`` (kept),
else a temporary one (deleted at the end). Cases are scored by the dataset file's
evaluators; a case with ``expected`` and no evaluator anywhere is scored by exact match.
While it runs, a progress line on stderr (a terminal only); then a table on stdout.

Exit codes: 0 every trial passed, 1 some failed, 2 usage or configuration error.
``compare`` prints the cases whose pass rate changed; exit 0, 1 when some regressed.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ._args import OneLineParser
from ._args import add_permission_options
from ._args import positive_int

EXIT_FAILED = 1
EXIT_USAGE = 2


def _parser() -> OneLineParser:
    p = OneLineParser(
        prog="ketch eval",
        description="Run the agent over a dataset (JSON or YAML) and report; 'ketch eval compare A.json B.json' "
        "lists the cases whose outcome changed.",
    )
    p.add_argument("dataset", help="the dataset file (.json, .yaml or .yml)")
    p.add_argument("--model", "-m", help="the model (provider:model, local, ...); default: as for ketch run")
    p.add_argument("--trials", type=positive_int, default=1, help="runs per case (default 1)")
    p.add_argument("--concurrency", type=positive_int, default=4, help="runs at a time (default 4)")
    p.add_argument("--json", dest="json_out", metavar="OUT", help="write the report as JSON")
    p.add_argument(
        "--html", dest="html_out", metavar="OUT", help="write the report as an HTML page with transcripts"
    )
    p.add_argument(
        "--resume", metavar="FILE", help="results file (JSONL): append each trial, skip those already in it"
    )
    p.add_argument(
        "--workspace",
        metavar="DIR",
        help="run each trial in DIR/<NNN>-<case>/<trial> (kept); default: a temp dir",
    )
    p.add_argument("--max-turns", type=positive_int, help="model calls per run")
    add_permission_options(
        p, modes="accept_edits: file edits and sandboxed bash in the trial's directory", allow_example="Bash(make test)"
    )
    p.add_argument("--trust-project", action="store_true", help="apply this project's settings")
    p.add_argument(
        "--otel-endpoint", metavar="URL", help="send the eval's and agents' spans over OTLP/HTTP (otel extra)"
    )
    return p


def _compare_parser() -> OneLineParser:
    p = OneLineParser(
        prog="ketch eval compare", description="The cases whose pass rate differs between two reports."
    )
    p.add_argument("before", help="a report written by ketch eval --json")
    p.add_argument("after", help="another report")
    return p


def _error(message: str) -> int:
    sys.stderr.write(f"ketch eval: {message}\n")
    return EXIT_USAGE


def eval_command(argv: Sequence[str]) -> int:
    """Run ``ketch eval``; returns the exit code."""
    if argv and argv[0] == "compare":
        args = _compare_parser().parse_args(list(argv[1:]))
        return _compare(Path(args.before), Path(args.after))
    args = _parser().parse_args(list(argv))
    return _run(args)


def _read_report(path: Path) -> Any:
    import msgspec

    from ..evals import EvalReport

    try:
        return msgspec.json.decode(path.read_bytes(), type=EvalReport)
    except OSError as e:
        raise ValueError(f"{path}: cannot read the report: {e.strerror or e}") from None
    except msgspec.DecodeError as e:
        raise ValueError(f"{path}: not a report of ketch eval --json: {e}") from None


def _compare(before: Path, after: Path) -> int:
    from ..evals import compare

    try:
        a, b = _read_report(before), _read_report(after)
    except ValueError as e:
        return _error(str(e))
    changes = compare(a, b)
    out = sys.stdout
    if not changes:
        out.write(f"No case changed ({len({r.case for r in b.results})} cases).\n")
        return 0
    width = max(len(c.case) for c in changes)
    for c in changes:
        out.write(f"{c.kind:<9} {c.case:<{width}}  {c.before or '-'} -> {c.after or '-'}\n")
    counts = {
        k: sum(c.kind == k for c in changes) for k in ("improved", "regressed", "changed", "added", "removed")
    }
    out.write(", ".join(f"{n} {k}" for k, n in counts.items() if n) + "\n")
    return EXIT_FAILED if counts["regressed"] else 0


def _run(args: Any) -> int:
    import msgspec

    from ..evals import Case
    from ..evals import CaseResult
    from ..evals import Dataset
    from ..evals import ExactMatchSpec
    from ..evals import run_evals
    from ..evals import to_html
    from ._config import ConfigError
    from ._config import finish_settings
    from ._config import load_settings
    from ._factory import build_agent
    from ._factory import build_model
    from ._factory import choose_model

    try:
        dataset = Dataset.from_file(args.dataset)
    except ValueError as e:
        return _error(str(e))
    if not dataset.cases:
        return _error(f"{args.dataset}: the dataset has no cases")
    if not dataset.evaluators:
        dataset.cases = [
            msgspec.structs.replace(c, evaluators=[ExactMatchSpec()])
            if c.expected is not None and not c.evaluators
            else c
            for c in dataset.cases
        ]
    root = Path.cwd()
    try:
        settings = load_settings(
            root,
            {"model": args.model, "max_turns": args.max_turns, "permission_mode": args.permission_mode},
            trust=args.trust_project,
        )
        finish_settings(settings, args.allow, None)
        spec, _ = choose_model(settings)
        first = build_model(spec, settings)  # a bad model fails here, before any case
    except ConfigError as e:
        return _error(str(e))

    tracer_provider = None
    if args.otel_endpoint is not None:
        from . import _otel

        try:
            _otel.configure(args.otel_endpoint)
        except ConfigError as e:
            return _error(str(e))
        tracer_provider = _otel.tracer_provider()

    # One model for every trial (the embedded one starts its server once), but a scripted
    # model anew for each: it answers from the top of its script every time.
    fresh = spec.startswith("scripted:")

    builts: dict[int, Any] = {}  # id(agent) -> what build_agent built it with

    def make(case: Case, where: Path) -> Any:  # with --otel-endpoint, build_agent instruments it
        model = build_model(spec, settings) if fresh else first
        built = build_agent(settings, where, approver=None, model=model)
        built.arm()  # the first call forced as in ketch run (the embedded model's)
        builts[id(built.agent)] = built
        return built.agent

    def answer(agent: Any, result: Any) -> str | None:
        # the answer ketch run prints: the embedded model's run ends with its routed call,
        # whose result is the answer
        built = builts.pop(id(agent), None)
        return built.tool_answer(result) if built is not None else None

    progress = _Progress(len(dataset.cases) * args.trials)

    def finished(result: CaseResult) -> None:
        progress.advance(result)

    keep = args.workspace is not None
    workspace = Path(args.workspace) if keep else Path(tempfile.mkdtemp(prefix="ketch-eval-"))
    try:
        with progress:
            report = asyncio.run(
                run_evals(
                    dataset,
                    make,
                    trials=args.trials,
                    concurrency=args.concurrency,
                    results_path=args.resume,
                    on_result=finished,
                    workspace=workspace,
                    resolve_model=lambda name: build_model(name, settings),
                    tracer_provider=tracer_provider,
                    answer=answer,
                )
            )
    except ConfigError as e:
        return _error(str(e))
    finally:
        if tracer_provider is not None:
            from . import _otel

            _otel.shutdown()
        if not keep:
            import shutil

            shutil.rmtree(workspace, ignore_errors=True)
    report.model = spec
    _table(report)
    try:
        if args.json_out:
            Path(args.json_out).write_bytes(report.to_json() + b"\n")
        if args.html_out:
            Path(args.html_out).write_text(to_html(report), encoding="utf-8")
    except OSError as e:
        return _error(f"cannot write the report: {e}")
    return 0 if all(r.passed for r in report.results) else EXIT_FAILED


class _Progress:
    """A rich progress bar on stderr while trials run (only on a terminal)."""

    def __init__(self, total: int) -> None:
        self.total = total
        self._bar: Any = None
        self._task: Any = None
        self.failed = 0

    def __enter__(self) -> _Progress:
        if sys.stderr.isatty() and os.environ.get("TERM") != "dumb":
            from rich.console import Console
            from rich.progress import BarColumn
            from rich.progress import MofNCompleteColumn
            from rich.progress import Progress
            from rich.progress import TextColumn

            self._bar = Progress(
                TextColumn("eval"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[failed]} failed"),
                console=Console(stderr=True),
                transient=True,
            )
            self._bar.__enter__()
            self._task = self._bar.add_task("eval", total=self.total, failed=0)
        return self

    def advance(self, result: Any) -> None:
        self.failed += not result.passed
        if self._bar is not None:
            self._bar.update(self._task, advance=1, failed=self.failed)

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)


def _table(report: Any) -> None:
    """The report as a table on stdout: per case its passes, turns, seconds, and why it failed."""
    from rich.console import Console
    from rich.table import Table

    table = Table()
    for column in ("case", "passed", "turns", "seconds", "failed because"):
        table.add_column(column, justify="right" if column in ("turns", "seconds") else "left")
    by_case: dict[str, list[Any]] = {}
    for r in report.results:
        by_case.setdefault(r.case, []).append(r)
    for case, runs in by_case.items():
        passed = sum(r.passed for r in runs)
        why = next(
            (
                (r.error or "; ".join(f"{s.evaluator}: {s.reason}" for s in r.scores if not s.passed))
                for r in runs
                if not r.passed
            ),
            "",
        )
        table.add_row(
            case,
            f"{passed}/{len(runs)}",
            f"{sum(r.turns for r in runs) / len(runs):g}",
            f"{sum(r.duration for r in runs) / len(runs):.2f}",
            why,
        )
    tty = sys.stdout.isatty()
    console = Console(
        width=None if tty else 120, soft_wrap=False, highlight=False, color_system="auto" if tty else None
    )
    console.print(f"{report.dataset} on {report.model}", markup=False, overflow="ignore", crop=False)
    console.print(table)
    k = report.trials
    line = f"pass@1 {report.pass_at_k(1):.3f}"
    if k > 1:
        line += f"  pass@{k} {report.pass_at_k(k):.3f}  pass^{k} {report.pass_hat_k(k):.3f}"
    console.print(line)
