"""Stand-in for src/harbor/environments/base.py (see the package doc)."""

from __future__ import annotations

from abc import ABC
from abc import abstractmethod

from pydantic import BaseModel


class ExecResult(BaseModel):
    stdout: str | None = None
    stderr: str | None = None
    return_code: int


class BaseEnvironment(ABC):
    default_user: str | int | None = None

    @abstractmethod
    async def exec(
        self,
        command: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_sec: int | None = None,
        user: str | int | None = None,
    ) -> ExecResult: ...
