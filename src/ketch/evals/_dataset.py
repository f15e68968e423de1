"""Cases and datasets: what an eval runs."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgspec

from ._specs import EvaluatorSpec

__all__ = ["Case", "Dataset"]


class Case(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One eval case: a name, the prompt, an optional expected answer, metadata, and
    evaluators of its own (as a dataset file writes them; they join the dataset's)."""

    name: str
    input: str
    expected: str | None = None
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    evaluators: list[EvaluatorSpec] = msgspec.field(default_factory=list)


class Dataset(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A named list of cases (names unique)."""

    name: str
    cases: list[Case]
    evaluators: list[EvaluatorSpec] = msgspec.field(default_factory=list)
    """Evaluators for every case, as a dataset file writes them (see :mod:`ketch.evals`)."""

    def __post_init__(self) -> None:
        seen: set[str] = set()
        for case in self.cases:
            if case.name in seen:
                raise ValueError(
                    f"Dataset {self.name!r}: case name {case.name!r} is used twice; names must be unique"
                )
            seen.add(case.name)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> Dataset:
        """Read a dataset from a JSON or YAML file (``.yaml``/``.yml``; needs PyYAML)
        ``{"name": ..., "cases": [...], "evaluators": [...]}``; unknown keys are an error."""
        p = Path(path)
        where = os.fspath(path)
        try:
            raw = p.read_bytes()
        except OSError as e:
            raise ValueError(f"{where}: cannot read the dataset: {e.strerror or e}") from None
        try:
            if p.suffix.lower() in (".yaml", ".yml"):
                try:
                    import yaml  # type: ignore[import-untyped,unused-ignore]
                except ImportError:  # pragma: no cover - PyYAML is installed with the dev extras
                    raise ValueError(
                        f"{where}: reading YAML needs PyYAML (pip install pyyaml); or write JSON"
                    ) from None
                try:
                    data = yaml.safe_load(raw)
                except yaml.YAMLError as e:
                    raise ValueError(f"{where}: not valid YAML: {e}") from None
                return msgspec.convert(data, type=cls)
            return msgspec.json.decode(raw, type=cls)
        except msgspec.ValidationError as e:
            raise ValueError(f"{where}: {e}") from None
        except msgspec.DecodeError as e:
            raise ValueError(f"{where}: not valid JSON: {e}") from None

    @classmethod
    def from_sessions(
        cls, name: str, recordings: dict[str, list[Any]], *, expect_answer: bool = True
    ) -> Dataset:
        """A dataset of saved conversations (``{case name: messages}``, e.g. from
        :func:`ketch.evals.load_session`): each case's input is the conversation's first
        user message and, with ``expect_answer``, its expected answer the last assistant text."""
        from ..llm import AssistantMessage
        from ..llm import UserMessage
        from ..llm import message_from_dict

        cases = []
        for case_name, recording in recordings.items():
            messages = [message_from_dict(m) if isinstance(m, dict) else m for m in recording]
            users = [m for m in messages if isinstance(m, UserMessage)]
            if not users:
                raise ValueError(f"Dataset {name!r}: recording {case_name!r} has no user message")
            first = users[0].content
            text = first if isinstance(first, str) else "".join(getattr(b, "text", "") for b in first)
            answers = [m.text for m in messages if isinstance(m, AssistantMessage) and m.text]
            expected = answers[-1] if expect_answer and answers else None
            cases.append(Case(name=case_name, input=text, expected=expected))
        return cls(name=name, cases=cases)
