"""Issue #16 item 4: while the server rebuilds an index at startup, `/ready` says so with a
percentage instead of `{"ready": false, "error": null}` for minutes."""

from __future__ import annotations

import re
import threading

from fastapi.testclient import TestClient

from rag.config import load_config
from rag.pipeline import Pipeline
from rag.server.app import create_app
from rag.server.state import Progress
from tests.readiness import wait_for


def test_progress_reason_format():
    p = Progress()
    assert p.reason() is None
    p.start("rebuilding collection docs")
    assert p.reason() == "rebuilding collection docs"
    p.update(2, 5)
    assert p.reason() == "rebuilding collection docs: 40%"
    p.finish()
    assert p.reason() is None


def test_ready_reports_rebuild_progress(tmp_path):
    cfg = load_config(None, [f"storage.path={tmp_path}", "retrieval.mode=bm25"])
    pipe = Pipeline(cfg)
    (tmp_path / "a.md").write_text("# A\n\nAlpha text about gliders.\n", encoding="utf-8")
    from rag.app import build_ingestor

    build_ingestor(cfg, pipe.store).ingest([str(tmp_path / "a.md")], collection="docs", progress=False)
    real_sync, reached, release = pipe.retriever.sync, threading.Event(), threading.Event()

    def sync(collection=None, on_progress=None):
        def hold(done: int, total: int) -> None:
            if not done:  # the total, reported before the first batch: "0%"
                on_progress(done, total)
                return
            on_progress(2 * done, 5 * total)  # report 40%, as a long rebuild would midway
            reached.set()
            release.wait(30)
            raise RuntimeError("stop here: the test does not need the language model")

        return real_sync(collection, on_progress=hold)

    pipe.retriever.sync = sync
    app = create_app(cfg, pipeline=pipe, load_in_background=True)
    try:
        with TestClient(app) as client:
            assert reached.wait(60)
            r = client.get("/ready")
            assert r.status_code == 503
            assert r.json()["ready"] is False and r.json()["reason"] == "rebuilding collection docs: 40%"
            err = client.post("/v1/search", json={"query": "gliders"}).json()["error"]
            assert re.search(r"rebuilding collection docs: \d+%", err["message"]) and err["type"] == "unavailable"
            release.set()
            wait_for(lambda: client.get("/ready").json()["error"], "the failed rebuild reached /ready", timeout=30)
            assert "stop here" in client.get("/ready").json()["reason"]
    finally:
        release.set()
        pipe.close()
