"""The Postgres backend against a real server: same results as the in-process backend (BM25 scores,
dense scores, hybrid ranks), SQL filters equal to the Python filter semantics, iterative scans under
selective filters, store changes reaching the indexes, and refusals on a wrong vector dimension."""

from __future__ import annotations

import pytest

from retrieval.collection_index import IndexMismatchError
from retrieval.config import RetrievalConfig
from retrieval.filters import Filters
from retrieval.pg_filters import SQL_FUNCTIONS, filters_sql
from retrieval.pg_index import vector_literal
from retrieval.pg_retriever import PgRetriever
from retrieval.retriever import Retriever

FILTERS = [
    ["topic=sports"], ["topic!=sports"], ["topic=sports|space"], ["year>=2012"], ["year=2003..2007"],
    ["year<2005", "rep=1"], ["date>=2010-01-01", "date<=2014"], ["date<2005"], ["source^=news/finance/"],
    ["title^=Spa"], ["page=1"], ["page!=1"], ["missing=1"], ["missing!=1"], {"metadata.year": 2004},
    {"year": {"gt": "2010", "lt": 2013}}, ["rep=3.0"], ["doc_id=space-0-1"], ["topic>=m"], ["source^=news"],
]


def test_sql_filters_match_python_semantics(pg_topic_store, doc_factory):
    chunks = list(pg_topic_store.iter_chunks("default"))
    tagged = doc_factory("tagged", "a tagged doc", metadata={"tags": ["x", "y"], "n": 3})
    pg_topic_store.upsert(*tagged)
    chunks += tagged[1]
    with pg_topic_store.conn() as db:
        db.execute(SQL_FUNCTIONS)
    for spec in FILTERS + [{"tags": "y"}, {"tags": ["q", "x"]}, ["tags!=x"], ["n=3"], ["n>=2.5"], ["tags^=x"]]:
        flt = Filters.parse(spec)
        want = sorted(c.chunk_id for c in chunks if flt.matches(c))
        sql, args = filters_sql(flt, "c")
        with pg_topic_store.conn() as db:
            got = sorted(r[0] for r in db.execute(f"SELECT chunk_id FROM chunks c WHERE collection = %s{sql}",
                                                  ["default", *args]).fetchall())
        assert got == want, spec


QUERIES = ["astronauts docking with the space station", "interest rates rose", "bread dough yeast",
           "the striker scored a goal in the final"]


def _scores_by_id(local: Retriever, query: str) -> dict[int, float]:
    """Every chunk's in-process BM25 score for the query (the reference the SQL must reproduce)."""
    bm = local.index("default").bm25
    return dict(zip(bm.ids[bm.alive].tolist(), bm.get_scores(local.analyzer(query)).tolist()))


@pytest.mark.parametrize("mode", ["bm25", "dense"])
def test_same_scores_as_in_process_backend(pg_topic_store, topic_store, embedder, tmp_path, mode):
    cfg = RetrievalConfig(mode=mode)
    local = Retriever.from_config(cfg, topic_store, tmp_path / "idx", embedder=embedder)
    pg = PgRetriever.from_config(cfg, pg_topic_store, tmp_path / "unused", embedder=embedder)
    assert pg.sync()["default"]["added"] == 80
    for q in QUERIES:
        a, b = local.search(q, k=10), pg.search(q, k=10)
        # The corpus repeats each sentence 4 times, so equal scores tie; the two backends may order a
        # tie differently, so compare the score sequences and every id above the last tied score.
        sa, sb = [c.score for c in a.candidates], [c.score for c in b.candidates]
        assert sb == pytest.approx(sa, rel=1e-4, abs=1e-5), q
        cut = sa[-1] + 1e-4
        assert {c.chunk_id for c in b.candidates if c.score > cut} == {c.chunk_id for c in a.candidates
                                                                        if c.score > cut}
        if mode == "bm25":
            ref = _scores_by_id(local, q)
            for c in b.candidates:
                assert c.score == pytest.approx(ref[c.chunk.int_id], rel=1e-9), c.chunk_id
    assert pg.sync()["default"]["added"] == 0  # nothing new: no re-embedding


def test_hybrid_candidates_carry_both_ranks(pg_topic_store, topic_store, embedder, tmp_path):
    local = Retriever.from_config({"mode": "hybrid"}, topic_store, tmp_path / "idx", embedder=embedder)
    pg = PgRetriever.from_config({"mode": "hybrid"}, pg_topic_store, tmp_path / "unused", embedder=embedder)
    res = pg.search("astronauts docking with the space station", k=5)
    top = res.candidates[0]
    assert "station" in top.text and set(top.ranks) == {"bm25", "dense"}
    assert top.score == pytest.approx(sum(1 / (60 + rk) for rk in top.ranks.values()))
    assert top.chunk.metadata == local.search("astronauts docking with the space station", k=5).candidates[0].chunk.metadata
    assert {"embed", "bm25", "dense", "fuse", "fetch", "total"} <= set(res.timings_ms)
    many = pg.search_many(["astronauts docking with the space station", "interest rates"], k=5)
    assert [c.chunk_id for c in many[0].candidates] == [c.chunk_id for c in res.candidates]


