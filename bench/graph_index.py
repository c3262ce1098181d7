"""Entity-graph index cost (issue 26): BM25, BM25 + dense, and the stored graph on the same chunks.

Ingests a BEIR corpus.jsonl into a fresh SQLite store, then times `Retriever.reindex` for BM25 and
BM25 + dense (cold embedding cache), the graph sync into the store's tables without and with entity
embeddings, an incremental delete of 10% of the documents and their re-add (and checks the re-added
graph equals the full build), and optionally LLM triple extraction throughput (chunks/s) with a
packaged model. Run (the lead's box, nothing else running):

    .venv/bin/python bench/graph_index.py --json graph_index.json
    .venv/bin/python bench/graph_index.py --llm-chunks 64 --model qwen2.5-0.5b

Smoke: `--dataset DIR --limit 30`. Needs ../shared/datasets/hotpotqa_pooled by default.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from indexing.store import DocumentStore  # noqa: E402
from retrieval.config import RetrievalConfig  # noqa: E402
from retrieval.graph import GraphIndex  # noqa: E402
from retrieval.retriever import Retriever  # noqa: E402

DATA = REPO.parent / "shared" / "datasets" / "hotpotqa_pooled"


def _timed(fn) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", type=Path, default=DATA)
    ap.add_argument("--limit", type=int, default=None, help="first N documents only (smoke runs)")
    ap.add_argument("--llm-chunks", type=int, default=0, help="chunks to extract triples from with --model")
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    corpus = a.dataset / "corpus.jsonl"
    if not corpus.exists():
        print(f"skipped: {corpus} is absent")
        return 0
    from indexing.pipeline import Ingestor
    from rag.app import indexing_config
    from rag.config import load_config

    cfg = load_config(None, [f"generator.engine.model={a.model}"])
    out: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmpd = Path(tmp)
        lines = corpus.read_text(encoding="utf-8").splitlines()[: a.limit]
        part = tmpd / "corpus.jsonl"
        part.write_text("\n".join(lines) + "\n", encoding="utf-8")
        store = DocumentStore(tmpd / "store.sqlite")
        Ingestor(store, indexing_config(cfg)).ingest([str(part)], progress=False)
        chunks = [(c.int_id, c.text, c.title) for c in store.iter_chunks()]
        out["documents"], out["chunks"] = store.count_documents(), len(chunks)
        out["bm25_s"], _ = _timed(lambda: Retriever.from_config({"mode": "bm25"}, store, tmpd / "i1").reindex())
        out["bm25_dense_s"], _ = _timed(lambda: Retriever.from_config({"mode": "hybrid"}, store, tmpd / "i2",
                                                                      cache_path=tmpd / "emb.sqlite").reindex())
        r = Retriever.from_config({"mode": "hybrid"}, store, tmpd / "i3", cache_path=tmpd / "emb-graph.sqlite")
        for emb in (False, True):
            gcfg = RetrievalConfig.model_validate({"graph": {"enabled": True, "entity_embeddings": emb}}).graph
            g = GraphIndex(gcfg)
            secs, st = _timed(lambda g=g, gcfg=gcfg: g.sync(store, "default", chunks, 1, rebuild=True,
                                                            embedder=lambda: r.embedder_for("default")))
            out[f"graph_s{'_with_entity_embeddings' if emb else ''}"] = secs
        out["graph_stats"] = {k: v for k, v in g.stats().items() if k != "largest_communities"}
        out["graph_vs_bm25_dense"] = out["graph_s_with_entity_embeddings"] / out["bm25_dense_s"]
        full = g.signature()
        docs = sorted({c.doc_id for c in store.iter_chunks()})
        gone = docs[: max(1, len(docs) // 10)]
        saved = {d: (store.get_document(d), list(store.iter_chunks(doc_id=d))) for d in gone}
        for d in gone:
            store.delete(d)
        now = [(c.int_id, c.text, c.title) for c in store.iter_chunks()]
        out["delete_10pct_sync_s"], _ = _timed(lambda: g.sync(store, "default", now, 2, embedder=lambda: r.embedder_for("default")))
        from indexing.types import Document

        for doc, chs in saved.values():
            meta = {k: doc[k] for k in ("doc_id", "source", "title", "date", "metadata", "text")}
            store.upsert(Document(**meta), chs)
        out["readd_10pct_sync_s"], _ = _timed(lambda: g.sync(store, "default", chunks, 3, embedder=lambda: r.embedder_for("default")))
        out["readd_equals_full_build"] = g.signature() == full
        if a.llm_chunks:
            from rag.generation import build_generator
            from rag.graph_llm import EngineGraphLLM

            gen = build_generator(cfg.generator)
            lcfg = RetrievalConfig.model_validate({"graph": {"enabled": True, "extractor": "llm"}}).graph
            llm = EngineGraphLLM(lambda: gen, lcfg)
            lg = GraphIndex(lcfg)
            secs, st = _timed(lambda: lg.sync(store, "llm", chunks[: a.llm_chunks], 1, rebuild=True, llm=llm))
            out["llm"] = {"model": a.model, "chunks": a.llm_chunks, "seconds": secs,
                          "chunks_per_s": a.llm_chunks / secs, "skipped_replies": st.skipped_replies,
                          "triples": lg.stats()["triples"]}
            gen.close()
        store.close()
    print(json.dumps(out, indent=1))
    if a.json:
        a.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
