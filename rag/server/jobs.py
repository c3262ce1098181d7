"""Background ingestion jobs: an upload returns at once with a job id; one worker ingests in order.

Jobs are durable (`job_store`): a restart re-queues every job that was queued or running (an
ingest is idempotent: the same file yields the same document ids) and marks failed, with the
reason, a job whose upload is gone or that was interrupted `MAX_ATTEMPTS` times. Each upload lives
in its own directory under `<storage>/uploads/<job id>/` and is removed when its job ends; at
startup anything there that no unfinished job owns is an orphan and is deleted.
"""

from __future__ import annotations

import logging
import queue
import shutil
import threading
import time
import traceback
import uuid
from pathlib import Path
from typing import Any

from .job_store import Job, JobStore

log = logging.getLogger("rag.server.jobs")
MAX_ATTEMPTS = 2


class JobRunner:
    def __init__(self, pipeline: Any, lock: threading.RLock, store: JobStore, upload_dir: Path):
        self.pipeline, self.lock, self.store, self.upload_dir = pipeline, lock, store, Path(upload_dir)
        self._q: queue.Queue[Job | None] = queue.Queue()
        self.recovered = self._recover()
        self._thread = threading.Thread(target=self._work, name="ingest-jobs", daemon=True)
        self._thread.start()

    def new_job(self, kind: str, collection: str) -> tuple[Job, Path]:
        """A job id and the empty directory its upload goes into (not yet submitted)."""
        job = Job(id=uuid.uuid4().hex, kind=kind, collection=collection)
        d = self.upload_dir / job.id
        d.mkdir(parents=True, exist_ok=True)
        return job, d

    def submit(self, job: Job, path: Path, metadata: dict[str, Any]) -> Job:
        """Record the job (durably) and queue it. `path` must be complete on disk already."""
        job.path, job.metadata = str(path), metadata
        self.store.add(job)
        self._q.put(job)
        return job

    def get(self, job_id: str) -> Job | None:
        return self.store.get(job_id)

    def pending(self) -> int:
        return len(self.store.unfinished())

    def stop(self, timeout: float = 10.0) -> None:
        self._q.put(None)
        self._thread.join(timeout)

    def _recover(self) -> dict[str, int]:
        counts = {"resumed": 0, "failed": 0, "orphans_removed": 0}
        owned: set[str] = set()
        for job in self.store.unfinished():
            if not job.path or not Path(job.path).is_file():
                self._fail(job, "upload file missing after a server restart; upload the document again")
                counts["failed"] += 1
            elif job.attempts >= MAX_ATTEMPTS:
                self._fail(job, f"interrupted by a server restart {job.attempts} times; not retried")
                counts["failed"] += 1
            else:
                job.status = "queued"
                self.store.save(job)
                owned.add(job.id)
                self._q.put(job)
                counts["resumed"] += 1
        if self.upload_dir.is_dir():
            for p in self.upload_dir.iterdir():
                if p.name not in owned:
                    shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
                    counts["orphans_removed"] += 1
        if any(counts.values()):
            log.info("jobs after restart: %s", counts)
        return counts

    def _fail(self, job: Job, reason: str) -> None:
        job.status, job.error, job.finished = "failed", reason, time.time()
        self.store.save(job)
        self._discard_upload(job)

    def _discard_upload(self, job: Job) -> None:
        shutil.rmtree(self.upload_dir / job.id, ignore_errors=True)

    def _work(self) -> None:
        while (job := self._q.get()) is not None:
            job.status, job.started = "running", time.time()
            job.attempts += 1
            self.store.save(job)
            try:
                self._ingest(job)
            except Exception as e:  # the job records the failure; the server keeps running
                job.status, job.error = "failed", f"{type(e).__name__}: {e}"
                job.report = {"traceback": traceback.format_exc(limit=3)}
            job.finished = time.time()
            self.store.save(job)
            self._discard_upload(job)

    def _ingest(self, job: Job) -> None:
        from indexing.pipeline import Ingestor

        from ..app import indexing_config

        pipe = self.pipeline
        icfg = indexing_config(pipe.cfg)
        icfg.loader.metadata = {**icfg.loader.metadata, **job.metadata}
        with self.lock:
            report = Ingestor(pipe.store, icfg).ingest([job.path], collection=job.collection, progress=False)
        # Outside the pipeline lock: the sync works on a copy of the index, and searches keep
        # answering from the last complete one until it is swapped in.
        pipe.retriever.sync(job.collection)
        job.report = report.to_dict()
        job.status = "failed" if report.failed else "done"
        if report.failed:
            job.error = "; ".join(f"{f.reason}" for f in report.failed)
        elif not report.documents:  # loaded, but nothing stored: say why rather than "done"
            job.status, job.error = "failed", nothing_indexed(report, job.filename or "the upload")


def nothing_indexed(report: Any, name: str) -> str:
    """Why an ingest that loaded without error stored no document (empty, too short, filtered,
    a duplicate of one already indexed), in words a person uploading a file can act on."""
    why = {"empty": "it has no text", "too_short": "its text is shorter than indexing.cleaning.min_chars",
           "exact_duplicate": "its text is already indexed", "near_duplicate": "a near-identical text is already indexed"}
    reasons = [why.get(r, f"dropped by {r}") for r in report.dropped] or ["no document was found in it"]
    dup = next(iter(report.duplicate_of.values()), None)
    return f"nothing indexed from {name}: {'; '.join(reasons)}" + (f" (as {dup})" if dup else "")
