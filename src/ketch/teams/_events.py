"""The team's records and events: :class:`Mail` and the :data:`TeamEvent` union.

Every event is a msgspec Struct tagged on ``type`` and carries ``path``, the member it
concerns as ``<team>/<member>`` (``team/reviewer``), so a UI can nest a teammate's events
under its name. ``msgspec.json.encode(event)`` gives the wire form.
"""

from __future__ import annotations

from typing import ClassVar
from typing import Literal
from typing import TypeAlias

import msgspec

from ketch.loop import AgentEvent

TeammateStateName: TypeAlias = Literal["idle", "working"]


class Mail(msgspec.Struct, frozen=True, kw_only=True):
    """One message between teammates (or between the lead and a teammate).

    ``id`` counts every message of the team from 1, in posting order; ``seq`` counts the
    messages from ``sender`` to ``to`` from 1, so a receiver's view of one sender is
    ``seq`` 1, 2, 3, ... with no gap and no repeat. ``broadcast`` marks a copy of a
    :meth:`~ketch.teams.Team.broadcast`.
    """

    id: int
    sender: str
    to: str
    text: str
    seq: int
    broadcast: bool = False


class _TeamEvent(msgspec.Struct, tag_field="type"):
    path: str
    """The member the event concerns, as ``<team>/<member>``."""


class TeammateEvent(_TeamEvent, tag="teammate_event"):
    """An event of a teammate's agent (every :data:`~ketch.AgentEvent` of its runs)."""

    type: ClassVar[Literal["teammate_event"]] = "teammate_event"
    event: AgentEvent


class MailPosted(_TeamEvent, tag="mail_posted"):
    """A message was posted to the mailbox of ``path`` (the recipient)."""

    type: ClassVar[Literal["mail_posted"]] = "mail_posted"
    mail: Mail


class MailRead(_TeamEvent, tag="mail_read"):
    """A message reached the recipient's transcript (its model reads it from the next
    request on). Exactly one per message delivered to a teammate."""

    type: ClassVar[Literal["mail_read"]] = "mail_read"
    mail: Mail


class TeammateState(_TeamEvent, tag="teammate_state"):
    """A teammate started working on its mail (``working``) or has none left (``idle``)."""

    type: ClassVar[Literal["teammate_state"]] = "teammate_state"
    state: TeammateStateName


class TeammateFailed(_TeamEvent, tag="teammate_failed"):
    """A teammate's run did not end normally (a model or tool failure, a limit, or an
    exception from the agent). ``mail_ids`` are the messages that run was given; the
    team goes on, and (unless turned off) each of their senders is told in a message from
    ``team``."""

    type: ClassVar[Literal["teammate_failed"]] = "teammate_failed"
    error: str
    mail_ids: list[int] = msgspec.field(default_factory=list)


TeamEvent: TypeAlias = TeammateEvent | MailPosted | MailRead | TeammateState | TeammateFailed
"""What :meth:`~ketch.teams.Team.subscribe` listeners receive (tagged on ``type``)."""
