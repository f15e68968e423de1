"""ketch's network proxy for a sandbox limited to named hosts (:class:`NetworkPolicy`).

The proxy listens on a Unix socket that is bound into the sandbox; the sandbox has no
network of its own. Inside, a small forwarder (:data:`FORWARDER`, standard library only,
started before the command in the sandbox's network namespace) listens on
``127.0.0.1:PORT`` and passes each connection to the socket; the command finds it through
``HTTP_PROXY`` and the other proxy variables. The proxy serves HTTP ``CONNECT`` (a tunnel,
bytes passed untouched) and plain-HTTP requests in absolute form, decides on the host
name the client asked for, resolves it here and connects to an address it checked. A
refused request gets ``403`` with one line the command prints (and :meth:`NetworkProxy.refused`
keeps for the model's note). Anything it cannot parse is refused (``400``).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import socket
import ssl
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Mapping
from typing import Any

from ._network import NetworkPolicy
from ._network import is_ip_literal
from ._network import normalize_host
from ._tls import TlsBroker

_HEAD_LIMIT = 65536
_CONNECT_TIMEOUT = 30.0
_ASK_TIMEOUT = 120.0  # how long an unlisted host waits for the user's answer
_CHUNK = 65536
_KEPT_REFUSALS = 20  # lines kept for the model's note, each once
_HOP_HEADERS = frozenset(
    {"connection", "keep-alive", "proxy-connection", "proxy-authorization", "proxy-authenticate", "te", "upgrade"}
)

FORWARDER = r'''
import os, socket, sys, threading
path, argv = sys.argv[1], sys.argv[2:]
listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
listener.bind(("127.0.0.1", 0))
listener.listen(128)
port = listener.getsockname()[1]
if os.fork():
    listener.close()
    url = "http://127.0.0.1:%d" % port
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "all_proxy"):
        os.environ[name] = url
    os.environ["no_proxy"] = os.environ["NO_PROXY"] = ""
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        sys.stderr.write("%s: %s\n" % (argv[0], exc.strerror))
        os._exit(127)
null = os.open("/dev/null", os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(null, fd)
def pump(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    for s, how in ((dst, socket.SHUT_WR), (src, socket.SHUT_RD)):
        try:
            s.shutdown(how)
        except OSError:
            pass
def serve(client):
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(path)
    except OSError:
        client.close()
        return
    other = threading.Thread(target=pump, args=(upstream, client), daemon=True)
    other.start()
    pump(client, upstream)
    other.join()
    client.close()
    upstream.close()
while True:
    client, _ = listener.accept()
    threading.Thread(target=serve, args=(client,), daemon=True).start()
'''
"""The forwarder run inside the sandbox: ``python3 -I -S -c FORWARDER SOCKET ARGV...``.
It binds its port, then forks: the parent sets the proxy variables and becomes the command
(so the port listens before the command starts), the child forwards connections until the
sandbox's process namespace ends with the command."""


def _response(status: str, line: str) -> bytes:
    body = (line + "\n").encode("utf-8", "replace")
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode() + body


