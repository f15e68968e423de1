"""OS sandboxes for shell commands, and the environment tools get.

A :class:`Sandbox` runs a command under a :class:`SandboxPolicy`: what the command may
write (the workspace, or nothing at all in plan mode), whether it has a network, which
workspace paths stay read-only (``.git/config``, ``.git/hooks``, ``.ketch`` by default).
The kernel enforces the bounds, so whatever a command hides in expansions, substitutions
or variables it cannot write outside them or read the agent's environment.

On Linux :func:`default_sandbox` gives a :class:`BubblewrapSandbox` when ``bwrap`` is
installed and can create its namespaces (probed once, on first use); elsewhere, or when
it cannot, it gives None and :func:`sandbox_unavailable_reason` says why. Other
implementations (macOS Seatbelt, a container runner) only need the three methods of
:class:`Sandbox`.

:class:`SandboxLimits` bounds each command's processes, memory, CPU time and file size.

:class:`NetworkPolicy` (``SandboxPolicy(network=NetworkPolicy(allow=[...]))``) limits a
command's network to named hosts, reached through a proxy ketch runs outside the sandbox,
which adds the configured :class:`Credential` headers.

:func:`tool_environment` builds the environment of tools and shell hooks from an
allow-list, never from the whole parent environment, and never passes secrets.
"""

from __future__ import annotations

import shutil
import sys
import threading

from ._bubblewrap import BubblewrapSandbox
from ._env import BASE_ALLOW
from ._env import SECRET_PATTERNS
from ._env import has_url_password
from ._env import is_secret_name
from ._env import tool_environment
from ._hints import denial_hint
from ._hints import protected_names
from ._limits import SandboxLimits
from ._limits import merge_limits
from ._network import Credential
from ._network import NetworkPolicy
from ._network import NetworkPolicyError
from ._policy import DEFAULT_PROTECTED
from ._policy import Sandbox
from ._policy import SandboxPolicy
from ._policy import command_paths
from ._policy import expand_protected
from ._policy import protected_path

__all__ = [
    "BASE_ALLOW",
    "DEFAULT_PROTECTED",
    "SECRET_PATTERNS",
    "BubblewrapSandbox",
    "Credential",
    "NetworkPolicy",
    "NetworkPolicyError",
    "Sandbox",
    "SandboxLimits",
    "SandboxPolicy",
    "command_paths",
    "default_sandbox",
    "denial_hint",
    "expand_protected",
    "has_url_password",
    "is_secret_name",
    "merge_limits",
    "protected_names",
    "protected_path",
    "sandbox_unavailable_reason",
    "tool_environment",
]

_lock = threading.Lock()
_probed: tuple[Sandbox | None, str | None] | None = None


def _probe() -> tuple[Sandbox | None, str | None]:
    if not sys.platform.startswith("linux"):
        return None, f"no sandbox is available on {sys.platform} yet"
    path = shutil.which("bwrap")
    if path is None:
        return None, "bubblewrap (bwrap) is not installed; install the 'bubblewrap' package"
    sandbox = BubblewrapSandbox(path)
    reason = sandbox.unavailable_reason()
    return (None, reason) if reason is not None else (sandbox, None)


def default_sandbox() -> Sandbox | None:
    """The sandbox for this machine, or None when there is none that works.

    On Linux, a :class:`BubblewrapSandbox` when ``bwrap`` is installed and can create
    its namespaces. The probe runs once per process (on the first call, not at import).
    """
    global _probed
    with _lock:
        if _probed is None:
            _probed = _probe()
        return _probed[0]


def sandbox_unavailable_reason() -> str | None:
    """Why :func:`default_sandbox` gives None (one line), or None when it gives a sandbox."""
    default_sandbox()
    assert _probed is not None
    return _probed[1]
