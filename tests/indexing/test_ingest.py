"""The ingest pipeline end to end on generated files: metadata on stored chunks, idempotent
re-ingest, update, delete, config changes, and bad files reported while the rest is indexed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from indexing.config import (
    ChunkingConfig,
    CleaningConfig,
    IndexingConfig,
    RecursiveSpec,
    SlidingSpec,
    SmallToBigSpec,
)
from indexing.pipeline import Ingestor
from indexing.store import DocumentStore


def small_cfg(near_dedup: str = "off", verify: str = "containment", **chunking) -> IndexingConfig:
    # The corpus below reuses one paragraph on purpose, so near-dedup is off unless tested.
    return IndexingConfig(
        cleaning=CleaningConfig(near_dedup=near_dedup, near_dedup_verify=verify),
        chunking=ChunkingConfig(**chunking) if chunking else ChunkingConfig(
            chunkers=[RecursiveSpec(chunk_size=64, overlap=16), SmallToBigSpec(child_size=32, child_overlap=0)]))


@pytest.fixture
def corpus(tmp_path: Path, en_text: str, zh_text: str, two_page_pdf) -> Path:
    root = tmp_path / "corpus"
    root.mkdir()
    (root / "guide.md").write_text(f"---\ntitle: Guide\ndate: 2024-05-01\n---\n# Setup\n{en_text}\n## Linux\n{en_text}",
                                   encoding="utf-8")
    (root / "zh.txt").write_text(zh_text * 3, encoding="utf-8")
    (root / "page.html").write_text(f"<title>Page</title><p>{en_text}</p><script>x()</script>", encoding="utf-8")
    two_page_pdf(root / "report.pdf")
    rows = [{"_id": f"r{i}", "title": f"Record {i}", "text": f"Record number {i}. " + en_text,
             "metadata": {"year": 2000 + i}} for i in range(3)]
    (root / "records.jsonl").write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    return root


def test_ingest_metadata_and_idempotence(tmp_path: Path, corpus: Path):
    with DocumentStore(tmp_path / "s.sqlite") as store:
        ing = Ingestor(store, small_cfg())
        r1 = ing.ingest([corpus], collection="c", progress=False)
        assert (r1.new, r1.changed, r1.unchanged, r1.failed) == (7, 0, 0, [])
        assert set(r1.chunks) == {"recursive-64", "child-32", "parent-512"}
        assert store.count_documents("c") == 7
        assert store.count_chunks("c") == sum(r1.chunks.values())
        for d in store.list_documents("c"):
            assert len(list(store.iter_chunks("c", doc_id=d["doc_id"]))) == d["n_chunks"]

        pdf_chunks = [c for c in store.iter_chunks("c", granularity="child-32") if c.source.endswith(".pdf")]
        assert {c.page for c in pdf_chunks} == {1, 2} and all(c.title == "Test PDF" for c in pdf_chunks)
        (whole,) = [c for c in store.iter_chunks("c", granularity="recursive-64") if c.source.endswith(".pdf")]
        assert whole.page == 1 and whole.metadata["page_end"] == 2
        md = [c for c in store.iter_chunks("c", granularity="recursive-64") if c.source.endswith(".md")]
        assert {c.section for c in md} == {"Setup", "Setup > Linux"} and md[0].date == "2024-05-01"
        assert {c.language for c in store.iter_chunks("c") if c.source.endswith("zh.txt")} == {"zh"}
        rec = list(store.iter_chunks("c", doc_id="r1"))
        assert rec[0].metadata["year"] == 2001 and rec[0].title == "Record 1"
        children = list(store.iter_chunks("c", granularity="child-32"))
        parents = {c.chunk_id for c in store.iter_chunks("c", granularity="parent-512")}
        assert children and all(c.parent_id in parents for c in children)

        r2 = ing.ingest([corpus], collection="c", progress=False)
        assert (r2.new, r2.changed, r2.unchanged) == (0, 0, 7) and not r2.chunks
        assert r2.timings["chunk"] == 0.0  # unchanged documents are never chunked


def test_update_delete_and_config_change(tmp_path: Path, corpus: Path, en_text: str):
    with DocumentStore(tmp_path / "s.sqlite") as store:
        Ingestor(store, small_cfg()).ingest([corpus], progress=False)
        version = store.version()
        zh = corpus / "zh.txt"
        zh.write_text("A completely new text. It replaced the Chinese one.", encoding="utf-8")
        r = Ingestor(store, small_cfg()).ingest([corpus], progress=False)
        assert (r.new, r.changed, r.unchanged) == (0, 1, 6)
        assert store.version() > version
        (doc,) = [d for d in store.list_documents() if d["source"] == str(zh.resolve())]
        texts = [c.text for c in store.iter_chunks(doc_id=doc["doc_id"])]
        assert texts and all("Chinese" in t or "new text" in t for t in texts)

        assert store.delete(doc["doc_id"]) == 1
        assert list(store.iter_chunks(doc_id=doc["doc_id"])) == []
        assert store.delete_source(str((corpus / "records.jsonl").resolve())) == 3
        assert store.count_documents() == 3
        r = Ingestor(store, small_cfg()).ingest([corpus], progress=False)
        assert (r.new, r.changed, r.unchanged) == (4, 0, 3)

        # Other chunk settings: every document is re-cut, old granularities disappear.
        cfg = small_cfg(chunkers=[SlidingSpec(chunk_size=100, overlap=10)])
        r = Ingestor(store, cfg).ingest([corpus], progress=False)
        assert (r.new, r.changed, r.unchanged) == (0, 7, 0)
        assert store.granularities() == ["sliding-100"]


def test_bad_files_reported_and_others_indexed(tmp_path: Path, corpus: Path):
    (corpus / "broken.pdf").write_bytes(b"%PDF-1.7\n1 0 obj <<>> garbage")
    (corpus / "binary.txt").write_bytes(b"\x00\x01\x02\xff" * 10)
    (corpus / "records.jsonl").open("a", encoding="utf-8").write("\n{bad json\n")
    with DocumentStore(tmp_path / "s.sqlite") as store:
        r = Ingestor(store, small_cfg()).ingest([corpus, tmp_path / "nope.md"], progress=False)
    assert r.new == 7 and not r.ok
    failed = {Path(f.path.split(":")[0]).name: f.reason for f in r.failed}
    assert set(failed) == {"broken.pdf", "binary.txt", "records.jsonl", "nope.md"}
    summary = r.summary()
    assert "7 new" in summary and "4 failed" in summary and "broken.pdf" in summary


def test_duplicates_dropped_and_counted(tmp_path: Path, en_text: str):
    for name in ("a.txt", "b.txt"):
        (tmp_path / name).write_text(en_text * 3, encoding="utf-8")
    (tmp_path / "c.txt").write_text((en_text * 3).replace("Chunking", "Splitting"), encoding="utf-8")
    with DocumentStore(tmp_path / "s.sqlite") as store:
        r = Ingestor(store, small_cfg("minhash", "none")).ingest(
            [tmp_path / "a.txt", tmp_path / "b.txt", tmp_path / "c.txt"], progress=False)
    assert r.new == 1 and r.dropped == {"exact_duplicate": 1, "near_duplicate": 1}
    assert "exact_duplicate=1" in r.summary()
    # Next run: a is unchanged (never re-chunked), a new near-copy is still caught against it.
    (tmp_path / "d.txt").write_text((en_text * 3).replace("generation", "generating"), encoding="utf-8")
    with DocumentStore(tmp_path / "s.sqlite") as store:
        r = Ingestor(store, small_cfg("minhash", "none")).ingest([tmp_path / "a.txt", tmp_path / "d.txt"],
                                                         progress=False)
    assert (r.new, r.unchanged) == (0, 1) and r.dropped == {"near_duplicate": 1}
    # The default containment check keeps a copy with a word substituted (it may be another
    # templated document) but still drops one with a footer added.
    (tmp_path / "e.txt").write_text(en_text * 3 + "\nPrinted from the wiki.", encoding="utf-8")
    with DocumentStore(tmp_path / "t.sqlite") as store:
        r = Ingestor(store, small_cfg("minhash")).ingest([tmp_path / "a.txt", tmp_path / "c.txt", tmp_path / "e.txt"],
                                                progress=False)
    assert r.new == 2 and r.dropped == {"near_duplicate": 1}  # c kept, e dropped


def test_preview_does_not_touch_the_store(tmp_path: Path, corpus: Path):
    with DocumentStore(tmp_path / "s.sqlite") as store:
        docs, chunks, errors = Ingestor(store, small_cfg()).preview(corpus / "guide.md")
        assert len(docs) == 1 and chunks[0] and not errors
        assert store.count_documents() == 0


def test_prune_removes_what_the_inputs_no_longer_hold(tmp_path: Path, corpus: Path):
    with DocumentStore(tmp_path / "s.sqlite") as store:
        ing = Ingestor(store, small_cfg())
        ing.ingest([corpus], progress=False)
        records = corpus / "records.jsonl"
        kept_rows = records.read_text(encoding="utf-8").splitlines()[:2]
        (corpus / "page.html").unlink()
        # A file with load errors is never pruned from: r2 may just be unreadable right now.
        records.write_text("\n".join(kept_rows + ["{broken"]), encoding="utf-8")
        r = ing.ingest([corpus], progress=False, prune=True)
        assert r.pruned == 1 and store.get_document("r2") is not None
        records.write_text("\n".join(kept_rows), encoding="utf-8")
        r = ing.ingest([corpus], progress=False, prune=True)
        assert r.pruned == 1 and store.get_document("r2") is None and "1 pruned" in r.summary()
        assert store.count_documents() == 5
        other = tmp_path / "other.txt"  # outside the pruned paths: untouched
        other.write_text("Another document entirely.", encoding="utf-8")
        ing.ingest([other], progress=False)
        assert ing.ingest([corpus / "zh.txt"], progress=False, prune=True).pruned == 0
        assert store.count_documents() == 6


def test_a_document_that_breaks_chunking_fails_alone(tmp_path: Path, monkeypatch):
    # A buggy user filter hands the chunkers a non-text body for one document.
    (tmp_path / "buggyfilter.py").write_text(
        "def to_bytes(doc):\n    if 'BREAK' in doc.text:\n        doc.text = doc.text.encode()\n    return doc\n",
        encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    for i, body in enumerate(["First fine document.", "This one will BREAK the chunker.", "Third fine one."]):
        (tmp_path / f"d{i}.txt").write_text(body, encoding="utf-8")
    cfg = small_cfg().model_copy(deep=True)
    cfg.cleaning = CleaningConfig(filters=["buggyfilter:to_bytes"], exact_dedup=False, near_dedup="off")
    with DocumentStore(tmp_path / "s.sqlite") as store:
        r = Ingestor(store, cfg).ingest(sorted(tmp_path.glob("d*.txt")), progress=False)
        assert r.new == 2 and len(r.failed) == 1 and "chunking failed" in r.failed[0].reason
        assert store.count_documents() == 2


def test_dedup_against_the_store_and_safe_renames(tmp_path: Path, en_text: str):
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text(en_text * 2, encoding="utf-8")
    copy = tmp_path / "copy.txt"
    copy.write_text(en_text * 2, encoding="utf-8")
    with DocumentStore(tmp_path / "s.sqlite") as store:
        ing = Ingestor(store, small_cfg("minhash"))
        assert ing.ingest([src], progress=False).new == 1
        r = ing.ingest([copy], progress=False)  # a copy of a stored file, indexed on its own
        assert r.new == 0 and r.dropped == {"exact_duplicate": 1}
        # Renamed under a pruned path: the new name is indexed, the old one pruned, nothing lost.
        (src / "a.txt").rename(src / "b.txt")
        r = ing.ingest([src], progress=False, prune=True)
        assert (r.new, r.pruned, dict(r.dropped)) == (1, 1, {})
        assert [Path(d["source"]).name for d in store.list_documents()] == ["b.txt"]
