"""The sandbox's network by host name: which hosts a command may reach through ketch's proxy,
and the credentials the proxy adds for some of them."""

from __future__ import annotations

import copy
import ipaddress
import re
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field

_LABEL = re.compile(r"^(?!-)[a-z0-9_-]{1,63}(?<!-)$")
_VARIABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HEADER = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_FORBIDDEN_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection", "proxy-authorization"})


class NetworkPolicyError(ValueError):
    """A network setting is invalid; the message names the bad value and what is allowed."""


@dataclass(frozen=True, slots=True)
class HostPattern:
    """One entry of an allow or deny list: an exact host (``pypi.org``, an IP address),
    or ``*.suffix`` for every name below ``suffix`` (not ``suffix`` itself), with an
    optional ``:port`` (every port when absent)."""

    host: str
    wildcard: bool = False
    port: int | None = None

    def __str__(self) -> str:
        name = f"*.{self.host}" if self.wildcard else (f"[{self.host}]" if ":" in self.host else self.host)
        return name if self.port is None else f"{name}:{self.port}"

    def matches(self, host: str, port: int) -> bool:
        """Whether ``host`` (normalized: :func:`normalize_host`) on ``port`` is this entry."""
        if self.port is not None and self.port != port:
            return False
        if self.wildcard:
            return host.endswith("." + self.host)
        return host == self.host


def normalize_host(host: str) -> str:
    """``host`` as entries are compared: lower case, no trailing dot, an IPv6 literal without brackets."""
    text = host.strip().lower()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    return text.removesuffix(".")


def is_ip_literal(host: str) -> bool:
    """Whether ``host`` (normalized) is an IPv4 or IPv6 address, or a number a resolver
    takes for one (``2130706433``, ``0x7f.1``)."""
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
        return True
    except ValueError:
        pass
    return bool(host) and all(re.fullmatch(r"0x[0-9a-f]*|[0-9]+", part) for part in host.split("."))


def parse_host_pattern(entry: str, setting: str = "allow") -> HostPattern:
    """One ``allow``/``deny`` entry; a :class:`NetworkPolicyError` naming it when it is not
    a host name, ``*.suffix`` or an IP address, with an optional ``:port`` (1-65535)."""
    if not isinstance(entry, str):
        raise NetworkPolicyError(f"[sandbox.network] {setting}: {entry!r} is not a string; give host names")
    text = entry.strip().lower()
    port: int | None = None
    host = text
    if text.startswith("["):  # [::1] or [::1]:8080
        end = text.find("]")
        rest = text[end + 1 :] if end > 0 else "x"
        if end < 0 or (rest and not re.fullmatch(r":[0-9]{1,5}", rest)):
            raise NetworkPolicyError(_bad(entry, setting))
        host, port = text[1:end], int(rest[1:]) if rest else None
    elif text.count(":") == 1:
        host, _, number = text.partition(":")
        if not re.fullmatch(r"[0-9]{1,5}", number):
            raise NetworkPolicyError(_bad(entry, setting))
        port = int(number)
    if port is not None and not 1 <= port <= 65535:
        raise NetworkPolicyError(f"[sandbox.network] {setting}: port {port} of {entry!r} is not in 1-65535")
    host = host.removesuffix(".")
    wildcard = host.startswith("*.")
    if wildcard:
        host = host[2:]
    if not wildcard:
        try:
            return HostPattern(str(ipaddress.ip_address(host)), False, port)
        except ValueError:
            pass
    labels = host.split(".")
    if not host or len(host) > 253 or not all(_LABEL.match(label) for label in labels) or is_ip_literal(host):
        raise NetworkPolicyError(_bad(entry, setting))
    return HostPattern(host, wildcard, port)


def _bad(entry: str, setting: str) -> str:
    return (
        f"[sandbox.network] {setting}: {entry!r} is not a host; give a name (pypi.org), *.suffix (*.github.com) "
        "or an IP address, with an optional :port"
    )


@dataclass(frozen=True, slots=True)
class Credential:
    """A header the proxy adds to each request to one host: ``header`` set to ``value``,
    in which ``${NAME}`` stands for the variable ``NAME`` of ketch's own environment
    (default ``value``: ``${env}``, the variable's value alone). The variable never reaches
    the sandbox; the command sees neither the header nor the value."""

    header: str
    env: str
    value: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.header, str) or not _HEADER.match(self.header):
            raise NetworkPolicyError(f"[sandbox.network.credentials] header {self.header!r} is not a header name")
        if self.header.lower() in _FORBIDDEN_HEADERS:
            raise NetworkPolicyError(
                f"[sandbox.network.credentials] header {self.header!r} cannot be set; "
                f"give another header than {', '.join(sorted(_FORBIDDEN_HEADERS))}"
            )
        if not isinstance(self.env, str) or not _VARIABLE.match(self.env):
            raise NetworkPolicyError(
                f"[sandbox.network.credentials] env {self.env!r} is not a variable name (letters, digits, _)"
            )
        if not isinstance(self.value, str) or "\r" in self.value or "\n" in self.value:
            raise NetworkPolicyError("[sandbox.network.credentials] value must be one line of text")
        names = _REFERENCE.findall(self.value)
        if self.value and (not names or names != [self.env] * len(names)):
            raise NetworkPolicyError(
                f"[sandbox.network.credentials] value {self.value!r} must hold ${{{self.env}}} "
                f"(the variable named by env) and no other variable"
            )

    def __repr__(self) -> str:
        return f"Credential(header={self.header!r}, env={self.env!r})"

    def render(self, environ: Mapping[str, str]) -> str | None:
        """The header's value from ``environ``; None when the variable is not set or
        its value is not one line."""
        secret = environ.get(self.env)
        if not secret or "\r" in secret or "\n" in secret:
            return None
        return self.value.replace(f"${{{self.env}}}", secret) if self.value else secret


