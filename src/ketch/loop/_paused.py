"""Continuing a response the provider paused (stop reason ``pause``).

A provider running its own tools may pause a long turn (Anthropic's ``pause_turn``): the
response ends with ``stop_reason == "pause"`` and the model continues it when the
transcript is sent back as it is, with no new message. The capabilities that ask for
hosted tools (:class:`ketch.tools.HostedTools`, :class:`ketch.web.WebSearch`) contribute
the check of :func:`continue_paused` for that; the loop itself knows nothing of it.
"""

from __future__ import annotations

from ._capability import StopCheck
from ._config import StopInfo
from ._next import Continue
from ._next import End

DEFAULT_PAUSE_CONTINUATIONS = 10
"""How many paused responses a run continues by default."""

_AGAIN = Continue(())


def check_pause_limit(owner: str, limit: object) -> int:
    """``limit`` checked as a number of continuations (0 or more), or a ``ValueError``
    naming ``owner``'s setting."""
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
        raise ValueError(f"{owner} max_pause_continuations={limit!r}: use a whole number, 0 or more")
    return limit


def continue_paused(limit: int, owner: str) -> tuple[StopCheck, ...]:
    """The stop checks (:data:`ketch.loop.StopCheck`) of one run: when the response was
    paused, another call with nothing new (:class:`~ketch.loop.Continue` of no messages),
    at most ``limit`` times; one more pause ends the run with an error naming the limit
    and ``owner`` (the capability whose setting it is). None for a ``limit`` of 0 (a
    paused response ends the run, as one that finished)."""
    if limit == 0:
        return ()
    left = limit

    def check(info: StopInfo) -> Continue | End | None:
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
