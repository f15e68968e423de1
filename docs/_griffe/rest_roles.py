"""A Griffe extension for the API reference: ketch's docstrings are written with reST
roles (``:class:`Agent```, ``:meth:`~ketch.Agent.prompt```) and ``::`` before literal
blocks; Markdown shows those literally. This turns a role into inline code naming the
object (the last part of the path with ``~``, the title of ``title <target>``) and a
paragraph's closing ``::`` into ``:`` (the indented block after it is code either way).
It changes only the text rendered in the docs, never the docstrings in the source.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?[a-z]+:`(~?)([^`<]+?)(?:\s*<([^>`]+)>)?`")
_LITERAL = re.compile(r"(\S)::$", re.MULTILINE)
_BARE_LITERAL = re.compile(r"^(\s*)::$", re.MULTILINE)


def _role(match: re.Match[str]) -> str:
    tilde, target, explicit = match.group(1), match.group(2).strip(), match.group(3)
    if explicit:  # :meth:`title <target>`
        return f"`{target}`"
    if tilde:
        target = target.rsplit(".", 1)[-1]
    return f"`{target}`"


def markdown(text: str) -> str:
    """``text`` with reST roles and ``::`` markers in Markdown form."""
    text = _ROLE.sub(_role, text)
    text = _LITERAL.sub(r"\1:", text)
    return _BARE_LITERAL.sub(r"\1", text)


class RestRoles(griffe.Extension):
    """Rewrite each loaded object's docstring for Markdown rendering."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown(obj.docstring.value)

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        # the top package itself gets no on_object call
        self.on_object(obj=pkg)
