"""Web access for agents, off unless given: :class:`WebFetch` adds the ``web_fetch`` tool,
:class:`WebSearch` web search (the provider's hosted search, else the ``web_search`` tool
over a :class:`SearchAPI` such as :class:`HTTPSearchAPI`).

``Agent(model, capabilities=[WebFetch(allowed_hosts=["docs.python.org"])])``: the model
can fetch a page, which it sees as Markdown in a fenced block labelled untrusted. Hosts
are checked on every redirect, internal addresses need naming, the body read is bounded,
binary content is refused, and ``robots.txt`` is obeyed when asked. HTML conversion
needs the ``web`` extra (``pip install 'ketch[web]'``: ``markdownify``).
"""

from ._fetch import WEB_FETCH_INSTRUCTIONS
from ._fetch import WebFetch
from ._fetch import WebFetchTool
from ._fetch import untrusted_block
from ._search import HTTPSearchAPI
from ._search import SearchAPI
from ._search import SearchResult
from ._search import WebSearch
from ._search import WebSearchTool

__all__ = [
    "WEB_FETCH_INSTRUCTIONS",
    "HTTPSearchAPI",
    "SearchAPI",
    "SearchResult",
    "WebFetch",
    "WebFetchTool",
    "WebSearch",
    "WebSearchTool",
    "untrusted_block",
]
