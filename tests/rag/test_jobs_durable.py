"""Issue #16 item 3: ingest jobs survive a restart (SQLite job table in the store's database).

Catches: queued jobs lost on kill -9 (their ids 404 afterwards), uploads left orphaned in
`<storage>/uploads`, a job re-run forever after repeated crashes, a job whose upload vanished
staying "queued" for ever.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from rag.server.job_store import Job, SqliteJobStore
from rag.server.jobs import JobRunner
from tests.rag.conftest import _free_port
from tests.readiness import process_alive, stop, wait_http

REPO = Path(__file__).resolve().parents[2]


def _upload(dirpath: Path, name: str, text: str) -> Path:
    dirpath.mkdir(parents=True)
    p = dirpath / name
    p.write_text(text, encoding="utf-8")
    return p


def test_restart_resumes_or_fails_every_unfinished_job(pipeline, tmp_path):
    uploads = tmp_path / "uploads"
    store = SqliteJobStore(tmp_path / "store.sqlite")
    jobs = {
        "queued": Job(id="a" * 32, kind="file", collection="jobsdur"),
        "running_once": Job(id="b" * 32, kind="file", collection="jobsdur", status="running", attempts=1),
        "lost_file": Job(id="c" * 32, kind="file", collection="jobsdur"),
        "crashed_twice": Job(id="d" * 32, kind="file", collection="jobsdur", status="running", attempts=2),
    }
    for key, job in jobs.items():
        if key != "lost_file":
            job.path = str(_upload(uploads / job.id, f"{key}.md", f"# {key}\n\nThe {key} job mentions Brennic.\n"))
        else:
            job.path = str(uploads / job.id / "gone.md")
        store.add(job)
    _upload(uploads / ("f" * 32), "orphan.md", "no job owns me")  # written, then the process died
    (uploads / "stray.part").write_bytes(b"half")

    runner = JobRunner(pipeline, pipeline.lock, store, uploads)
    assert runner.recovered == {"resumed": 2, "failed": 2, "orphans_removed": 2}
    deadline = time.time() + 120
    while runner.pending() and time.time() < deadline:
        time.sleep(0.1)
    runner.stop()
    got = {k: store.get(j.id) for k, j in jobs.items()}
    assert got["queued"].status == "done" and got["running_once"].status == "done"
    assert got["running_once"].attempts == 2
    assert got["lost_file"].status == "failed" and "missing" in got["lost_file"].error
    assert got["crashed_twice"].status == "failed" and "restart" in got["crashed_twice"].error
    assert sorted(uploads.iterdir()) == []  # every upload gone: finished, failed or orphaned
    assert pipeline.store.count_documents("jobsdur") == 2
    store.close()


def _serve(storage: Path, port: int, log: Path) -> subprocess.Popen:
    args = [sys.executable, "-m", "rag", "serve", "--port", str(port), "--set", f"storage.path={storage}",
            "--set", "retrieval.mode=bm25", "--set", "generator.engine.max_model_len=512",
            "--set", "generator.engine.kv_cache_memory=0.25"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    return subprocess.Popen(args, cwd=REPO, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT)


def _wait_ready(base: str, proc: subprocess.Popen, timeout: float = 240, log: Path | None = None) -> None:
    wait_http(base + "/ready", "rag serve did not become ready", timeout, alive=process_alive(proc), log=log)


def test_sigkill_with_queued_uploads_loses_nothing(tmp_path):
    """Catches queued or running jobs lost when the server dies mid-queue: their ids 404 after the
    restart, they are never resumed, or their uploads stay orphaned. The kill must land while jobs
    are unfinished, or the test checks nothing (it would pass if all 12 had finished first)."""
    storage, log, port = tmp_path / "rag", tmp_path / "server.log", _free_port()
    base = f"http://127.0.0.1:{port}"
    proc = _serve(storage, port, log)
    try:
        _wait_ready(base, proc, log=log)
        ids: list[str] = []

        def send(i: int) -> None:
            body = f"# Note {i}\n\nWindmill {i} at Harrowgate grinds {i * 7} sacks a day.\n".encode()
            r = httpx.post(base + "/v1/documents", files={"file": (f"note {i}.md", body)}, timeout=30)
            assert r.status_code == 202, r.text
            ids.append(r.json()["job_id"])

        threads = [threading.Thread(target=send, args=(i,)) for i in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        # Freeze the server, read what its job table says right now, then kill it there.
        os.kill(proc.pid, signal.SIGSTOP)
        db = sqlite3.connect(str(storage / "store.sqlite"), timeout=30)
        unfinished = db.execute("SELECT COUNT(*) FROM jobs WHERE status IN ('queued', 'running')").fetchone()[0]
        db.close()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        assert unfinished >= 1, "every job had finished before the kill: nothing was tested"
    finally:
        if proc.poll() is None:
            proc.kill()

    proc = _serve(storage, port, log)
    try:
        _wait_ready(base, proc, log=log)
        recovered = httpx.get(base + "/ready").json()["jobs_recovered"]
        print(f"unfinished at SIGKILL: {unfinished}; after restart: {recovered}")
        assert recovered["resumed"] == unfinished and recovered["failed"] == 0  # every one picked up
        deadline = time.time() + 180
        while True:
            jobs = [httpx.get(f"{base}/v1/jobs/{i}").json() for i in ids]
            assert all("status" in j for j in jobs), jobs  # no job id 404s after the restart
            if all(j["status"] in ("done", "failed") for j in jobs) or time.time() > deadline:
                break
            time.sleep(0.3)
        assert all(j["status"] == "done" for j in jobs), [(j["status"], j["error"]) for j in jobs]
        names = {d["metadata"].get("filename") for d in
                 httpx.get(base + "/v1/documents", params={"limit": 1000}).json()["documents"]}
        assert {f"note {i}.md" for i in range(12)} <= names  # no document lost
        uploads = storage / "uploads"
        assert not uploads.exists() or not any(uploads.iterdir())  # no orphaned upload
    finally:
        stop(proc, signal.SIGTERM, grace=30)
