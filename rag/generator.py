"""One engine for the whole process, usable from sync code (CLI, eval) and async code (server).

Everything goes through a single `AsyncEngine`, so requests from the planner, the reranker, the
answer step and concurrent HTTP clients are batched together by its scheduler and share one
prefix cache. Sync callers get a private event loop thread as a bridge.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from inference.config import EngineConfig

from .remote_generator import RemoteConfig


class SamplingConfig(BaseModel):
    """Default decoding settings of the answer step (a subset of `inference.SamplingParams`)."""

    model_config = ConfigDict(extra="forbid")
    max_tokens: int = Field(128, ge=1)
    temperature: float = Field(0.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=0)
    min_p: float = Field(0.0, ge=0.0, le=1.0)
    repetition_penalty: float = Field(1.05, gt=0.0)
    seed: int | None = 0
    stop: list[str] = Field(default_factory=list)
    no_repeat_ngram: int = Field(6, ge=0, description=(
        "ban exact repeats of this many generated tokens (stops loops); 0 disables"))

    def params(self, **overrides: Any):
        from inference.sampling_params import SamplingParams
        from inference.structured.no_repeat import NoRepeatNGram

        args = {**self.model_dump(), **overrides}
        n = args.pop("no_repeat_ngram")
        sp = SamplingParams(**args)
        if n >= 2:
            sp.logits_processors = [*sp.logits_processors, NoRepeatNGram(n)]
        return sp


class GeneratorConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    engine: EngineConfig = Field(default_factory=lambda: EngineConfig(max_model_len=2048, kv_cache_memory=2.0))
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    context_shift: bool = Field(True, description=(
        "when a long answer fills the context, keep the system prompt, drop older tokens and go on "
        "(llama.cpp --keep) instead of stopping"))
    backend: Literal["engine", "remote"] = Field("engine", description=(
        "engine: the in-process engine; remote: an OpenAI-compatible server at generator.remote.base_url"))
    remote: RemoteConfig = Field(default_factory=RemoteConfig)


class Generator:
    def __init__(self, cfg: GeneratorConfig):
        from inference.async_engine import AsyncEngine

        args = cfg.engine.model_dump(exclude={"model"})
        self.engine = AsyncEngine(cfg.engine.model, **args)
        self.tokenizer = self.engine.tokenizer
        self.max_model_len: int = self.engine.engine.max_model_len
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="rag-generator", daemon=True)
        self._thread.start()

    # ---- async (server) -------------------------------------------------------------------
    def astream(self, prompt: str | list[int], params: Any, request_id: str | None = None) -> AsyncIterator:
        return self.engine.add_request(prompt, params, request_id=request_id)

    async def agenerate(self, prompt: str | list[int], params: Any, request_id: str | None = None):
        return await self.engine.generate(prompt, params, request_id=request_id)

    # ---- sync (CLI, eval) -----------------------------------------------------------------
    def run(self, coro: Any) -> Any:
        """Run a coroutine that uses this generator (e.g. `answerability.passage_check`) to its result."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def generate(self, prompts: list[str] | list[list[int]], params: Any | list[Any]) -> list:
        plist = params if isinstance(params, list) else [params] * len(prompts)

        async def run():
            return await asyncio.gather(*(self.agenerate(p, sp) for p, sp in zip(prompts, plist)))

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result()

    def stream(self, prompt: str | list[int], params: Any) -> Iterator:
        """Incremental outputs; closing the iterator early aborts the request."""
        return self.iterate(self.astream(prompt, params))

    def iterate(self, agen: AsyncIterator) -> Iterator:
        """Drive an async iterator on the bridge loop and yield its items here, in sync code.
        Closing the returned iterator early closes the async one (aborting its requests)."""
        q: queue.Queue = queue.Queue()
        done = object()

        async def pump():
            try:
                async for item in agen:
                    q.put(item)
            except BaseException as e:  # surfaced to the caller below
                q.put(e)
            finally:
                q.put(done)

        fut = asyncio.run_coroutine_threadsafe(pump(), self._loop)
        try:
            while (item := q.get()) is not done:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            if not fut.done():
                fut.cancel()

    def encode_chat(self, messages: list[dict]) -> list[int]:
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return self.tokenizer.encode(text, add_special_tokens=False)

    def next_token_logprobs(self, prompts: list, candidate_token_ids: list[int]) -> list[dict[int, float]]:
        """log P(candidate | prompt) per prompt, all in one batch (the LLM reranker's P("yes"))."""
        from inference.sampling_params import SamplingParams

        sp = SamplingParams(max_tokens=1, temperature=0.0, candidate_token_ids=candidate_token_ids)
        return [o.candidate_logprobs for o in self.generate(prompts, sp)]

    def prompt_logprobs(self, prompts: list) -> list[list[float]]:
        """log P(token | prefix) of every prompt token after the first (the engine compressor's
        surprisal), all prompts in one batch on the shared engine."""
        from inference.prompt_logprobs import PROMPT_SCORING, prompt_token_logprobs

        return prompt_token_logprobs(self.generate(prompts, PROMPT_SCORING))

    def stats(self) -> dict:
        return self.engine.stats()

    def close(self) -> None:
        self.engine.shutdown()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
