"""ATIF export of a run, and the Harbor agent adapter on a scripted model and a tiny local
task. Harbor itself is not installed (it needs Python >= 3.12): the adapter imports a
stand-in of Harbor's base classes and ATIF models with the real signatures and rules
(tests/evals/harbor_standin; its package doc names the Harbor files they mirror), and the
adapter's commands run here, in a directory standing for the task's container."""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import sys
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from pathlib import PurePosixPath
from types import ModuleType
from typing import Any

import pytest

from ketch import Agent
from ketch import tool
from ketch.evals import to_atif
from ketch.llm import Cost
from ketch.llm import ThinkingContent
from ketch.llm import Usage
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call


@tool
def shout(text: str) -> str:
    """Say it louder."""
    return text.upper()


STANDIN = Path(__file__).parent / "harbor_standin"


def _forget_harbor() -> None:
    for name in [
        n for n in sys.modules if n == "harbor" or n.startswith("harbor.") or n == "ketch.evals.harbor"
    ]:
        del sys.modules[name]


@pytest.fixture
def harbor() -> Iterator[ModuleType]:
    """``ketch.evals.harbor`` imported on the stand-in of Harbor."""
    _forget_harbor()
    sys.path.insert(0, str(STANDIN))
    try:
        yield importlib.import_module("ketch.evals.harbor")
    finally:
        sys.path.remove(str(STANDIN))
        _forget_harbor()


def test_a_run_as_an_atif_trajectory(harbor: ModuleType) -> None:
    usage = Usage(input=10, output=5, cache_read=2, cost=Cost(total=0.25))
    model = ScriptedModel(
        [
            reply(
                ThinkingContent(thinking="Shout it."),
                tool_call("shout", {"text": "hi"}, id="c1"),
                usage=usage,
            ),
            reply("Done: HI", usage=Usage(input=20, output=3, cost=Cost(total=0.5))),
        ]
    )
    agent = Agent(model, tools=[shout])
    asyncio.run(agent.prompt("shout hi"))
    t = to_atif(
        agent.messages, session_id="s1", agent_version="9.9", model_name="scripted", system_prompt="Be loud."
    )
    for step in t["steps"][1:]:  # the system prompt is not a message: no time
        assert step.pop("timestamp").endswith("Z")
    assert t == {
        "schema_version": "ATIF-v1.7",
        "session_id": "s1",
        "agent": {"name": "ketch", "version": "9.9", "model_name": "scripted"},
        "steps": [
            {"step_id": 1, "source": "system", "message": "Be loud."},
            {"step_id": 2, "source": "user", "message": "shout hi"},
            {
                "step_id": 3,
                "source": "agent",
                "message": "",
                "model_name": "scripted-model",
                "llm_call_count": 1,
                "reasoning_content": "Shout it.",
                "tool_calls": [{"tool_call_id": "c1", "function_name": "shout", "arguments": {"text": "hi"}}],
                "metrics": {
                    "prompt_tokens": 12,
                    "completion_tokens": 5,
                    "cached_tokens": 2,
                    "cost_usd": 0.25,
                },
                "observation": {"results": [{"source_call_id": "c1", "content": "HI"}]},
            },
            {
                "step_id": 4,
                "source": "agent",
                "message": "Done: HI",
                "model_name": "scripted-model",
                "llm_call_count": 1,
                "metrics": {"prompt_tokens": 20, "completion_tokens": 3, "cached_tokens": 0, "cost_usd": 0.5},
            },
        ],
        "final_metrics": {
            "total_prompt_tokens": 32,
            "total_completion_tokens": 8,
            "total_cached_tokens": 2,
            "total_cost_usd": 0.75,
            "total_steps": 4,
        },
    }
    from harbor.models.trajectories import Trajectory

    Trajectory.model_validate(t)  # Harbor's ATIF models accept it


class LocalEnvironment:
    """Harbor's environment for the test: the agent user's commands run in ``container``
    (a directory standing for the task's container) with ``base`` as their environment;
    root's are only recorded (no package is installed here)."""

    def __init__(self, container: Path, base: dict[str, str]) -> None:
        self.container = container
        self.base = base
        self.default_user: str | int | None = None
        self.calls: list[tuple[str, str | int | None, dict[str, str] | None]] = []

    async def exec(
        self,
        command: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_sec: int | None = None,
        user: str | int | None = None,
    ) -> Any:
        from harbor.environments.base import ExecResult

        self.calls.append((command, user, env))
        if user == "root":
            return ExecResult(stdout="", stderr="", return_code=0)
        proc = await asyncio.create_subprocess_exec(
            "bash",
            "-c",
            command,
            cwd=cwd or self.container,
            env={**self.base, **(env or {})},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), timeout_sec or 120)
        return ExecResult(stdout=out.decode(), stderr=err.decode(), return_code=proc.returncode)


