"""ketch as a Harbor agent (Terminal-Bench and other Harbor tasks).

::

    harbor run -d terminal-bench@2.0 -m anthropic/claude-sonnet-4-5 \\
        --agent-import-path ketch.evals.harbor:KetchAgent

:class:`KetchAgent` is one of Harbor's installed agents: Harbor renders
:data:`INSTALL_SCRIPT` and runs it in the task's container (it installs ketch with pip),
then runs the commands of :meth:`KetchAgent.create_run_agent_commands` there: ``ketch run``
on the task's instruction with every tool call allowed (the container is the sandbox),
its events as JSON lines in the agent's log directory. After the run,
:meth:`KetchAgent.populate_context_post_run` reads that log, writes the run as an ATIF
trajectory (``trajectory.json``, see :func:`ketch.evals.to_atif`) and fills the context's
token counts and cost.

The model is Harbor's ``-m`` (``provider/model`` or ketch's ``provider:model``); provider
keys are passed from the environment Harbor runs in (``OPENAI_API_KEY``,
``ANTHROPIC_API_KEY``, ``GEMINI_API_KEY``, ``GOOGLE_API_KEY``, ``OPENROUTER_API_KEY``).

When Harbor is not installed this module still imports: :class:`KetchAgent` then stands
on a minimal stand-in of Harbor's base class, enough to build the commands and read a
run's log (that is how ketch's own tests check it).
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from ._atif import to_atif

__all__ = ["INSTALL_SCRIPT", "KetchAgent"]

INSTALL_SCRIPT = """\
#!/bin/bash
set -euo pipefail
if ! command -v pip >/dev/null 2>&1 && ! python3 -m pip --version >/dev/null 2>&1; then
  (apt-get update && apt-get install -y python3-pip) >/dev/null
fi
python3 -m pip install --quiet {% if version %}"ketch=={{ version }}"{% else %}ketch{% endif %} \\
  || python3 -m pip install --quiet --break-system-packages \\
     {% if version %}"ketch=={{ version }}"{% else %}ketch{% endif %}
ketch --version
"""
"""The install script template Harbor renders (Jinja: ``version``) and runs in the container."""

LOG_NAME = "ketch.jsonl"
"""The run's events (``ketch run -o stream-json``), in the agent's log directory."""

KEY_VARIABLES = (
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "OPENROUTER_API_KEY",
)

try:  # pragma: no cover - Harbor needs Python >= 3.12 and is not a dependency of ketch
    from harbor.agents.installed.base import BaseInstalledAgent  # type: ignore[import-not-found,unused-ignore]
    from harbor.agents.installed.base import ExecInput  # type: ignore[import-not-found,unused-ignore]
except ImportError:

    @dataclass
    class ExecInput:  # type: ignore[no-redef]
        """Harbor's command to run in the task's container (stand-in)."""

        command: str
        cwd: str | None = None
        env: dict[str, str] | None = None
        timeout_sec: int | None = None

    class BaseInstalledAgent:  # type: ignore[no-redef]
        """Harbor's installed-agent base (stand-in when Harbor is not installed)."""

        def __init__(
            self, logs_dir: Path, model_name: str | None = None, version: str | None = None, **kwargs: Any
        ) -> None:
            self.logs_dir = Path(logs_dir)
            self.model_name = model_name
            self._version = version

        def version(self) -> str | None:
            return self._version


class KetchAgent(BaseInstalledAgent):  # type: ignore[misc]
    """ketch as a Harbor installed agent; see the module doc."""

    SUPPORTS_ATIF = True
    container_logs_dir = "/logs/agent"
    """Where Harbor mounts the agent's log directory (``logs_dir``) in the container."""

    @staticmethod
    def name() -> str:
        return "ketch"

    @property
    def _install_agent_template_path(self) -> Path:
        path = Path(self.logs_dir) / "install-ketch.sh.j2"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(INSTALL_SCRIPT)
        return path

    def ketch_model(self) -> str | None:
        """Harbor's model name as ketch spells it (``provider/model`` -> ``provider:model``)."""
        name = getattr(self, "model_name", None)
        if not name:
            return None
        if ":" not in name and "/" in name:
            provider, _, model = name.partition("/")
            return f"{provider}:{model}"
        return str(name)

    def create_run_agent_commands(self, instruction: str) -> list[ExecInput]:
        """``ketch run`` on ``instruction`` in the container's working directory, every tool
        call allowed, events to ``<logs>/ketch.jsonl``."""
        logs = self.container_logs_dir
        log = f"{logs}/{LOG_NAME}"
        model = self.ketch_model()
        args = ["ketch", "run", "--permission-mode", "bypass", "--no-session", "-o", "stream-json"]
        if model:
            args += ["--model", model]
        args += ["--", instruction]
        env = {k: os.environ[k] for k in KEY_VARIABLES if os.environ.get(k)}
        command = (
            f"mkdir -p {shlex.quote(logs)} && {shlex.join(args)} > {shlex.quote(log)} "
            f"2> {shlex.quote(logs + '/ketch.stderr')}; true"
        )
        return [ExecInput(command=command, env=env or None)]

    def populate_context_post_run(self, context: Any) -> None:
        """Write ``trajectory.json`` (ATIF) from the run's log and set the context's token
        counts and cost; a missing or cut log gives what it holds."""
        log = Path(self.logs_dir) / LOG_NAME
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
        trajectory = to_atif(
            messages, session_id=Path(self.logs_dir).parent.name or "ketch", model_name=model
        )
        if result:
            trajectory["extra"] = {"end_reason": result.get("end_reason"), "error": result.get("error")}
        (Path(self.logs_dir) / "trajectory.json").write_bytes(msgspec.json.encode(trajectory))
        totals = trajectory["final_metrics"]
        context.n_input_tokens = totals["total_prompt_tokens"]
        context.n_cache_tokens = totals["total_cached_tokens"]
        context.n_output_tokens = totals["total_completion_tokens"]
        context.cost_usd = totals["total_cost_usd"]
