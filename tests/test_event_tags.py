"""An event's tag is written twice by necessity: the class keyword ``tag=`` is what msgspec
encodes and decodes, the ``type: ClassVar[Literal[...]]`` is what type checkers narrow a
union on (``if event.type == "message_end": event.message``). Deriving one from the other
needs a custom metaclass, which makes building a struct about 2.5x slower on the streaming
path, so this test keeps the two equal instead."""

from __future__ import annotations

import typing

import msgspec
import pytest

import ketch.llm._stream as stream_events
import ketch.loop._events as loop_events
import ketch.subagents._events as subagent_events
import ketch.teams._events as team_events


def _tagged() -> list[type[msgspec.Struct]]:
    found = []
    for module in (stream_events, loop_events, subagent_events, team_events):
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, msgspec.Struct) and "type" in value.__dict__:
                found.append(value)
    return found


def test_every_event_module_has_tagged_classes() -> None:
    assert len(_tagged()) >= 30


@pytest.mark.parametrize("cls", _tagged(), ids=lambda c: c.__name__)
def test_the_classvar_is_the_wire_tag(cls: type[msgspec.Struct]) -> None:
    hints = typing.get_type_hints(cls, vars(__import__(cls.__module__, fromlist=["x"])), include_extras=True)
    literal = typing.get_args(typing.get_args(hints["type"])[0])
    assert (cls.__struct_config__.tag, literal) == (cls.__dict__["type"], (cls.__dict__["type"],))
