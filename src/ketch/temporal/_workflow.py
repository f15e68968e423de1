"""The durable agent workflow: ``run_loop`` inside Temporal's workflow sandbox.

The loop runs unchanged with a :class:`~ketch.llm.Model` and :class:`~ketch.loop.Tool`
objects whose ``stream`` and ``execute`` call activities: the workflow sees each model
call's complete assistant message and each tool call's result, never partial output.
Everything else the loop does (scheduling, stop controls, steering, approval) is
deterministic workflow code; message timestamps and durations read the workflow's
clock (:func:`ketch.llm.use_clock`), so a replay rebuilds the same transcript.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from collections.abc import Callable
from datetime import timedelta
from typing import Any
from typing import cast

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError
from temporalio.exceptions import ApplicationError
from temporalio.exceptions import CancelledError

with workflow.unsafe.imports_passed_through():
    import msgspec

    from ..llm import AbortSignal
    from ..llm import AssistantMessage
    from ..llm import Message
    from ..llm import MessageBuilder
    from ..llm import Request
    from ..llm import StreamDone
    from ..llm import StreamError
    from ..llm import StreamEvent
    from ..llm import StreamOptions
    from ..llm import message_from_dict
    from ..llm import message_to_dict
    from ..llm import use_clock
    from ..loop import AgentEnd
    from ..loop import AgentEvent
    from ..loop import AgentStart
    from ..loop import Conversation
    from ..loop import Decision
    from ..loop import LoopConfig
    from ..loop import MessageEnd
    from ..loop import MessageStart
    from ..loop import MessageUpdate
    from ..loop import RunState
    from ..loop import RunStream
    from ..loop import RunSummary
    from ..loop import Tool
    from ..loop import ToolContext
    from ..loop import ToolResult
    from ..loop import TurnInfo
    from ..loop import UsageLimits
    from ..loop import continue_loop
    from ..loop import deny
    from ..loop import resume_loop
    from ..loop import run_loop
    from . import _pure
    from ._spec import IN_WORKFLOW
    from ._spec import PUBLISH_ACTIVITY
    from ._spec import AgentSpec
    from ._spec import DurableAgent
    from ._spec import RunInput
    from ._spec import ToolDef
    from ._spec import jsonable
    from ._spec import model_activity
    from ._spec import output_builtins
    from ._spec import tool_activity

PASSTHROUGH = (
    "msgspec",
    "ketch.llm",
    "ketch.loop",
    "ketch._agent",
    "ketch._schema",
    "ketch.temporal._spec",
    "ketch.temporal._pure",
)
"""Modules the workflow sandbox shares with the worker instead of re-importing them
(deterministic code only; the loop's clock is the workflow's, see ``use_clock``)."""


def _pass_through_by_default() -> None:
    """Add :data:`PASSTHROUGH` to Temporal's default sandbox restrictions
    (``SandboxRestrictions.passthrough_modules_default``, the set behind
    ``SandboxRestrictions.default``), so a runner or :class:`temporalio.worker.Replayer`
    built with the defaults runs this workflow: re-imported in the sandbox, ketch's
    message Structs cannot be defined again."""
    from temporalio.worker.workflow_sandbox import SandboxRestrictions

    modules = getattr(SandboxRestrictions, "passthrough_modules_default", None)
    if isinstance(modules, set):
        modules.update(PASSTHROUGH)


if not workflow.unsafe.in_sandbox():
    _pass_through_by_default()


def _retry(spec: AgentSpec, *, non_retryable: list[str] | None = None) -> RetryPolicy:
    s = spec.activities
    return RetryPolicy(
        initial_interval=timedelta(seconds=s.initial_interval),
        backoff_coefficient=s.backoff,
        maximum_interval=timedelta(seconds=s.max_interval),
        maximum_attempts=s.max_attempts,
        non_retryable_error_types=non_retryable,
    )


def _failure_text(err: ActivityError) -> tuple[str, str]:
    """The message and error kind an activity failure carries."""
    cause = err.cause
    if isinstance(cause, ApplicationError):
        kind = cause.type or "unknown"
        text = str(cause.details[0]) if cause.details else cause.message
        return text, kind
    if cause is not None:
        return str(cause), "unknown"
    return str(err), "unknown"


_WORKER_ONLY = frozenset({"signal", "api_key", "headers"})


class _ActivityModel:
    """A Model whose ``stream`` is one activity call returning the complete message."""

    def __init__(self, wf: AgentWorkflow, spec: AgentSpec) -> None:
        self._wf = wf
        self._spec = spec
        # The Model protocol's members, fixed as the (frozen) spec is.
        self.provider = spec.model_provider
        self.api = spec.model_api
        self.id = spec.model_id
        self.context_window = spec.context_window
        self.native_output = spec.model_native_output

    def stream(self, request: Request, options: StreamOptions | None = None) -> AsyncIterator[StreamEvent]:
        return self._call(request, options or StreamOptions())

    def _message(self, stop: str, text: str, kind: str | None) -> AssistantMessage:
        return AssistantMessage(
            provider=self.provider, api=self.api, model=self.id,
            stop_reason=stop,  # type: ignore[arg-type]
            error_message=text, error_kind=kind,
        )

    async def _call(self, request: Request, options: StreamOptions) -> AsyncIterator[StreamEvent]:
        spec = self._spec
        wf = self._wf
        signal = options.signal
        if signal is not None and signal.aborted:
            yield MessageBuilder(provider=self.provider, api=self.api, model=self.id).aborted()
            return
        plain = {k: v for k, v in msgspec.structs.asdict(options).items() if v is not None and k not in _WORKER_ONLY}
        payload = {
            "system_prompt": request.system_prompt,
            "messages": [message_to_dict(m) for m in request.messages],
            "tools": [msgspec.to_builtins(t) for t in request.tools],
            "options": msgspec.to_builtins(plain),  # without what stays on the worker
            # what a worker from before "options" reads
            "thinking": options.thinking,
            "max_tokens": options.max_tokens,
            "temperature": options.temperature,
            **wf.activity_context(),
        }
        s = spec.activities
        handle = workflow.start_activity(
            model_activity(spec.name),
            payload,
            start_to_close_timeout=timedelta(seconds=s.model_timeout),
            heartbeat_timeout=timedelta(seconds=s.heartbeat_timeout),
            retry_policy=_retry(spec),
        )
        wf.live_message = True

        def cancel() -> None:
            handle.cancel()

        remove = signal.add_callback(cancel) if signal is not None else None
        try:
            out: dict[str, Any] = await handle
        except ActivityError as err:
            if isinstance(err.cause, CancelledError) or (signal is not None and signal.aborted):
                yield MessageBuilder(provider=self.provider, api=self.api, model=self.id).aborted()
            else:
                text, kind = _failure_text(err)
                yield StreamError(reason="error", error=self._message("error", text, kind))
            return
        finally:
            if remove is not None:
                remove()
        message = message_from_dict(out)
        assert isinstance(message, AssistantMessage)
        if message.stop_reason in ("error", "aborted"):
            yield StreamError(reason=message.stop_reason, error=message)
        else:
            yield StreamDone(reason=message.stop_reason, message=message)


def _activity_tool(wf: AgentWorkflow, spec: AgentSpec, d: ToolDef, local: Tool | None) -> Tool:
    """A Tool whose ``execute`` runs the activity ``<agent>.tool.<name>`` (or, for a pure
    tool, the worker's own tool ``local``, inside the workflow). The decisions ``d``
    makes per call are ``local``'s functions, called inside the workflow."""
    pure = local if d.pure else None
    s = spec.activities

    async def execute(args: dict[str, Any], ctx: ToolContext[Any]) -> Any:
        if pure is not None:
            if isinstance(pure, _pure.Invocable):  # a @tool function: no thread inside a workflow
                return await pure.invoke(args, ctx)
            return await pure.execute(args, ctx)
        payload = {
            "args": args,
            "call_id": ctx.call_id,
            "idempotency_key": wf._next_key(ctx.call_id),
            **wf.activity_context(),
        }
        timeout = d.timeout if d.timeout is not None else s.tool_timeout
        try:
            out: dict[str, Any] = await workflow.execute_activity(
                tool_activity(spec.name, d.name),
                payload,
                start_to_close_timeout=timedelta(seconds=timeout),
                heartbeat_timeout=timedelta(seconds=s.heartbeat_timeout),
                retry_policy=_retry(spec),
            )
        except ActivityError as err:
            text, _ = _failure_text(err)
            return ToolResult.error(text)
        return msgspec.convert(out, ToolResult)

    decided: dict[str, Any] = {}
    if d.per_call:
        if local is None:
            raise RuntimeError(_missing(spec.name, [f"tool {d.name!r} ({', '.join(d.per_call)})"]))
        decided = {name: getattr(local, name) for name in d.per_call}
    return Tool(
        d.name,
        d.description,
        d.parameters,
        execute,
        sequential=decided.get("sequential", d.sequential),
        read_only=decided.get("read_only", d.read_only),
        requires_approval=decided.get("requires_approval", d.requires_approval),
        prepare_arguments=decided.get("prepare_arguments"),
        validate=decided.get("validate"),
        preview=decided.get("preview"),
        interrupt=d.interrupt,
        strict=d.strict,
        reports_progress=pure is not None,
    )


def _missing(name: str, what: list[str]) -> str:
    return (
        f"durable agent {name!r} is not defined in this worker process, and its {', '.join(what)} run inside "
        "the workflow: run it on a worker built with this agent (build_worker(agents=[...]))"
    )


def _left(limits: UsageLimits | None, used: RunSummary) -> UsageLimits | bool | None:
    """``limits`` less what the run used before this workflow run (the per-run ones);
    False when one is used up."""
    if limits is None:
        return None
    u = used.usage
    spent = {
        "tool_calls": used.tool_calls,
        "input_tokens": u.input,
        "output_tokens": u.output,
        "total_tokens": u.total_tokens,
    }
    left: dict[str, int] = {}
    for name, n in spent.items():
        limit = getattr(limits, name)
        if limit is not None and n:
            if limit - n < 1:
                return False
            left[name] = limit - n
    return msgspec.structs.replace(limits, **left) if left else limits


def _decision(data: dict[str, Any]) -> Decision:
    return cast(Decision, msgspec.convert(data, Decision))


@workflow.defn(name="ketch.agent")
class AgentWorkflow:
    """One durable agent run. Signals: ``steer``, ``follow_up``, ``abort``, ``decide``;
    queries: ``state``, ``transcript``."""

    def __init__(self) -> None:
        self._steering: list[Message] = []
        self._follow_ups: list[Message] = []
        self._signal = AbortSignal()
        self._decisions: dict[str, Decision] | None = None
        self._conversation: Conversation | None = None
        self._status = "running"
        self._pending: list[dict[str, Any]] = []
        self._outbox: list[dict[str, Any]] = []
        self._seq = 0
        self._events_url: str | None = None
        self._continue = False
        self._generation = 0
        self._more = False
        self._last_end: dict[str, Any] | None = None
        self.live_message = False
        self._call_key = ""
        self._calls = 0
        self._carried = RunSummary()  # what the workflow runs before this one used
        self._used = RunSummary()  # requests, tool calls and usage of this workflow run so far

    # -- signals and queries -------------------------------------------------------------
    @workflow.signal(name="steer")
    def steer(self, message: dict[str, Any]) -> None:
        """Queue a steering message (delivered before the next model call)."""
        self._steering.append(message_from_dict(message))

    @workflow.signal(name="follow_up")
    def follow_up(self, message: dict[str, Any]) -> None:
        """Queue a follow-up message (delivered when the agent would stop)."""
        self._follow_ups.append(message_from_dict(message))

    @workflow.signal(name="abort")
    def abort(self) -> None:
        """Abort the run: running activities are cancelled; it ends ``aborted``."""
        self._signal.abort("aborted")

    @workflow.signal(name="decide")
    def decide(self, decisions: dict[str, dict[str, Any]]) -> None:
        """Decisions for a run paused for approval: call id -> approve/deny/edit."""
        self._decisions = {k: _decision(v) for k, v in decisions.items()}

    @workflow.query(name="state")
    def state(self) -> dict[str, Any]:
        """``status`` (running, awaiting_approval, done), pending calls, message count."""
        conversation = self._conversation
        return {
            "status": self._status,
            "pending": self._pending,
            "messages": len(conversation.messages) if conversation is not None else 0,
            "steering": len(self._steering),
            "follow_ups": len(self._follow_ups),
        }

    @workflow.query(name="transcript")
    def transcript(self) -> list[dict[str, Any]]:
        """The transcript so far."""
        conversation = self._conversation
        return [] if conversation is None else [message_to_dict(m) for m in conversation.messages]

    # -- events -------------------------------------------------------------------------
    def activity_context(self) -> dict[str, Any]:
        """What every activity gets besides its own input: where to publish, the events
        the workflow produced since the last activity (published first), the run id."""
        outbox, self._outbox = self._outbox, []
        return {"run_id": workflow.info().workflow_id, "events_url": self._events_url, "outbox": outbox}

    def _next_key(self, call_id: str) -> str:
        """The idempotency key of the run's next tool call: unique per call within the run
        (the model's call ids need not be), the same for every attempt of that call."""
        self._calls += 1
        return f"{self._call_key}/{self._calls}"

    def _emit(self, event: AgentEvent) -> None:
        if event.type == "message_end" and isinstance(event.message, AssistantMessage):
            self._used.turns += 1
            self._used.usage.add(event.message.usage)
        elif event.type == "tool_execution_end":
            self._used.tool_calls += 1
        if self._events_url is None:
            return
        if type(event) is MessageUpdate:
            return
        if type(event) is MessageStart and isinstance(event.message, AssistantMessage) and self.live_message:
            return  # the model activity published it with the partial output
        if type(event) is MessageEnd and isinstance(event.message, AssistantMessage):
            self.live_message = False
        if type(event) is AgentStart and (self._generation or self._more):
            return  # one run across continue-as-new and late messages: one agent_start
        if type(event) is AgentEnd and event.summary.end_reason != "approval_required":
            self._last_end = jsonable(event)  # published when the run really ends, with its whole summary
            return
        self._seq += 1
        self._outbox.append({"seq": self._seq, "event": jsonable(event)})

    def _take(self, queue: list[Message], mode: str = "all") -> Callable[[], list[Message]]:
        def take() -> list[Message]:
            if mode != "all":
                return [queue.pop(0)] if queue else []
            taken = list(queue)
            queue.clear()
            return taken

        return take

    def _stop_for_new_run(self, spec: AgentSpec) -> Callable[[TurnInfo], bool]:
        def predicate(info: TurnInfo) -> bool:
            if not info.tool_results:  # continue_loop needs a transcript that does not end the turn
                return False
            wfi = workflow.info()
            if wfi.is_continue_as_new_suggested() or wfi.get_current_history_length() >= spec.max_history_events:
                limited = spec.max_turns is not None or spec.max_budget_usd is not None or spec.usage_limits is not None
                if limited and workflow.patched("ketch-limits-per-run") and _exhausted(
                    spec, _merge(self._carried, self._used, 0, 0, 0.0)
                ):
                    return False  # a limit is reached: this workflow run ends the run (the loop stops it)
                self._continue = True
                return True
            return False

        return predicate

    # -- the run ------------------------------------------------------------------------
    @workflow.run
    async def run(self, data: dict[str, Any]) -> dict[str, Any]:
        """Run the agent loop to its end; returns new messages, summary and transcript."""
        inp = msgspec.convert(data, RunInput)
        spec = inp.agent
        self._events_url = inp.events_url
        self._outbox = list(inp.outbox)
        self._seq = inp.seq
        self._generation = inp.generation
        self._steering.extend(message_from_dict(m) for m in inp.steering)
        self._follow_ups.extend(message_from_dict(m) for m in inp.follow_ups)
        with use_clock(lambda: workflow.now().timestamp()):
            transcript_data = inp.transcript
            if inp.transcript_ref is not None:
                transcript_data = await workflow.execute_activity(
                    "ketch.load", inp.transcript_ref, start_to_close_timeout=timedelta(seconds=60),
                    retry_policy=_retry(spec),
                )
            agent = cast("DurableAgent | None", _pure.agent(spec.name))  # registered by DurableAgent
            needed = [k for k in spec.worker_side if k in IN_WORKFLOW]
            if needed and agent is None:
                raise RuntimeError(_missing(spec.name, needed))
            conversation = Conversation(
                system_prompt=spec.system_prompt,
                messages=[message_from_dict(m) for m in transcript_data],
                tools=[_activity_tool(self, spec, d, _pure.tool(spec.name, d.name)) for d in spec.tools],
            )
            self._conversation = conversation
            carried = msgspec.convert(inp.summary, RunSummary) if inp.summary is not None else RunSummary()
            self._carried = carried
            self._call_key = inp.call_key or f"{workflow.info().workflow_id}/{workflow.uuid4().hex[:12]}"
            self._calls = inp.calls
            config = _config(self, spec, agent, needed)
            _count_from(config, spec, carried)
            stream: RunStream
            if inp.generation == 0:
                prompts = [message_from_dict(m) for m in inp.prompts]
                stream = run_loop(prompts, conversation, config, self._signal)
            else:
                stream = continue_loop(conversation, config, self._signal)
            summary = carried
            while True:
                calls = errors = 0
                duration = 0.0
                while True:
                    async for event in stream:
                        self._emit(event)
                    result = await stream.result()
                    output = result.output
                    part = result.summary
                    duration += part.duration
                    state = result.state
                    if part.end_reason == "approval_required" and state is not None:
                        calls += part.tool_calls  # a resumed segment counts turns and usage again, not calls
                        errors += part.tool_errors
                        stream = await self._await_decisions(state, conversation, config, spec.approval_timeout)
                        continue
                    break
                summary = _merge(summary, part, calls, errors, duration)
                if self._continue and part.end_reason == "stop":
                    await self._continue_as_new(inp, conversation, summary)
                end = self._last_end
                if end is not None:
                    end["summary"] = msgspec.to_builtins(summary)
                    self._seq += 1
                    self._outbox.append({"seq": self._seq, "event": end})
                    self._last_end = None
                await self._flush()
                if (
                    part.end_reason == "stop"
                    and (self._steering or self._follow_ups)
                    and workflow.patched("ketch-late-messages")
                ):
                    # messages signalled while the run published its last events: go on
                    queued = self._take(self._steering)() + self._take(self._follow_ups)()
                    _count_from(config, spec, summary)
                    self._more = True
                    stream = run_loop(queued, conversation, config, self._signal)
                    continue
                break
            self._status = "done"
            return {
                "messages": [message_to_dict(m) for m in conversation.messages[inp.run_start:]],
                "summary": msgspec.to_builtins(summary),
                "transcript": [message_to_dict(m) for m in conversation.messages],
                "generations": inp.generation + 1,
                "output": None if output is None else output_builtins(output),
            }

    async def _flush(self) -> None:
        """Publish the events produced since the last activity (at a pause and at the end)."""
        if self._events_url is not None and self._outbox:
            await workflow.execute_activity(
                PUBLISH_ACTIVITY, self.activity_context(),
                start_to_close_timeout=timedelta(seconds=60),
                retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=10)),
            )

    async def _await_decisions(
        self, state: RunState, conversation: Conversation, config: LoopConfig[Any], wait: float | None
    ) -> RunStream:
        self._status = "awaiting_approval"
        self._pending = [msgspec.to_builtins(p) for p in state.pending]
        self._decisions = None
        await self._flush()
        timed_out = False
        try:
            await workflow.wait_condition(lambda: self._decisions is not None or self._signal.aborted, timeout=wait)
        except TimeoutError:
            timed_out = True
        decisions: dict[str, Decision] = self._decisions or {}
        if timed_out:
            decisions = {
                p.tool_call_id: deny(f"No decision within {wait:g}s; the call was not run")
                for p in state.pending if p.needs_decision
            }
        elif self._signal.aborted:
            decisions = {p.tool_call_id: deny("aborted") for p in state.pending if p.needs_decision}
        self._decisions = None
        self._status = "running"
        self._pending = []
        return resume_loop(state, conversation, config, self._signal, decisions=decisions)

    async def _continue_as_new(self, inp: RunInput, conversation: Conversation, summary: RunSummary) -> None:
        spec = inp.agent
        transcript = [message_to_dict(m) for m in conversation.messages]
        ref: str | None = None
        if len(msgspec.json.encode(transcript)) > spec.inline_limit:
            ref = await workflow.execute_activity(
                "ketch.store", {"run_id": workflow.info().workflow_id, "transcript": transcript},
                start_to_close_timeout=timedelta(seconds=60), retry_policy=_retry(spec),
            )
            transcript = []
        nxt = RunInput(
            agent=spec,
            transcript=transcript,
            transcript_ref=ref,
            events_url=inp.events_url,
            run_start=inp.run_start,
            summary=msgspec.to_builtins(summary),
            steering=[message_to_dict(m) for m in self._steering],
            follow_ups=[message_to_dict(m) for m in self._follow_ups],
            outbox=self._outbox,
            seq=self._seq,
            generation=inp.generation + 1,
            call_key=self._call_key,
            calls=self._calls,
        )
        workflow.continue_as_new(msgspec.to_builtins(nxt))


