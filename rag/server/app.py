"""The FastAPI application: one pipeline, one engine, shared by every request."""

from __future__ import annotations

import asyncio
import contextlib
import threading

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from indexing.pg_store import PgDocumentStore

from ..config import RagConfig, ServerConfig
from . import errors, middleware, routes_ask, routes_docs, routes_openai, routes_ops
from .job_store import JobStore, PgJobStore, SqliteJobStore
from .jobs import JobRunner
from .state import Admission, Progress, ServerState


def _wait_for_database(cfg: RagConfig, progress: Progress) -> None:
    """A database (or read replica) still starting up or in recovery is waited for, up to
    `storage.connect_wait_s`, with `/ready` saying so, instead of failing the start-up."""
    from indexing.pg_connect import mask_dsn, wait_for_server

    for dsn in filter(None, [cfg.storage.resolved_dsn(), cfg.storage.resolved_read_dsn()]):
        progress.start(f"connecting to PostgreSQL at {mask_dsn(dsn)}")
        wait_for_server(dsn, cfg.storage.connect_wait_s, on_wait=progress.start)


def create_app(cfg: RagConfig, pipeline=None, load_in_background: bool = True,
               console_progress: bool = False) -> FastAPI:
    """`pipeline` may be given (tests, embedding); otherwise it is built at startup.

    Models load in a background thread so `/health` answers at once and `/ready` turns true
    when everything is loaded.
    """
    server: ServerConfig = cfg.server
    state = ServerState(cfg=cfg, server=server, pipeline=pipeline, progress=Progress(echo=console_progress))

    def load() -> None:
        try:
            if state.pipeline is None:
                from ..pipeline import Pipeline

                if cfg.storage.backend == "postgres":
                    _wait_for_database(cfg, state.progress)
                state.pipeline = Pipeline(cfg)
            pipe = state.pipeline
            for c in pipe.store.collections() or [cfg.retrieval.default_collection]:
                state.progress.start(f"rebuilding collection {c}")
                pipe.retriever.sync(c, on_progress=state.progress.update)
            state.progress.start("loading the language model")
            pipe.generator  # noqa: B018 - loads the engine now, not on the first request
            # Jobs live in the store's own database: its SQLite file, or the Postgres database.
            cfg.storage_path.mkdir(parents=True, exist_ok=True)
            if isinstance(pipe.store, PgDocumentStore):
                job_store: JobStore = PgJobStore(pipe.store.dsn, pipe.store.statement_timeout_ms)
            else:
                job_store = SqliteJobStore(pipe.store.path)
            state.jobs = JobRunner(pipe, pipe.lock, job_store, cfg.storage_path / "uploads")
            state.progress.finish()
            state.registry.gauge_source("rag_engine", "engine state", pipe.generator.stats)
            state.ready = True
        except Exception as e:  # surfaced by /ready; the process stays up for inspection
            state.load_error = f"{type(e).__name__}: {e}"
            state.progress.finish()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        state.admission = Admission(server.max_concurrent, server.max_waiting, server.retry_after_s, state.registry)
        if load_in_background:
            threading.Thread(target=load, name="rag-load", daemon=True).start()
        else:
            await asyncio.to_thread(load)
        yield
        # Graceful shutdown: refuse new work, let running requests finish, flush and close.
        state.draining = True
        if state.jobs is not None:
            await asyncio.to_thread(state.jobs.stop, server.shutdown_grace_s)
            state.jobs.store.close()
        if state.pipeline is not None and pipeline is None:
            await asyncio.to_thread(state.pipeline.close)

    app = FastAPI(title="ragstack", version="0.1.0", lifespan=lifespan,
                  description="Question answering with citations over your documents, on an in-process engine.")
    app.state.rag = state
    if server.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=server.cors_origins, allow_methods=["*"],
                           allow_headers=["*"])
    errors.install(app)
    middleware.install(app, state)
    app.add_middleware(middleware.BodyLimit, limit=server.max_body_bytes)
    for r in (routes_ops.router, routes_ask.router, routes_docs.router, routes_openai.router):
        app.include_router(r)
    return app