def _private(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return (
        ip.is_loopback or ip.is_link_local or ip.is_private or ip.is_unspecified or ip.is_multicast or ip.is_reserved
    )


def _split_authority(authority: str, default_port: int) -> tuple[str, int] | None:
    """``host`` and port of ``host[:port]`` or ``[v6][:port]``; None when malformed."""
    text = authority.strip()
    if not text or any(c in text for c in "@/\\ \t?#"):
        return None
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            return None
        host, rest = text[: end + 1], text[end + 1 :]
        if rest and not rest.startswith(":"):
            return None
        number = rest[1:]
    elif text.count(":") > 1:
        return None  # an IPv6 literal without brackets
    else:
        host, _, number = text.partition(":")
    if number:
        if not number.isdigit() or not 1 <= int(number) <= 65535:
            return None
        port = int(number)
    else:
        port = default_port
    return (host, port) if host else None


class NetworkProxy:
    """One command's proxy: listens on ``path`` (a Unix socket made here, bound into the
    sandbox) under ``policy``; credentials are read from ``environ`` (default: this
    process's environment) at each request. ``resolve`` is ``getaddrinfo`` (default: the
    event loop's, called as ``resolve(host, port, type=..., flags=...)``). With ``tls``, a
    ``CONNECT`` to a host with a credential is ended here (:class:`TlsBroker`) so the
    credential can be added; other ``CONNECT`` tunnels pass bytes untouched. :meth:`start`
    serves, :meth:`close` stops."""

    def __init__(
        self,
        path: str,
        policy: NetworkPolicy,
        environ: Mapping[str, str] | None = None,
        resolve: Callable[..., Awaitable[list[Any]]] | None = None,
        tls: TlsBroker | None = None,
    ) -> None:
        self.path = path
        self.policy = policy
        self.environ = os.environ if environ is None else environ
        self.resolve = resolve
        self.tls = tls
        self.refusals: list[str] = []
        self.granted: set[tuple[str, int]] = set()  # unlisted hosts the user allowed (``policy.ask``)
        self._socket: socket.socket | None = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._socket.bind(path)
            os.chmod(path, 0o666)  # the command may run as another user; its folder is root's alone
            self._socket.listen(128)
        except BaseException:
            self._socket.close()
            raise
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        """Serve connections (those made before wait in the socket's queue)."""
        if self._socket is None or self._server is not None:
            return
        self._server = await asyncio.start_unix_server(self._serve, sock=self._socket, limit=_HEAD_LIMIT)

    def refused(self) -> list[str]:
        """The refusal lines given so far, each once."""
        return list(dict.fromkeys(self.refusals))

    def close(self) -> None:
        """Stop serving, end open connections and remove the socket."""
        if self._server is not None:
            self._server.close()
            self._server = None
        elif self._socket is not None:
            self._socket.close()
        self._socket = None
        for writer in list(self._writers):
            writer.close()
        self._writers.clear()
        with contextlib.suppress(OSError):
            os.unlink(self.path)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        upstream: asyncio.StreamWriter | None = None
        try:
            upstream = await self._handle(reader, writer)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass
        finally:
            for w in (writer, upstream):
                if w is not None:
                    w.close()
            self._writers.discard(writer)

    async def _refuse(self, writer: asyncio.StreamWriter, status: str, line: str) -> None:
        if len(self.refusals) < _KEPT_REFUSALS and line not in self.refusals:
            self.refusals.append(line)
        writer.write(_response(status, line))
        with contextlib.suppress(OSError):
            await writer.drain()

    async def _read_head(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> tuple[str, str, str, list[tuple[str, str]]] | None:
        """A request's method, target, version and headers; None (refused) when it cannot be parsed."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            await self._refuse(writer, "431 Request Header Fields Too Large", "ketch sandbox: request headers too large")
            return None
        except asyncio.IncompleteReadError:
            return None
        lines = head.decode("iso-8859-1").split("\r\n")[:-2]
        parts = lines[0].split(" ") if lines else []
        bare = any(c in line for line in lines for c in "\r\n\0")  # a bare CR or LF would split a line upstream
        if bare or len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            await self._refuse(writer, "400 Bad Request", "ketch sandbox: the proxy could not parse the request")
            return None
        headers: list[tuple[str, str]] = []
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep or not name or name != name.strip() or any(c in name for c in " \t"):
                await self._refuse(writer, "400 Bad Request", "ketch sandbox: the proxy could not parse the request")
                return None
            headers.append((name, value.strip()))
        return parts[0], parts[1], parts[2], headers

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> asyncio.StreamWriter | None:
        request = await self._read_head(reader, writer)
        if request is None:
            return None
        method, target, version, headers = request
        if method == "CONNECT":
            where = _split_authority(target, 443)
            path = ""
        elif target.lower().startswith("http://"):
            rest = target[len("http://") :]
            slash = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
            where = _split_authority(rest[:slash], 80)
            path = rest[slash:] or "/"
            if path.startswith("?"):
                path = "/" + path
        else:
            line = f"ketch sandbox: the proxy takes CONNECT and http:// requests, not {target[:80]!r}"
            await self._refuse(writer, "400 Bad Request", line)
            return None
        if where is None:
            await self._refuse(writer, "400 Bad Request", f"ketch sandbox: {target[:80]!r} names no valid host")
            return None
        host, port = where
        name = normalize_host(host)
        refusal = self.policy.refusal(name, port)
        if refusal is not None and not await self._granted(name, port):
            await self._refuse(writer, "403 Forbidden", refusal)
            return None
        credential = self.policy.credential(name)
        secret = credential.render(self.environ) if credential is not None else None
        if credential is not None and secret is None:
            await self._refuse(
                writer,
                "403 Forbidden",
                f"ketch sandbox: the credential for {name!r} is not available ({credential.env} is not set)",
            )
            return None
        if method == "CONNECT" and credential is not None and self.tls is not None:
            return await self._intercept(reader, writer, name, port)
        upstream = await self._connect(writer, name, port)
        if upstream is None:
            return None
        up_reader, up_writer = upstream
        if method == "CONNECT":
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()
        else:
            await self._send_head(up_writer, method, path, version, headers, name)
        await _relay(reader, writer, up_reader, up_writer)
        return up_writer

    async def _granted(self, name: str, port: int) -> bool:
        """Whether the user allows an unlisted host (asked through ``policy.ask``, once per
        host and port for this proxy); a denied host, no ``ask``, an error or no answer
        within :data:`_ASK_TIMEOUT`: no (fail closed)."""
        ask = self.policy.ask
        if ask is None or self.policy.denied(name, port):
            return False
        if (name, port) in self.granted:
            return True
        try:
            async with asyncio.timeout(_ASK_TIMEOUT):
                answer = await ask(name, port)
        except Exception:
            return False
        if answer not in ("once", "always"):
            return False
        self.granted.add((name, port))
        return True

    async def _send_head(
        self, up_writer: asyncio.StreamWriter, method: str, path: str, version: str, headers: list[tuple[str, str]], name: str
    ) -> None:
        """The request's head in origin form, without hop-by-hop headers, with the host's credential."""
        credential = self.policy.credential(name)
        secret = credential.render(self.environ) if credential is not None else None
        out = [f"{method} {path} {version}"]
        drop = set(_HOP_HEADERS)
        if credential is not None:
            drop.add(credential.header.lower())
        out += [f"{n}: {v}" for n, v in headers if n.lower() not in drop]
        if credential is not None and secret is not None:
            out.append(f"{credential.header}: {secret}")
        out.append("Connection: close")
        up_writer.write(("\r\n".join(out) + "\r\n\r\n").encode("iso-8859-1", "replace"))
        await up_writer.drain()

    async def _intercept(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, name: str, port: int
    ) -> asyncio.StreamWriter | None:
        """A CONNECT to a credentialed host: TLS ended here with a certificate of the run's
        CA, the request read, the credential added, sent on over TLS checked against the
        real host's certificate."""
        assert self.tls is not None
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await writer.drain()
        try:
            await writer.start_tls(self.tls.server_context(name))
        except (OSError, ssl.SSLError):
            return None  # the client did not trust the run's CA (or spoke no TLS)
        request = await self._read_head(reader, writer)
        if request is None:
            return None
        method, target, version, headers = request
        if not target.startswith("/"):
            await self._refuse(writer, "400 Bad Request", f"ketch sandbox: {target[:80]!r} is not a path")
            return None
        sock = await self._connect_socket(writer, name, port)
        if sock is None:
            return None
        try:
            up_reader, up_writer = await asyncio.open_connection(
                sock=sock, ssl=self.tls.client_context(), server_hostname=name, limit=_HEAD_LIMIT
            )
        except (OSError, ssl.SSLError) as exc:
            sock.close()
            why = getattr(exc, "reason", None) or exc.strerror or str(exc)
            await self._refuse(writer, "502 Bad Gateway", f"ketch sandbox: TLS to {name}:{port} failed: {why}")
            return None
        await self._send_head(up_writer, method, target, version, headers, name)
        await _relay(reader, writer, up_reader, up_writer)
        return up_writer

    async def _connect(
        self, writer: asyncio.StreamWriter, name: str, port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        """Streams to ``name``'s first address the policy allows (None: refused)."""
        sock = await self._connect_socket(writer, name, port)
        return None if sock is None else await asyncio.open_connection(sock=sock, limit=_HEAD_LIMIT)

    async def _connect_socket(self, writer: asyncio.StreamWriter, name: str, port: int) -> socket.socket | None:
        """Resolve ``name`` here and connect to its first address the policy allows."""
        loop = asyncio.get_running_loop()
        literal = is_ip_literal(name)
        try:
            infos = await (self.resolve or loop.getaddrinfo)(
                name, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST if literal else 0
            )
        except (OSError, UnicodeError):
            await self._refuse(writer, "502 Bad Gateway", f"ketch sandbox: host {name!r} could not be resolved")
            return None
        named = self.policy.named(name) or (name, port) in self.granted
        candidates = [info for info in infos if named or not _private(str(info[4][0]))]
        if not candidates:
            shown = str(infos[0][4][0]) if infos else "?"
            await self._refuse(
                writer,
                "403 Forbidden",
                f"ketch sandbox: host {name!r} resolves to a private address ({shown}); "
                "name it exactly in [sandbox.network] allow to reach it",
            )
            return None
        last: OSError | None = None
        for family, kind, proto, _, address in candidates:
            sock = socket.socket(family, kind, proto)
            sock.setblocking(False)
            try:
                async with asyncio.timeout(_CONNECT_TIMEOUT):
                    await loop.sock_connect(sock, address)
            except (OSError, TimeoutError) as exc:
                sock.close()
                last = exc if isinstance(exc, OSError) else OSError("timed out")
                continue
            return sock
        why = last.strerror if last is not None and last.strerror else str(last)
        await self._refuse(writer, "502 Bad Gateway", f"ketch sandbox: could not connect to {name}:{port}: {why}")
        return None


async def _relay(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    up_reader: asyncio.StreamReader,
    up_writer: asyncio.StreamWriter,
) -> None:
    """Copy both ways until both sides have finished."""

    async def copy(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while data := await src.read(_CHUNK):
                dst.write(data)
                await dst.drain()
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                if dst.can_write_eof():
                    dst.write_eof()

    await asyncio.gather(copy(reader, up_writer), copy(up_reader, writer))
