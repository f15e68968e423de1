"""Stand-in for src/harbor/agents/base.py (see the package doc)."""

from __future__ import annotations

import logging
import os
from abc import ABC
from abc import abstractmethod
from collections.abc import Mapping
from pathlib import Path
from pathlib import PurePosixPath
from typing import Any

AGENT_DIR = PurePosixPath("/logs/agent")  # EnvironmentPaths.agent_dir


class BaseAgent(ABC):
    SUPPORTS_ATIF: bool = False
    session_id: str | None = None

    def __init__(
        self,
        logs_dir: Path,
        model_name: str | None = None,
        logger: logging.Logger | None = None,
        mcp_servers: list[Any] | None = None,
        skills_dir: str | None = None,
        *args: Any,
        extra_env: dict[str, str] | None = None,
        load_trajectory: str | Path | None = None,
        environment_logs_dir: PurePosixPath | None = None,
        **kwargs: Any,
    ) -> None:
        self.logs_dir = logs_dir
        self.environment_logs_dir = environment_logs_dir or AGENT_DIR
        self.model_name = model_name
        self.logger = logger or logging.getLogger("harbor-standin")
        self.mcp_servers = mcp_servers or []
        self.skills_dir = skills_dir
        self._extra_env: dict[str, str] = dict(extra_env) if extra_env else {}

    def _env_sources(self) -> tuple[Mapping[str, str], ...]:
        return (self._extra_env, os.environ)

    def _get_env(self, key: str, *alternatives: str) -> str | None:
        for source in self._env_sources():
            for name in (key, *alternatives):
                if name in source:
                    return source[name]
        return None

    @staticmethod
    @abstractmethod
    def name() -> str: ...

    @abstractmethod
    def version(self) -> str | None: ...

    @abstractmethod
    async def setup(self, environment: Any) -> None: ...

    @abstractmethod
    async def run(self, instruction: str, environment: Any, context: Any) -> None: ...

    def populate_context_post_run(self, context: Any) -> None:  # noqa: B027 (optional to override)
        pass
