"""Continuing a response the provider paused (stop reason ``pause``).

A provider running its own tools may pause a long turn (Anthropic's ``pause_turn``): the
response ends with ``stop_reason == "pause"`` and the model continues it when the
transcript is sent back as it is, with no new message. The capabilities that ask for
hosted tools (:class:`ketch.tools.HostedTools`, :class:`ketch.web.WebSearch`) contribute
the check of :func:`continue_paused` for that; the loop itself knows nothing of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from typing import Protocol

from ._next import Continue
from ._next import End

if TYPE_CHECKING:
    from ..llm._messages import AssistantMessage
    from ._capability import StopCheck


class _Stopping(Protocol):
    """What the check reads of a :class:`~ketch.loop.StopInfo`."""

    @property
    def message(self) -> AssistantMessage: ...

_AGAIN = Continue(())


def continue_paused(limit: int = 10, *, owner: str = "continue_paused") -> tuple[StopCheck, ...]:
    """The stop checks (:data:`~ketch.loop.StopCheck`, for :attr:`Contribution.at_stop
    <ketch.loop.Contribution.at_stop>`) of one run that continue a paused response: another
    model call with nothing new (a :class:`~ketch.loop.Continue` of no messages), at most
    ``limit`` times; one more pause ends the run with an error naming the limit and
    ``owner`` (whose ``max_pause_continuations`` it is). No check for a ``limit`` of 0 (a
    paused response ends the run like one that finished). A ``limit`` that is not a whole
    number of 0 or more is a ``ValueError`` naming ``owner``."""
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
        raise ValueError(f"{owner} max_pause_continuations={limit!r}: use a whole number, 0 or more")
    if limit == 0:
        return ()
    left = limit

    def check(info: _Stopping) -> Continue | End | None:
        nonlocal left
        if info.message.stop_reason != "pause":
            return None
        if left <= 0:
            return End(
                "error",
                f"the provider paused its turn again after {limit} continuation{'' if limit == 1 else 's'} "
                f"({owner} max_pause_continuations={limit}); send another prompt to continue it",
            )
        left -= 1
        return _AGAIN

    return (check,)
