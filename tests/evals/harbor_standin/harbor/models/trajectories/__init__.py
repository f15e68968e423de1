"""Stand-in for src/harbor/models/trajectories/*.py, the ATIF models (see the package doc):
the same fields, unknown fields forbidden, and the rules the real models check (step ids
from 1, fields only agent steps may have, observations naming their step's calls)."""

from __future__ import annotations

from typing import Any
from typing import Literal

from pydantic import BaseModel
from pydantic import ConfigDict
from pydantic import Field
from pydantic import model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ImageSource(_Strict):
    media_type: Literal["image/jpeg", "image/png", "image/gif", "image/webp"]
    path: str


class ContentPart(_Strict):
    type: Literal["text", "image"]
    text: str | None = None
    source: ImageSource | None = None


class ToolCall(_Strict):
    tool_call_id: str
    function_name: str
    arguments: dict[str, Any]
    extra: dict[str, Any] | None = None


class SubagentTrajectoryRef(_Strict):
    trajectory_id: str | None = None
    session_id: str | None = None
    trajectory_path: str | None = None
    extra: dict[str, Any] | None = None


class ObservationResult(_Strict):
    source_call_id: str | None = None
    content: str | list[ContentPart] | None = None
    subagent_trajectory_ref: list[SubagentTrajectoryRef] | None = None
    extra: dict[str, Any] | None = None


class Observation(_Strict):
    results: list[ObservationResult]


class Metrics(_Strict):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    cost_usd: float | None = None
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    extra: dict[str, Any] | None = None


class FinalMetrics(_Strict):
    total_prompt_tokens: int | None = None
    total_completion_tokens: int | None = None
    total_cached_tokens: int | None = None
    total_cost_usd: float | None = None
    total_steps: int | None = Field(default=None, ge=0)
    extra: dict[str, Any] | None = None


class Agent(_Strict):
    name: str
    version: str
    model_name: str | None = None
    tool_definitions: list[dict[str, Any]] | None = None
    extra: dict[str, Any] | None = None


class Step(_Strict):
    step_id: int = Field(ge=1)
    timestamp: str | None = None
    source: Literal["system", "user", "agent"]
    model_name: str | None = None
    reasoning_effort: str | float | None = None
    message: str | list[ContentPart]
    reasoning_content: str | None = None
    tool_calls: list[ToolCall] | None = None
    observation: Observation | None = None
    metrics: Metrics | None = None
    is_copied_context: bool | None = None
    llm_call_count: int | None = Field(default=None, ge=0)
    extra: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _agent_only(self) -> Step:
        if self.source != "agent":
            for name in ("model_name", "reasoning_effort", "reasoning_content", "tool_calls", "metrics"):
                if getattr(self, name) is not None:
                    raise ValueError(f"Field '{name}' is only applicable when source is 'agent'")
        if self.llm_call_count == 0 and self.source == "agent":
            for name in ("metrics", "reasoning_content"):
                if getattr(self, name) is not None:
                    raise ValueError(f"Field '{name}' must be absent when llm_call_count is 0")
        return self


class Trajectory(_Strict):
    schema_version: Literal[
        "ATIF-v1.0", "ATIF-v1.1", "ATIF-v1.2", "ATIF-v1.3", "ATIF-v1.4", "ATIF-v1.5", "ATIF-v1.6", "ATIF-v1.7"
    ] = "ATIF-v1.7"
    session_id: str | None = None
    trajectory_id: str | None = None
    agent: Agent
    steps: list[Step] = Field(min_length=1)
    notes: str | None = None
    final_metrics: FinalMetrics | None = None
    continued_trajectory_ref: str | None = None
    extra: dict[str, Any] | None = None
    subagent_trajectories: list[Trajectory] | None = None

    @model_validator(mode="after")
    def _steps(self) -> Trajectory:
        for i, step in enumerate(self.steps):
            if step.step_id != i + 1:
                raise ValueError(
                    f"steps[{i}].step_id: expected {i + 1} (sequential from 1), got {step.step_id}"
                )
            calls = {c.tool_call_id for c in step.tool_calls or ()}
            for result in step.observation.results if step.observation else ():
                if result.source_call_id is not None and result.source_call_id not in calls:
                    raise ValueError(
                        f"source_call_id {result.source_call_id!r} is not in step {step.step_id}'s tool_calls"
                    )
        return self
