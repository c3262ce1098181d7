"""The generator contract: what the stages around the engine may call on it.

`inference.LLM` (offline, blocking) and `rag.generator.Generator` (the pipeline's async bridge)
implement the same scoring/generation methods; the engine compressor, the LLM reranker and the
query planner are typed against these Protocols instead of probing with `hasattr`, so a third
implementation (a remote server, a test double that runs a real model) only has to match them.
They live in `inference/` because it is the lowest package every consumer may import.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class TokenScorer(Protocol):
    """The engine compressor's need: a tokenizer and per-token log-probabilities of prompts."""

    tokenizer: Any

    def prompt_logprobs(self, prompts: Sequence[str] | Sequence[list[int]]) -> list[list[float]]: ...


@runtime_checkable
class ChatScorer(TokenScorer, Protocol):
    """The LLM reranker's and planner's need: chat prompts, next-token scores and generation."""

    def encode_chat(self, messages: list[dict]) -> list[int]: ...

    def next_token_logprobs(self, prompts: Sequence[str] | Sequence[list[int]],
                            candidate_token_ids: list[int]) -> list[dict[int, float]]: ...

    def generate(self, prompts: Any, sampling_params: Any = None) -> list: ...

    def stats(self) -> dict: ...


@runtime_checkable
class StreamingGenerator(ChatScorer, Protocol):
    """The pipeline's need on top: a context length, async token streams and a sync bridge."""

    max_model_len: int

    def astream(self, prompt: str | list[int], params: Any, request_id: str | None = None) -> AsyncIterator: ...

    async def agenerate(self, prompt: str | list[int], params: Any, request_id: str | None = None) -> Any: ...

    def iterate(self, agen: AsyncIterator) -> Iterator: ...

    def close(self) -> None: ...
