"""Result objects returned by `LLM.generate` and streamed by the async engine."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class RequestMetrics:
    """Seconds, measured with time.monotonic(). `cached_prompt_tokens` came from the prefix cache."""

    arrival_time: float
    queue_time: float | None = None  # arrival -> first scheduled
    ttft: float | None = None  # arrival -> first generated token
    tpot: float | None = None  # mean time per output token after the first
    e2e_latency: float | None = None
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    generated_tokens: int = 0
    preemptions: int = 0


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    finish_reason: str | None = None  # "stop" | "length" | "abort"
    stop_reason: int | str | None = None
    logprobs: list[dict[int, float]] | None = None
    delta_text: str = ""  # text new since the previous streamed output
    delta_token_ids: list[int] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool
    metrics: RequestMetrics
    # next-token logprobs of `SamplingParams.candidate_token_ids` after the prompt
    candidate_logprobs: dict[int, float] | None = None
    # `SamplingParams.prompt_logprobs`: per prompt position {token: logprob}, None at position 0
    prompt_logprobs: list[dict[int, float] | None] | None = None
    # `SamplingParams.hidden_state`: the last prompt token's hidden state at `hidden_state_layer` (torch, float32, CPU)
    hidden_state: Any = None

    @property
    def text(self) -> str:
        return self.outputs[0].text

    @property
    def token_ids(self) -> list[int]:
        return self.outputs[0].token_ids

    @property
    def finish_reason(self) -> str | None:
        return self.outputs[0].finish_reason
