"""OpenTelemetry spans of eval runs (only when a tracer provider is given; importing this
module imports no OpenTelemetry module).

``eval {dataset}`` spans the run; under it one ``eval_case {case}`` span per trial
(``ketch.eval.case``, ``ketch.eval.trial``, ``ketch.eval.passed``), the agent's own spans
(from :func:`ketch.telemetry.instrument`) inside it, and one ``evaluate {evaluator}`` span
per evaluator (``ketch.eval.evaluator``, ``ketch.eval.passed``, ``ketch.eval.reason``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

__all__: list[str] = []

SCOPE = "ketch.evals"


class Tracing:
    """The spans of one eval run; every method is a no-op without a provider."""

    def __init__(self, tracer_provider: Any, dataset: str) -> None:
        self.dataset = dataset
        self.tracer: Any = None
        if tracer_provider is not None:
            from opentelemetry import trace

            self.tracer = trace.get_tracer(SCOPE, tracer_provider=tracer_provider)

    @contextlib.contextmanager
    def span(self, name: str, attributes: dict[str, Any]) -> Iterator[Any]:
        if self.tracer is None:
            yield None
            return
        with self.tracer.start_as_current_span(name, attributes=attributes) as span:
            yield span

    def run(self, trials: int) -> contextlib.AbstractContextManager[Any]:
        return self.span(
            f"eval {self.dataset}", {"ketch.eval.dataset": self.dataset, "ketch.eval.trials": trials}
        )

    def case(self, case: str, trial: int) -> contextlib.AbstractContextManager[Any]:
        attributes = {"ketch.eval.dataset": self.dataset, "ketch.eval.case": case, "ketch.eval.trial": trial}
        return self.span(f"eval_case {case}", attributes)

    def evaluator(self, case: str, name: str) -> contextlib.AbstractContextManager[Any]:
        return self.span(f"evaluate {name}", {"ketch.eval.case": case, "ketch.eval.evaluator": name})
