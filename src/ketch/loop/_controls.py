"""What comes next in a run, decided by ordered lists of small checks (:class:`Checks`).

Each check answers with a :data:`~ketch.loop._next.Next` (continue, end, pause) or None
(no opinion: ask the next one). The lists are built once per run from its configuration,
with only the checks that apply, so a run pays nothing for a feature it does not use.
:meth:`Checks.next` asks, after each turn:

1. the turn itself: the tool step's own end (a failed or aborted call, a refusal over the
   tool-call limit), an abort, a tool guardrail's trip, a call denied with ``stop``;
2. ``after_turn``: the capabilities' tools view (the next turn's tools), the output tool's
   answer (:mod:`._output`), ``prepare_next_turn``, ``stop_when``, the capabilities' checks;
3. steering (a batch's, else polled): the tool calls go on unless the batch stopped;
4. ``at_stop`` (the tool calls do not go on): length recovery, queued messages, an abort,
   follow-ups, the typed answer in the text (:mod:`._output`), the output guardrails
   (:mod:`._guardrails`), ``on_stop``; none answering, the run ends with ``stop``
   (``stop_sequence``);
5. a continue passes the run's abort and ``before_call``: ``max_turns``,
   ``max_budget_usd``, usage limits (:mod:`._limits`).

Before the first call :meth:`Checks.admit` asks ``first_call``: a usage limit
(:mod:`._limits`), the input guardrails (:mod:`._guardrails`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Sequence
from typing import TYPE_CHECKING
from typing import Any

from ..llm._messages import Message
from ..llm._messages import UserMessage
from ._config import LoopConfig
from ._guardrails import InputGuard
from ._guardrails import OutputGuard
from ._guardrails import tripped
from ._hooks import StopInfo
from ._hooks import TurnInfo
from ._hooks import maybe_await
from ._next import GO_ON
from ._next import Continue
from ._next import End
from ._next import Next
from ._next import Turn
from ._runtime import Run

log = logging.getLogger("ketch.loop")

if TYPE_CHECKING:
    Check = Callable[[Turn], Awaitable[Next | None]]
    """A check after a turn or at the stop."""


class Checks:
    """A run's checks, in order (see the module docstring)."""

    __slots__ = ("after_turn", "at_stop", "before_call", "first_call", "poll_steering", "signal", "steers")

    def __init__(self, run: Run) -> None:
        cfg = run.cfg
        guards = run.guards
        output = run.output
        self.first_call: list[Callable[[list[Message]], Awaitable[Next | None]]] = []
        self.before_call: list[Callable[[], End | None]] = []  # after the run's abort
        if cfg.usage_limits is not None or cfg.max_turns is not None or cfg.max_budget_usd is not None:
            from ._limits import limit_checks  # loaded with a run's limits

            self.first_call, self.before_call = limit_checks(run)
        if guards is not None and (guards.input or guards.parallel):
            self.first_call.append(InputGuard(guards, run.conversation, cfg.deps, run.signal, run.keep_gate))

        guard = OutputGuard(guards, run.conversation, cfg.deps, output) if guards is not None and guards.output else None
        self.after_turn: list[Check] = []
        if run.view is not None:
            self.after_turn.append(RefreshTools(run))
        if output is not None and output.tool_name is not None:
            from ._output import OutputAnswer  # loaded with the run's typed output

            self.after_turn.append(OutputAnswer(guard.check if guard is not None else None, run.poll_steering))
        if cfg.prepare_next_turn is not None:
            self.after_turn.append(PrepareNextTurn(run, cfg.prepare_next_turn))
        if cfg.stop_when:
            self.after_turn.append(StopWhen(run, cfg.stop_when))
        added_after_turn, added_at_stop = run.added_checks  # the capabilities' (ketch.loop._capability)
        self.after_turn += [AfterTurn(run, check) for check in added_after_turn]

        self.at_stop: list[Check] = []
        if cfg.length_recoveries > 0:
            self.at_stop.append(LengthRecovery(cfg))
        self.at_stop += [queued, Aborted(run)]
        if cfg.get_follow_up_messages is not None:
            self.at_stop.append(FollowUps(run))
        if output is not None:
            from ._output import OutputText

            self.at_stop.append(OutputText(output))
        if guard is not None:
            self.at_stop.append(guard)
        self.at_stop += [AtStop(run, check) for check in added_at_stop]
        if cfg.on_stop is not None:
            self.at_stop.append(OnStop(run, cfg.on_stop))
        self.signal = run.signal
        self.steers = cfg.get_steering_messages is not None  # else no poll: nothing to take
        self.poll_steering = run.poll_steering

    async def admit(self, prompts: list[Message]) -> Next | None:
        """Before the first call: the end of the run (the prompts are committed, nothing
        is sent), what to commit after the prompts (a :class:`Continue`), or None."""
        for check in self.first_call:
            nxt = await check(prompts)
            if nxt is not None:
                return nxt
        return None

    async def next(self, turn: Turn) -> Next:
        """What comes after ``turn`` (see the module docstring)."""
        # The turn's tool step ended the run: its own end (a refusal over the tool-call limit),
        # else an abort (of the batch or the run), a tool guardrail's trip, a call denied with
        # ``stop``. (The output tool's answer decides for itself: the first after-turn check.)
        nxt: Next | None = turn.end
        batch = turn.batch
        if turn.answered:
            nxt = None
        elif nxt is None:
            if (batch is not None and batch.aborted) or self.signal.aborted:
                nxt = End("aborted", "aborted")
            elif batch is not None and batch.tripped is not None:
                nxt = tripped(batch.tripped)
            elif batch is not None and batch.denied is not None:
                nxt = End("denied", batch.denied)
        if nxt is None and self.after_turn:
            nxt = await _first(self.after_turn, turn)
        if nxt is None:
            # Steering (a batch may have taken it already); the tool calls go on unless the batch stopped.
            steering: Sequence[Message] = batch.steering if batch is not None else ()
            if not steering and self.steers:
                steering = await self.poll_steering()
            turn.pending = steering
            if batch is not None and not batch.stop:
                nxt = Continue(steering) if steering else GO_ON
        if nxt is None:
            nxt = await _first(self.at_stop, turn)
        if nxt is None:
            return End("stop_sequence" if turn.message.stop_reason == "stop_sequence" else "stop")
        if type(nxt) is Continue:
            if self.signal.aborted:
                return End("aborted")  # (no error: the run was told to stop before the call)
            for gate in self.before_call:
                end = gate()
                if end is not None:
                    return end
        return nxt


