"""Ingest: load -> clean -> (skip if unchanged) -> chunk -> store, one transaction per document.

The unchanged check runs before chunking, so re-ingesting a corpus costs only loading and
hashing. Documents are chunked in batches (one tokenizer call per batch) but each is committed
alone, so a process killed at any moment loses at most the documents not yet committed.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from tqdm import tqdm

from .chunking import build_chunkers, chunk_documents, token_counter
from .cleaning import Cleaner
from .config import IndexingConfig
from .loaders import LoaderError, iter_documents
from .report import Failure, IngestReport
from .store import DocumentStore
from .store_protocol import DocumentStoreProtocol
from .types import Chunk, Document


class Ingestor:
    """Turns paths into stored chunks according to an IndexingConfig."""

    def __init__(self, store: DocumentStoreProtocol | None, cfg: IndexingConfig | None = None):
        """`store` may be None for `preview` (nothing is written)."""
        self.store = store
        self.cfg = cfg or IndexingConfig()
        self.fingerprint = self.cfg.chunking.fingerprint()
        self.counter = token_counter(self.cfg.chunking)
        self.chunkers = build_chunkers(self.cfg.chunking, self.counter)

    def chunk(self, docs: list[Document]) -> list[list[Chunk]]:
        """Chunks of already cleaned documents (what `rag chunk` prints)."""
        return chunk_documents(docs, self.chunkers)

    def token_length(self, text: str) -> int:
        """Tokens the embedder sees for `text`, [CLS]/[SEP] included (for `rag chunk` output)."""
        return self.counter.full_length(text)

    def preview(self, path: str | Path) -> tuple[list[Document], list[list[Chunk]], list[LoaderError]]:
        """Load, clean and chunk one file without touching the store (for `rag chunk FILE`)."""
        cleaner = Cleaner(self.cfg.cleaning.model_copy(update={"exact_dedup": False, "near_dedup": "off"}))
        docs, errors = [], []
        for item in iter_documents([path], self.cfg.loader):
            if isinstance(item, LoaderError):
                errors.append(item)
            elif (doc := cleaner(item)) is not None:
                docs.append(doc)
        return docs, self.chunk(docs), errors

    def ingest(self, paths: Iterable[str | Path], collection: str = "default", progress: bool = True,
               prune: bool = False) -> IngestReport:
        """Index `paths` (files and directories) into `collection`.

        prune=True also deletes stored documents under these paths that the inputs no longer
        yield (a record removed from a JSONL file, a file deleted from a directory), except for
        files that had load errors this time.
        """
        if self.store is None:
            raise ValueError("Ingestor.ingest needs a DocumentStore")
        paths = list(paths)
        report = IngestReport(collection=collection)
        kept: set[str] = set()
        errored: set[str] = set()
        cleaner = Cleaner(self.cfg.cleaning)
        t0 = time.perf_counter()
        seeded = self._seed_dedup(cleaner, collection, paths if prune else [])
        report.timings["clean"] += time.perf_counter() - t0
        pending: list[Document] = []
        bar = tqdm(desc=f"indexing {collection}", unit="doc", disable=not progress, file=sys.stderr,
                   mininterval=0.5, dynamic_ncols=True)
        items = iter(iter_documents(paths, self.cfg.loader))
        with bar:
            while True:
                t = time.perf_counter()
                item = next(items, None)
                report.timings["load"] += time.perf_counter() - t
                if item is None:
                    break
                bar.update(1)
                if isinstance(item, LoaderError):
                    report.failed.append(Failure(item.path, item.reason))
                    errored.add(item.source)
                    continue
                t = time.perf_counter()
                doc = cleaner.prepare(item)
                report.timings["clean"] += time.perf_counter() - t
                if doc is None:
                    continue
                kept.add(doc.doc_id)
                if self.store.is_current(doc, collection, self.fingerprint):
                    report.unchanged += 1
                    if doc.doc_id not in seeded:
                        cleaner.remember(doc)
                    continue
                t = time.perf_counter()
                doc = cleaner.check_near(doc)
                report.timings["clean"] += time.perf_counter() - t
                if doc is None:
                    kept.discard(item.doc_id)
                    continue
                pending.append(doc)
                if len(pending) >= self.cfg.batch_size:
                    self._flush(pending, collection, report)
                    pending = []
            self._flush(pending, collection, report)
        if prune:
            report.pruned = self._prune(paths, collection, kept, errored)
        report.dropped.update(cleaner.dropped)
        report.dropped_docs = list(cleaner.dropped_docs)
        record = getattr(self.store, "record_dropped", None)
        if record is not None:
            record(collection, cleaner.dropped_docs)
        report.edits.update(cleaner.edits)
        report.duplicate_of.update(cleaner.duplicate_of)
        report.timings["total"] = time.perf_counter() - t0
        return report

    def _seed_dedup(self, cleaner: Cleaner, collection: str, prune_paths: list[str | Path]) -> set[str]:
        """Register the collection's stored documents with the deduplicator; returns their ids.

        Exact keys cost one hash per stored text; near-dup signatures are only computed once a
        new document needs comparing. Documents an ingest may prune are left out, so renaming a
        file under a pruned path does not drop the new copy while the old one is deleted.
        """
        c = self.cfg.cleaning
        if self.store is None or not c.dedup_against_store or (not c.exact_dedup and c.near_dedup == "off"):
            return set()
        in_scope = _scope(prune_paths)
        seeded: set[str] = set()
        for doc_id, source, text in self.store.iter_texts(collection):
            if not in_scope(source):
                cleaner.register_stored(doc_id, text)
                seeded.add(doc_id)
        return seeded

    def _prune(self, paths: list[str | Path], collection: str, kept: set[str], errored: set[str]) -> int:
        assert self.store is not None
        in_scope = _scope(paths)
        gone = [d for d, src in self.store.document_sources(collection).items()
                if d not in kept and src not in errored and in_scope(src)]
        for doc_id in gone:
            self.store.delete(doc_id, collection)
        return len(gone)

    def _flush(self, docs: list[Document], collection: str, report: IngestReport) -> None:
        if not docs:
            return
        t = time.perf_counter()
        try:
            all_chunks: list[list[Chunk] | None] = list(self.chunk(docs))
        except Exception:  # isolate the document that broke the batch; the others still go in
            all_chunks = [self._chunk_one(d, report) for d in docs]
        report.timings["chunk"] += time.perf_counter() - t
        t = time.perf_counter()
        for doc, chunks in zip(docs, all_chunks, strict=True):
            if chunks is None:
                continue
            outcome = self.store.upsert(doc, chunks, collection, self.fingerprint)
            if outcome == "new":
                report.new += 1
            elif outcome == "changed":
                report.changed += 1
            else:
                report.unchanged += 1
            report.chunks.update(c.granularity for c in chunks)
            report.bytes_chunked += len(doc.text.encode("utf-8"))
        report.timings["store"] += time.perf_counter() - t


    def _chunk_one(self, doc: Document, report: IngestReport) -> list[Chunk] | None:
        try:
            return self.chunk([doc])[0]
        except Exception as e:
            report.failed.append(Failure(f"{doc.source}#{doc.doc_id}", f"chunking failed: {type(e).__name__}: {e}"))
            return None


def _scope(paths: list[str | Path]) -> Callable[[str], bool]:
    """Whether a stored source lies under one of `paths` (a file itself or inside a directory)."""
    roots = [str(Path(p).expanduser().resolve()) for p in paths]

    def in_scope(source: str) -> bool:
        return any(source == r or source.startswith(r.rstrip(os.sep) + os.sep) for r in roots)

    return in_scope


def ingest(paths: Iterable[str | Path], store_path: str | Path, cfg: IndexingConfig | None = None,
           collection: str = "default", progress: bool = True, prune: bool = False) -> IngestReport:
    """One-call ingest into the store file at `store_path`."""
    with DocumentStore(store_path) as store:
        return Ingestor(store, cfg).ingest(paths, collection, progress, prune)
