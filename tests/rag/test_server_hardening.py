"""Issue #16 item 2, 5, 6: bad inputs get a 4xx in one JSON shape that names the field; metric
labels stay bounded; uploads are cited by their original names and leave no files behind."""

from __future__ import annotations

import time
import uuid

import httpx
import pytest


def assert_error(r: httpx.Response, status: int, field: str | None) -> dict:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    err = r.json()["error"]
    assert set(err) >= {"message", "field", "type", "errors"} and err["message"]
    assert err["field"] == field, err
    assert err["errors"][0]["field"] == field
    return err


@pytest.mark.parametrize("body, field", [
    ({"title": "no text"}, "text"),
    ({"text": 5}, "text"),
    ({"text": "ok", "bogus": 1}, "bogus"),
    ({"text": ""}, "text"),
    ({"text": "ok", "collection": "../etc"}, "collection"),
    (["not", "an", "object"], "body"),
])
def test_document_json_validation_is_422_naming_the_field(server, body, field):
    # was: a plain-text 500 and a reset connection (pydantic error raised inside the route)
    base, _ = server
    assert_error(httpx.post(base + "/v1/documents", json=body), 422, field)


def test_chunked_oversize_body_is_413(server):
    # was: 500 (an ExceptionGroup around the size-limit signal); no Content-Length here
    base, _ = server

    def chunks():
        for _ in range(40):
            yield b"x" * 4096

    r = httpx.post(base + "/v1/documents", content=chunks(), headers={"content-type": "application/json"})
    assert_error(r, 413, "body")


def test_missing_and_malformed_bodies_name_body_or_field(server):
    base, _ = server
    assert_error(httpx.post(base + "/v1/search", json={"top_k": 3}), 422, "query")  # was: field null
    assert_error(httpx.post(base + "/v1/search"), 422, "body")
    r = httpx.post(base + "/v1/search", content=b'{"query": "drone", oops}', headers={"content-type": "application/json"})
    assert_error(r, 422, "body")  # was: field "18" (the character offset)
    r = httpx.post(base + "/v1/documents", content=b"{nope", headers={"content-type": "application/json"})
    assert_error(r, 422, "body")


def test_bad_filters_and_unknown_collection(server):
    base, _ = server
    assert_error(httpx.post(base + "/v1/search", json={"query": "drone", "filters": {"year": {"bogus": 1}}}),
                 422, "filters")
    assert_error(httpx.post(base + "/v1/search", json={"query": "drone", "filters": {"tag": {"in": 5}}}),
                 422, "filters")
    assert_error(httpx.post(base + "/v1/ask", json={"question": "drone?", "filters": ["no operator"]}),
                 422, "filters")
    err = assert_error(httpx.post(base + "/v1/search", json={"query": "drone", "collection": "nope"}),
                       404, "collection")
    assert "default" in err["message"]  # the hint lists the collections that do exist


def test_graph_mode_without_a_graph_index_is_409_not_500(server):
    """Catches `mode: graph` on a collection indexed without the graph escaping as a 500 (found by
    the API fuzzer): it is a valid request the index cannot serve, so 409 naming `mode` and the
    fix (reindex)."""
    base, _ = server
    err = assert_error(httpx.post(base + "/v1/search", json={"query": "drone", "mode": "graph"}), 409, "mode")
    assert "reindex" in err["message"]
    assert httpx.post(base + "/v1/search", json={"query": "drone", "mode": "hybrid"}).status_code == 200


def test_framework_errors_share_the_shape(server):
    base, _ = server
    assert_error(httpx.get(base + "/v1/nothing-here"), 404, "path")
    assert_error(httpx.post(base + "/v1/documents", content=b"garbage",
                            headers={"content-type": "multipart/form-data; boundary=xx"}), 400, "body")
    assert_error(httpx.get(base + "/v1/search"), 405, "method")
    assert_error(httpx.get(base + f"/v1/jobs/{uuid.uuid4().hex}"), 404, "job_id")
    assert_error(httpx.get(base + "/v1/documents", params={"limit": "many"}), 422, "limit")
    # found by the fuzzer: an offset past SQLite's 64-bit integers was an OverflowError (500)
    assert_error(httpx.get(base + "/v1/documents", params={"offset": str(2**70)}), 422, "offset")


def test_metrics_labels_are_route_templates(server):
    # was: every job id became its own `endpoint` label (unbounded cardinality)
    base, _ = server
    ids = [uuid.uuid4().hex for _ in range(3)]
    for i in ids:
        httpx.get(f"{base}/v1/jobs/{i}")
    httpx.get(base + "/v1/documents/some/doc-id")
    text = httpx.get(base + "/metrics").text
    assert not any(i in text for i in ids) and "some/doc-id" not in text
    assert 'endpoint="/v1/jobs/{job_id}"' in text and 'endpoint="/v1/documents/{doc_id}"' in text


def _wait_job(base: str, job_id: str) -> dict:
    deadline = time.time() + 120
    while time.time() < deadline:
        job = httpx.get(f"{base}/v1/jobs/{job_id}").json()
        if job["status"] in ("done", "failed"):
            return job
        time.sleep(0.1)
    raise AssertionError("job did not finish")


def test_upload_is_cited_by_its_original_name_and_cleaned_up(server):
    base, app = server
    text = b"# Ferrow lighthouse\n\nThe Ferrow lighthouse keeper is named Ansel Quill.\n"
    r = httpx.post(base + "/v1/documents", files={"file": ("Ferrow notes.md", text)})
    assert r.status_code == 202
    job = _wait_job(base, r.json()["job_id"])
    assert job["status"] == "done" and job["filename"] == "Ferrow notes.md" and "path" not in job
    hit = httpx.post(base + "/v1/search", json={"query": "Ferrow lighthouse keeper", "top_k": 1}).json()["results"][0]
    assert hit["metadata"]["filename"] == "Ferrow notes.md"
    ans = httpx.post(base + "/v1/ask", json={"question": "Who keeps the Ferrow lighthouse?",
                                             "options": {"max_tokens": 16}}, timeout=120).json()
    cited = [c for c in ans["citations"] if "Ferrow" in (c["title"] + c["source"])]
    assert cited and all(c["source"] == "Ferrow notes.md" for c in cited)  # not .rag/uploads/<uuid>.md
    uploads = app.state.rag.cfg.storage_path / "uploads"
    assert not any(uploads.iterdir())  # the upload is removed once its job ends
    httpx.delete(base + f"/v1/documents/{hit['doc_id']}")