async def _first(checks: list[Check], turn: Turn) -> Next | None:
    """The first answer of ``checks``, asked in order."""
    for check in checks:
        nxt = await check(turn)
        if nxt is not None:
            return nxt
    return None


# -- the checks of every run ---------------------------------------------------------------


class Aborted:
    """The model would stop, and the run was aborted: it ends."""

    __slots__ = ("signal",)

    def __init__(self, run: Run) -> None:
        self.signal = run.signal

    async def __call__(self, turn: Turn) -> Next | None:
        return End("aborted", "aborted") if self.signal.aborted else None


async def queued(turn: Turn) -> Next | None:
    """Messages are queued: the model is called with them."""
    return Continue(turn.pending) if turn.pending else None


class FollowUps:
    """The model would stop: follow-up messages, if any are queued, start another turn."""

    __slots__ = ("run",)

    def __init__(self, run: Run) -> None:
        self.run = run

    async def __call__(self, turn: Turn) -> Next | None:
        follow_ups = await self.run.poll(self.run.cfg.get_follow_up_messages)
        return Continue(follow_ups) if follow_ups else None


# -- the stop controls and hooks ------------------------------------------------------------


def turn_info(run: Run, turn: Turn) -> TurnInfo:
    """The :class:`TurnInfo` of ``turn`` (one for all the hooks after it)."""
    info = turn.info
    if info is None:
        info = turn.info = TurnInfo(
            run.turn, turn.message, turn.results, run.conversation, run.new_messages, run.summary.usage
        )
    return info


