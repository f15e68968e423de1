"""ATIF export of a run, and the Harbor agent adapter on a scripted model and a tiny local
task (Harbor itself is not installed: the adapter's commands run here, in a directory
standing for the task's container)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from ketch import Agent
from ketch import tool
from ketch.evals import to_atif
from ketch.evals.harbor import INSTALL_SCRIPT
from ketch.evals.harbor import KetchAgent
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


def test_a_run_as_an_atif_trajectory() -> None:
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
        "schema_version": "ATIF-v1.4",
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


def test_the_harbor_adapter_on_a_tiny_local_task(tmp_path: Path) -> None:
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
    agent = KetchAgent(logs_dir=logs, model_name=f"scripted:{script}")
    agent.container_logs_dir = str(logs)  # Harbor mounts logs_dir at /logs/agent in the container
    assert KetchAgent.name() == "ketch"
    assert agent._install_agent_template_path.read_text() == INSTALL_SCRIPT
    commands = agent.create_run_agent_commands("Create hello.txt containing 'hi'.")
    assert len(commands) == 1
    assert commands[0].command.startswith(
        f"mkdir -p {logs} && ketch run --permission-mode bypass --no-session"
    )
    env = {
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local"),
    }
    proc = subprocess.run(["bash", "-c", commands[0].command], cwd=container, env=env, timeout=120)
    assert proc.returncode == 0
    assert (container / "hello.txt").read_text() == "hi\n"  # the task's verifier would check this
    context = SimpleNamespace()
    agent.populate_context_post_run(context)
    assert (context.n_input_tokens, context.n_output_tokens, context.n_cache_tokens) == (110, 11, 0)
    assert context.cost_usd == 0.03
    t = json.loads((logs / "trajectory.json").read_text())
    assert t["schema_version"] == "ATIF-v1.4"
    assert t["session_id"] == "trial-1"
    assert [(s["source"], s.get("tool_calls", [{}])[0].get("function_name")) for s in t["steps"]] == [
        ("user", None),
        ("agent", "write"),
        ("agent", None),
    ]
    assert t["steps"][1]["observation"]["results"][0]["source_call_id"] == "w1"
    assert t["steps"][2]["message"] == "Created hello.txt."
    assert t["extra"] == {"end_reason": "stop", "error": None}


def test_harbor_model_names_and_a_missing_log(tmp_path: Path) -> None:
    assert KetchAgent(logs_dir=tmp_path, model_name="anthropic/claude-sonnet-4-5").ketch_model() == (
        "anthropic:claude-sonnet-4-5"
    )
    assert KetchAgent(logs_dir=tmp_path, model_name="openai:gpt-5").ketch_model() == "openai:gpt-5"
    assert KetchAgent(logs_dir=tmp_path).ketch_model() is None
    context = SimpleNamespace()
    KetchAgent(logs_dir=tmp_path).populate_context_post_run(context)  # the run never started
    assert (context.n_input_tokens, context.cost_usd) == (0, 0.0)
    assert json.loads((tmp_path / "trajectory.json").read_text())["steps"] == []
