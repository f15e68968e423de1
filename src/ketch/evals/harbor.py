"""ketch as a Harbor agent (Terminal-Bench and other Harbor tasks).

::

    harbor run -d terminal-bench@2.0 -a ketch.evals.harbor:KetchAgent \\
        -m anthropic/claude-sonnet-4-5

:class:`KetchAgent` is one of Harbor's installed agents (it subclasses
``harbor.agents.installed.base.BaseInstalledAgent``): Harbor calls
:meth:`KetchAgent.install` in the task's container (``pip install ketch`` as root, with
``python3-pip`` from the system's package manager when pip is missing), then
:meth:`KetchAgent.run`: ``ketch run`` on the task's instruction (after Harbor's prompt
template, if any) as the task's agent user, every tool call allowed (the container is the
sandbox), its events as JSON lines in the agent's log directory (``/logs/agent``). After
the run, :meth:`KetchAgent.populate_context_post_run` reads that log from the host's copy
(``logs_dir``), writes the run as an ATIF trajectory (``trajectory.json``, see
:func:`ketch.evals.to_atif`) and fills the context's token counts and cost.

The model is Harbor's ``-m`` (``provider/model`` or ketch's ``provider:model``); provider
keys (``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``, ``GEMINI_API_KEY``, ``GOOGLE_API_KEY``,
``OPENROUTER_API_KEY``) are passed from the agent's environment (``--ae KEY=VALUE``, else
the environment Harbor runs in) to the command only.

Importing this module needs Harbor (``pip install harbor``; Python >= 3.12).
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import msgspec

from ._atif import to_atif

try:
    from harbor.agents.installed.base import BaseInstalledAgent  # type: ignore[import-not-found,unused-ignore]
    from harbor.agents.installed.base import with_prompt_template  # type: ignore[import-not-found,unused-ignore]
except ImportError as e:  # pragma: no cover - Harbor is not a dependency of ketch
    raise ImportError(
        "ketch.evals.harbor is the agent adapter for Harbor, which is not installed: "
        "pip install harbor (Python >= 3.12)",
        name=e.name,
    ) from e

__all__ = ["KEY_VARIABLES", "LOG_NAME", "KetchAgent", "install_command"]

LOG_NAME = "ketch.jsonl"
"""The run's events (``ketch run -o stream-json``), in the agent's log directory."""

KEY_VARIABLES = (
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "OPENROUTER_API_KEY",
)
"""The provider key variables passed to ``ketch run`` in the container."""

CONTAINER_LOGS = "/logs/agent"
"""The agent's log directory in the container, for a Harbor without ``environment_logs_dir``."""


def install_command(version: str | None = None) -> str:
    """The shell command that installs ketch (``version``: that release) in a container:
    pip, else the system's ``python3-pip`` first; ``--break-system-packages`` where the
    system Python refuses pip (PEP 668)."""
    package = shlex.quote(f"ketch=={version}" if version else "ketch")
    return (
        "set -eu; "
        "if ! python3 -m pip --version >/dev/null 2>&1; then "
        "if command -v apt-get >/dev/null 2>&1; then apt-get update -qq && apt-get install -y -qq python3-pip; "
        "elif command -v dnf >/dev/null 2>&1; then dnf install -y python3-pip; "
        "elif command -v apk >/dev/null 2>&1; then apk add --no-cache py3-pip; fi; "
        "fi; "
        f"python3 -m pip install --quiet {package} "
        f"|| python3 -m pip install --quiet --break-system-packages {package}; "
        "ketch --version"
    )