def test_the_harbor_adapter_on_a_tiny_local_task(harbor: ModuleType, tmp_path: Path) -> None:
    from harbor.agents.installed.base import BaseInstalledAgent
    from harbor.environments.base import BaseEnvironment
    from harbor.models.agent.context import AgentContext
    from harbor.models.trajectories import Trajectory

    BaseEnvironment.register(LocalEnvironment)
    container, logs, home = tmp_path / "app", tmp_path / "trial-1" / "agent", tmp_path / "home"
    for d in (container, logs, home):
        d.mkdir(parents=True)
    script = tmp_path / "model.json"
    script.write_text(
        json.dumps(
            [
                {
                    "blocks": [
                        {
                            "type": "tool_call",
                            "id": "w1",
                            "name": "write",
                            "args": {"path": "hello.txt", "content": "hi\n"},
                        }
                    ],
                    "usage": {"input": 50, "output": 7, "total_tokens": 57, "cost": {"total": 0.01}},
                },
                {
                    "blocks": [{"type": "text", "text": "Created hello.txt."}],
                    "usage": {"input": 60, "output": 4, "total_tokens": 64, "cost": {"total": 0.02}},
                },
            ]
        )
    )
    template = tmp_path / "prompt.j2"
    template.write_text("Task: {{ instruction }}")
    # as Harbor builds it: the host's logs_dir is mounted at environment_logs_dir in the container
    agent = harbor.KetchAgent(
        logs_dir=logs,
        model_name=f"scripted:{script}",
        prompt_template_path=template,
        extra_env={"ANTHROPIC_API_KEY": "sk-ant-test"},
        environment_logs_dir=PurePosixPath(logs),
    )
    agent.session_id = "hello-world__AbC__agent"
    assert isinstance(agent, BaseInstalledAgent)
    assert (harbor.KetchAgent.name(), agent.SUPPORTS_ATIF) == ("ketch", True)
    env = LocalEnvironment(
        container,
        {
            "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
            "HOME": str(home),
            "XDG_CONFIG_HOME": str(home / ".config"),
            "XDG_DATA_HOME": str(home / ".local"),
        },
    )

    asyncio.run(agent.setup(env))
    assert [(c, u) for c, u, _ in env.calls] == [
        ("mkdir -p /installed-agent", "root"),
        (f"set -o pipefail; {harbor.install_command()}", "root"),
        ("ketch --version", None),
    ]
    assert agent.version() == version("ketch")  # what the container's ketch --version said

    env.calls.clear()
    context = AgentContext()
    asyncio.run(agent.run("Create hello.txt containing 'hi'.", env, context))
    [(command, user, passed)] = env.calls
    assert user is None  # the task's agent user
    assert passed == {"ANTHROPIC_API_KEY": "sk-ant-test"}  # the keys only
    assert command.startswith(
        f"set -o pipefail; mkdir -p {logs} && ketch run --permission-mode bypass --no-session"
    )
    assert (container / "hello.txt").read_text() == "hi\n"  # the task's verifier would check this

    agent.populate_context_post_run(context)
    assert (context.n_input_tokens, context.n_output_tokens, context.n_cache_tokens) == (110, 11, 0)
    assert context.cost_usd == pytest.approx(0.03)
    t = Trajectory.model_validate_json((logs / "trajectory.json").read_bytes())
    assert (t.schema_version, t.session_id, t.agent.name, t.agent.version) == (
        "ATIF-v1.7",
        "hello-world__AbC__agent",
        "ketch",
        version("ketch"),
    )
    assert [(s.source, s.message, [c.function_name for c in s.tool_calls or ()]) for s in t.steps] == [
        ("user", "Task: Create hello.txt containing 'hi'.", []),  # through the prompt template
        ("agent", "", ["write"]),
        ("agent", "Created hello.txt.", []),
    ]
    assert t.steps[1].observation is not None
    assert t.steps[1].observation.results[0].source_call_id == "w1"
    assert t.extra == {"end_reason": "stop", "error": None}


def test_the_install_command_pins_a_version(harbor: ModuleType) -> None:
    assert "python3 -m pip install --quiet ketch || " in harbor.install_command()
    pinned = harbor.install_command("0.1.0")
    assert "python3 -m pip install --quiet ketch==0.1.0 || " in pinned
    assert pinned.endswith(
        "python3 -m pip install --quiet --break-system-packages ketch==0.1.0; ketch --version"
    )


def test_harbor_model_names_and_a_missing_log(harbor: ModuleType, tmp_path: Path) -> None:
    from harbor.models.agent.context import AgentContext

    agent = harbor.KetchAgent
    assert agent(logs_dir=tmp_path, model_name="anthropic/claude-sonnet-4-5").ketch_model() == (
        "anthropic:claude-sonnet-4-5"
    )
    assert agent(logs_dir=tmp_path, model_name="openai:gpt-5").ketch_model() == "openai:gpt-5"
    assert agent(logs_dir=tmp_path).ketch_model() is None
    assert agent(logs_dir=tmp_path).container_logs() == "/logs/agent"
    context = AgentContext()
    agent(logs_dir=tmp_path).populate_context_post_run(context)  # the run never started
    assert (context.n_input_tokens, context.cost_usd) == (0, 0.0)
    assert not (tmp_path / "trajectory.json").exists()  # ATIF needs a step


def test_without_harbor_the_adapter_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    _forget_harbor()
    monkeypatch.setitem(sys.modules, "harbor", None)  # type: ignore[arg-type]
    with pytest.raises(ImportError) as raised:
        importlib.import_module("ketch.evals.harbor")
    assert str(raised.value) == (
        "ketch.evals.harbor is the agent adapter for Harbor, which is not installed: "
        "pip install harbor (Python >= 3.12)"
    )