def test_selective_filters_return_k_with_iterative_scan(pg_topic_store, pg_dsn, embedder, tmp_path):
    hnsw = {"hnsw_ef_search": 4, "hnsw_m": 4}
    PgRetriever.from_config(RetrievalConfig(mode="hybrid", dense=hnsw), pg_topic_store, tmp_path,
                            embedder=embedder).sync()
    # 80 rows would be scanned exactly; make the planner walk the HNSW graph as it would on a big table.
    dbname = pg_dsn.rsplit("/", 1)[1]
    with pg_topic_store.conn() as db:
        db.execute(f'ALTER DATABASE "{dbname}" SET enable_seqscan = off')
        db.execute(f'ALTER DATABASE "{dbname}" SET enable_sort = off')
    pg_topic_store.close()  # the next connection picks the settings up
    r = PgRetriever.from_config(RetrievalConfig(mode="dense", dense=hnsw), pg_topic_store, tmp_path,
                                embedder=embedder)
    q = r.embedder().encode_queries(["rocket launch"])[0]
    flt = Filters.parse({"topic": "finance", "rep": 0})
    sql, args = filters_sql(flt, "c")
    with pg_topic_store.conn() as db, db.transaction():
        db.execute("SET LOCAL hnsw.ef_search = 4")
        plan = "\n".join(r[0] for r in db.execute(
            "EXPLAIN SELECT int_id FROM chunks c WHERE collection = 'default'" + sql + " ORDER BY "
            "embedding <#> %s::vector LIMIT 4", [*args, vector_literal(q)]).fetchall())
        plain = db.execute("SELECT int_id FROM chunks c WHERE collection = 'default'" + sql + " ORDER BY "
                           "embedding <#> %s::vector LIMIT 4", [*args, vector_literal(q)]).fetchall()
    assert "chunks_embedding_hnsw" in plan and len(plain) < 4  # what a filter does to a plain HNSW walk
    res = r.search("rocket launch", k=4, filters={"topic": "finance", "rep": 0})
    assert len(res.candidates) == 4 and {c.chunk.metadata["topic"] for c in res.candidates} == {"finance"}
    for mode in ("bm25", "hybrid"):
        r2 = PgRetriever.from_config(RetrievalConfig(mode=mode), pg_topic_store, tmp_path, embedder=embedder)
        res = r2.search("boil pasta in salted water note", k=5, filters=["topic=sports", "rep=3"])
        assert len(res.candidates) == 5
        assert all(c.chunk.metadata["topic"] == "sports" and c.chunk.metadata["rep"] == 3 for c in res.candidates)
        assert r2.search("pasta", k=3, filters=["topic=nothing"]).candidates == []


def test_store_changes_reach_both_indexes(pg_topic_store, embedder, tmp_path, doc_factory):
    r = PgRetriever.from_config({"mode": "hybrid"}, pg_topic_store, tmp_path, embedder=embedder)
    r.sync()
    doc, chunks = doc_factory("space-0-0", "a submarine dives under the arctic ice", title="Space")
    pg_topic_store.upsert(doc, chunks)
    top = r.search("submarine under arctic ice", k=1).candidates[0]  # auto_sync picks the change up
    assert top.chunk_id == "space-0-0#0" and set(top.ranks) == {"bm25", "dense"}
    assert r.search("rocket low earth orbit", k=80, mode="bm25").candidates[0].chunk_id != "space-0-0#0"
    pg_topic_store.delete("space-0-0")
    ids = {c.chunk_id for c in r.search("submarine under arctic ice", k=80).candidates}
    assert "space-0-0#0" not in ids
    with pg_topic_store.conn() as db:  # postings went with the chunk (cascade), nothing orphaned
        orphans = db.execute("SELECT count(*) FROM rag_postings p WHERE NOT EXISTS (SELECT 1 FROM chunks c "
                             "WHERE c.collection = p.collection AND c.int_id = p.int_id)").fetchone()[0]
        assert orphans == 0
        assert db.execute("SELECT count(*) FROM chunks WHERE index_hash IS NULL").fetchone()[0] == 0


def test_wrong_vector_dimension_is_refused_with_both_numbers(pg_topic_store, embedder, tmp_path):
    with pg_topic_store.conn() as db:
        db.execute("ALTER TABLE chunks ADD COLUMN embedding vector(8)")
    with pytest.raises(IndexMismatchError, match=r"holds 8-dimensional.*produces 384-dimensional"):
        PgRetriever.from_config({"mode": "dense"}, pg_topic_store, tmp_path, embedder=embedder).search("x")
    r = PgRetriever.from_config({"mode": "dense"}, pg_topic_store, tmp_path, embedder=embedder)
    assert r.reindex()["default"]["added"] == 80  # reindex re-creates the column at the embedder's size
    assert r.search("rocket", k=1).candidates


def test_config_change_asks_for_reindex(pg_topic_store, embedder, tmp_path):
    PgRetriever.from_config({"mode": "hybrid"}, pg_topic_store, tmp_path, embedder=embedder).sync()
    r = PgRetriever.from_config({"mode": "hybrid", "include_title": False}, pg_topic_store, tmp_path,
                                embedder=embedder)
    with pytest.raises(IndexMismatchError, match="include_title"):
        r.search("rocket")
