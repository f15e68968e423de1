"""The conformance kit for session stores: run it against your own store.

In a pytest file (with pytest-asyncio)::

    import pytest
    from ketch.sessions.conformance import CHECKS, Check

    @pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.name)
    async def test_my_store(check: Check, tmp_path) -> None:
        await check(lambda: MyStore(tmp_path))

or all at once: ``await check_store(make_store)``. Each check raises AssertionError
naming what was wrong.
"""

from ._kit import CHECKS
from ._kit import Check
from ._kit import StoreFactory
from ._kit import check_store

__all__ = ["CHECKS", "Check", "StoreFactory", "check_store"]
