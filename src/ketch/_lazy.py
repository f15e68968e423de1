"""Lazy names for package faces (PEP 562): a name imports its module on first use.

It imports nothing of ketch, so any layer may use it. A face keeps its ``TYPE_CHECKING``
imports of the lazy names, for type checkers and editors, and sets::

    __getattr__ = lazy_getattr(__name__, {"get_model": "._resolve"}, globals())
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from typing import Any

if TYPE_CHECKING:
    from collections.abc import Callable
    from collections.abc import Mapping


def lazy_getattr(package: str, names: Mapping[str, str], namespace: dict[str, Any]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package`` that imports ``names[name]`` on first use.

    ``names`` maps each lazy name to its module, relative to ``package`` (``"._resolve"``).
    The value is stored in ``namespace`` (the package's ``globals()``), so a second use
    does not come back here. Any other name raises ``AttributeError`` as a module does.
    """

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        from importlib import import_module

        value = getattr(import_module(module, package), name)
        namespace[name] = value
        return value

    return __getattr__
