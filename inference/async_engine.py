"""Async front-end for the server: many concurrent callers, one background stepping thread.

The engine itself is synchronous and single-threaded. Callers never wait for a step: requests
are tokenised and validated in the caller (errors such as a too-long prompt raise right there),
then handed to the stepping thread through a queue together with aborts. Outputs go back to each
caller's event loop with `call_soon_threadsafe`. torch releases the GIL inside kernels, so the
event loop stays responsive while the engine computes. Prefix-cache admin calls take the step
lock and may wait for the current step.
"""

from __future__ import annotations

import asyncio
import queue
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
        self.tokenizer = engine.tokenizer
        self._step_lock = threading.Lock()  # held by the stepping thread during a step
        self._streams_lock = threading.Lock()  # short critical sections only
        self._pending: queue.SimpleQueue = queue.SimpleQueue()
        self._wake = threading.Event()
        self._streams: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Queue]] = {}
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name="inference-engine", daemon=True)
        self._thread.start()

    # ---- caller side ------------------------------------------------------------------
    def add_request(self, prompt: str | list[int], params: SamplingParams | None = None,
                    request_id: str | None = None, priority: int = 0,
                    passage_spans: list[tuple[int, int]] | None = None,
                    passage_anchor: list[int] | None = None) -> AsyncIterator[RequestOutput]:
        """Queue a request and return an async iterator of incremental outputs; leaving the
        iteration early aborts the request. `passage_spans`, `passage_anchor`: see
        `LLMEngine.prepare_request`."""
        loop = asyncio.get_running_loop()
        state = self.engine.prepare_request(prompt, params, request_id=request_id, priority=priority,
                                            passage_spans=passage_spans, passage_anchor=passage_anchor)
        rid = state.request_id
        out_q: asyncio.Queue = asyncio.Queue()
        with self._streams_lock:
            if rid in self._streams:
                raise ValueError(f"duplicate request_id {rid!r}")
            self._streams[rid] = (loop, out_q)
        self._pending.put(("add", state))
        self._wake.set()
        return self._stream(rid, out_q)

    async def _stream(self, rid: str, out_q: asyncio.Queue) -> AsyncIterator[RequestOutput]:
        done = False
        try:
            while True:
                item = await out_q.get()
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
                       request_id: str | None = None, priority: int = 0,
                       passage_spans: list[tuple[int, int]] | None = None,
                       passage_anchor: list[int] | None = None) -> RequestOutput | None:
        last = None
        async for out in self.add_request(prompt, params, request_id, priority, passage_spans, passage_anchor):
            last = out
        return last

    def abort(self, request_id: str) -> bool:
        """Stop streaming now; the stepping thread frees the request's blocks before its next step."""
        with self._streams_lock:
            stream = self._streams.pop(request_id, None)
        self._pending.put(("abort", request_id))
        self._wake.set()
        if stream is not None:
            self._post(stream[0], stream[1], _END)
        return stream is not None

    def stats(self) -> dict:
        return self.engine.stats()  # counters only: a slightly stale read is fine, never blocks

    def save_prefix_cache(self, path: str) -> int:
        with self._step_lock:
            return save_prefix_cache(self.engine, path)

    def load_prefix_cache(self, path: str) -> int:
        with self._step_lock:
            return load_prefix_cache(self.engine, path)

    def clear_prefix_cache(self) -> int:
        with self._step_lock:
            return self.engine.bm.clear_cache()

    def cached_prefixes(self, top: int = 10) -> list[dict]:
        with self._step_lock:
            return cached_prefixes(self.engine, top)

    def shutdown(self) -> None:
        self._stopped = True
        self._wake.set()
        self._thread.join(timeout=30)

    # ---- engine thread ----------------------------------------------------------------
    @staticmethod
    def _post(loop: asyncio.AbstractEventLoop, out_q: asyncio.Queue, item) -> None:
        if not loop.is_closed():
            loop.call_soon_threadsafe(out_q.put_nowait, item)

    def _drain(self) -> None:
        while True:
            try:
                op, arg = self._pending.get_nowait()
            except queue.Empty:
                return
            if op == "add":
                with self._streams_lock:
                    live = arg.request_id in self._streams
                if live:
                    try:
                        self.engine.submit(arg)
                    except ValueError as exc:
                        self._fail([arg.request_id], exc)
            else:
                self.engine.abort(arg)

    def _fail(self, rids: list[str], exc: BaseException) -> None:
        for rid in rids:
            with self._streams_lock:
                stream = self._streams.pop(rid, None)
            self.engine.abort(rid)
            if stream is not None:
                self._post(stream[0], stream[1], exc)

    def _loop(self) -> None:
        while not self._stopped:
            with self._step_lock:
                self._drain()
                busy = self.engine.has_unfinished_requests()
            if not busy:
                self._wake.clear()
                if self._pending.empty():
                    self._wake.wait(timeout=1.0)
                continue
            try:
                with self._step_lock:
                    outs = self.engine.step()
            except Exception as exc:  # surface engine failures to every caller instead of hanging
                with self._step_lock:
                    self._fail(list(self.engine.requests), exc)
                continue
            for out in outs:
                with self._streams_lock:
                    target = self._streams.get(out.request_id)
                    if target is not None and out.finished:
                        del self._streams[out.request_id]
                if target is not None:
                    self._post(target[0], target[1], out)
