"""Stand-in for src/harbor/agents/installed/base.py (see the package doc)."""

from __future__ import annotations

import functools
from abc import ABC
from abc import abstractmethod
from pathlib import Path
from typing import Any

from harbor.agents.base import BaseAgent
from harbor.environments.base import BaseEnvironment


class NonZeroAgentExitCodeError(RuntimeError):
    pass


def with_prompt_template(fn: Any) -> Any:
    """``run()``'s instruction goes through the prompt template first."""

    @functools.wraps(fn)
    async def wrapper(self: BaseInstalledAgent, instruction: str, *args: Any, **kwargs: Any) -> None:
        return await fn(self, self.render_instruction(instruction), *args, **kwargs)

    return wrapper


class BaseInstalledAgent(BaseAgent, ABC):
    def __init__(
        self,
        logs_dir: Path,
        prompt_template_path: Path | str | None = None,
        version: str | None = None,
        extra_env: dict[str, str] | None = None,
        *args: Any,
        config: Path | str | dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(logs_dir, *args, extra_env=extra_env, **kwargs)
        self._prompt_template_path = Path(prompt_template_path) if prompt_template_path else None
        self._version = version

    def version(self) -> str | None:
        return self._version

    def get_version_command(self) -> str | None:
        return None

    def parse_version(self, stdout: str) -> str:
        return stdout.strip()

    async def _exec(
        self,
        environment: BaseEnvironment,
        command: str,
        user: str | int | None = None,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        timeout_sec: int | None = None,
    ) -> Any:
        result = await environment.exec(
            command=f"set -o pipefail; {command}", user=user, env=env, cwd=cwd, timeout_sec=timeout_sec
        )
        if result.return_code != 0:
            raise NonZeroAgentExitCodeError(f"Command failed (exit {result.return_code}): {command}")
        return result

    async def exec_as_root(
        self,
        environment: BaseEnvironment,
        command: str,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        timeout_sec: int | None = None,
    ) -> Any:
        return await self._exec(environment, command, user="root", env=env, cwd=cwd, timeout_sec=timeout_sec)

    async def exec_as_agent(
        self,
        environment: BaseEnvironment,
        command: str,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        timeout_sec: int | None = None,
    ) -> Any:
        return await self._exec(environment, command, env=env, cwd=cwd, timeout_sec=timeout_sec)

    def render_instruction(self, instruction: str) -> str:
        if self._prompt_template_path:  # Harbor renders a Jinja template with {{ instruction }}
            return self._prompt_template_path.read_text().replace("{{ instruction }}", instruction)
        return instruction

    @abstractmethod
    async def install(self, environment: BaseEnvironment) -> None: ...

    async def setup(self, environment: BaseEnvironment) -> None:
        await environment.exec(command="mkdir -p /installed-agent", user="root")
        (Path(self.logs_dir) / "setup").mkdir(parents=True, exist_ok=True)
        await self.install(environment)
        if self._version is None:
            command = self.get_version_command()
            if command:
                result = await environment.exec(command=command)
                if result.return_code == 0 and result.stdout:
                    self._version = self.parse_version(result.stdout)
