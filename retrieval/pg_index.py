"""Dense and keyword indexes of one collection inside PostgreSQL, next to the chunks they index.

Dense: a pgvector `embedding vector(dim)` column on `chunks` with one HNSW index (inner product;
embeddings are L2-normalised, so that is cosine). Filtered kNN runs with pgvector's iterative
index scan (`hnsw.iterative_scan = relaxed_order`, re-sorted outside), so a selective filter still
returns k rows instead of the few that survived the first `ef_search` candidates.

Keyword: our own analyzer's terms (stemmed English words, CJK bigrams + unigrams) in a postings
table `rag_postings(collection, term, int_id, tf, dl)`, scored with Okapi BM25 in one SQL query,
with the same idf (and `epsilon * mean idf` floor) as `retrieval.bm25`. Postgres' own tsvector +
ts_rank is not BM25 (no idf, no length saturation) and its parser does not cut CJK into words, so
a native tsvector ranking would not match our BM25 on either SciFact or DRCD; postings give exactly
our analyzer's terms and exactly BM25, and a GROUP BY over the query terms' postings is what a
BM25 engine does too (minus its top-k pruning).

Consistency: postings reference their chunk (ON DELETE CASCADE) and the embedding lives on the
chunk row, so when the store replaces or deletes a document, its index entries go in the same
transaction. A chunk is indexed when its `index_hash` is set; `sync` indexes the rows where it is
NULL (new or re-ingested chunks), so it resumes after a crash and needs no diff of the whole
collection. `rag_index_meta` holds what the index was built with; a config change asks for
`rag reindex`.

Graph (`retrieval.graph`): the entity graph's rows live in the same database (graph_* tables,
indexing/graph_rows.py) and are synced by the one implementation the SQLite backend uses
(`GraphIndex.sync`, one transaction per sync); searches read an in-memory `GraphIndex` loaded from
them, reloaded when another replica synced the collection.

Schema (the DDL, the pgvector column, HNSW, the index meta): retrieval/pg_schema.py.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from indexing.pg_store import PgDocumentStore
from indexing.types import Chunk, content_hash

from .analyzer import Analyzer
from .collection_index import IndexMismatchError, retrievers_for
from .config import RetrievalConfig
from .embeddings.base import Embedder
from .filters import Filters
from .graph import GraphIndex, GraphLLM, graph_build_settings
from .pg_filters import filters_sql
from .pg_schema import create_hnsw, create_schema, read_index_meta, vector_dim, vector_literal
from .text import indexed_text

log = logging.getLogger(__name__)
FORMAT = 1
__all__ = ["FORMAT", "PgIndex", "vector_dim", "vector_literal"]  # the last two live in pg_schema.py


class PgIndex:
    """BM25 postings + pgvector HNSW of one collection; the `CollectionIndex` of the Postgres backend."""

    def __init__(self, store: PgDocumentStore, collection: str, cfg: RetrievalConfig,
                 embedder: Callable[[], Embedder], analyzer: Analyzer, rebuild: bool = False,
                 graph_llm: GraphLLM | None = None):
        self.store, self.collection, self.cfg = store, collection, cfg
        self._embedder, self.analyzer, self.graph_llm = embedder, analyzer, graph_llm
        self.retrievers = retrievers_for(cfg.mode, cfg.graph_built())
        self._graph: GraphIndex | None = None
        self._graph_version: int | None = None
        if "bm25" in self.retrievers and cfg.bm25.variant != "okapi":
            raise ValueError(f"the postgres backend scores BM25 okapi only, not {cfg.bm25.variant!r}")
        self.stats: dict[str, float] = {}
        self.ensure_schema(rebuild_dim=rebuild)

    # ---- schema and manifest ---------------------------------------------------------
    def expected(self) -> dict[str, Any]:
        exp: dict[str, Any] = {"format": FORMAT, "granularity": self.cfg.index_granularity(),
                               "include_title": self.cfg.include_title, "retrievers": self.retrievers}
        if "bm25" in self.retrievers:
            exp["bm25"] = json.loads(self.cfg.bm25.model_dump_json())
        if "dense" in self.retrievers:
            emb = self._embedder()
            exp["embedding_model"], exp["dim"] = emb.name, emb.dim
        if "graph" in self.retrievers:
            exp["graph"] = graph_build_settings(self.cfg.graph)
        return exp

    def ensure_schema(self, rebuild_dim: bool = False) -> None:
        create_schema(self.store, self._embedder() if "dense" in self.retrievers else None, rebuild_dim)

    def _ensure_hnsw(self) -> None:
        create_hnsw(self.store, self.cfg.dense)

    def meta(self) -> dict[str, Any] | None:
        return self.read_meta(self.store, self.collection)

    read_meta = staticmethod(read_index_meta)

    def check(self, meta: dict[str, Any]) -> None:
        """Raise IndexMismatchError when the index was built differently. An index holding more
        retrievers than asked (hybrid, searched as bm25) serves as is and keeps all of them up to date."""
        have = meta["config"].get("retrievers", [])
        if set(have) > set(self.retrievers):
            self.retrievers = [r for r in ("bm25", "dense", "graph") if r in have]
        exp = self.expected()
        for key, want in exp.items():
            have = meta["config"].get(key)
            if have != want:
                raise IndexMismatchError(
                    f"postgres index of collection {self.collection!r} was built with {key}={have!r} but the "
                    f"configuration asks for {want!r}; run `rag reindex --collection {self.collection}`")

    def is_current(self) -> bool:
        m = self.meta()
        return m is not None and m["store_version"] == self.store.version(self.collection)

    # ---- sync ------------------------------------------------------------------------
    def sync(self, rebuild: bool = False, batch: int = 512) -> dict[str, int]:
        """Index the chunks that have no index entry yet; returns added/removed/kept counts.
        Replicas sharing the database take turns (session advisory lock per collection)."""
        with self.store.conn() as db:
            db.execute("SELECT pg_advisory_lock(hashtext(%s))", ("rag_sync:" + self.collection,))
        try:
            return self._sync(rebuild, batch)
        finally:
            with self.store.conn() as db:
                db.execute("SELECT pg_advisory_unlock(hashtext(%s))", ("rag_sync:" + self.collection,))

    def _sync(self, rebuild: bool, batch: int) -> dict[str, int]:
        version = self.store.version(self.collection)
        meta = self.meta()
        if rebuild:
            self.ensure_schema(rebuild_dim=True)
            with self.store.conn() as db, db.transaction():
                db.execute("DELETE FROM rag_postings WHERE collection = %s", (self.collection,))
                db.execute("UPDATE chunks SET index_hash = NULL, doc_len = NULL"
                           + (", embedding = NULL" if "dense" in self.retrievers else "")
                           + " WHERE collection = %s", (self.collection,))
                db.execute("DELETE FROM rag_index_meta WHERE collection = %s", (self.collection,))
            meta = None
        elif meta is not None:
            self.check(meta)
            if meta["store_version"] == version:
                self.stats = meta
                return {"added": 0, "removed": 0, "kept": int(meta["n_docs"]), "store_version": version}
        if meta is None:
            with self.store.conn() as db:
                db.execute("INSERT INTO rag_index_meta(collection, config) VALUES (%s, %s) ON CONFLICT "
                           "(collection) DO UPDATE SET config = EXCLUDED.config",
                           (self.collection, json.dumps(self.expected())))
        added = 0
        gran = self.cfg.index_granularity()
        q = ("SELECT chunk_id, doc_id, text, start, \"end\", granularity, parent_id, source, title, date, "
             "section, page, language, metadata, int_id, content_hash FROM chunks WHERE collection = %s "
             "AND index_hash IS NULL")
        args: list[Any] = [self.collection]
        if gran is not None:
            q, args = q + " AND granularity = %s", args + [gran]
        else:
            q += " AND coalesce(metadata->>'role', '') <> 'parent'"
        rows = self.store.stream(q, args)
        part: list[tuple[Chunk, int, str]] = []
        from indexing.sql_store import row_to_chunk

        for row in rows:
            part.append((row_to_chunk(row[:14]), row[14], row[15]))
            if len(part) >= batch:
                added += self._write(part)
                part = []
        added += self._write(part)
        if "dense" in self.retrievers:
            self._ensure_hnsw()
        if "graph" in self.retrievers:
            self._sync_graph(version, rebuild)
        self._refresh_stats(version)
        n = int(self.stats.get("n_docs", 0))
        log.info("synced %s in postgres: +%d (%d chunks)", self.collection, added, n)
        return {"added": added, "removed": 0, "kept": n - added, "store_version": version}

    # ---- graph -----------------------------------------------------------------------
    def _indexed_chunks(self) -> list[tuple[int, str, str]]:
        """(int id, text, title) of the chunks the indexes hold (CollectionIndex.iter_indexed's rule)."""
        gran = self.cfg.index_granularity()
        q = "SELECT int_id, text, title, metadata->>'role' FROM chunks WHERE collection = %s"
        args: list[Any] = [self.collection]
        if gran is not None:
            q, args = q + " AND granularity = %s", args + [gran]
        return [(int(i), t, ti) for i, t, ti, role in self.store.stream(q + " ORDER BY int_id", args)
                if gran is not None or role != "parent"]

    def _sync_graph(self, version: int, rebuild: bool) -> None:
        """Sync a copy (searches keep reading the last complete graph), then swap it in."""
        base = None
        if not rebuild:
            base = _copy(self._graph) if self._graph is not None else GraphIndex.load(self.store, self.collection,
                                                                                     self.cfg.graph)
        work = base or GraphIndex(self.cfg.graph)
        st = work.sync(self.store, self.collection, self._indexed_chunks(), version, rebuild=base is None,
                       embedder=self._embedder, llm=self.graph_llm)
        if not work.chunks_of and work.hashes:
            log.warning("collection %r: no entities found in %d chunks, the graph is empty; graph search "
                        "returns the other retrievers' results", self.collection, len(work.hashes))
        if st.skipped_replies:
            log.warning("collection %r: %d graph extraction replies were not valid output and were skipped",
                        self.collection, st.skipped_replies)
        self._graph, self._graph_version = work, version

    @property
    def graph(self) -> GraphIndex | None:
        """The in-memory graph, (re)loaded from the tables when another process synced them."""
        if "graph" not in self.retrievers:
            return None
        version = (self.stats or {}).get("store_version")
        if self._graph is None or self._graph_version != version:
            g = GraphIndex.load(self.store, self.collection, self.cfg.graph)
            if g is None:
                raise IndexMismatchError(f"the entity graph of {self.collection!r} was not built with these "
                                         f"settings; run `rag reindex --collection {self.collection}`")
            self._graph, self._graph_version = g, version
        return self._graph

    def allowed(self, filters: Filters | None, must: Sequence[Sequence[str]] = ()) -> np.ndarray | None:
        """Int ids passing the filters and required terms (for the in-memory graph), None: all."""
        fsql, fargs = filters_sql(filters, "c")
        msql, margs = self._must_sql(must, "c")
        if not fsql and not msql:
            return None
        with self.store.reader.conn() as db:
            rows = db.execute(f"SELECT c.int_id FROM chunks c WHERE c.collection = %s{fsql}{msql}",
                              [self.collection, *fargs, *margs]).fetchall()
        return np.array([r[0] for r in rows], dtype=np.int64)

    def _write(self, part: list[tuple[Chunk, int, str]]) -> int:
        if not part:
            return 0
        texts = [indexed_text(c, self.cfg.include_title) for c, _, _ in part]
        terms = [self.analyzer(t) for t in texts] if "bm25" in self.retrievers else [[] for _ in texts]
        vecs = self._embedder().encode_documents(texts) if "dense" in self.retrievers else None
        with self.store.conn() as db, db.transaction(), db.cursor() as cur:
            cur.execute("CREATE TEMP TABLE IF NOT EXISTS _rag_stage (int_id BIGINT, chunk_hash TEXT, "
                        "index_hash TEXT, doc_len INTEGER, embedding TEXT) ON COMMIT DELETE ROWS")
            cur.execute("CREATE TEMP TABLE IF NOT EXISTS _rag_stage_post (int_id BIGINT, term TEXT, tf REAL, "
                        "dl REAL) ON COMMIT DELETE ROWS")
            with cur.copy("COPY _rag_stage FROM STDIN") as cp:
                for j, ((_, int_id, chash), text, toks) in enumerate(zip(part, texts, terms, strict=True)):
                    emb = None if vecs is None else vector_literal(vecs[j])
                    cp.write_row((int_id, chash, content_hash(text), len(toks), emb))
            if "bm25" in self.retrievers:
                with cur.copy("COPY _rag_stage_post FROM STDIN") as cp:
                    for (_, int_id, _), toks in zip(part, terms, strict=True):
                        for term, tf in Counter(toks).items():
                            cp.write_row((int_id, term, float(tf), float(len(toks))))
            emb_set = ", embedding = s.embedding::vector" if vecs is not None else ""
            cur.execute(f"UPDATE chunks c SET index_hash = s.index_hash, doc_len = s.doc_len{emb_set} FROM _rag_stage s "
                        "WHERE c.collection = %s AND c.int_id = s.int_id AND c.content_hash = s.chunk_hash",
                        (self.collection,))
            done = cur.rowcount
            if "bm25" in self.retrievers:
                cur.execute("INSERT INTO rag_postings (collection, term, int_id, tf, dl) SELECT %s, p.term, p.int_id, "
                            "p.tf, p.dl FROM _rag_stage_post p JOIN chunks c ON c.collection = %s AND c.int_id = "
                            "p.int_id AND c.index_hash IS NOT NULL ON CONFLICT DO NOTHING",
                            (self.collection, self.collection))
        return done

    def _refresh_stats(self, version: int) -> None:
        """N, total length and the mean idf (Okapi's floor for terms in more than half the documents)."""
        with self.store.conn() as db, db.transaction():
            n, sum_len = db.execute("SELECT count(*), coalesce(sum(doc_len), 0) FROM chunks WHERE collection = %s "
                                    "AND index_hash IS NOT NULL", (self.collection,)).fetchone()
            mean_idf = 0.0
            if "bm25" in self.retrievers and n:
                mean_idf = db.execute(
                    "SELECT coalesce(avg(ln(%s - df + 0.5) - ln(df + 0.5)), 0) FROM (SELECT count(*) AS df FROM "
                    "rag_postings WHERE collection = %s GROUP BY term) t", (float(n), self.collection)).fetchone()[0]
            db.execute("UPDATE rag_index_meta SET store_version = %s, n_docs = %s, sum_len = %s, mean_idf = %s, "
                       "config = %s WHERE collection = %s",
                       (version, n, float(sum_len), float(mean_idf), json.dumps(self.expected()), self.collection))
        self.stats = {"n_docs": n, "sum_len": float(sum_len), "mean_idf": float(mean_idf), "store_version": version}

    # ---- search ----------------------------------------------------------------------
    def _must_sql(self, must: Sequence[Sequence[str]], alias: str) -> tuple[str, list[Any]]:
        sql, args = "", []
        for clause in must:
            for term in clause:
                sql += (f" AND EXISTS (SELECT 1 FROM rag_postings m WHERE m.collection = {alias}.collection "
                        f"AND m.term = %s AND m.int_id = {alias}.int_id)")
                args.append(term)
        return sql, args

    def bm25(self, terms: Sequence[str], k: int, filters: Filters | None = None,
             must: Sequence[Sequence[str]] = ()) -> list[tuple[int, float]]:
        counts = Counter(terms)
        if not counts or not self.stats.get("n_docs"):
            return []
        n = float(self.stats["n_docs"])
        avgdl = self.stats["sum_len"] / n
        cfg = self.cfg.bm25
        eps = cfg.epsilon * float(self.stats["mean_idf"])
        fsql, fargs = filters_sql(filters, "c")
        msql, margs = self._must_sql(must, "c")
        join = f" JOIN chunks c ON c.collection = %s AND c.int_id = s.int_id{fsql}{msql}" if fsql or msql else ""
        jargs = [self.collection, *fargs, *margs] if join else []
        # df per query term from the postings themselves (one GROUP BY over the rows we read anyway,
        # float8 throughout: a numeric ln() per row cost 4x), idf once per term, then one aggregate.
        sql = f"""
            WITH q AS (SELECT * FROM unnest(%s::text[], %s::float8[]) AS q(term, mult)),
            p AS MATERIALIZED (SELECT p.term, p.int_id, p.tf, p.dl FROM q
                               JOIN rag_postings p ON p.collection = %s AND p.term = q.term),
            r AS (SELECT term, ln(%s::float8 - count(*) + 0.5::float8) - ln(count(*) + 0.5::float8) AS raw
                  FROM p GROUP BY term),
            w AS (SELECT q.term, q.mult * (CASE WHEN r.raw < 0 THEN %s::float8 ELSE r.raw END) AS w
                  FROM q JOIN r ON r.term = q.term),
            s AS (SELECT p.int_id, sum(w.w * (p.tf * (%s::float8 + 1) / (p.tf + %s::float8
                        * (1 - %s::float8 + %s::float8 * p.dl / %s::float8)))) AS score
                  FROM p JOIN w ON w.term = p.term GROUP BY p.int_id)
            SELECT s.int_id, s.score FROM s{join} ORDER BY s.score DESC, s.int_id LIMIT %s"""
        args = [list(counts), [float(v) for v in counts.values()], self.collection, n, eps,
                cfg.k1, cfg.k1, cfg.b, cfg.b, avgdl, *jargs, int(k)]
        with self.store.reader.conn() as db:  # the read replica when storage.read_dsn is set
            return [(int(i), float(s)) for i, s in db.execute(sql, args).fetchall()]

    def dense(self, qvec: np.ndarray, k: int, filters: Filters | None = None,
              must: Sequence[Sequence[str]] = ()) -> list[tuple[int, float]]:
        fsql, fargs = filters_sql(filters, "c")
        msql, margs = self._must_sql(must, "c")
        vec = vector_literal(qvec)
        sql = f"""
            SELECT int_id, score FROM (
                SELECT c.int_id, -(c.embedding <#> %s::vector) AS score FROM chunks c
                WHERE c.collection = %s AND c.embedding IS NOT NULL{fsql}{msql}
                ORDER BY c.embedding <#> %s::vector LIMIT %s) t
            ORDER BY score DESC, int_id"""
        d = self.cfg.dense
        with self.store.reader.conn() as db, db.transaction():
            db.execute("SELECT set_config('hnsw.ef_search', %s, true), "
                       "set_config('hnsw.iterative_scan', 'relaxed_order', true)",
                       (str(max(int(d.hnsw_ef_search), int(k))),))
            rows = db.execute(sql, [vec, self.collection, *fargs, *margs, vec, int(k)]).fetchall()
        return [(int(i), float(s)) for i, s in rows]


def _copy(graph: GraphIndex) -> GraphIndex:
    import copy

    return copy.deepcopy(graph)
