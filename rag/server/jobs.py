"""Background ingestion jobs: an upload returns at once with a job id; one worker ingests in order."""

from __future__ import annotations

import queue
import threading
import time
import traceback
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Job:
    id: str
    kind: str
    collection: str
    status: str = "queued"  # queued | running | done | failed
    created: float = field(default_factory=time.time)
    started: float | None = None
    finished: float | None = None
    report: dict[str, Any] | None = None
    error: str | None = None
    doc_ids: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class JobRunner:
    def __init__(self, pipeline: Any, lock: threading.RLock):
        self.pipeline = pipeline
        self.lock = lock
        self.jobs: dict[str, Job] = {}
        self._q: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._work, name="ingest-jobs", daemon=True)
        self._thread.start()

    def submit(self, path: Path, collection: str, metadata: dict[str, Any], kind: str) -> Job:
        job = Job(id=uuid.uuid4().hex, kind=kind, collection=collection)
        self.jobs[job.id] = job
        self._q.put((job, path, metadata))
        return job

    def pending(self) -> int:
        return sum(1 for j in self.jobs.values() if j.status in ("queued", "running"))

    def stop(self, timeout: float = 10.0) -> None:
        self._q.put(None)
        self._thread.join(timeout)

    def _work(self) -> None:
        from ..app import indexing_config

        while (item := self._q.get()) is not None:
            job, path, metadata = item
            job.status, job.started = "running", time.time()
            try:
                from indexing.pipeline import Ingestor

                pipe = self.pipeline
                icfg = indexing_config(pipe.cfg)
                icfg.loader.metadata = {**icfg.loader.metadata, **metadata}
                with self.lock:
                    report = Ingestor(pipe.store, icfg).ingest([path], collection=job.collection, progress=False)
                    pipe.retriever.sync(job.collection)
                job.report = report.to_dict()
                job.status = "failed" if report.failed else "done"
                if report.failed:
                    job.error = "; ".join(f"{f.reason}" for f in report.failed)
            except Exception as e:  # the job records the failure; the server keeps running
                job.status, job.error = "failed", f"{type(e).__name__}: {e}"
                job.report = {"traceback": traceback.format_exc(limit=3)}
            finally:
                job.finished = time.time()
