"""Liveness, readiness, Prometheus metrics, prefix-cache inspection and persistence, the web page."""

from __future__ import annotations

import asyncio
from pathlib import Path

from fastapi import APIRouter, Query, Request
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse

from indexing.pg_store import StoreUnavailable

from .deps import get_state, ready_pipeline
from .errors import NotFound

router = APIRouter(tags=["operations"])
WEB = Path(__file__).resolve().parents[1] / "web"


@router.get("/health", summary="Liveness: the process answers")
async def health():
    return {"status": "ok"}


@router.get("/ready", summary="Readiness: models loaded and index open")
async def ready(request: Request):
    st = get_state(request)
    reason = st.progress.reason()
    body = {"ready": st.ready, "error": st.load_error, "reason": st.load_error or reason}
    if not st.ready:
        return JSONResponse(body, status_code=503)
    pipe = st.pipeline
    try:
        body.update({"documents": pipe.store.count_documents(), "collections": pipe.store.collections()})
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
    pipe = ready_pipeline(request)
    eng = pipe.generator.engine
    stats = eng.stats()
    keys = ("kv_blocks_total", "kv_blocks_used", "kv_blocks_cached", "kv_blocks_cached_free", "kv_blocks_free",
            "prefix_cache_queries", "prefix_cache_hits", "prefix_cache_hit_rate", "prefix_cache_evictions",
            "running", "waiting", "preemptions")
    return {**{k: stats.get(k) for k in keys}, "top_prefixes": eng.cached_prefixes(top)}


@router.post("/v1/cache/save", summary="Persist the prefix cache under the storage directory")
async def cache_save(request: Request):
    pipe = ready_pipeline(request)
    path = _cache_file(request)
    n = await asyncio.to_thread(pipe.generator.engine.save_prefix_cache, str(path))
    return {"saved_blocks": n, "path": str(path)}


@router.post("/v1/cache/restore", summary="Reload a saved prefix cache")
async def cache_restore(request: Request):
    pipe = ready_pipeline(request)
    path = _cache_file(request)
    if not path.exists():
        raise NotFound("no saved prefix cache; POST /v1/cache/save first")
    n = await asyncio.to_thread(pipe.generator.engine.load_prefix_cache, str(path))
    return {"restored_blocks": n, "path": str(path)}


@router.post("/v1/cache/clear", summary="Drop every cached block that no request is using")
async def cache_clear(request: Request):
    pipe = ready_pipeline(request)
    return {"cleared_blocks": pipe.generator.engine.clear_prefix_cache()}


@router.get("/", include_in_schema=False)
async def index():
    return FileResponse(WEB / "index.html", media_type="text/html")
