"""White-box test: imports ketch implementation modules (private) directly.

One answer to "how big is this model's context window": the model's ``context_window``,
read by the loop, the agent, the compactor and the command alike, for a registry model,
an unknown model, the local model and a user's setting."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from ketch import Agent
from ketch.cli._config import Settings
from ketch.cli._factory import build_agent
from ketch.cli._factory import context_window
from ketch.context import Compactor
from ketch.llm import DEFAULT_CONTEXT_WINDOW
from ketch.llm import FallbackModel
from ketch.llm import Model
from ketch.llm import ModelInfo
from ketch.llm import Request
from ketch.llm import SettableContextWindow
from ketch.llm import StreamEvent
from ketch.llm import StreamOptions
from ketch.llm import get_model
from ketch.llm._providers.local import LocalModel
from ketch.loop import TurnEnd
from ketch.testing import FunctionModel
from ketch.testing import ScriptedModel


class Served:
    """A model with another model's identity and window, answering from a script (so the
    loop can run without a provider)."""

    def __init__(self, like: Model) -> None:
        self.like = like
        self.provider, self.api, self.id = like.provider, like.api, like.id
        self.script = ScriptedModel(["ok"])

    @property
    def context_window(self) -> int:
        return self.like.context_window

    def stream(self, request: Request, options: StreamOptions | None = None) -> AsyncIterator[StreamEvent]:
        return self.script.stream(request, options)


async def windows(model: Model, settings: Settings, tmp_path: Path) -> list[int]:
    """The window every place reports, in one list: command, model, agent, compactor, loop."""
    built = build_agent(settings, tmp_path, approver=None, model=model, environ={})
    manager = built.context_manager
    assert manager is not None
    agent = Agent(Served(model))
    seen: list[int] = []
    agent.subscribe(lambda e: seen.append(e.context.window) if isinstance(e, TurnEnd) and e.context else None)
    await agent.prompt("hi")
    return [
        context_window(model, settings),
        built.window,
        built.context().window,
        model.context_window,
        built.agent.context_usage().window,
        Agent(model).context_usage().window,
        manager.limits(model)[0],
        Compactor().limits(model)[0],
        *seen,
    ]


async def test_a_registry_model_reports_its_listed_window_everywhere(tmp_path: Path) -> None:
    model = get_model("openai:gpt-4.1", api_key="k")
    assert await windows(model, Settings(), tmp_path) == [1_047_576] * 9


async def test_an_unknown_model_reports_the_one_default_everywhere(tmp_path: Path) -> None:
    model = get_model("openai:no-such-model-xyz", api_key="k")
    assert DEFAULT_CONTEXT_WINDOW == ModelInfo(id="x", provider="p", api="a").context_window == 128_000
    assert await windows(model, Settings(), tmp_path) == [128_000] * 9
    assert await windows(ScriptedModel(), Settings(), tmp_path) == [128_000] * 9


async def test_the_local_model_reports_n_ctx_everywhere(tmp_path: Path) -> None:
    assert await windows(LocalModel("smollm2", n_ctx=2048), Settings(), tmp_path) == [2048] * 9


@pytest.mark.parametrize(
    "make",
    [
        lambda: get_model("openai:gpt-4.1", api_key="k"),
        lambda: get_model("openai:no-such-model-xyz", api_key="k"),
        lambda: LocalModel("smollm2", n_ctx=2048),
        lambda: FunctionModel(lambda request, options: "ok"),
    ],
)
async def test_a_user_setting_is_the_window_everywhere(make: object, tmp_path: Path) -> None:
    model = make()  # type: ignore[operator]
    assert await windows(model, Settings(context_window=50_000), tmp_path) == [50_000] * 9
    model.set_context_window(None)
    assert model.context_window != 50_000  # the model's own answer again


def test_every_shipped_model_takes_a_window_setting() -> None:
    for model in (
        get_model("anthropic:claude-sonnet-4-5", api_key="k"),
        get_model("google:gemini-2.5-flash", api_key="k"),
        get_model("openai:gpt-4.1", api_key="k"),
        LocalModel("smollm2"),
        ScriptedModel(),
        FunctionModel(lambda request, options: "ok"),
        FallbackModel([ScriptedModel()]),
    ):
        assert isinstance(model, Model) and isinstance(model, SettableContextWindow)


def test_a_fallback_chain_reports_its_smallest_window() -> None:
    chain = FallbackModel([ScriptedModel(context_window=200_000), ScriptedModel(context_window=32_000)])
    assert chain.context_window == 32_000
    chain.set_context_window(16_000)
    assert chain.context_window == 16_000
