"""`generator.backend: engine`: one in-process engine for the whole process.

Everything goes through a single `AsyncEngine`, so requests from the planner, the reranker, the
answer step and concurrent HTTP clients are batched together by its scheduler and share one
prefix cache. Sync callers reach it through the bridge loop of `base.Generator`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from .base import GENERATORS, Generator, Spans
from .config import GeneratorConfig


@GENERATORS.register("engine")
class EngineGenerator(Generator):
    backend = "engine"
    supports_logits_processors = True
    supports_prefix_cache = True

    def __init__(self, cfg: GeneratorConfig):
        from inference.async_engine import AsyncEngine

        args = cfg.engine.model_dump(exclude={"model"})
        self.engine = AsyncEngine(cfg.engine.model, **args)
        self.tokenizer = self.engine.tokenizer
        self.max_model_len: int = self.engine.engine.max_model_len
        self.passage_cache_on: bool = cfg.engine.passage_cache.enabled
        super().__init__("rag-generator")

    @property
    def uses_passage_spans(self) -> bool:
        return self.passage_cache_on

    def astream(self, prompt: str | list[int], params: Any, request_id: str | None = None,
                passage_spans: Spans | None = None, passage_anchor: list[int] | None = None) -> AsyncIterator:
        return self.engine.add_request(prompt, params, request_id=request_id, passage_spans=passage_spans,
                                       passage_anchor=passage_anchor)

    async def agenerate(self, prompt: str | list[int], params: Any, request_id: str | None = None,
                        passage_spans: Spans | None = None, passage_anchor: list[int] | None = None):
        return await self.engine.generate(prompt, params, request_id=request_id, passage_spans=passage_spans,
                                          passage_anchor=passage_anchor)

    def passage_cache_file(self, token_ids: list[int], span: tuple[int, int], anchor: list[int] | None = None
                           ) -> Any:
        """The file the passage at `span` of this prompt is (or would be) cached in under
        `passage_cache.disk_path` (None without one), keyed under `anchor` (default: the prompt's
        tokens before the span): what `rag index --warm-kv` checks to resume."""
        reuse = self.engine.engine.kv_reuse
        store = reuse.store if reuse is not None else None
        if store is None:
            return None
        return store.file_for(token_ids[:span[0]] if anchor is None else anchor, token_ids[span[0]:span[1]])

    @property
    def eos_token_ids(self) -> set[int] | int | None:
        # The engine's set (chat models end turns with more than one token), else the tokenizer's.
        return self.engine.engine.eos_token_ids or self.tokenizer.eos_token_id

    @property
    def num_layers(self) -> int:
        """Decoder layers of the loaded model (`rag eval probe` picks the layer it reads)."""
        return len(self.engine.engine.model.layers)

    async def anext_token_logprobs(self, prompts: list, candidate_token_ids: list[int]) -> list[dict[int, float]]:
        """log P(candidate | prompt) per prompt, all in one batch (the LLM reranker's P("yes"))."""
        from inference.sampling_params import SamplingParams

        sp = SamplingParams(max_tokens=1, temperature=0.0, candidate_token_ids=candidate_token_ids)
        return [o.candidate_logprobs for o in await self.agenerate_many(prompts, sp)]

    async def aprompt_logprobs(self, prompts: list) -> list[list[float]]:
        """log P(token | prefix) of every prompt token after the first (the engine compressor's
        surprisal), all prompts in one batch on the shared engine."""
        from inference.prompt_logprobs import PROMPT_SCORING, prompt_token_logprobs

        return prompt_token_logprobs(await self.agenerate_many(prompts, PROMPT_SCORING))

    def stats(self) -> dict:
        return self.engine.stats()

    def cached_prefixes(self, top: int = 10) -> list:
        return self.engine.cached_prefixes(top)

    def save_prefix_cache(self, path: str) -> int:
        return self.engine.save_prefix_cache(path)

    def load_prefix_cache(self, path: str) -> int:
        return self.engine.load_prefix_cache(path)

    def clear_prefix_cache(self) -> int:
        return self.engine.clear_prefix_cache()

    def _shutdown(self) -> None:
        self.engine.shutdown()
