"""The proxy's TLS for credentialed hosts: a certificate authority made for this ketch process
(its key only in memory), whose certificate only sandboxed commands trust (a CA bundle bound
into the sandbox), and a certificate per host signed by it. Needs ``cryptography``
(the ``cli`` extra)."""

from __future__ import annotations

import contextlib
import datetime
import os
import shutil
import ssl
import tempfile
import threading
from typing import Any

_SYSTEM_BUNDLES = (
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
    "/etc/ssl/ca-bundle.pem",
)


def _system_bundle() -> bytes:
    paths = ssl.get_default_verify_paths()
    for path in (paths.cafile, paths.openssl_cafile, *_SYSTEM_BUNDLES):
        if path and os.path.isfile(path):
            try:
                with open(path, "rb") as f:
                    return f.read()
            except OSError:
                continue
    return b""


class TlsBroker:
    """The CA of this process and the server contexts of the hosts it stands in for.

    ``bundle`` is the path of a file holding the system's CA bundle and this CA's
    certificate (readable by anyone: it holds no key), for the sandbox's
    ``SSL_CERT_FILE`` and the like. :meth:`server_context` gives the TLS context that
    presents ``host``'s certificate; :meth:`client_context` the one that checks the real
    host (the system's trust, or ``SSL_CERT_FILE`` of ketch's environment)."""

    def __init__(self) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        self._x509: Any = x509
        self._hashes: Any = hashes
        self._serialization: Any = serialization
        self._ec: Any = ec
        self._name_oid: Any = NameOID
        now = datetime.datetime.now(datetime.UTC)
        self._key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"ketch sandbox proxy CA (pid {os.getpid()})")])
        self._name = name
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=7))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True, content_commitment=False, key_encipherment=False, data_encipherment=False,
                    key_agreement=False, key_cert_sign=True, crl_sign=True, encipher_only=False, decipher_only=False,
                ),
                critical=True,
            )
            .sign(self._key, hashes.SHA256())
        )
        self.certificate = self._cert.public_bytes(serialization.Encoding.PEM)
        self._folder = tempfile.mkdtemp(prefix="ketch-ca-")
        os.chmod(self._folder, 0o755)  # a command of another user reads the bundle
        self.bundle = os.path.join(self._folder, "bundle.pem")
        with open(self.bundle, "wb") as f:
            system = _system_bundle()
            f.write(system + (b"" if not system or system.endswith(b"\n") else b"\n") + self.certificate)
        os.chmod(self.bundle, 0o644)
        self._contexts: dict[str, ssl.SSLContext] = {}
        self._lock = threading.Lock()
        self._client: ssl.SSLContext | None = None

    def close(self) -> None:
        """Remove the bundle's folder."""
        shutil.rmtree(self._folder, ignore_errors=True)

    def client_context(self) -> ssl.SSLContext:
        """The context that checks the real host's certificate."""
        if self._client is None:
            self._client = ssl.create_default_context()
        return self._client

    def server_context(self, host: str) -> ssl.SSLContext:
        """A TLS server context presenting a certificate for ``host`` signed by this CA."""
        with self._lock:
            context = self._contexts.get(host)
            if context is None:
                context = self._contexts[host] = self._make(host)
            return context

    def _make(self, host: str) -> ssl.SSLContext:
        import ipaddress

        x509, ec, serialization = self._x509, self._ec, self._serialization
        now = datetime.datetime.now(datetime.UTC)
        key = ec.generate_private_key(ec.SECP256R1())
        try:
            alt: Any = x509.IPAddress(ipaddress.ip_address(host))
        except ValueError:
            alt = x509.DNSName(host)
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(self._name_oid.COMMON_NAME, host)]))
            .issuer_name(self._name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=7))
            .add_extension(x509.SubjectAlternativeName([alt]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(self._key, self._hashes.SHA256())
        )
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.set_alpn_protocols(["http/1.1"])
        # ssl loads a key only from a file: one of this user's alone, removed at once
        folder = tempfile.mkdtemp(prefix="ketch-leaf-")
        try:
            path = os.path.join(folder, "leaf.pem")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(
                    key.private_bytes(
                        serialization.Encoding.PEM,
                        serialization.PrivateFormat.PKCS8,
                        serialization.NoEncryption(),
                    )
                )
                f.write(cert.public_bytes(serialization.Encoding.PEM))
            context.load_cert_chain(path)
        finally:
            with contextlib.suppress(OSError):
                shutil.rmtree(folder)
        return context
