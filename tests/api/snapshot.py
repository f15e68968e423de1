"""The released API as text: every public name of ketch's faces and its signature.

``python tests/api/snapshot.py --write`` rewrites ``tests/api/public_api.txt`` after a
deliberate API change (record the change in CHANGELOG.md too, with how to upgrade).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
import sys
import typing
from pathlib import Path
from typing import Any

import msgspec

FACES = (
    "ketch",
    "ketch.llm",
    "ketch.loop",
    "ketch.tools",
    "ketch.context",
    "ketch.permissions",
    "ketch.sandbox",
    "ketch.hooks",
    "ketch.mcp",
    "ketch.sessions",
    "ketch.sessions.conformance",
    "ketch.testing",
    "ketch.evals",
    "ketch.client",
    "ketch.mcp",
    "ketch.teams",
    "ketch.tasks",
    "ketch.subagents",
    "ketch.skills",
    "ketch.telemetry",
    "ketch.server",
    "ketch.temporal",
    "ketch.memory",
    "ketch.web",
    "ketch.worktrees",
)
SNAPSHOT = Path(__file__).with_name("public_api.txt")
_ADDRESS = re.compile(r" at 0x[0-9a-f]+")
_SET = re.compile(r"(frozenset\(|)\{('[^{}]*')\}")


def _stable(text: str) -> str:
    """Without object addresses, and with set items sorted (their order follows string
    hashing, which changes from process to process)."""
    text = _ADDRESS.sub("", text)
    return _SET.sub(lambda m: m.group(1) + "{" + ", ".join(sorted(m.group(2).split(", "))) + "}", text)


def _sig(obj: Any) -> str:
    try:
        text = str(inspect.signature(obj))
    except (TypeError, ValueError):
        return "(...)"
    return _stable(text)


def _own(cls: type, public: set[type]) -> dict[str, Any]:
    """The attributes ``cls`` defines or inherits from ketch's private bases (a method
    inherited from a public base is listed under that base)."""
    found: dict[str, Any] = {}
    for klass in cls.__mro__:
        if klass is not cls and (klass in public or not klass.__module__.startswith("ketch")):
            break
        for name, value in vars(klass).items():
            found.setdefault(name, value)
    return found


def _members(cls: type, public: set[type]) -> list[str]:
    lines: list[str] = []
    if isinstance(cls, type) and issubclass(cls, msgspec.Struct):
        for name in cls.__struct_fields__:
            if not name.startswith("_"):
                lines.append(f"  field {name}")
    elif dataclasses.is_dataclass(cls):
        for f in dataclasses.fields(cls):
            if not f.name.startswith("_"):
                lines.append(f"  field {f.name}")
    elif typing.is_typeddict(cls):
        for name, hint in cls.__annotations__.items():
            lines.append(f"  key {name}: {getattr(hint, '__forward_arg__', hint)}")
        return lines
    for name, value in sorted(_own(cls, public).items()):
        if name.startswith("_") and name != "__init__":
            continue
        if isinstance(value, (staticmethod, classmethod)):
            lines.append(f"  {type(value).__name__} {name}{_sig(value.__func__)}")
        elif isinstance(value, property):
            lines.append(f"  property {name}")
        elif inspect.isfunction(value):
            if name == "__init__" and (issubclass(cls, msgspec.Struct) or dataclasses.is_dataclass(cls)):
                continue
            lines.append(f"  def {name}{_sig(value)}")
    return lines


def snapshot() -> str:
    """The whole public API, one line per name (classes with their members)."""
    out: list[str] = []
    public = {
        obj
        for face in FACES
        for obj in (getattr(importlib.import_module(face), name) for name in importlib.import_module(face).__all__)
        if inspect.isclass(obj)
    }
    for face in FACES:
        module = importlib.import_module(face)
        out.append(f"# {face}")
        for name in sorted(module.__all__):
            obj = getattr(module, name)
            if inspect.isclass(obj):
                out.append(f"class {name}{_sig(obj)}")
                out.extend(_members(obj, public))
            elif callable(obj) and (inspect.isfunction(obj) or inspect.isbuiltin(obj)):
                out.append(f"def {name}{_sig(obj)}")
            else:
                out.append(f"{name}: {_stable(repr(obj))[:200]}")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    if "--write" in sys.argv:
        SNAPSHOT.write_text(snapshot())
        print(f"wrote {SNAPSHOT}")
    else:
        sys.stdout.write(snapshot())
