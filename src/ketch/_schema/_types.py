"""Facts about a user's type that the schema builder, the structured-output parser and
the loop's typed output all need, kept in one place (imports nothing of ketch and
nothing heavy: pydantic is only looked for when the user has imported it)."""

from __future__ import annotations

import re
import sys
from typing import Any

_NAME_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")


def is_pydantic_model(tp: Any) -> bool:
    """Whether ``tp`` is a pydantic model class (False when pydantic was never imported)."""
    module = sys.modules.get("pydantic")
    base = getattr(module, "BaseModel", None) if module is not None else None
    return isinstance(base, type) and isinstance(tp, type) and issubclass(tp, base)


def output_name(tp: Any) -> str:
    """The name a type's schema is sent under (a response format's or the output
    tool's): its ``__name__`` with characters other than letters, digits, ``_`` and ``-``
    replaced, at most 64 of them, else ``output``."""
    name = getattr(tp, "__name__", None)
    return (_NAME_UNSAFE.sub("_", name)[:64] if isinstance(name, str) else "") or "output"
