"""Evaluators written in a dataset file: one tagged object per evaluator.

``{"type": "exact_match"}``, ``{"type": "tool_trajectory", "calls": [{"name": ...,
"args": {...}}], "ordered": true, "exact": false, "tolerance": 0}``, ``{"type": "budget", "max_turns":
3, "max_cost": 0.01}``, ``{"type": "latency", "max_seconds": 20}`` and ``{"type":
"judge", "rubric": "...", "model": "provider:model"}``; an unknown type or key is an
error naming it.
"""

from __future__ import annotations

from typing import Any
from typing import TypeAlias

import msgspec

__all__ = ["BudgetSpec", "EvaluatorSpec", "ExactMatchSpec", "JudgeSpec", "LatencySpec", "ToolTrajectorySpec"]


class _Spec(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, tag_field="type"):
    pass


class ExactMatchSpec(_Spec, tag="exact_match"):
    """The final text equals the case's ``expected``."""


class SpecCall(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One expected tool call: its name and the arguments that must match."""

    name: str
    args: dict[str, Any] = msgspec.field(default_factory=dict)


class ToolTrajectorySpec(_Spec, tag="tool_trajectory"):
    """The run made these calls (see :class:`ketch.evals.ToolTrajectory`)."""

    calls: list[SpecCall]
    ordered: bool = True
    exact: bool = False
    tolerance: float = 0.0


class BudgetSpec(_Spec, tag="budget"):
    """At most ``max_turns`` turns and ``max_cost`` US dollars."""

    max_turns: int | None = None
    max_cost: float | None = None


class LatencySpec(_Spec, tag="latency"):
    """The run took at most ``max_seconds``."""

    max_seconds: float


class JudgeSpec(_Spec, tag="judge"):
    """The model ``model`` (``provider:model``) grades the answer against ``rubric``."""

    rubric: str
    model: str


EvaluatorSpec: TypeAlias = ExactMatchSpec | ToolTrajectorySpec | BudgetSpec | LatencySpec | JudgeSpec
"""An evaluator as a dataset file writes it."""
