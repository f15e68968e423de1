"""ketch.server: sessions of ketch agents over HTTP, a Server-Sent-Events stream of their
events, and a web page to watch and steer them (``ketch serve``).

::

    from aiohttp import web
    from ketch import Agent
    from ketch.sessions import JsonlStore
    from ketch.server import create_app

    async def factory(session):
        return Agent("openai:gpt-5-mini", tools=my_tools, session=session)

    app = create_app(factory, store=JsonlStore(), cwd=".", token="a long random string")
    web.run_app(app, host="127.0.0.1", port=8765)

Routes are in :data:`ROUTES` and in the OpenAPI document at ``/openapi.json``. Every
route needs the token (``Authorization: Bearer <token>``; the page gets a cookie from
the URL ``ketch serve`` prints once). One run per session at a time: a prompt while a run
is active, or while the session waits on approvals, is a 409. :func:`proxy_app` is the
model proxy (what :func:`ketch.llm.proxy` talks to), mounted with ``create_app(...,
subapps=[("/proxy", proxy_app(...))])``. :func:`is_loopback_host` says whether a bind
address is this machine's loopback (what ``create_app(..., loopback_only=...)`` wants).
"""

from ._app import ROUTES
from ._app import create_app
from ._app import is_loopback_host
from ._hub import AgentFactory
from ._live import Hosted
from ._openapi import openapi_document
from ._proxy import proxy_app

__all__ = ["ROUTES", "AgentFactory", "Hosted", "create_app", "is_loopback_host", "openapi_document", "proxy_app"]
