"""Everything the routes share: one pipeline (so one engine), metrics, admission control, jobs."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..chat import ChatMemory
from ..config import RagConfig, ServerConfig
from .errors import Busy
from .metrics import Registry

if TYPE_CHECKING:
    from ..pipeline import Pipeline
    from .jobs import JobRunner


class Admission:
    """Bounded admission: `max_concurrent` run, `max_waiting` queue, the rest get 429."""

    def __init__(self, max_concurrent: int, max_waiting: int, retry_after: int, registry: Registry):
        self._sem = asyncio.Semaphore(max_concurrent)
        self.limit = max_concurrent + max_waiting
        self.in_flight = 0
        self.retry_after = retry_after
        self.registry = registry

    async def __aenter__(self) -> Admission:
        if self.in_flight >= self.limit:
            self.registry.rejected.inc("queue_full")
            raise Busy("server busy: the request queue is full", None, {"Retry-After": str(self.retry_after)})
        self.in_flight += 1
        try:
            await self._sem.acquire()
        except BaseException:
            self.in_flight -= 1
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._sem.release()
        self.in_flight -= 1


class Progress:
    """What the server is doing before it is ready (or while it rebuilds), for `/ready`.

    Written by the loading thread, read by request handlers: a lock keeps the pair consistent.
    """

    def __init__(self, echo: bool = False) -> None:
        self._lock = threading.Lock()
        self._task: str | None = None
        self._done = 0
        self._total = 0
        self._echo = echo  # `rag serve` also draws a progress bar on the console
        self._bar = None

    def start(self, task: str, total: int = 0) -> None:
        with self._lock:
            self._close_bar()
            self._task, self._done, self._total = task, 0, total

    def update(self, done: int, total: int | None = None) -> None:
        with self._lock:
            self._done = done
            if total is not None:
                self._total = total
            if self._echo and self._task:
                if self._bar is None:
                    from tqdm import tqdm

                    self._bar = tqdm(desc=self._task, unit="chunk", file=sys.stderr, mininterval=0.5)
                self._bar.total, self._bar.n = self._total, self._done
                self._bar.refresh()

    def finish(self) -> None:
        with self._lock:
            self._close_bar()
            self._task = None

    def _close_bar(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def reason(self) -> str | None:
        with self._lock:
            if self._task is None:
                return None
            if self._total:
                return f"{self._task}: {100 * self._done // self._total}%"
            return self._task


@dataclass
class ServerState:
    cfg: RagConfig
    server: ServerConfig
    registry: Registry = field(default_factory=Registry)
    pipeline: Pipeline | None = None
    ready: bool = False
    load_error: str | None = None
    admission: Admission | None = None
    jobs: JobRunner | None = None
    lock: threading.RLock = field(default_factory=threading.RLock)
    draining: bool = False
    progress: Progress = field(default_factory=Progress)
    chat: ChatMemory = field(init=False)  # the passages of answered chat turns (`rag.chat`)

    def __post_init__(self) -> None:
        self.chat = ChatMemory(self.server.chat_memory_turns)

    def api_keys(self) -> set[str]:
        keys = set(self.server.api_keys)
        env = os.environ.get(self.server.api_keys_env, "")
        keys |= {k.strip() for k in env.split(",") if k.strip()}
        return keys
