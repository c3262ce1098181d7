"""Per-request decoding settings (vLLM-compatible names where they exist)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

# logits_processors: fn(generated_token_ids, logits[vocab]) -> logits
LogitsProcessor = Callable[[list[int], Any], Any]


class SamplingParams(BaseModel):
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    n: int = Field(1, ge=1)
    temperature: float = Field(1.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=0)  # 0 = disabled
    min_p: float = Field(0.0, ge=0.0, le=1.0)
    repetition_penalty: float = Field(1.0, gt=0.0)
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int | None = None
    max_tokens: int = Field(16, ge=1)
    min_tokens: int = Field(0, ge=0)
    stop: list[str] = Field(default_factory=list)
    stop_token_ids: list[int] = Field(default_factory=list)
    ignore_eos: bool = False
    include_stop_str_in_output: bool = False
    logprobs: int | None = Field(None, ge=0)  # top-N logprobs per generated token
    # logprob of every prompt token (plus the top-N alternatives); such a request skips prefix-cache
    # hits, since a cached token has no logits to give
    prompt_logprobs: int | None = Field(None, ge=0)
    # logprobs of these tokens as the next token after the prompt (e.g. P("yes") for a reranker)
    candidate_token_ids: list[int] | None = None
    # With candidate_token_ids and max_tokens 1: the output head computes only the candidates' rows
    # (a yes/no check needs 2-6 of the vocabulary's 151,936 on Qwen2.5), so `candidate_logprobs`
    # are log-probabilities within the candidate set (their differences, e.g. a yes/no log-odds,
    # are the full distribution's) and the token sampled is one of the candidates.
    candidates_only: bool = False
    # the hidden state of the last prompt token, for linear probes on the model's reading of the
    # prompt (e.g. rag's answerability probe); float32 on the CPU. Layer -1: the final normed
    # output; k >= 1: the residual stream after decoder layer k (middle layers often probe better)
    hidden_state: bool = False
    hidden_state_layer: int = Field(-1, ge=-1)
    logits_processors: list[LogitsProcessor] = Field(default_factory=list)
    # Constrained decoding (like llama.cpp's json_schema field): the engine adds the processor.
    json_schema: dict[str, Any] | None = None
    # Grounded extractive decoding: the output is a verbatim span of one of these passages, or
    # exactly `grounded_refusal` (the no-answer exit). The engine adds the processor.
    grounded_passages: list[str] | None = None
    grounded_refusal: str | None = None
    skip_special_tokens: bool = True
    # With `passage_spans` and the passage cache on: whether the passages this request computes are
    # stored for later requests. False: it reads cached passages but leaves no entry of its own, for a
    # prompt that reads another prompt's entries (`passage_anchor`) and computes the rest amid other
    # passages: stored under that key, its K/V would stand in for the other prompt's exact entries
    # (rag's long prompt reading its short-answer gate's passages).
    store_passages: bool = True
    # Context shift (llama.cpp --keep): when the context is full, keep the first N tokens
    # (-1: the whole prompt), drop half of the rest and go on instead of stopping at max_model_len.
    context_shift_keep: int | None = Field(None, ge=-1)

    @model_validator(mode="before")
    @classmethod
    def _stop_as_list(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("stop"), str):
            data = {**data, "stop": [data["stop"]]}
        return data

    @model_validator(mode="after")
    def _candidates_only_needs_candidates(self) -> SamplingParams:
        if self.candidates_only and (not self.candidate_token_ids or self.max_tokens != 1):
            raise ValueError("candidates_only needs candidate_token_ids and max_tokens: 1 (the head computes "
                             "only the candidates' rows, so nothing else could be sampled after them)")
        return self

    @property
    def greedy(self) -> bool:
        return self.temperature < 1e-5 or self.top_k == 1

    @property
    def needs_penalties(self) -> bool:
        return self.repetition_penalty != 1.0 or self.presence_penalty != 0.0 or self.frequency_penalty != 0.0