class KetchAgent(BaseInstalledAgent):  # type: ignore[misc,unused-ignore]
    """ketch as a Harbor installed agent; see the module doc."""

    SUPPORTS_ATIF = True

    @staticmethod
    def name() -> str:
        return "ketch"

    def get_version_command(self) -> str | None:
        return "ketch --version"

    def parse_version(self, stdout: str) -> str:
        """``ketch 0.1.0`` -> ``0.1.0``."""
        return stdout.strip().removeprefix("ketch").strip()

    def ketch_model(self) -> str | None:
        """Harbor's model name as ketch spells it (``provider/model`` -> ``provider:model``)."""
        name = getattr(self, "model_name", None)
        if not name:
            return None
        if ":" not in name and "/" in name:
            provider, _, model = name.partition("/")
            return f"{provider}:{model}"
        return str(name)

    def container_logs(self) -> str:
        """The agent's log directory in the container (Harbor mounts ``logs_dir`` there)."""
        return str(getattr(self, "environment_logs_dir", None) or CONTAINER_LOGS)

    def run_command(self, instruction: str) -> str:
        """``ketch run`` on ``instruction`` in the container's working directory, every
        tool call allowed, events to ``<logs>/ketch.jsonl`` and stderr to
        ``<logs>/ketch.stderr``. Its exit status is left out (the task's verifier
        judges the outcome; the log says how the run ended)."""
        logs = self.container_logs()
        args = ["ketch", "run", "--permission-mode", "bypass", "--no-session", "-o", "stream-json"]
        model = self.ketch_model()
        if model:
            args += ["--model", model]
        args += ["--", instruction]
        return (
            f"mkdir -p {shlex.quote(logs)} && {shlex.join(args)} > {shlex.quote(logs + '/' + LOG_NAME)} "
            f"2> {shlex.quote(logs + '/ketch.stderr')} || true"
        )

    def run_env(self) -> dict[str, str]:
        """The provider keys for the command: the agent's extra environment's, else the host's."""
        found = {k: self._get_env(k) for k in KEY_VARIABLES}
        return {k: v for k, v in found.items() if v}

    async def install(self, environment: Any) -> None:
        """Install ketch in the task's container (as root)."""
        await self.exec_as_root(environment, command=install_command(self.version()))

    @with_prompt_template  # type: ignore[untyped-decorator,misc,unused-ignore]
    async def run(self, instruction: str, environment: Any, context: Any) -> None:
        """Run ``ketch run`` on the task's instruction as the agent user (:meth:`run_command`)."""
        await self.exec_as_agent(
            environment, command=self.run_command(instruction), env=self.run_env() or None
        )

    def populate_context_post_run(self, context: Any) -> None:
        """Write ``trajectory.json`` (ATIF) from the run's log and set the context's token
        counts and cost; a cut log gives what it holds, and a run that left no message
        (it never started) no trajectory (ATIF needs a step)."""
        logs = Path(self.logs_dir)
        log = logs / LOG_NAME
        messages: list[dict[str, Any]] = []
        model: str | None = None
        result: dict[str, Any] = {}
        if log.is_file():
            for line in log.read_bytes().splitlines():
                try:
                    event = msgspec.json.decode(line)
                except msgspec.DecodeError:
                    continue
                if not isinstance(event, dict):
                    continue
                kind = event.get("type")
                if kind == "init":
                    model = event.get("model")
                elif kind == "message_end" and isinstance(event.get("message"), dict):
                    messages.append(event["message"])
                elif kind == "result":
                    result = event
        session_id = getattr(self, "session_id", None) or logs.parent.name or "ketch"
        trajectory = to_atif(
            messages, session_id=str(session_id), agent_version=self.version(), model_name=model
        )
        if result:
            trajectory["extra"] = {"end_reason": result.get("end_reason"), "error": result.get("error")}
        if trajectory["steps"]:
            (logs / "trajectory.json").write_bytes(msgspec.json.encode(trajectory))
        totals = trajectory["final_metrics"]
        context.n_input_tokens = totals["total_prompt_tokens"]
        context.n_cache_tokens = totals["total_cached_tokens"]
        context.n_output_tokens = totals["total_completion_tokens"]
        context.cost_usd = totals["total_cost_usd"]
