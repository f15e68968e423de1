"""One-line hints appended to a failed command's output when it looks like a sandbox denial."""

from __future__ import annotations

from ._policy import SandboxPolicy

_NETWORK_ERRORS = (
    "Network is unreachable",
    "Could not resolve host",
    "Temporary failure in name resolution",
    "Name or service not known",
    "No address associated with hostname",
    "Connection refused",
    "Could not connect to server",
)


def denial_hint(output: str, policy: SandboxPolicy) -> str | None:
    """A one-line ``[sandbox: …]`` hint when ``output`` of a failed command looks like a
    sandbox denial under ``policy``, else None."""
    read_only = "Read-only file system" in output
    busy = "Device or resource busy" in output
    if policy.write and (busy or ((read_only or "File exists" in output) and _names_protected(output, policy))):
        return f"[sandbox: {protected_names(policy.protected)} are read-only, even inside the workspace]"
    if read_only:
        if policy.write:
            return "[sandbox: the filesystem outside the workspace is read-only; write in the workspace or /tmp]"
        return "[sandbox: plan mode: the whole filesystem is read-only, the workspace too]"
    if "Invalid cross-device link" in output:
        return "[sandbox: hard links across the workspace boundary are not allowed]"
    if not policy.network and any(e in output for e in _NETWORK_ERRORS):
        return "[sandbox: network access is disabled]"
    if "Operation not permitted" in output:
        return "[sandbox: commands run without privileges (all capabilities dropped)]"
    return None


def _names_protected(output: str, policy: SandboxPolicy) -> bool:
    return any(p.rstrip("/") in output for p in policy.protected)


_MAX_NAMES = 10


def protected_names(protected: tuple[str, ...]) -> str:
    """The protected paths for people and models: the plain ones (the first
    ten), ``…`` for the rest and any with wildcards."""
    plain = [p for p in protected if not any(c in p for c in "*?[")]
    if len(plain) < len(protected) or len(plain) > _MAX_NAMES:
        plain = [*plain[:_MAX_NAMES], "…"]
    return ", ".join(plain) or "no paths"
