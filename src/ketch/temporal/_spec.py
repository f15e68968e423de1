"""What travels between client, workflow and activities: plain msgspec Structs.

Nothing here imports temporalio; the workflow sandbox and the client both use it.
Payloads are passed to Temporal as builtins (``msgspec.to_builtins``) and converted
back with ``msgspec.convert``, so histories are plain JSON.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any
from typing import Literal
from typing import NamedTuple
from typing import TypeAlias
from typing import get_args

import msgspec

from .. import Agent
from ..llm import Message
from ..llm import Model
from ..llm import StreamOptions
from ..llm import ThinkingLevel
from ..loop import LoopConfig
from ..loop import RunSummary
from ..loop import Tool
from ..loop import ToolExecution
from ..loop import UsageLimits
from . import _pure

_LOOP_FIELDS = {f.name: f for f in dataclasses.fields(LoopConfig)}


def loop_default(name: str) -> Any:
    """LoopConfig's default of the field ``name`` (defaults are declared there only)."""
    f = _LOOP_FIELDS[name]
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


WORKFLOW_NAME = "ketch.agent"
"""The workflow type every durable agent runs as (the agent is in the input)."""

PUBLISH_ACTIVITY = "ketch.publish"
"""The activity that publishes the events a run produced after its last activity."""


def model_activity(agent: str) -> str:
    """The stable activity name of ``agent``'s model calls."""
    return f"{agent}.model"


def tool_activity(agent: str, tool: str) -> str:
    """The stable activity name of ``agent``'s tool ``tool``."""
    return f"{agent}.tool.{tool}"


class ActivitySettings(msgspec.Struct, kw_only=True, frozen=True):
    """Timeouts and retries of a durable agent's activities (seconds).

    ``heartbeat_timeout``: a worker that dies mid-call is noticed after this long and
    the call is retried on another worker. Retries back off from ``initial_interval``
    by ``backoff`` up to ``max_interval``; ``max_attempts`` counts every attempt (0: no
    limit). A rate-limited model call waits the server's ``Retry-After`` instead.
    """

    model_timeout: float = 600.0
    tool_timeout: float = 600.0
    heartbeat_timeout: float = 30.0
    initial_interval: float = 1.0
    backoff: float = 2.0
    max_interval: float = 60.0
    max_attempts: int = 5


PerCall: TypeAlias = Literal["sequential", "read_only", "requires_approval", "prepare_arguments", "validate", "preview"]
PER_CALL: tuple[PerCall, ...] = get_args(PerCall)
"""A tool's attributes that may be functions deciding per call; a durable run calls them
inside the workflow with the worker's own copy of the tool."""