@dataclass(frozen=True, slots=True)
class NetworkPolicy:
    """A sandbox's network limited to named hosts.

    The command has no network of its own (a new network namespace: loopback only); its
    one way out is ketch's proxy, which reaches a host when an ``allow`` entry names it
    and no ``deny`` entry does (deny wins). Entries are exact hosts (``pypi.org``),
    ``*.suffix`` (every name below it) or IP addresses, each with an optional ``:port``.
    The proxy decides on the name the command asked for: an IP address or another name
    that resolves to an allowed host's address is refused unless listed itself. A name
    that resolves to a loopback, link-local or private address is reached only when an
    exact (not wildcard) entry names it. ``credentials`` maps an exact host to the
    :class:`Credential` the proxy adds to its plain-HTTP requests.

    ``ask`` (``async (host, port) -> "once" | "always" | "deny"``), when given, is called
    for a host no entry allows and no ``deny`` entry names: ``"once"`` or ``"always"``
    reaches it (and every later request to it through the same proxy), anything else, an
    error or no answer within two minutes refuses it. Without ``ask`` such a host is refused.

    Strings are accepted for the entries and checked: a :class:`NetworkPolicyError`
    names a bad one.
    """

    allow: tuple[HostPattern, ...] = ()
    deny: tuple[HostPattern, ...] = ()
    credentials: Mapping[str, Credential] = field(default_factory=dict)
    ask: Callable[[str, int], Awaitable[str]] | None = field(default=None, compare=False)

    def __init__(
        self,
        allow: Iterable[str] = (),
        deny: Iterable[str] = (),
        credentials: Mapping[str, Credential | Mapping[str, str]] | None = None,
        ask: Callable[[str, int], Awaitable[str]] | None = None,
    ) -> None:
        if isinstance(allow, str) or isinstance(deny, str):
            raise NetworkPolicyError("[sandbox.network] allow and deny are lists of hosts, not one string")
        allowed = tuple(parse_host_pattern(e, "allow") for e in allow)
        denied = tuple(parse_host_pattern(e, "deny") for e in deny)
        creds: dict[str, Credential] = {}
        for host, given in (credentials or {}).items():
            name = normalize_host(host) if isinstance(host, str) else ""
            try:
                pattern = parse_host_pattern(name, "credentials")
            except NetworkPolicyError:
                pattern = None
            if pattern is None or pattern.wildcard or pattern.port is not None:
                raise NetworkPolicyError(
                    f"[sandbox.network.credentials] {host!r} is not a host name; give one exact host (api.github.com)"
                )
            if isinstance(given, Credential):
                cred = given
            elif isinstance(given, Mapping):
                unknown = sorted(set(given) - {"header", "env", "value"})
                if unknown:
                    raise NetworkPolicyError(
                        f"[sandbox.network.credentials] {host!r}: unknown key {unknown[0]!r}; allowed: header, env, value"
                    )
                if "header" not in given or "env" not in given:
                    raise NetworkPolicyError(f"[sandbox.network.credentials] {host!r} needs header and env")
                cred = Credential(str(given["header"]), str(given["env"]), str(given.get("value", "")))
            else:
                raise NetworkPolicyError(f"[sandbox.network.credentials] {host!r}: give a table of header, env, value")
            creds[pattern.host] = cred
        object.__setattr__(self, "allow", allowed)
        object.__setattr__(self, "deny", denied)
        object.__setattr__(self, "credentials", creds)
        object.__setattr__(self, "ask", ask)

    def __repr__(self) -> str:
        return (
            f"NetworkPolicy(allow={[str(e) for e in self.allow]!r}, deny={[str(e) for e in self.deny]!r}, "
            f"credentials={sorted(self.credentials)!r})"
        )

    def refusal(self, host: str, port: int) -> str | None:
        """None when ``host`` (as the command gave it) on ``port`` may be reached, else the
        one line the command gets instead."""
        name = normalize_host(host)
        for entry in self.deny:
            if entry.matches(name, port):
                return f"ketch sandbox: host {name!r} is denied by [sandbox.network] deny ({entry})"
        if any(entry.matches(name, port) for entry in self.allow):
            return None
        allowed = ", ".join(str(e) for e in self.allow) or "(none)"
        return f"ketch sandbox: host {name!r} is not in [sandbox.network] allow; allowed: {allowed}"

    def with_ask(self, ask: Callable[[str, int], Awaitable[str]] | None) -> NetworkPolicy:
        """This policy with ``ask`` as the question for unlisted hosts."""
        new = copy.copy(self)
        object.__setattr__(new, "ask", ask)
        return new

    def denied(self, host: str, port: int) -> bool:
        """Whether a ``deny`` entry names ``host`` on ``port`` (never asked about)."""
        name = normalize_host(host)
        return any(entry.matches(name, port) for entry in self.deny)

    def named(self, host: str) -> bool:
        """Whether an exact (not wildcard) allow entry names ``host``: only then may it
        lead to a loopback, link-local or private address."""
        name = normalize_host(host)
        return any(not e.wildcard and e.host == name for e in self.allow)

    def credential(self, host: str) -> Credential | None:
        """The credential for ``host``, if one is configured."""
        return self.credentials.get(normalize_host(host))

    def secret_names(self) -> tuple[str, ...]:
        """The variables the credentials read (never passed into the sandbox)."""
        return tuple(dict.fromkeys(c.env for c in self.credentials.values()))
