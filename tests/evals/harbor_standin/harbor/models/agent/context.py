"""Stand-in for src/harbor/models/agent/context.py (see the package doc)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


class AgentContext(BaseModel):
    n_input_tokens: int | None = None
    n_cache_tokens: int | None = None
    n_output_tokens: int | None = None
    cost_usd: float | None = None
    rollout_details: list[Any] | None = None
    metadata: dict[str, Any] | None = None
