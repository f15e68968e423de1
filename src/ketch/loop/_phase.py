"""The observable phase of a run: :class:`Phase`, and :class:`PhaseRef`, the handle the
stateless loop keeps up to date (``LoopConfig.phase``)."""

from __future__ import annotations

from typing import Literal
from typing import TypeAlias
from typing import get_args

import msgspec

PhaseKind: TypeAlias = Literal[
    "starting",
    "llm_in_flight",
    "turn_finished",
    "tool_executing",
    "idle",
    "done",
    "aborted",
    "error",
    "approval_required",
]
TerminalKind: TypeAlias = Literal["done", "aborted", "error", "approval_required"]
_TERMINAL = frozenset(get_args(TerminalKind))


class Phase(msgspec.Struct, frozen=True):
    """Where a run is: ``kind`` and the 1-based turn (model call) number (0 before the
    first call).

    ``done``, ``aborted``, ``error`` and ``approval_required`` (the run paused; see
    :meth:`ketch.Agent.resume`) are terminal and stay until the next run.
    """

    kind: PhaseKind
    turn: int

    @property
    def is_terminal(self) -> bool:
        """True for ``done``, ``aborted``, ``error`` and ``approval_required``."""
        return self.kind in _TERMINAL


class PhaseRef:
    """An observable handle on a stateless run's phase: pass one as
    ``LoopConfig(phase=ref)`` and read :meth:`observe` from anywhere (another task, a
    poller) while the run goes on.

    The loop writes ``starting`` (turn 0), ``llm_in_flight`` at each turn's start,
    ``turn_finished`` once the turn's assistant message is committed,
    ``tool_executing`` while its tool calls run, and ``idle`` when the run ended (a
    parking state, not terminal). It never writes a terminal kind: the owner of the run
    does, once, with :meth:`set_terminal` (the first call wins; the turn is kept).
    After that the loop's writes are ignored; :meth:`reset` makes the handle reusable.
    """

    __slots__ = ("_phase",)

    def __init__(self) -> None:
        self._phase = Phase("starting", 0)

    def observe(self) -> Phase:
        """The current phase and turn, read atomically."""
        return self._phase

    def set_terminal(self, kind: TerminalKind) -> bool:
        """Set the terminal kind (``done``, ``aborted``, ``error`` or
        ``approval_required``); False when a terminal kind was already set. Raises
        ``ValueError`` for a kind that is not terminal."""
        if kind not in _TERMINAL:
            raise ValueError(f"set_terminal() takes one of {', '.join(sorted(_TERMINAL))}, got {kind!r}")
        phase = self._phase
        if phase.kind in _TERMINAL:
            return False
        self._phase = Phase(kind, phase.turn)
        return True

    def reset(self) -> None:
        """Back to ``starting`` (turn 0), for another run."""
        self._phase = Phase("starting", 0)

    def _set(self, kind: PhaseKind, turn: int | None = None) -> None:
        """The loop's write (ignored once terminal)."""
        phase = self._phase
        if phase.kind not in _TERMINAL:
            self._phase = Phase(kind, phase.turn if turn is None else turn)

    def __repr__(self) -> str:
        phase = self._phase
        return f"PhaseRef({phase.kind}, turn={phase.turn})"
