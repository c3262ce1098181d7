"""The one sync/async bridge every generation backend shares, its capability flags and the registry.

A backend only says how to stream one request (`astream`); everything else the pipeline, the CLI
and the server call lives here once: a private event-loop thread for sync callers (CLI, eval),
`generate`/`stream`/`iterate` over it, chat encoding with the backend's tokenizer, and `close`.
Before this, the engine and remote generators each carried a copy and imported each other.

Each sync method is its async twin (`agenerate_many`, `anext_token_logprobs`, `aprompt_logprobs`)
run through `_submit`, the one place sync code crosses onto the bridge loop. A question is one
async implementation (`Pipeline.astream`) whose LLM stages await the async twins on whatever loop
runs it: the bridge loop for `Pipeline.ask` (one crossing, `iterate`), the server's own loop for
its routes (none). `run_sync` is the same entry for a pipeline whose model is not loaded yet.
`Bridge` is the loop thread and its `submit`, the only `run_coroutine_threadsafe`.

What differs between backends is said by flags, not by `generator.backend == ...` checks or by
reaching into `generator.engine.engine`: `supports_logits_processors` (grounded spans, forced
citation markers), `supports_prefix_cache` (the server's /v1/cache routes), `eos_token_ids`,
`uses_passage_spans` (the engine's passage KV cache: see `locate_passages`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Coroutine, Iterator
from typing import Any, ClassVar, TypeVar

from rerank.registry import Registry

from .config import GeneratorConfig

Spans = list[tuple[int, int]]  # [start, end) token ranges of a prompt that are retrieved passages
T = TypeVar("T")


class Bridge:
    """A private event loop in a daemon thread, and the one crossing of sync code onto it."""

    def __init__(self, thread_name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name=thread_name, daemon=True)
        self.thread.start()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule `coro` on the loop. Called on that loop itself it would wait for itself forever:
        that is a sync call left inside the async path (await the async twin instead), so it fails."""
        if threading.current_thread() is self.thread:
            coro.close()
            raise RuntimeError("a sync generator call on the generator's own loop would deadlock; "
                               "await its async twin (agenerate_many, anext_token_logprobs, ...)")
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)


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
        self._bridge = Bridge(thread_name)
        self._loop, self._thread = self._bridge.loop, self._bridge.thread

    # ---- what a backend provides ------------------------------------------------------------
    @abstractmethod
    def astream(self, prompt: str | list[int], params: Any, request_id: str | None = None,
                passage_spans: Spans | None = None, passage_anchor: list[int] | None = None) -> AsyncIterator:
        """Incremental `RequestOutput`s of one request; closing it early aborts the request.
        `passage_spans`: where the prompt's passages are (`locate_passages`), or None;
        `passage_anchor`: the template their cached K/V is keyed under when another prompt's
        (`inference.LLMEngine.prepare_request`)."""

    async def agenerate(self, prompt: str | list[int], params: Any, request_id: str | None = None,
                        passage_spans: Spans | None = None, passage_anchor: list[int] | None = None) -> Any:
        """The final output of one request (a backend with a cheaper path overrides this)."""
        last = None
        async for last in self.astream(prompt, params, request_id, passage_spans, passage_anchor):  # noqa: B007 - keep the final output
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

        # without each passage's first token: the checks' template folds a space into it, the answer
        # prompt's does not, and they read one entry (keyed under the answer prompt's anchor)
        return locate_spans(self.tokenizer, list(token_ids), texts, skip_first=True) or None

    async def agenerate_many(self, prompts: list[str] | list[list[int]], sampling_params: Any | list[Any] = None,
                             passage_spans: list[Spans | None] | None = None,
                             passage_anchors: list[list[int] | None] | None = None) -> list:
        """Final outputs of many requests, submitted together so the backend batches them; one
        `SamplingParams` for all, one per prompt, or None for the defaults (as `inference.LLM`);
        `passage_spans[i]`, `passage_anchors[i]`: prompt i's passage spans and their key's anchor
        (None: none, its own template). `generate` is this, from sync code."""
        if sampling_params is None:
            from inference.sampling_params import SamplingParams

            sampling_params = SamplingParams()
        plist = sampling_params if isinstance(sampling_params, list) else [sampling_params] * len(prompts)
        spans = passage_spans if passage_spans is not None else [None] * len(prompts)
        anchors = passage_anchors if passage_anchors is not None else [None] * len(prompts)
        return await asyncio.gather(*(self.agenerate(p, sp, passage_spans=s, passage_anchor=a)
                                      for p, sp, s, a in zip(prompts, plist, spans, anchors, strict=True)))

    async def anext_token_logprobs(self, prompts: list, candidate_token_ids: list[int]) -> list[dict[int, float]]:
        """log P(candidate | prompt) per prompt, in one batch (the LLM reranker's P("yes"))."""
        raise NotImplementedError(f"generator.backend {self.backend} has no next-token logprobs")

    async def aprompt_logprobs(self, prompts: list) -> list[list[float]]:
        """log P(token | prefix) of every prompt token after the first (the engine compressor)."""
        raise NotImplementedError(f"generator.backend {self.backend} has no prompt logprobs")

    def next_token_logprobs(self, prompts: list, candidate_token_ids: list[int]) -> list[dict[int, float]]:
        return self.run(self.anext_token_logprobs(prompts, candidate_token_ids))

    def prompt_logprobs(self, prompts: list) -> list[list[float]]:
        return self.run(self.aprompt_logprobs(prompts))

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
    def _submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """The one crossing from sync code into async code: `coro` is scheduled on the bridge loop."""
        return self._bridge.submit(coro)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine that uses this generator (e.g. `answerability.passage_check`) to its result."""
        return self._submit(coro).result()

    def generate(self, prompts: list[str] | list[list[int]], sampling_params: Any | list[Any] = None,
                 passage_spans: list[Spans | None] | None = None,
                 passage_anchors: list[list[int] | None] | None = None) -> list:
        """`agenerate_many` from sync code."""
        return self.run(self.agenerate_many(prompts, sampling_params, passage_spans, passage_anchors))

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

        fut = self._submit(pump())
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
        self._bridge.stop()


# `generator.backend` -> the module that registers it; a backend's heavy imports (torch, httpx)
# load only when a config asks for it.
GENERATORS: Registry[Generator] = Registry("generator backend", {
    "engine": "rag.generation.engine", "remote": "rag.generation.remote"})


_shared: Bridge | None = None
_shared_lock = threading.Lock()


def run_sync(coro: Coroutine[Any, Any, T], generator: Generator | None) -> T:
    """A sync API's entry into its async implementation: through `generator`'s bridge loop, or,
    where no generator is loaded yet, through one bridge shared by such calls (a retrieval-only
    `Pipeline.search` never loads a model to get a loop; a fresh `asyncio.run` per call cost ~5x
    more). A generator the call builds meanwhile is awaited on that loop (the engine answers on
    whichever loop asks)."""
    global _shared
    if generator is not None:
        return generator.run(coro)
    with _shared_lock:
        if _shared is None:
            _shared = Bridge("rag-sync")
    return _shared.submit(coro).result()


def build_generator(cfg: GeneratorConfig) -> Generator:
    """The generator `generator.backend` names, built from the whole `generator` config."""
    return GENERATORS.build(cfg.backend, cfg)
