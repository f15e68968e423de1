"""Cases and datasets: what an eval runs."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgspec

__all__ = ["Case", "Dataset"]


class Case(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One eval case: a name, the prompt, an optional expected answer and metadata."""

    name: str
    input: str
    expected: str | None = None
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)


class Dataset(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A named list of cases (names unique)."""

    name: str
    cases: list[Case]

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
        """Read a dataset from a JSON file ``{"name": ..., "cases": [...]}``; unknown keys are an error."""
        try:
            return msgspec.json.decode(Path(path).read_bytes(), type=cls)
        except msgspec.ValidationError as e:
            raise ValueError(f"{os.fspath(path)}: {e}") from None
