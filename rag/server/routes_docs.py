"""Document management: uploads become background ingest jobs; list, get and delete documents."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

from fastapi import APIRouter, HTTPException, Request

from indexing.config import SUPPORTED_EXTENSIONS

from .deps import bad, get_state, ready_pipeline
from .schemas import DocumentIn

router = APIRouter(tags=["documents"])


def _upload_dir(request: Request) -> Path:
    d = get_state(request).cfg.storage_path / "uploads"
    d.mkdir(parents=True, exist_ok=True)
    return d


@router.post("/v1/documents", status_code=202,
             summary="Add a document (JSON text or multipart file); ingestion runs as a background job")
async def add_document(request: Request):
    st = get_state(request)
    ready_pipeline(request)
    ctype = request.headers.get("content-type", "")
    # Generated names only: no client-supplied path or file name ever reaches the filesystem.
    name = uuid.uuid4().hex
    if ctype.startswith("multipart/form-data"):
        form = await request.form()
        upload = form.get("file")
        if upload is None or not hasattr(upload, "read"):
            raise bad("file", "a multipart upload needs a 'file' part")
        suffix = Path(upload.filename or "").suffix.lower()
        if suffix not in SUPPORTED_EXTENSIONS:
            raise bad("file", f"unsupported file type {suffix or '(none)'}; supported: "
                      f"{', '.join(SUPPORTED_EXTENSIONS)}", 415)
        try:
            metadata = json.loads(form.get("metadata") or "{}")
        except json.JSONDecodeError as e:
            raise bad("metadata", f"not valid JSON: {e}") from None
        if not isinstance(metadata, dict):
            raise bad("metadata", "must be a JSON object")
        collection = str(form.get("collection") or "default")
        if not collection.replace("-", "").replace("_", "").isalnum() or len(collection) > 64:
            raise bad("collection", "letters, digits, '-' and '_' only (at most 64)")
        path = _upload_dir(request) / f"{name}{suffix}"
        path.write_bytes(await upload.read())
        metadata.setdefault("filename", Path(upload.filename or "").name[:200])
        job = st.jobs.submit(path, collection, metadata, "file")
    else:
        try:
            body = DocumentIn.model_validate(await request.json())
        except json.JSONDecodeError as e:
            raise bad("body", f"not valid JSON: {e}") from None
        doc_id = body.doc_id or name
        path = _upload_dir(request) / f"{name}.jsonl"
        record = {"_id": doc_id, "title": body.title, "text": body.text, "metadata": body.metadata}
        path.write_text(json.dumps(record, ensure_ascii=False) + "\n", encoding="utf-8")
        job = st.jobs.submit(path, body.collection, {}, "text")
        job.doc_ids.append(doc_id)
    return {"job_id": job.id, "status": job.status, "doc_ids": job.doc_ids, "job": f"/v1/jobs/{job.id}"}


@router.get("/v1/jobs/{job_id}", summary="Status of an ingest job")
async def get_job(job_id: str, request: Request):
    job = get_state(request).jobs.jobs.get(job_id)
    if job is None:
        raise HTTPException(404, detail={"message": f"no job {job_id}", "field": "job_id"})
    return job.to_dict()


@router.get("/v1/documents", summary="List stored documents")
async def list_documents(request: Request, collection: str | None = None, limit: int = 100, offset: int = 0):
    pipe = ready_pipeline(request)
    if not 1 <= limit <= 1000 or offset < 0:
        raise bad("limit", "limit must be 1..1000 and offset >= 0")

    def run():
        with pipe.lock:
            return pipe.store.list_documents(collection, limit=limit, offset=offset), \
                pipe.store.count_documents(collection)

    docs, total = await asyncio.to_thread(run)
    return {"documents": docs, "total": total, "limit": limit, "offset": offset}


@router.get("/v1/documents/{doc_id:path}", summary="One document with its text and chunk count")
async def get_document(doc_id: str, request: Request, collection: str | None = None):
    pipe = ready_pipeline(request)

    def run():
        with pipe.lock:
            return pipe.store.get_document(doc_id, collection)

    doc = await asyncio.to_thread(run)
    if doc is None:
        raise HTTPException(404, detail={"message": f"no document {doc_id}", "field": "doc_id"})
    return doc


@router.delete("/v1/documents/{doc_id:path}", summary="Delete a document; indexes follow")
async def delete_document(doc_id: str, request: Request, collection: str | None = None):
    pipe = ready_pipeline(request)

    def run():
        with pipe.lock:
            colls = [collection] if collection else pipe.store.collections()
            n = pipe.store.delete(doc_id, collection)
            if n:
                for c in colls:
                    pipe.retriever.sync(c)
            return n

    n = await asyncio.to_thread(run)
    if not n:
        raise HTTPException(404, detail={"message": f"no document {doc_id}", "field": "doc_id"})
    return {"deleted": n, "doc_id": doc_id}
