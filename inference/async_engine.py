"""Async front-end for the server: many concurrent callers, one background stepping thread.

The engine itself is synchronous and single-threaded; a lock serialises add/abort/step, and a
daemon thread steps whenever there is work. Outputs are handed to each caller's event loop with
`call_soon_threadsafe`, so callers on any loop can stream. Model forward passes release the GIL
inside torch, so the event loop stays responsive while the engine computes.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator

from inference.config import EngineConfig
from inference.llm_engine import LLMEngine
from inference.outputs import RequestOutput
from inference.prefix_io import cached_prefixes, load_prefix_cache, save_prefix_cache
from inference.sampling_params import SamplingParams

_END = object()


class AsyncEngine:
    def __init__(self, model: str = "smollm2", **engine_args) -> None:
        self._attach(LLMEngine(EngineConfig(model=model, **engine_args)))

    @classmethod
    def from_engine(cls, engine: LLMEngine) -> AsyncEngine:
        """Wrap an existing engine (e.g. one shared with an offline `LLM`)."""
        self = cls.__new__(cls)
        self._attach(engine)
        return self

    def _attach(self, engine: LLMEngine) -> None:
        self.engine = engine
        self.tokenizer = self.engine.tokenizer
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._streams: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Queue]] = {}
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name="inference-engine", daemon=True)
        self._thread.start()

    # ---- caller side ------------------------------------------------------------------
    def add_request(self, prompt: str | list[int], params: SamplingParams | None = None,
                    request_id: str | None = None, priority: int = 0) -> AsyncIterator[RequestOutput]:
        """Queue a request now (errors such as a too-long prompt raise here) and return an async
        iterator of incremental outputs; leaving the iteration early aborts the request."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()
        with self._lock:
            rid = self.engine.add_request(prompt, params, request_id=request_id, priority=priority)
            self._streams[rid] = (loop, queue)
        self._wake.set()
        return self._stream(rid, queue)

    async def _stream(self, rid: str, queue: asyncio.Queue) -> AsyncIterator[RequestOutput]:
        done = False
        try:
            while True:
                item = await queue.get()
                if item is _END:
                    done = True
                    return
                if isinstance(item, BaseException):
                    done = True
                    raise item
                yield item
                if item.finished:
                    done = True
                    return
        finally:
            if not done:
                self.abort(rid)

    async def generate(self, prompt: str | list[int], params: SamplingParams | None = None,
                       request_id: str | None = None, priority: int = 0) -> RequestOutput | None:
        last = None
        async for out in self.add_request(prompt, params, request_id, priority):
            last = out
        return last

    def abort(self, request_id: str) -> bool:
        with self._lock:
            found = self.engine.abort(request_id)
            stream = self._streams.pop(request_id, None)
        if stream is not None:
            loop, queue = stream
            self._post(loop, queue, _END)
        return found

    def stats(self) -> dict:
        with self._lock:
            return self.engine.stats()

    def save_prefix_cache(self, path: str) -> int:
        with self._lock:
            return save_prefix_cache(self.engine, path)

    def load_prefix_cache(self, path: str) -> int:
        with self._lock:
            return load_prefix_cache(self.engine, path)

    def clear_prefix_cache(self) -> int:
        with self._lock:
            return self.engine.bm.clear_cache()

    def cached_prefixes(self, top: int = 10) -> list[dict]:
        with self._lock:
            return cached_prefixes(self.engine, top)

    def shutdown(self) -> None:
        self._stopped = True
        self._wake.set()
        self._thread.join(timeout=10)

    # ---- engine thread ----------------------------------------------------------------
    @staticmethod
    def _post(loop: asyncio.AbstractEventLoop, queue: asyncio.Queue, item) -> None:
        if not loop.is_closed():
            loop.call_soon_threadsafe(queue.put_nowait, item)

    def _loop(self) -> None:
        while not self._stopped:
            with self._lock:
                busy = self.engine.has_unfinished_requests()
                if not busy:
                    self._wake.clear()
            if not busy:
                self._wake.wait(timeout=1.0)
                continue
            try:
                with self._lock:
                    outs = self.engine.step()
                    targets = [(o, self._streams.get(o.request_id)) for o in outs]
                    for o in outs:
                        if o.finished:
                            self._streams.pop(o.request_id, None)
            except Exception as exc:  # surface engine failures to every caller instead of hanging
                with self._lock:
                    streams = list(self._streams.items())
                    self._streams.clear()
                    for rid, _ in streams:
                        self.engine.abort(rid)
                for _, (loop, queue) in streams:
                    self._post(loop, queue, exc)
                continue
            for out, target in targets:
                if target is not None:
                    self._post(target[0], target[1], out)
