"""`rag serve --replicas N`: N uvicorn worker processes on one port, each with its own engine.

Why uvicorn workers and not Ray Serve: on one machine the workers share the listening socket, so
the kernel spreads connections over them with no proxy hop, and each worker is a whole process
(its own engine, KV cache and GIL) with nothing else to install or run. State that must be shared
lives in PostgreSQL (`storage.backend: postgres`): every replica reads the same documents,
vectors and postings, ingests from any replica are seen by all (each syncs on the store version),
and index syncs take turns through an advisory lock. Across machines, run `rag serve` per machine
behind a load balancer (or Ray Serve) against the same database.

Workers are separate interpreters started by uvicorn, so they rebuild the config from the
environment variables set by `rag serve`.
"""

from __future__ import annotations

import json
import os

CONFIG_ENV, OVERRIDES_ENV = "RAG_SERVE_CONFIG", "RAG_SERVE_OVERRIDES"


def make_app():
    """Uvicorn app factory run in each worker process."""
    from ..config import load_config
    from .app import create_app

    cfg = load_config(os.environ.get(CONFIG_ENV) or None, json.loads(os.environ.get(OVERRIDES_ENV) or "[]"))
    return create_app(cfg)


def run_replicas(config_path: str | None, overrides: list[str] | None, host: str, port: int, replicas: int,
                 grace_s: float) -> None:
    import uvicorn

    os.environ[CONFIG_ENV] = config_path or ""
    os.environ[OVERRIDES_ENV] = json.dumps(list(overrides or []))
    uvicorn.run("rag.server.replicas:make_app", factory=True, host=host, port=port, workers=replicas,
                log_level="info", timeout_graceful_shutdown=int(grace_s) or None)