class ToolDef(msgspec.Struct, kw_only=True, frozen=True, omit_defaults=True):
    """A tool as the workflow knows it: what the model is shown and how it is scheduled.

    ``per_call`` names the attributes the tool decides per call with a function (the bash
    tool's ``sequential``); the workflow calls the worker's own copy of the tool for them
    (deterministic code only: they run inside the workflow)."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = msgspec.field(default_factory=dict)
    sequential: bool = False
    read_only: bool = False
    requires_approval: bool = False
    pure: bool = False
    timeout: float | None = None
    interrupt: Literal["block", "cancel"] = "block"
    strict: bool = False
    per_call: list[PerCall] = msgspec.field(default_factory=list)


Crossing: TypeAlias = Literal["carried", "worker", "refused"]
Where: TypeAlias = Literal["", "workflow", "model activity", "tool activity"]


class Carry(NamedTuple):
    """One row of :data:`DURABLE`: how a part of an agent crosses into a durable run.

    ``carried``: its value travels in the run's input (the workflow history); ``worker``:
    the worker's own copy of the agent supplies it, where ``where`` says (``workflow``:
    inside the workflow, so deterministic code only: no I/O, no clock, no randomness; an
    activity: on the worker, anything goes); ``refused``: a :class:`DurableAgent` refuses
    an agent that sets it (other than to its default), for the reason in ``note``."""

    how: Crossing
    note: str
    where: Where = ""


_IN_WORKFLOW = "runs inside the workflow (deterministic code only)"

DURABLE: dict[str, Carry] = {
    # the agent's own parameters, listeners and queues
    "model": Carry(
        "carried", "its provider:id names it; the worker calls its own copy (build_worker(models=...) may replace it)"
    ),
    "system_prompt": Carry("carried", "in the run's input"),
    "tools": Carry(
        "carried",
        "their definitions; each call runs as the activity <agent>.tool.<tool> on the worker (pure=[...]: "
        "inside the workflow); a per-call decision (the bash tool's sequential) runs inside the workflow",
    ),
    "skills": Carry(
        "refused",
        "they become a Skills capability, and capabilities do not cross into a durable run yet: "
        "give the skill tool and its instructions to the agent directly",
    ),
    "messages": Carry("refused", "a durable run starts from start_run(transcript=...)"),
    "steering_mode": Carry("carried", "how the workflow drains its steer signals"),
    "follow_up_mode": Carry("carried", "how the workflow drains its follow_up signals"),
    "session": Carry(
        "refused", "a durable run's transcript lives in its workflow: keep it with export_session(result, store)"
    ),
    "listeners": Carry(
        "refused",
        "a durable run's events go to an EventHub (start_run(events=...)); for traces use "
        "build_worker(wrap_model=..., middlewares=...)",
    ),
    "queued messages": Carry("refused", "send them to the run with RunHandle.steer() or follow_up()"),
    # the agent options (LoopConfig)
    "thinking": Carry("carried", "in the run's input"),
    "options": Carry(
        "carried",
        "in the run's input, except api_key and headers: the worker's copy adds them in the model activity, "
        "so no secret enters the history",
    ),
    "max_turns": Carry("carried", "counted over the whole run, across continue-as-new"),
    "max_budget_usd": Carry("carried", "counted over the whole run, across continue-as-new"),
    "usage_limits": Carry("carried", "per-run limits counted over the whole run, across continue-as-new"),
    "stop_when": Carry("worker", _IN_WORKFLOW, "workflow"),
    "on_stop": Carry("worker", _IN_WORKFLOW, "workflow"),
    "length_recoveries": Carry("carried", "in the run's input"),
    "length_recovery_prompt": Carry("carried", "in the run's input"),
    "tool_execution": Carry("carried", "in the run's input"),
    "max_tool_concurrency": Carry("carried", "in the run's input"),
    "steering_during_tools": Carry("carried", "in the run's input"),
    "max_tool_errors": Carry("carried", "in the run's input"),
    "max_repeated_tool_calls": Carry("carried", "in the run's input"),
    "tool_timeout": Carry("carried", "in the run's input (a tool's own timeout also bounds its activity)"),
    "tool_abort_grace": Carry("carried", "in the run's input"),
    "transform_context": Carry("worker", _IN_WORKFLOW, "workflow"),
    "convert_to_llm": Carry("worker", _IN_WORKFLOW, "workflow"),
    "get_api_key": Carry(
        "worker", "called in the model activity, on the worker: the key never enters the history", "model activity"
    ),
    "get_steering_messages": Carry("refused", "a durable run's steering queue is its steer signal (RunHandle.steer)"),
    "get_follow_up_messages": Carry(
        "refused", "a durable run's follow-up queue is its follow_up signal (RunHandle.follow_up)"
    ),
    "before_tool_call": Carry("worker", _IN_WORKFLOW + "; an approval pauses the run for RunHandle.decide", "workflow"),
    "after_tool_call": Carry("worker", _IN_WORKFLOW, "workflow"),
    "middlewares": Carry(
        "worker",
        "wrap each tool activity's execution on the worker (they see the call, with an empty conversation)",
        "tool activity",
    ),
    "prepare_next_turn": Carry("worker", _IN_WORKFLOW + "; a model it returns must be the agent's own", "workflow"),
    "context_manager": Carry(
        "worker",
        _IN_WORKFLOW + ", a fresh copy per run; its summary requests go through the model activity "
        "(a Compactor with its own summary_model is refused: that model would be called inside the workflow)",
        "workflow",
    ),
    "guardrails": Carry("worker", _IN_WORKFLOW, "workflow"),
    "capabilities": Carry(
        "refused",
        "a capability's tools, hooks and checks do not cross into a durable run yet: give them to the agent directly",
    ),
    "phase": Carry("refused", "a PhaseRef lives in one process: query RunHandle.state()"),
    "deps": Carry(
        "worker", "handed to the tools on the worker (and to code inside the workflow: pure tools, hooks)", "tool activity"
    ),
    "output_type": Carry(
        "worker", _IN_WORKFLOW + "; DurableResult.output is the value, validated again by the client", "workflow"
    ),
    "output_mode": Carry("carried", "in the run's input"),
    "output_retries": Carry("carried", "in the run's input"),
    "output_validators": Carry("worker", _IN_WORKFLOW, "workflow"),
}
"""How each part of an :class:`~ketch.Agent` crosses into a durable run: every
:class:`~ketch.loop.LoopConfig` field and every parameter of the agent's (and its
listeners and queued messages). ``tests/temporal/test_durable_agent.py`` fails when
LoopConfig or the agent gains one without a row."""

_AGENT_PARTS = frozenset({"model", "system_prompt", "tools", "messages", "steering_mode", "follow_up_mode", "session"})

CARRIED: tuple[str, ...] = tuple(
    k for k, c in DURABLE.items() if c.how == "carried" and k not in _AGENT_PARTS
)
"""The carried agent options: each is an :class:`AgentSpec` field of the same name."""

IN_WORKFLOW: frozenset[str] = frozenset(k for k, c in DURABLE.items() if c.where == "workflow")
"""The worker-side agent options the workflow runs itself."""

_SECRET_OPTIONS = ("api_key", "headers", "signal")


class AgentSpec(msgspec.Struct, kw_only=True, frozen=True, omit_defaults=True):
    """The serialisable definition of a durable agent (part of every run's input).

    The carried agent options (:data:`CARRIED`) are fields of the same names, with
    LoopConfig's defaults; ``options`` holds the request options without their secrets.
    ``worker_side`` names the options the worker's copy of the agent supplies
    (:data:`DURABLE`). ``max_tokens`` and ``temperature``, and the ``"all"`` default of
    the queue modes, are how runs started before the agent wrapper said it: a worker
    still runs those as they started.
    """

    name: str
    model: str
    model_provider: str
    model_api: str
    model_id: str
    context_window: int
    model_native_output: bool = False
    system_prompt: str = ""
    tools: list[ToolDef] = msgspec.field(default_factory=list)
    thinking: ThinkingLevel = loop_default("thinking")
    options: dict[str, Any] | None = None
    max_turns: int | None = loop_default("max_turns")
    max_budget_usd: float | None = loop_default("max_budget_usd")
    usage_limits: UsageLimits | None = loop_default("usage_limits")
    length_recoveries: int = loop_default("length_recoveries")
    length_recovery_prompt: str = loop_default("length_recovery_prompt")
    tool_execution: ToolExecution = loop_default("tool_execution")
    max_tool_concurrency: int = loop_default("max_tool_concurrency")
    steering_during_tools: Literal["wait", "interrupt"] = loop_default("steering_during_tools")
    max_tool_errors: int | None = loop_default("max_tool_errors")
    max_repeated_tool_calls: int | None = loop_default("max_repeated_tool_calls")
    tool_timeout: float | None = loop_default("tool_timeout")
    tool_abort_grace: float = loop_default("tool_abort_grace")
    output_mode: Literal["auto", "native", "tool", "prompted"] = loop_default("output_mode")
    output_retries: int = loop_default("output_retries")
    steering_mode: Literal["one_at_a_time", "all"] = "all"
    follow_up_mode: Literal["one_at_a_time", "all"] = "all"
    worker_side: list[str] = msgspec.field(default_factory=list)
    max_tokens: int | None = None
    temperature: float | None = None
    max_history_events: int = 10_000
    inline_limit: int = 256 * 1024
    approval_timeout: float | None = None
    activities: ActivitySettings = msgspec.field(default_factory=ActivitySettings)

    def stream_options(self) -> StreamOptions:
        """The agent's request options (without their secrets)."""
        if self.options is None:
            return StreamOptions(max_tokens=self.max_tokens, temperature=self.temperature)
        return msgspec.convert(self.options, StreamOptions)


def jsonable(value: Any) -> Any:
    """``value`` as JSON-ready builtins for Temporal's payloads (what msgspec cannot
    encode is written as its ``repr``): the worker's events and results, the workflow's
    outbox."""
    return msgspec.to_builtins(value, enc_hook=repr)


def _model_dump(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    raise TypeError(f"cannot encode {type(value).__name__}")


def output_builtins(value: Any) -> Any:
    """A typed output value as JSON-ready builtins (a pydantic model by its own dump)."""
    if callable(getattr(value, "model_dump", None)):
        return _model_dump(value)
    return msgspec.to_builtins(value, enc_hook=_model_dump)


def _tool_def(tool: Tool, pure: bool) -> ToolDef:
    per_call: list[PerCall] = []
    flags: dict[str, bool] = {}
    for name in PER_CALL:
        value = getattr(tool, name)
        if name in ("sequential", "read_only", "requires_approval"):
            if callable(value):
                per_call.append(name)
            else:
                flags[name] = bool(value)
        elif value is not None:
            per_call.append(name)
    return ToolDef(
        name=tool.name,
        description=tool.description,
        parameters=tool.parameters,
        pure=pure,
        timeout=tool.timeout,
        interrupt=tool.interrupt,
        strict=tool.strict,
        per_call=per_call,
        **flags,
    )


def _set(agent: Agent[Any], name: str) -> bool:
    """Whether ``agent`` sets the part ``name`` of :data:`DURABLE` (to other than its default)."""
    if name == "messages":
        return bool(agent.messages)
    if name == "session":
        return agent.session is not None
    if name == "listeners":
        return bool(agent._listeners)
    if name == "queued messages":
        return bool(agent.steering) or bool(agent.follow_ups)
    if name == "skills":  # they are a capability in agent.config.capabilities: refused as capabilities
        return False
    if name in _AGENT_PARTS:
        return True
    value = getattr(agent.config, name)
    default = loop_default(name)
    if isinstance(default, tuple):
        return len(value) > 0
    return bool(value != default)


def _refusals(agent: Agent[Any]) -> list[str]:
    refused = [f"{name} ({c.note})" for name, c in DURABLE.items() if c.how == "refused" and _set(agent, name)]
    manager = agent.config.context_manager
    if manager is not None and getattr(manager, "summary_model", None) is not None:
        refused.append(
            "context_manager with a summary_model (that model would be called inside the workflow: leave "
            "summary_model unset and the summaries go through the model activity)"
        )
    return refused


class DurableAgent:
    """An ordinary :class:`~ketch.Agent`, run durably on Temporal: ``DurableAgent(agent,
    name="coder")``.

    The agent is read once, here. Each of its parts crosses into a run as
    :data:`DURABLE` says: its model, system prompt, tool definitions and plain options
    (limits, budget, usage limits, tool settings, output mode) travel in the run's
    input; its functions and objects (hooks, guardrails, stop controls, context manager,
    output type, deps, the key and headers of its requests) stay on the worker, whose
    own copy of the same definition supplies them; what cannot cross (a session, a
    transcript, listeners, queued messages) is refused with a one-line ``ValueError``
    naming each part and why.

    ``name`` names the activities (``<name>.model``, ``<name>.tool.<tool>``); tools
    named in ``pure`` run inside the workflow instead of as activities (deterministic
    code only). ``settings`` sets activity timeouts and retries. ``max_history_events``:
    the workflow continues as new (carrying the transcript) once its history is this
    long or Temporal suggests it. Payloads larger than ``inline_limit`` bytes are kept
    out of the history (see :func:`build_worker`). ``approval_timeout``: seconds of
    workflow time a run paused for approval waits for a decision before the calls are
    denied (None: as long as it takes).

    The same definition is used by the client (:func:`start_run`) and the worker
    (:func:`build_worker`).
    """

    def __init__(
        self,
        agent: Agent[Any],
        *,
        name: str,
        pure: Sequence[str] = (),
        settings: ActivitySettings | None = None,
        max_history_events: int = 10_000,
        inline_limit: int = 256 * 1024,
        approval_timeout: float | None = None,
    ) -> None:
        if not isinstance(agent, Agent):
            raise TypeError(
                f"DurableAgent wraps a ketch.Agent, got {type(agent).__name__}: "
                "DurableAgent(Agent(model, tools=...), name='coder')"
            )
        if not isinstance(name, str) or not name or "." in name or "/" in name:
            raise ValueError(f"agent name must be non-empty without '.' or '/', got {name!r}")
        tools = list(agent.tools)
        names = [t.name for t in tools]
        for p in pure:
            if p not in names:
                raise ValueError(f"pure tool {p!r} is not one of the agent's tools {sorted(names)}")
        refused = _refusals(agent)
        if refused:
            raise ValueError(f"DurableAgent {name!r} cannot carry: {'; '.join(refused)}")
        cfg = agent.config
        self.agent = agent
        """The wrapped agent (read when wrapped: later changes to it are not seen)."""
        self.name = name
        self.model: Model = agent.model
        self.model_name = f"{self.model.provider}:{self.model.id}"
        self.tools: list[Tool] = tools
        self.deps = cfg.deps
        self.output_type = cfg.output_type
        self.pure = tuple(pure)
        options = {k: v for k, v in jsonable(cfg.options).items() if k not in _SECRET_OPTIONS and v is not None}
        self.spec = AgentSpec(
            name=name,
            model=self.model_name,
            model_provider=self.model.provider,
            model_api=self.model.api,
            model_id=self.model.id,
            context_window=self.model.context_window,
            model_native_output=bool(getattr(self.model, "native_output", False)),
            system_prompt=agent.system_prompt,
            tools=[_tool_def(t, t.name in pure) for t in tools],
            options=options,
            steering_mode=agent.steering.mode,
            follow_up_mode=agent.follow_ups.mode,
            worker_side=[k for k, c in DURABLE.items() if c.how == "worker" and _set(agent, k)],
            max_history_events=max_history_events,
            inline_limit=inline_limit,
            approval_timeout=approval_timeout,
            activities=settings or ActivitySettings(),
            **{k: getattr(cfg, k) for k in CARRIED if k != "options"},
        )
        _pure.register_agent(self)

    def __repr__(self) -> str:
        return f"DurableAgent(name={self.name!r}, model={self.model_name!r}, tools={[t.name for t in self.tools]})"


class RunInput(msgspec.Struct, kw_only=True):
    """The workflow's input (also what it continues as new with)."""

    agent: AgentSpec
    prompts: list[dict[str, Any]] = msgspec.field(default_factory=list)
    transcript: list[dict[str, Any]] = msgspec.field(default_factory=list)
    transcript_ref: str | None = None
    events_url: str | None = None
    # carried across continue-as-new
    run_start: int = 0
    summary: dict[str, Any] | None = None
    steering: list[dict[str, Any]] = msgspec.field(default_factory=list)
    follow_ups: list[dict[str, Any]] = msgspec.field(default_factory=list)
    outbox: list[dict[str, Any]] = msgspec.field(default_factory=list)
    seq: int = 0
    generation: int = 0
    call_key: str | None = None
    """What the idempotency keys of the run's tool calls start with (made by its first
    workflow run); ``calls`` counts the calls keyed so far."""
    calls: int = 0


class DurableResult(msgspec.Struct, kw_only=True):
    """A finished durable run: the messages it added, its summary, the whole transcript."""

    messages: list[Message]
    summary: RunSummary
    transcript: list[Message]
    generations: int = 1
    """How many workflow runs (1 + continue-as-new count) the run took."""
    output: Any = None
    """The agent's typed output (``output_type``), validated: ``RunResult.output`` of the
    run (JSON values when the handle does not know the type, see :func:`run_handle`)."""


def messages_builtins(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Messages as plain JSON values."""
    return [msgspec.to_builtins(m) for m in messages]
