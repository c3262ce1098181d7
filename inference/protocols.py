"""The generator contract: what the stages around the engine may call on it.

`inference.LLM` (offline, blocking) and `rag.generation.Generator` (the pipeline's async bridge)
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
class PrefixCache(Protocol):
    """The server's /v1/cache routes: list, persist, reload and drop cached KV prefixes. Callers
    check `supports_prefix_cache` first (a remote backend has none and answers 501)."""

    supports_prefix_cache: bool

    def cached_prefixes(self, top: int = 10) -> list: ...

    def save_prefix_cache(self, path: str) -> int: ...

    def load_prefix_cache(self, path: str) -> int: ...

    def clear_prefix_cache(self) -> int: ...


@runtime_checkable
class StreamingGenerator(ChatScorer, PrefixCache, Protocol):
    """The pipeline's need on top: a context length, async token streams, a sync bridge and the
    capability flags it reads instead of asking which backend it has."""

    max_model_len: int
    backend: str  # the `generator.backend` that built it, for error messages
    supports_logits_processors: bool  # grounded spans and forced citation markers need logits

    @property
    def eos_token_ids(self) -> set[int] | int | None: ...

    def astream(self, prompt: str | list[int], params: Any, request_id: str | None = None,
                passage_spans: list[tuple[int, int]] | None = None,
                passage_anchor: list[int] | None = None) -> AsyncIterator: ...

    async def agenerate(self, prompt: str | list[int], params: Any, request_id: str | None = None,
                        passage_spans: list[tuple[int, int]] | None = None,
                        passage_anchor: list[int] | None = None) -> Any: ...

    def locate_passages(self, token_ids: list[int], texts: list[str]) -> list[tuple[int, int]] | None: ...

    def iterate(self, agen: AsyncIterator) -> Iterator: ...

    def close(self) -> None: ...
