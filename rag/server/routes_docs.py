"""Document management: uploads become durable background ingest jobs; list, get and delete."""

from __future__ import annotations

import asyncio
import json
import os
import re
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Query, Request
from pydantic import ValidationError

from indexing.config import SUPPORTED_EXTENSIONS

from .deps import bad, get_state, ready_pipeline
from .errors import InvalidRequest, NotFound, UnsupportedMedia, from_validation
from .schemas import COLLECTION_PATTERN, DocumentIn

router = APIRouter(tags=["documents"])


def safe_name(filename: str, suffix: str) -> str:
    """The client's file name reduced to a harmless base name (kept so titles and citations read
    `report.md`, not a generated id). It only ever lands inside a directory we generated."""
    base = Path(filename.replace("\\", "/")).name
    base = re.sub(r"[^\w.\- ]+", "_", base).strip(" .")[:120]
    if not base or not base.lower().endswith(suffix):
        base = (base or "upload") + suffix
    return base


def _write(path: Path, data: bytes) -> None:
    """Write-then-rename: the final name exists only once the bytes are complete on disk."""
    part = path.with_name(path.name + ".part")
    with part.open("wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(part, path)


@router.post("/v1/documents", status_code=202,
             summary="Add a document (JSON text or multipart file); ingestion runs as a background job")
async def add_document(request: Request):
    st = get_state(request)
    ready_pipeline(request)
    ctype = request.headers.get("content-type", "")
    if ctype.startswith("multipart/form-data"):
        form = await request.form()
        upload = form.get("file")
        if upload is None or not hasattr(upload, "read"):
            raise bad("file", "a multipart upload needs a 'file' part")
        original = str(upload.filename or "")
        suffix = Path(original).suffix.lower()
        if suffix not in SUPPORTED_EXTENSIONS:
            raise UnsupportedMedia(f"file: unsupported file type {suffix or '(none)'}; supported: "
                                   f"{', '.join(SUPPORTED_EXTENSIONS)}", "file")
        try:
            metadata = json.loads(str(form.get("metadata") or "{}"))
        except json.JSONDecodeError as e:
            raise bad("metadata", f"not valid JSON: {e}") from None
        if not isinstance(metadata, dict):
            raise bad("metadata", "must be a JSON object")
        collection = str(form.get("collection") or "default")
        if not re.fullmatch(COLLECTION_PATTERN, collection):
            raise bad("collection", "letters, digits, '-' and '_' only (1 to 64)")
        data = await upload.read()
        name = safe_name(original, suffix)
        metadata.setdefault("filename", name)
        job, d = st.jobs.new_job("file", collection)
        job.filename = name
        await asyncio.to_thread(_write, d / name, data)
        st.jobs.submit(job, d / name, metadata)
    else:
        try:
            raw: Any = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise InvalidRequest(f"body: not valid JSON: {e}", "body") from None
        try:
            body = DocumentIn.model_validate(raw)
        except ValidationError as e:
            raise from_validation(list(e.errors()), ("body",)) from None
        job, d = st.jobs.new_job("text", body.collection)
        doc_id = body.doc_id or job.id
        job.doc_ids.append(doc_id)
        job.filename = doc_id
        meta = {"filename": doc_id, **body.metadata}
        record = {"_id": doc_id, "title": body.title, "text": body.text, "metadata": meta}
        path = d / "document.jsonl"
        await asyncio.to_thread(_write, path, (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8"))
        st.jobs.submit(job, path, {})
    return {"job_id": job.id, "status": job.status, "doc_ids": job.doc_ids, "job": f"/v1/jobs/{job.id}"}


@router.get("/v1/jobs/{job_id}", summary="Status of an ingest job")
async def get_job(job_id: str, request: Request):
    st = get_state(request)
    job = st.jobs.get(job_id) if st.jobs is not None else None
    if job is None:
        raise NotFound(f"no job {job_id}", "job_id")
    return job.to_dict()


@router.get("/v1/documents", summary="List stored documents")
async def list_documents(request: Request, collection: str | None = None,
                         limit: int = Query(100, ge=1, le=1000),
                         offset: int = Query(0, ge=0, le=2**62, description="SQLite integers are 64-bit")):
    pipe = ready_pipeline(request)

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
        raise NotFound(f"no document {doc_id}", "doc_id")
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
        raise NotFound(f"no document {doc_id}", "doc_id")
    return {"deleted": n, "doc_id": doc_id}
