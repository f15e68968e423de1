"""Teams: long-lived named agents that work together by sending each other messages.

::

    from ketch import Agent
    from ketch.teams import Team

    async with Team() as team:                      # the code running it is the lead
        team.add("coder", Agent(model, tools=tools), description="writes the code")
        team.add("reviewer", Agent(model), description="reviews every change")
        await team.send("coder", "Add a --verbose flag; ask reviewer to review it.")
        while (mail := await team.receive()) is not None:   # messages sent to "lead"
            print(mail.sender, mail.text)
        print(team["coder"].sent, team["reviewer"].received, team.cost)

Each teammate is an :class:`~ketch.Agent` with a mailbox and the tools
``send_message(to, text)``, ``broadcast(text)`` and ``list_teammates``. A message to an
idle teammate starts a run; a message to a working one reaches its model at the next
turn (steering). Messages are delivered exactly once and in order per sender. Events of
every teammate reach :meth:`Team.subscribe` listeners tagged ``<team>/<teammate>``.
"""

from ._events import Mail
from ._events import MailPosted
from ._events import MailRead
from ._events import TeamEvent
from ._events import TeammateEvent
from ._events import TeammateFailed
from ._events import TeammateState
from ._events import TeammateStateName
from ._team import TEAM_SENDER
from ._team import Team
from ._team import TeamListener
from ._team import Teammate
from ._team import render

__all__ = [
    "TEAM_SENDER",
    "Mail",
    "MailPosted",
    "MailRead",
    "Team",
    "TeamEvent",
    "TeamListener",
    "Teammate",
    "TeammateEvent",
    "TeammateFailed",
    "TeammateState",
    "TeammateStateName",
    "render",
]