def _merge(total: RunSummary, part: RunSummary, calls: int, errors: int, duration: float) -> RunSummary:
    """The run's summary: what earlier workflow runs carried plus this one's."""
    usage = msgspec.structs.replace(total.usage, cost=msgspec.structs.replace(total.usage.cost))
    usage.add(part.usage)
    return RunSummary(
        turns=total.turns + part.turns,
        tool_calls=total.tool_calls + part.tool_calls + calls,
        tool_errors=total.tool_errors + part.tool_errors + errors,
        usage=usage,
        end_reason=part.end_reason,
        error=part.error,
        duration=total.duration + duration,
    )


def _config(wf: AgentWorkflow, spec: AgentSpec, agent: DurableAgent | None, needed: list[str]) -> LoopConfig[Any]:
    """The loop's config: the carried options from the run's input, the worker-side ones
    (``needed``) from the worker's own definition of the agent."""
    worker: dict[str, Any] = {}
    if agent is not None:
        own = agent.agent.config
        worker = {k: getattr(own, k) for k in needed}
        if "context_manager" in worker:  # a fresh one per run: it keeps state about its transcript
            worker["context_manager"] = copy.deepcopy(worker["context_manager"])
        worker["deps"] = own.deps
    stop_when = (*worker.pop("stop_when", ()), wf._stop_for_new_run(spec))
    return LoopConfig(
        model=_ActivityModel(wf, spec),
        thinking=spec.thinking,
        options=spec.stream_options(),
        length_recoveries=spec.length_recoveries,
        length_recovery_prompt=spec.length_recovery_prompt,
        tool_execution=spec.tool_execution,
        max_tool_concurrency=spec.max_tool_concurrency,
        steering_during_tools=spec.steering_during_tools,
        max_tool_errors=spec.max_tool_errors,
        max_repeated_tool_calls=spec.max_repeated_tool_calls,
        tool_timeout=spec.tool_timeout,
        tool_abort_grace=spec.tool_abort_grace,
        output_mode=spec.output_mode,
        output_retries=spec.output_retries,
        get_steering_messages=wf._take(wf._steering, spec.steering_mode),
        get_follow_up_messages=wf._take(wf._follow_ups, spec.follow_up_mode),
        stop_when=stop_when,
        **worker,
    )


def _exhausted(spec: AgentSpec, used: RunSummary) -> bool:
    """Whether the run has used up its turns, budget or a usage limit (the loop, which
    checks them before each model call but the first, stops it)."""
    if spec.max_turns is not None and used.turns >= spec.max_turns:
        return True
    if spec.max_budget_usd is not None and used.usage.cost.total >= spec.max_budget_usd:
        return True
    return _left(spec.usage_limits, used) is False


def _count_from(config: LoopConfig[Any], spec: AgentSpec, used: RunSummary) -> None:
    """Set the run's limits for a loop that starts after the run used ``used`` (a workflow
    run continued as new, messages that came after the run's end)."""
    config.max_turns = None if spec.max_turns is None else spec.max_turns - used.turns
    if (spec.max_budget_usd is None and spec.usage_limits is None) or not workflow.patched("ketch-limits-per-run"):
        return  # (a run started before the budget counted across workflow runs: as it started)
    config.max_budget_usd = None if spec.max_budget_usd is None else spec.max_budget_usd - used.usage.cost.total
    left = _left(spec.usage_limits, used)
    config.usage_limits = spec.usage_limits if isinstance(left, bool) else left
