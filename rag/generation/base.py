"""The one sync/async bridge every generation backend shares, its capability flags and the registry.

A backend only says how to stream one request (`astream`); everything else the pipeline, the CLI
and the server call lives here once: a private event-loop thread for sync callers (CLI, eval),
`generate`/`stream`/`iterate` over it, chat encoding with the backend's tokenizer, and `close`.
Before this, the engine and remote generators each carried a copy and imported each other.

What differs between backends is said by flags, not by `generator.backend == ...` checks or by
reaching into `generator.engine.engine`: `supports_logits_processors` (grounded spans, forced
citation markers), `supports_prefix_cache` (the server's /v1/cache routes), `eos_token_ids`,
`uses_passage_spans` (the engine's passage KV cache: see `locate_passages`).
"""

from __future__ import annotations

import asyncio
import queue
import threading
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Coroutine, Iterator
from typing import Any, ClassVar

from rerank.registry import Registry

from .config import GeneratorConfig

Spans = list[tuple[int, int]]  # [start, end) token ranges of a prompt that are retrieved passages


class Generator(ABC):
    """Base of the answer step's generators (`generator.backend`); satisfies
    `inference.protocols.StreamingGenerator`."""

    backend: ClassVar[str]  # the `generator.backend` value that builds it (named in error messages)
    supports_logits_processors: ClassVar[bool] = False  # may the pipeline add logits processors?
    supports_prefix_cache: ClassVar[bool] = False  # can the prefix cache be listed, saved, restored, cleared?
    tokenizer: Any
    max_model_len: int

    @property
    def uses_passage_spans(self) -> bool:
        """Does this backend reuse passage K/V when told where the passages are? Only then are
        spans worth computing (a backend without a passage cache accepts and ignores them)."""
        return False

    def __init__(self, thread_name: str) -> None:
        # Subclasses load their model first, so a failed load leaves no thread behind.
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=thread_name, daemon=True)
        self._thread.start()

    # ---- what a backend provides ------------------------------------------------------------
    @abstractmethod
    def astream(self, prompt: str | list[int], params: Any, request_id: str | None = None,
                passage_spans: Spans | None = None) -> AsyncIterator:
        """Incremental `RequestOutput`s of one request; closing it early aborts the request.
        `passage_spans`: where the prompt's passages are (`locate_passages`), or None."""

    async def agenerate(self, prompt: str | list[int], params: Any, request_id: str | None = None,
                        passage_spans: Spans | None = None) -> Any:
        """The final output of one request (a backend with a cheaper path overrides this)."""
        last = None
        async for last in self.astream(prompt, params, request_id, passage_spans):  # noqa: B007 - keep the final output
            pass
        assert last is not None
        return last

    @property
    def eos_token_ids(self) -> set[int] | int | None:
        """The token ids that end an answer (what a logits processor must leave open)."""
        return self.tokenizer.eos_token_id

    def locate_passages(self, token_ids: list[int], texts: list[str]) -> Spans | None:
        """The spans of `texts` (each passage exactly as the prompt renders it, in prompt order) in
        `token_ids`, for the passage KV cache; None when this backend would not use them (no
        tokenising spent) or none is found. One place, so every prompt that carries passages
        (answer, per-passage checks, `rag index --warm-kv`) finds them the same way and so under
        the same cache key."""
        if not self.uses_passage_spans or not texts:
            return None
        from inference.kv_reuse import locate_spans

        return locate_spans(self.tokenizer, list(token_ids), texts) or None

    def next_token_logprobs(self, prompts: list, candidate_token_ids: list[int]) -> list[dict[int, float]]:
        raise NotImplementedError(f"generator.backend {self.backend} has no next-token logprobs")

    def prompt_logprobs(self, prompts: list) -> list[list[float]]:
        raise NotImplementedError(f"generator.backend {self.backend} has no prompt logprobs")

    def stats(self) -> dict:
        return {}

    # ---- prefix cache (only where supports_prefix_cache) ------------------------------------
    def cached_prefixes(self, top: int = 10) -> list:
        return []

    def save_prefix_cache(self, path: str) -> int:
        raise NotImplementedError(self._no_prefix_cache())

    def load_prefix_cache(self, path: str) -> int:
        raise NotImplementedError(self._no_prefix_cache())

    def clear_prefix_cache(self) -> int:
        raise NotImplementedError(self._no_prefix_cache())

    def _no_prefix_cache(self) -> str:
        return f"generator.backend {self.backend} has no prefix cache (use generator.backend: engine)"

    def _shutdown(self) -> None:  # noqa: B027 - an optional hook, not an abstract method
        """Release the backend's own resources; the bridge loop is stopped after this."""

    # ---- the sync bridge (CLI, eval) --------------------------------------------------------
    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Run a coroutine that uses this generator (e.g. `answerability.passage_check`) to its result."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def generate(self, prompts: list[str] | list[list[int]], sampling_params: Any | list[Any] = None,
                 passage_spans: list[Spans | None] | None = None) -> list:
        """Final outputs of many requests, submitted together so the backend batches them; one
        `SamplingParams` for all, one per prompt, or None for the defaults (as `inference.LLM`);
        `passage_spans[i]`: prompt i's passage spans (None: none)."""
        if sampling_params is None:
            from inference.sampling_params import SamplingParams

            sampling_params = SamplingParams()
        plist = sampling_params if isinstance(sampling_params, list) else [sampling_params] * len(prompts)
        spans = passage_spans if passage_spans is not None else [None] * len(prompts)

        async def run() -> list:
            return await asyncio.gather(*(self.agenerate(p, sp, passage_spans=s)
                                          for p, sp, s in zip(prompts, plist, spans, strict=True)))

        return self.run(run())

    def stream(self, prompt: str | list[int], params: Any, passage_spans: Spans | None = None) -> Iterator:
        """Incremental outputs; closing the iterator early aborts the request. The request is
        created on the bridge loop: the engine's `astream` submits at once and needs a running
        loop (called here in sync code it raised "no running event loop")."""

        async def outputs() -> AsyncIterator:
            async for out in self.astream(prompt, params, passage_spans=passage_spans):
                yield out

        return self.iterate(outputs())

    def iterate(self, agen: AsyncIterator) -> Iterator:
        """Drive an async iterator on the bridge loop and yield its items here, in sync code.
        Closing the returned iterator early closes the async one (aborting its requests)."""
        q: queue.Queue = queue.Queue()
        done = object()

        async def pump() -> None:
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

    def close(self) -> None:
        self._shutdown()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)


# `generator.backend` -> the module that registers it; a backend's heavy imports (torch, httpx)
# load only when a config asks for it.
GENERATORS: Registry[Generator] = Registry("generator backend", {
    "engine": "rag.generation.engine", "remote": "rag.generation.remote"})


def build_generator(cfg: GeneratorConfig) -> Generator:
    """The generator `generator.backend` names, built from the whole `generator` config."""
    return GENERATORS.build(cfg.backend, cfg)
