"""Liveness, readiness, Prometheus metrics, prefix-cache inspection and persistence, the web page."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from fastapi import APIRouter, Query, Request
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse

from indexing.pg_connect import StoreUnavailable
from inference.protocols import StreamingGenerator

from .deps import get_state, ready_pipeline
from .errors import NotFound, NotImplementedByBackend

router = APIRouter(tags=["operations"])
WEB = Path(__file__).resolve().parents[1] / "web"


@router.get("/health", summary="Liveness: the process answers")
async def health():
    return {"status": "ok"}


@router.get("/ready", summary="Readiness: models loaded and index open")
async def ready(request: Request):
    st = get_state(request)
    reason = st.progress.reason()
    # worker_pid: which process answered (`rag serve --replicas N` runs N, each loading its own engine)
    body = {"ready": st.ready, "error": st.load_error, "reason": st.load_error or reason, "worker_pid": os.getpid()}
    if not st.ready:
        return JSONResponse(body, status_code=503)
    pipe = st.pipeline
    try:
        body.update({"documents": pipe.store.count_documents(), "collections": pipe.store.collections(),
                     "default_collection": pipe.cfg.retrieval.default_collection,
                     "generator_model": pipe.cfg.generator.engine.model})
    except StoreUnavailable as e:  # Postgres backend: the database went away after startup
        return JSONResponse({"ready": False, "error": str(e), "reason": str(e)}, status_code=503)
    if st.jobs is not None:
        body["jobs_pending"] = st.jobs.pending()
        body["jobs_recovered"] = st.jobs.recovered  # what the last start found unfinished
    return body


@router.get("/metrics", summary="Prometheus text format", response_class=PlainTextResponse)
async def metrics(request: Request):
    st = get_state(request)
    return PlainTextResponse(st.registry.render(), media_type="text/plain; version=0.0.4")


def _cache_file(request: Request) -> Path:
    d = get_state(request).cfg.storage_path / "cache"
    d.mkdir(parents=True, exist_ok=True)
    return d / "prefix_cache.bin"


@router.get("/v1/cache", summary="Prefix cache: blocks, hit rate, top cached prefixes (like llama.cpp /slots)")
async def cache(request: Request, top: int = Query(10, ge=1, le=100)):
    gen = ready_pipeline(request).generator
    stats = gen.stats()
    keys = ("kv_blocks_total", "kv_blocks_used", "kv_blocks_cached", "kv_blocks_cached_free", "kv_blocks_free",
            "prefix_cache_queries", "prefix_cache_hits", "prefix_cache_hit_rate", "prefix_cache_evictions",
            "running", "waiting", "preemptions", "passage_cache_hits", "passage_cache_tokens_reused",
            "recomputed_tokens", "kv_shift_reused_tokens", "passage_prefix_hits", "passage_prefix_tokens", "reuse_prefills",
            # QUEST (sparse_attention): KV blocks decode skipped / that dense attention would have read
            "sparse_blocks_skipped", "sparse_blocks_considered")
    return {**{k: stats.get(k) for k in keys}, "top_prefixes": gen.cached_prefixes(top)}


def _prefix_cache(request: Request, action: str) -> StreamingGenerator:
    """The generator, if its backend keeps a prefix cache to act on; else a 501 naming the backend
    (it was an AttributeError and a 500 with `generator.backend: remote`)."""
    gen = ready_pipeline(request).generator
    if not gen.supports_prefix_cache:
        raise NotImplementedByBackend(
            f"cannot {action} the prefix cache: generator.backend {gen.backend} keeps no prefix cache here "
            "(the remote server manages its own); use generator.backend: engine")
    return gen


@router.post("/v1/cache/save", summary="Persist the prefix cache under the storage directory")
async def cache_save(request: Request):
    gen = _prefix_cache(request, "save")
    path = _cache_file(request)
    n = await asyncio.to_thread(gen.save_prefix_cache, str(path))
    return {"saved_blocks": n, "path": str(path)}


@router.post("/v1/cache/restore", summary="Reload a saved prefix cache")
async def cache_restore(request: Request):
    gen = _prefix_cache(request, "restore")
    path = _cache_file(request)
    if not path.exists():
        raise NotFound("no saved prefix cache; POST /v1/cache/save first")
    n = await asyncio.to_thread(gen.load_prefix_cache, str(path))
    return {"restored_blocks": n, "path": str(path)}


@router.post("/v1/cache/clear", summary="Drop every cached block that no request is using")
async def cache_clear(request: Request):
    gen = _prefix_cache(request, "clear")
    return {"cleared_blocks": gen.clear_prefix_cache()}


@router.get("/", include_in_schema=False)
async def index():
    return FileResponse(WEB / "index.html", media_type="text/html")
