"""The model registry: context windows, output limits, prices, thinking support.

:class:`ModelInfo` describes one model. The registry ships data for mainstream models
and accepts :func:`register_model` at run time. Unknown models get
:func:`default_info`: cost 0, a 128k window, no crash.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from .messages import Usage
from .model import ThinkingLevel

__all__ = ["ModelInfo", "Pricing", "default_info"]


class Pricing(msgspec.Struct, kw_only=True, frozen=True):
    """US dollars per million tokens."""

    input: float = 0.0
    output: float = 0.0
    cache_read: float = 0.0
    cache_write: float = 0.0

    def apply(self, usage: Usage) -> None:
        """Recompute ``usage.cost`` from its token counts."""
        c = usage.cost
        c.input = self.input * usage.input / 1e6
        c.output = self.output * usage.output / 1e6
        c.cache_read = self.cache_read * usage.cache_read / 1e6
        c.cache_write = self.cache_write * usage.cache_write / 1e6
        c.total = c.input + c.output + c.cache_read + c.cache_write


class ModelInfo(msgspec.Struct, kw_only=True, frozen=True):
    """What ketch knows about one model.

    ``thinking`` maps each supported level to the provider's value for it (a reasoning
    effort string, or a token budget as an int); levels absent from the map are
    clamped to the nearest supported one. An empty map means no reasoning support.
    ``thinking_style`` says how the value is sent: ``effort`` (OpenAI
    ``reasoning_effort``), ``budget`` (Anthropic/Gemini token budgets) or ``adaptive``
    (Anthropic adaptive thinking with an effort).
    """

    id: str
    provider: str
    api: str
    base_url: str = ""
    name: str = ""
    context_window: int = 128_000
    max_output_tokens: int = 16_384
    input_modalities: tuple[Literal["text", "image"], ...] = ("text",)
    pricing: Pricing = Pricing()
    thinking: dict[ThinkingLevel, str | int] = msgspec.field(default_factory=dict)
    thinking_style: Literal["none", "effort", "budget", "adaptive"] = "none"


def default_info(provider: str, api: str, id: str, base_url: str = "") -> ModelInfo:
    """Info for a model the registry does not know: zero cost, 128k window."""
    return ModelInfo(id=id, provider=provider, api=api, base_url=base_url)
