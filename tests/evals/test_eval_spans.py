"""OpenTelemetry spans of an eval run: the run, each trial with its case, each evaluator
with its verdict, and the agent's own spans (ketch.telemetry) inside the trial's."""

from __future__ import annotations

import asyncio

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ketch import Agent
from ketch.evals import Case
from ketch.evals import Dataset
from ketch.evals import ExactMatch
from ketch.evals import TurnsBudget
from ketch.evals import run_evals
from ketch.telemetry import instrument
from ketch.testing import ScriptedModel


def test_spans_carry_the_case_and_the_evaluators() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))

    def make(case: Case) -> Agent[None]:
        agent = Agent(ScriptedModel(["4"]))
        instrument(agent, tracer_provider=provider)
        return agent

    ds = Dataset(
        name="math",
        cases=[Case(name="two", input="2+2", expected="4"), Case(name="one", input="1+2", expected="3")],
    )
    asyncio.run(
        run_evals(ds, make, [ExactMatch(), TurnsBudget(max_turns=1)], concurrency=1, tracer_provider=provider)
    )
    spans = {s.name: s for s in exporter.get_finished_spans() if not s.name.startswith("evaluate")}
    run = spans["eval math"]
    assert dict(run.attributes) == {"ketch.eval.dataset": "math", "ketch.eval.trials": 1}
    two, one = spans["eval_case two"], spans["eval_case one"]
    assert dict(two.attributes) == {
        "ketch.eval.dataset": "math",
        "ketch.eval.case": "two",
        "ketch.eval.trial": 0,
        "ketch.eval.passed": True,
    }
    assert dict(one.attributes)["ketch.eval.passed"] is False
    assert two.parent.span_id == run.context.span_id
    agent_spans = [s for s in exporter.get_finished_spans() if s.name == "invoke_agent agent"]
    assert sorted(s.parent.span_id for s in agent_spans) == sorted([two.context.span_id, one.context.span_id])
    exact = [s for s in exporter.get_finished_spans() if s.name == "evaluate exact_match"]
    assert [(dict(s.attributes), s.parent.span_id) for s in exact] == [
        (
            {
                "ketch.eval.case": "two",
                "ketch.eval.evaluator": "exact_match",
                "ketch.eval.passed": True,
                "ketch.eval.reason": "",
            },
            two.context.span_id,
        ),
        (
            {
                "ketch.eval.case": "one",
                "ketch.eval.evaluator": "exact_match",
                "ketch.eval.passed": False,
                "ketch.eval.reason": "expected '3', got '4'",
            },
            one.context.span_id,
        ),
    ]
    assert [
        s.attributes["ketch.eval.passed"]
        for s in exporter.get_finished_spans()
        if s.name == "evaluate budget"
    ] == [True, True]
