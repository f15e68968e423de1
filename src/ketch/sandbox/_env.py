"""The environment of tools and shell hooks: an allow-list, never the parent's whole environment."""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterable
from collections.abc import Mapping

BASE_ALLOW: tuple[str, ...] = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TERM",
    "COLORTERM",
    "NO_COLOR",
    "CLICOLOR",
    "COLUMNS",
    "LINES",
    "TZ",
    "TMPDIR",
    "VIRTUAL_ENV",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
)
"""Names (``fnmatch`` patterns) passed to tools by default."""

SECRET_PATTERNS: tuple[str, ...] = (
    "*_KEY",
    "*_KEYS",
    "*_API_KEY",
    "*_APIKEY",
    "*_PAT",
    "*_TOKEN",
    "*_TOKENS",
    "*_SECRET",
    "*SECRET*",
    "*PASSWORD*",
    "*PASSWD*",
    "*_ACCESS_KEY*",
    "*_PRIVATE_KEY*",
    "*_CREDENTIAL",
    "*_CREDENTIALS",
    "AWS_*",
)
"""``fnmatch`` patterns (matched against the upper-cased name) of names never passed on."""

SECRET_EXACT: frozenset[str] = frozenset(
    {"API_KEY", "APIKEY", "KEY", "TOKEN", "PAT", "SECRET", "PASSWORD", "DATABASE_URL", "NETRC",
     "GOOGLE_APPLICATION_CREDENTIALS"}
)
"""Upper-case names never passed on, besides :data:`SECRET_PATTERNS`."""

_URL_WITH_CREDENTIALS = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*://)[^/\s@?#]+@")
_PROXY = re.compile(r"(?i)^(?:[a-z]+_)?proxy$")


def is_secret_name(name: str, secret_names: Iterable[str] = ()) -> bool:
    """Whether a variable called ``name`` must never reach a tool.

    True for names in ``secret_names`` (for example configured providers' ``api_key_env``)
    and conventional secret names (``*_KEY``, ``*_API_KEY``, ``*_PAT``, ``*_TOKEN``,
    ``*_SECRET``, ``*PASSWORD*``, …), compared case-insensitively.
    """
    upper = name.upper()
    if upper in SECRET_EXACT or upper in {n.upper() for n in secret_names}:
        return True
    return any(fnmatch.fnmatchcase(upper, p) for p in SECRET_PATTERNS)


def has_url_password(value: str) -> bool:
    """Whether ``value`` holds a URL with credentials: a password
    (``scheme://user:pass@host``) or a user name alone, which is how a token is often
    passed (``https://TOKEN@host``)."""
    return _URL_WITH_CREDENTIALS.search(value) is not None


def without_url_credentials(value: str) -> str:
    """``value`` with the credentials (``user:pass@``, ``TOKEN@``) of every URL in it removed."""
    return _URL_WITH_CREDENTIALS.sub(r"\1", value)


def tool_environment(
    *,
    allow: Iterable[str] = (),
    secret_names: Iterable[str] = (),
    environ: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment for tools and shell hooks, built from an allow-list.

    Only variables of ``environ`` (default: the process environment) whose names match
    :data:`BASE_ALLOW` or ``allow`` (``fnmatch`` patterns, case-sensitive) are kept. Names
    in ``secret_names`` or conventional secret names (:func:`is_secret_name`) and values
    holding a URL with credentials (:func:`has_url_password`) are never passed, even when
    allowed; but a proxy variable (``HTTPS_PROXY``, ``http_proxy``, ``ALL_PROXY`` …) is
    passed without the credentials of its URL (``http://TOKEN@proxy:3128`` becomes
    ``http://proxy:3128``).
    """
    source = os.environ if environ is None else environ
    patterns = BASE_ALLOW + tuple(allow)
    secrets = tuple(secret_names)
    result: dict[str, str] = {}
    for name, value in source.items():
        if not any(fnmatch.fnmatchcase(name, p) for p in patterns):
            continue
        if is_secret_name(name, secrets):
            continue
        if has_url_password(value):
            if not _PROXY.match(name):
                continue
            value = without_url_credentials(value)
        result[name] = value
    return result
