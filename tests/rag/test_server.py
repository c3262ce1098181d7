"""The REST server over real HTTP: uvicorn on 127.0.0.1, the session pipeline behind it."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest

from rag.server.state import Admission
from tests.readiness import wait_for


def sse_events(text: str) -> list[tuple[str, dict]]:
    out = []
    for block in text.strip().split("\n\n"):
        ev = data = None
        for line in block.splitlines():
            if line.startswith("event: "):
                ev = line[7:]
            elif line.startswith("data: "):
                data = line[6:]
        if data and data != "[DONE]":
            out.append((ev, json.loads(data)))
    return out


def wait_no_blocks(base: str, timeout: float = 30.0) -> dict:
    deadline = time.time() + timeout
    while True:
        cache = httpx.get(base + "/v1/cache").json()
        if cache["kv_blocks_used"] == 0 or time.time() > deadline:
            return cache
        time.sleep(0.2)


def test_health_ready_models(server):
    base, _ = server
    assert httpx.get(base + "/health").json() == {"status": "ok"}
    ready = httpx.get(base + "/ready").json()
    assert ready["ready"] is True and ready["documents"] >= 6
    assert httpx.get(base + "/v1/models").json()["data"][0]["id"] == "ragstack"
    assert httpx.get(base + "/docs").status_code == 200


def test_ask_json_and_stream(server):
    base, _ = server
    r = httpx.post(base + "/v1/ask", json={"question": "What is the capital city of Zarnovia?"}, timeout=120)
    assert r.status_code == 200, r.text
    body = r.json()
    assert "Velmora" in body["text"] and body["citations"] and body["passages"]
    assert {"retrieve", "prefill", "decode", "total"} <= set(body["timings_ms"])
    r = httpx.post(base + "/v1/ask", json={"question": "What is the capital city of Quintara?", "stream": True,
                                           "options": {"passages": False}}, timeout=120)
    events = sse_events(r.text)
    deltas = [d["text"] for e, d in events if e == "delta"]
    final = [d for e, d in events if e == "final"]
    assert len(final) == 1 and "passages" not in final[0]
    # a grounded long answer (the default) streams each sentence once judged: one delta or more
    assert "".join(deltas) == final[0]["text"] and len(deltas) >= 1


def test_search(server):
    base, _ = server
    r = httpx.post(base + "/v1/search", json={"query": "drone flight time", "top_k": 3, "mode": "bm25"})
    res = r.json()["results"]
    # BM25 returns only chunks that share a term with the query: the two drone manuals
    assert len(res) == 2 and all("/products/xr" in x["metadata"]["source"] for x in res)
    assert all(x["ranks"] == {"bm25": i + 1} for i, x in enumerate(res))


def test_validation_errors_name_the_field(server):
    base, _ = server
    r = httpx.post(base + "/v1/ask", json={"question": "hi", "bogus": 1})
    assert r.status_code == 422 and r.json()["error"]["field"] == "bogus"
    r = httpx.post(base + "/v1/ask", json={"question": "hi", "options": {"max_tokens": 10_000}})
    assert r.status_code == 422 and r.json()["error"]["field"] == "options.max_tokens"
    r = httpx.post(base + "/v1/ask", json={"question": "x" * 3000})
    assert r.status_code == 413 and r.json()["error"]["field"] == "question"
    r = httpx.post(base + "/v1/ask", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 422


def test_oversize_body_is_413(server):
    base, _ = server
    r = httpx.post(base + "/v1/documents", json={"text": "a" * 100_000})
    assert r.status_code == 413 and r.json()["error"]["field"] == "body"


def test_document_lifecycle(server, tmp_path):
    base, app = server
    r = httpx.post(base + "/v1/documents", json={"text": "The Lorvik glacier melts 3 metres each summer.",
                                                 "title": "Lorvik", "doc_id": "lorvik-1",
                                                 "metadata": {"topic": "ice"}})
    assert r.status_code == 202
    job = _wait_job(base, r.json()["job_id"])
    assert job["status"] == "done" and job["report"]["new"] == 1
    doc = httpx.get(base + "/v1/documents/lorvik-1").json()
    assert doc["title"] == "Lorvik" and doc["metadata"]["topic"] == "ice"
    hits = httpx.post(base + "/v1/search", json={"query": "Lorvik glacier", "top_k": 1}).json()["results"]
    assert hits[0]["doc_id"] == "lorvik-1"
    # multipart upload: the client's file name never reaches the filesystem
    r = httpx.post(base + "/v1/documents", files={"file": ("../../evil name.md", b"# Kestrel\n\nKestrels hover.\n")},
                   data={"metadata": json.dumps({"team": "birds"})})
    job = _wait_job(base, r.json()["job_id"])
    assert job["status"] == "done"
    uploads = app.state.rag.cfg.storage_path / "uploads"
    assert all("evil" not in p.name for p in uploads.iterdir())
    r = httpx.post(base + "/v1/documents", files={"file": ("x.exe", b"MZ")})
    assert r.status_code == 415 and r.json()["error"]["field"] == "file"
    listed = httpx.get(base + "/v1/documents", params={"limit": 1000}).json()
    assert any(d["doc_id"] == "lorvik-1" for d in listed["documents"])
    assert httpx.delete(base + "/v1/documents/lorvik-1").json()["deleted"] == 1
    assert httpx.get(base + "/v1/documents/lorvik-1").status_code == 404
    hits = httpx.post(base + "/v1/search", json={"query": "Lorvik glacier", "top_k": 3}).json()["results"]
    assert all(h["doc_id"] != "lorvik-1" for h in hits)


def test_an_upload_that_cannot_be_indexed_fails_with_the_reason_and_changes_nothing(server):
    """Bugs caught: an empty file reported "done" with nothing stored (the page would say it was
    indexed), a broken PDF's loader error not reaching the job, and a failed upload touching the
    documents or the index already there."""
    base, _ = server
    before = httpx.get(base + "/v1/documents", params={"limit": 1000}).json()
    hits_before = httpx.post(base + "/v1/search", json={"query": "capital city of Zarnovia", "top_k": 3}).json()
    for name, body, words in [("empty notes.md", b"   \n\n", "no text"),
                              ("broken.pdf", b"%PDF-1.4 this is not a pdf", "unreadable PDF")]:
        r = httpx.post(base + "/v1/documents", files={"file": (name, body)})
        assert r.status_code == 202, r.text
        job = _wait_job(base, r.json()["job_id"])
        assert job["status"] == "failed" and words in job["error"], job
    r = httpx.post(base + "/v1/documents", files={"file": ("notes.docx", b"PK")})
    assert r.status_code == 415 and ".docx" in r.json()["error"]["message"]
    assert httpx.get(base + "/v1/documents", params={"limit": 1000}).json() == before
    hits_after = httpx.post(base + "/v1/search", json={"query": "capital city of Zarnovia", "top_k": 3}).json()
    assert [h["chunk_id"] for h in hits_after["results"]] == [h["chunk_id"] for h in hits_before["results"]]


def _wait_job(base: str, job_id: str) -> dict:
    def finished() -> dict | None:
        job = httpx.get(f"{base}/v1/jobs/{job_id}").json()
        return job if job["status"] in ("done", "failed") else None

    return wait_for(finished, f"job {job_id} did not finish", timeout=120)


def test_openai_client_chat_and_completions(server):
    openai = pytest.importorskip("openai")
    base, _ = server
    client = openai.OpenAI(base_url=base + "/v1", api_key="unused")
    resp = client.chat.completions.create(model="ragstack", messages=[{"role": "user", "content": "Say hi."}],
                                          max_tokens=8, temperature=0)
    assert resp.choices[0].message.content and resp.usage.completion_tokens >= 1
    chunks = list(client.chat.completions.create(model="ragstack", stream=True, max_tokens=8, temperature=0,
                                                 messages=[{"role": "user", "content": "Say hi."}]))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == resp.choices[0].message.content
    comp = client.completions.create(model="ragstack", prompt="The capital of France is", max_tokens=4,
                                     temperature=0)
    assert comp.choices[0].text
    rag = client.chat.completions.create(model="ragstack", max_tokens=30, temperature=0,
                                         messages=[{"role": "user", "content": "What is the capital city of Zarnovia?"}],
                                         extra_body={"rag": True})
    assert "Velmora" in rag.choices[0].message.content
    assert rag.model_extra["rag"]["citations"]


def test_chat_answer_says_the_parts_it_was_made_of(server):
    """Bug caught: the chat API (what the page reads) dropping a comparison's parts, so a client
    shows "the XR-300 [1][2]" with no sign of the two values behind it."""
    base, _ = server
    r = httpx.post(base + "/v1/chat/completions", timeout=120, json={
        "messages": [{"role": "user", "content": "Which drone has a longer flight time, the XR-200 or the XR-300?"}],
        "rag": {"mode": "short"}})
    rag = r.json()["rag"]
    assert rag["comparison"]["used"] is True, rag["comparison"]
    assert "42 minutes" in rag["comparison"]["answers"][0] and len(rag["comparison"]["sub_questions"]) == 2
    assert rag["two_hop"] == {}


def test_json_schema_response_format(server):
    base, _ = server
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}}}
    r = httpx.post(base + "/v1/chat/completions", timeout=60, json={
        "messages": [{"role": "user", "content": "Name a city as JSON."}], "max_tokens": 20, "temperature": 0,
        "response_format": {"type": "json_schema", "json_schema": {"name": "c", "schema": schema}}})
    assert set(json.loads(r.json()["choices"][0]["message"]["content"])) == {"city"}


def test_32_concurrent_clients_all_answered(server):
    base, _ = server

    async def run():
        async with httpx.AsyncClient(timeout=300) as c:
            qs = ["What is the capital city of Zarnovia?", "How long does the XR-300 fly?",
                  "What does a leather couch cost?", "What is sold with oak dining tables?"]
            rs = await asyncio.gather(*(c.post(base + "/v1/ask", json={"question": qs[i % 4],
                                                                       "options": {"max_tokens": 8}})
                                        for i in range(32)))
            return rs

    rs = asyncio.run(run())
    assert [r.status_code for r in rs] == [200] * 32
    assert all(r.json()["text"] for r in rs)
    assert wait_no_blocks(base)["kv_blocks_used"] == 0


def test_client_killed_mid_stream_frees_blocks(server):
    base, _ = server
    with httpx.stream("POST", base + "/v1/ask", timeout=120,
                      json={"question": "What is the capital city of Zarnovia?", "stream": True,
                            "options": {"max_tokens": 200}}) as r:
        for line in r.iter_lines():
            if line.startswith("event: delta"):
                break  # leave after the first delta: the connection is closed here
    cache = wait_no_blocks(base)
    assert cache["kv_blocks_used"] == 0 and cache["running"] == 0


def test_backpressure_429(server):
    base, app = server
    st = app.state.rag
    old = st.admission
    st.admission = Admission(1, 0, 3, st.registry)
    try:
        async def run():
            async with httpx.AsyncClient(timeout=120) as c:
                return await asyncio.gather(*(c.post(base + "/v1/ask", json={"question": "Zarnovia capital?",
                                                                             "options": {"max_tokens": 16}})
                                              for _ in range(4)))
        rs = asyncio.run(run())
    finally:
        st.admission = old
    codes = sorted(r.status_code for r in rs)
    assert 200 in codes and 429 in codes
    assert all(r.headers["retry-after"] == "3" for r in rs if r.status_code == 429)


def test_auth(server, monkeypatch):
    base, app = server
    monkeypatch.setattr(app.state.rag.server, "api_keys", ["s3cret"])
    assert httpx.get(base + "/v1/documents").status_code == 401
    assert httpx.get(base + "/v1/documents", headers={"Authorization": "Bearer nope"}).status_code == 401
    assert httpx.get(base + "/v1/documents", headers={"Authorization": "Bearer s3cret"}).status_code == 200
    assert httpx.get(base + "/health").status_code == 200  # liveness stays open
    monkeypatch.setenv("RAG_API_KEYS", "k2, k3")
    assert httpx.get(base + "/v1/documents", headers={"Authorization": "Bearer k3"}).status_code == 200


def test_cache_endpoints_and_metrics(server):
    from prometheus_client.parser import text_string_to_metric_families

    base, _ = server
    httpx.post(base + "/v1/ask", json={"question": "What is the capital city of Quintara?",
                                       "options": {"max_tokens": 8}}, timeout=120)
    cache = httpx.get(base + "/v1/cache").json()
    assert cache["kv_blocks_cached"] > 0 and cache["top_prefixes"]
    saved = httpx.post(base + "/v1/cache/save").json()["saved_blocks"]
    assert saved > 0
    assert httpx.post(base + "/v1/cache/clear").json()["cleared_blocks"] > 0
    assert httpx.post(base + "/v1/cache/restore").json()["restored_blocks"] == saved
    text = httpx.get(base + "/metrics").text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert "rag_http_requests" in families and "rag_stage_duration_seconds" in families
    assert "rag_engine_kv_blocks_free" in families and "rag_engine_prefix_cache_hit_rate" in families
    samples = [s for s in families["rag_http_requests"].samples if s.labels.get("endpoint") == "/v1/ask"]
    assert samples and sum(s.value for s in samples) >= 1