class RefreshTools:
    """A capability's tools view: the next turn's tools follow the transcript (a tool
    search's result loads tools). It never ends the run."""

    __slots__ = ("run",)

    def __init__(self, run: Run) -> None:
        self.run = run

    async def __call__(self, turn: Turn) -> Next | None:
        run = self.run
        run.set_tools(run.conversation.tools)
        return None


class PrepareNextTurn:
    """``prepare_next_turn``: its replacements apply from the next turn (it never ends the run)."""

    __slots__ = ("hook", "run")

    def __init__(self, run: Run, hook: Callable[[TurnInfo], Any]) -> None:
        self.run = run
        self.hook = hook

    async def __call__(self, turn: Turn) -> Next | None:
        nxt = await maybe_await(self.hook(turn_info(self.run, turn)))
        if nxt is not None:
            self.run.apply(nxt)
        return None


class StopWhen:
    """``stop_when``: any predicate true ends the run (one that raises counts as false, logged)."""

    __slots__ = ("predicates", "run")

    def __init__(self, run: Run, predicates: Any) -> None:
        self.run = run
        self.predicates = tuple(predicates)

    async def __call__(self, turn: Turn) -> Next | None:
        info = turn_info(self.run, turn)
        for predicate in self.predicates:
            try:
                stops = bool(await maybe_await(predicate(info)))
            except Exception:
                log.exception("stop_when predicate %r failed; not stopping", predicate)
                stops = False
            if stops:
                return End("stop")
        return None


class LengthRecovery:
    """A response cut off by the output limit, without tool calls: ask the model to go on
    (``length_recovery_prompt``, after any steering), at most ``length_recoveries`` times."""

    __slots__ = ("left", "prompt")

    def __init__(self, cfg: LoopConfig[Any]) -> None:
        self.left = cfg.length_recoveries
        self.prompt = cfg.length_recovery_prompt

    async def __call__(self, turn: Turn) -> Next | None:
        if turn.message.stop_reason != "length" or turn.calls or self.left <= 0:
            return None
        self.left -= 1
        return Continue([*turn.pending, UserMessage(content=self.prompt)])


class OnStop:
    """``on_stop``: the model would end the run without tool calls; it may let it end,
    inject a message (another turn) or escalate (``stop_guard``)."""

    __slots__ = ("hook", "run")

    def __init__(self, run: Run, hook: Callable[[StopInfo], Any]) -> None:
        self.run = run
        self.hook = hook

    async def __call__(self, turn: Turn) -> Next | None:
        message = turn.message
        if message.tool_calls:
            return None
        run = self.run
        decision = await maybe_await(self.hook(StopInfo(run.turn, message, run.conversation)))
        if decision is None:
            return None
        if decision.action == "escalate":
            return End("stop_guard", decision.reason or "on_stop escalated")
        injected = decision.injected()
        return None if injected is None else Continue([injected])


# -- the capabilities' checks ------------------------------------------------------------------


class AfterTurn:
    """A capability's check after a turn: its answer (continue, end) or None."""

    __slots__ = ("check", "run")

    def __init__(self, run: Run, check: Callable[[TurnInfo], Any]) -> None:
        self.run = run
        self.check = check

    async def __call__(self, turn: Turn) -> Next | None:
        return _checked(await maybe_await(self.check(turn_info(self.run, turn))), self.check)


class AtStop:
    """A capability's check when the model would end the run without tool calls."""

    __slots__ = ("check", "run")

    def __init__(self, run: Run, check: Callable[[StopInfo], Any]) -> None:
        self.run = run
        self.check = check

    async def __call__(self, turn: Turn) -> Next | None:
        if turn.message.tool_calls:
            return None
        run = self.run
        return _checked(await maybe_await(self.check(StopInfo(run.turn, turn.message, run.conversation))), self.check)


def _checked(answer: Any, check: Any) -> Next | None:
    """A capability check's answer, which must be a Continue, an End or None."""
    if answer is None or type(answer) is Continue or type(answer) is End:
        return answer
    raise TypeError(f"check {check!r} must return Continue, End or None, got {type(answer).__name__}")
