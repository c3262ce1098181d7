"""Everything the routes share: one pipeline (so one engine), metrics, admission control, jobs."""

from __future__ import annotations

import asyncio
import os
import threading
from dataclasses import dataclass, field

from fastapi import HTTPException

from ..config import RagConfig
from .config import ServerConfig
from .metrics import Registry


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
            raise HTTPException(429, detail={"message": "server busy: the request queue is full",
                                             "field": None}, headers={"Retry-After": str(self.retry_after)})
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


@dataclass
class ServerState:
    cfg: RagConfig
    server: ServerConfig
    registry: Registry = field(default_factory=Registry)
    pipeline: object | None = None
    ready: bool = False
    load_error: str | None = None
    admission: Admission | None = None
    jobs: object | None = None
    lock: threading.RLock = field(default_factory=threading.RLock)
    draining: bool = False

    def api_keys(self) -> set[str]:
        keys = set(self.server.api_keys)
        env = os.environ.get(self.server.api_keys_env, "")
        keys |= {k.strip() for k in env.split(",") if k.strip()}
        return keys
