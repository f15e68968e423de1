"""Reports of an eval run: a self-contained HTML page and the comparison of two runs."""

from __future__ import annotations

import html
import json
from typing import Any
from typing import Literal

import msgspec

from ._run import EvalReport

__all__ = ["Change", "compare", "to_html"]


class Change(msgspec.Struct, frozen=True, kw_only=True):
    """A case whose outcome differs between two runs: passes out of trials before and after
    (None: the case is not in that run) and the kind of change."""

    case: str
    before: str | None
    after: str | None
    kind: Literal["improved", "regressed", "changed", "added", "removed"]


def _rates(report: EvalReport) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    for r in report.results:
        passed, total = out.get(r.case, (0, 0))
        out[r.case] = (passed + r.passed, total + 1)
    return out


def compare(before: EvalReport, after: EvalReport) -> list[Change]:
    """The cases whose pass rate differs between ``before`` and ``after`` (or that only one
    has), in ``before``'s case order, then the added ones."""
    a, b = _rates(before), _rates(after)
    changes: list[Change] = []
    for case in [*a, *(c for c in b if c not in a)]:
        old, new = a.get(case), b.get(case)
        show_old = f"{old[0]}/{old[1]}" if old else None
        show_new = f"{new[0]}/{new[1]}" if new else None
        if old is None:
            changes.append(Change(case=case, before=None, after=show_new, kind="added"))
        elif new is None:
            changes.append(Change(case=case, before=show_old, after=None, kind="removed"))
        elif old != new:
            rate_old, rate_new = old[0] / old[1], new[0] / new[1]
            kind: Literal["improved", "regressed", "changed"] = (
                "improved" if rate_new > rate_old else "regressed" if rate_new < rate_old else "changed"
            )
            changes.append(Change(case=case, before=show_old, after=show_new, kind=kind))
    return changes


_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 72em; padding: 0 1em; }
table { border-collapse: collapse; } td, th { border: 1px solid #ccc; padding: .25em .6em; text-align: left; }
.pass { color: #176b2c; } .fail { color: #a4161a; }
details { margin: .5em 0 1em; } summary { cursor: pointer; }
.msg { border-left: 3px solid #ccc; margin: .4em 0; padding: .2em .8em; white-space: pre-wrap; }
.user { border-color: #2b6cb0; } .assistant { border-color: #6b46c1; } .tool_result { border-color: #888; }
.role { font-weight: 600; font-size: 12px; text-transform: uppercase; color: #555; }
"""


def _block_text(block: dict[str, Any]) -> str:
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text", ""))
    if kind == "thinking":
        return f"(thinking) {block.get('thinking', '')}"
    if kind == "tool_call":
        return f"→ {block.get('name', '')}({json.dumps(block.get('args', {}), ensure_ascii=False)})"
    return f"[{kind}]"


def _message_html(message: dict[str, Any]) -> str:
    role = str(message.get("role", ""))
    content = message.get("content", [])
    if isinstance(content, str):
        text = content
    else:
        text = "\n".join(_block_text(b) for b in content if isinstance(b, dict))
    if role == "tool_result":
        role_line = f"tool result: {message.get('tool_name', '')}" + (
            " (error)" if message.get("is_error") else ""
        )
    else:
        role_line = role
    if message.get("error_message"):
        text += f"\n(error: {message['error_message']})"
    css = role if role in ("user", "assistant", "tool_result") else "other"
    return f'<div class="msg {css}"><div class="role">{html.escape(role_line)}</div>{html.escape(text)}</div>'


def to_html(report: EvalReport, *, title: str | None = None) -> str:
    """A self-contained HTML page of ``report``: the summary table and, per trial, its
    scores and transcript. Everything from the cases and runs is escaped and the page
    forbids scripts (its Content-Security-Policy allows only its inline style)."""
    e = html.escape
    heading = title if title is not None else f"Eval: {report.dataset}"
    rates = _rates(report)
    rows = "".join(
        f'<tr><td>{e(case)}</td><td class="{"pass" if p == n else "fail"}">{p}/{n}</td></tr>'
        for case, (p, n) in rates.items()
    )
    k = report.trials
    summary = f"pass@1 {report.pass_at_k(1):.3f}" + (
        f" · pass^{k} {report.pass_hat_k(k):.3f}" if k > 1 else ""
    )
    trials = []
    for r in report.results:
        scores = "".join(
            f'<li class="{"pass" if s.passed else "fail"}">{e(s.evaluator)}: '
            f"{'pass' if s.passed else 'fail'}{e(' — ' + s.reason) if s.reason else ''}</li>"
            for s in r.scores
        )
        error = f'<p class="fail">error: {e(r.error)}</p>' if r.error else ""
        transcript = "".join(_message_html(m) for m in r.messages)
        verdict = "pass" if r.passed else "fail"
        trials.append(
            f'<details><summary><span class="{verdict}">{verdict}</span> {e(r.case)} · trial {r.trial} · '
            f"{r.turns} turns · {r.duration:.2f} s</summary>{error}<ul>{scores}</ul>{transcript}</details>"
        )
    return (
        '<!doctype html>\n<html><head><meta charset="utf-8">'
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">"
        f"<title>{e(heading)}</title><style>{_STYLE}</style></head><body>"
        f"<h1>{e(heading)}</h1><p>{e(summary)}</p>"
        f"<table><tr><th>case</th><th>passed</th></tr>{rows}</table>"
        f"<h2>Trials</h2>{''.join(trials)}</body></html>\n"
    )
