"""The graph as the retrievers hold it: loaded from the document store's graph tables and synced
to them, one transaction per sync (why that is kill -9 safe: retrieval/graph/__init__.py)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from indexing.graph_rows import GraphChunk, GraphDelta, GraphEntity, GraphSummary

from ..config import GraphConfig
from .base import Embeds, GraphLLM, SyncStats, chunk_hash, graph_build_settings, members_hash
from .search import GraphSearch

log = logging.getLogger(__name__)


class GraphIndex(GraphSearch):
    """The collection's entity graph: searchable, read from and written to the store's rows."""

    # ---- persistence: the store's graph tables ------------------------------------------
    @classmethod
    def from_rows(cls, cfg: GraphConfig, state: Any) -> GraphIndex:
        """The in-memory graph from `store.graph_load` (edges are recounted from the mentions)."""
        self = cls(cfg)
        self.put(state.chunks)
        meta = state.meta or {}
        self.hubs = set(meta.get("hubs", []))
        self.embedding_model = meta.get("embedding_model")
        self.skipped_replies = int(meta.get("skipped_replies", 0))
        for e in state.entities:
            if e.community is not None:
                self.community[e.key] = e.community
            if e.vector is not None:
                self.vectors[e.key] = np.frombuffer(e.vector, dtype=np.float32)
        self.summaries = {s.label: s for s in state.summaries}
        self._dirty = set()
        return self

    @classmethod
    def load(cls, store: Any, collection: str, cfg: GraphConfig) -> GraphIndex | None:
        """The collection's graph from the store; None when it was never built with these
        settings (the next sync builds it)."""
        state = store.graph_load(collection)
        if state.meta is None or state.meta.get("settings") != graph_build_settings(cfg):
            return None
        return cls.from_rows(cfg, state)

    def _meta(self, version: int | None) -> dict[str, Any]:
        return {"settings": graph_build_settings(self.cfg), "hubs": sorted(self.hubs), "store_version": version,
                "embedding_model": self.embedding_model, "skipped_replies": self.skipped_replies}

    def sync(self, store: Any, collection: str, chunks: Iterable[tuple[int, str, str]], version: int | None = None,
             rebuild: bool = False, embedder: Callable[[], Embeds] | None = None, llm: GraphLLM | None = None,
             on_progress: Callable[[int, int], None] | None = None) -> SyncStats:
        """Bring the graph in line with `chunks` ((int id, text, title) of every indexed chunk)
        and write the changed rows to the store in one transaction (see the module docstring).
        `embedder` is called only when entity embeddings are on; `llm` only with extractor
        llm/both (triples) or summaries. Returns what changed."""
        reset = rebuild
        st = SyncStats()
        before_comm, before_keys = dict(self.community), set(self.chunks_of)
        before_vec = set(self.vectors)
        before_summ = dict(self.summaries)
        if reset:
            self.__init__(self.cfg)  # type: ignore[misc]
            before_comm, before_keys, before_vec, before_summ = {}, set(), set(), {}
        current: dict[int, str] = {}
        todo: list[tuple[int, str, str]] = []
        for cid, text, title in chunks:
            h = chunk_hash(text, title)
            current[cid] = h
            if self.hashes.get(cid) != h:
                todo.append((cid, text, title))
        stale = [c for c, h in self.hashes.items() if current.get(c) != h]
        self.delete(stale)
        st.removed = len([c for c in stale if c not in {t[0] for t in todo}])
        use_llm = self.cfg.extractor in ("llm", "both")
        if use_llm and llm is None and todo:
            raise ValueError(f"retrieval.graph.extractor={self.cfg.extractor!r} needs the engine; build the "
                             "retriever through rag (rag index / rag reindex), which passes it")
        put: list[GraphChunk] = []
        skipped0 = self.skipped_replies
        step = self.cfg.llm_batch if use_llm else 4096
        for s in range(0, len(todo), step):
            part = todo[s : s + step]
            replies: list[str | None] = [None] * len(part)
            if use_llm:
                try:
                    replies = list(llm.triples([(title, text[: self.cfg.llm_chars]) for _, text, title in part]))
                except Exception as e:  # an engine failure skips the batch's triples, never the ingest
                    log.warning("graph extraction failed for %d chunks (%s); they keep their other entities",
                                len(part), e)
                    self.skipped_replies += len(part)
                    replies = [None] * len(part)
            entries = [self.extract(cid, text, title, reply) for (cid, text, title), reply in zip(part, replies, strict=True)]
            self.put(entries)
            put.extend(entries)
            if on_progress is not None:
                on_progress(min(s + step, len(todo)), len(todo))
        st.added, st.skipped_replies = len(todo), self.skipped_replies - skipped0
        self.finish()
        if self.cfg.entity_embeddings and embedder is not None and self.chunks_of:
            emb = embedder()
            if emb.name != self.embedding_model:  # another vector space: every entity again
                self.vectors, self.embedding_model, before_vec = {}, emb.name, set()
            missing = sorted(k for k in self.chunks_of if k not in self.vectors)
            for s in range(0, len(missing), 1024):
                part = missing[s : s + 1024]
                vecs = np.asarray(emb.encode_queries(part), dtype=np.float32)
                vecs /= np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
                self.vectors.update(zip(part, vecs, strict=True))
            st.embedded = len(missing)
        self._vec_matrix = None
        def texts(ids: list[int]) -> list[str]:
            return [c.text[: self.cfg.llm_chars // 3] for c in store.get_chunks_by_int(ids, collection)]

        self._sync_summaries(llm, st, texts)
        keys = set(self.chunks_of)
        delta = GraphDelta(meta=self._meta(version), reset=reset, drop_chunks=sorted(stale), put_chunks=put)
        delta.drop_entities = sorted(before_keys - keys)
        delta.put_entities = [self._entity_row(k) for k in sorted(keys) if k not in before_keys
                              or before_comm.get(k) != self.community.get(k) or (k in self.vectors) != (k in before_vec)]
        delta.drop_summaries = sorted(lb for lb in before_summ if lb not in self.summaries
                                      or self.summaries[lb] is not before_summ[lb])
        delta.put_summaries = [s for lb, s in sorted(self.summaries.items()) if before_summ.get(lb) is not s]
        store.graph_write(collection, delta)
        st.written = {"chunks": len(put), "dropped_chunks": len(stale), "entities": len(delta.put_entities),
                      "dropped_entities": len(delta.drop_entities), "summaries": len(delta.put_summaries)}
        return st

    def _entity_row(self, key: str) -> GraphEntity:
        v = self.vectors.get(key)
        return GraphEntity(key, self.community.get(key), None if v is None else np.asarray(v, np.float32).tobytes())

    def _sync_summaries(self, llm: GraphLLM | None, st: SyncStats, texts: Callable[[list[int]], list[str]]) -> None:
        """Drop every summary whose community no longer has the members it was written for (a
        deleted document's entities leave, so its summary goes with them), then, with
        `summaries: true`, write the missing ones for the communities worth one."""
        want = self.summarisable() if self.cfg.summaries else {}
        members = self.members()
        for lb in list(self.summaries):
            m = members.get(lb)
            if m is None or self.summaries[lb].members_hash != members_hash(m) or lb not in want:
                del self.summaries[lb]
                st.summaries_dropped += 1
        todo = [(lb, m) for lb, m in want.items() if lb not in self.summaries]
        if not todo or llm is None:
            return
        step = self.cfg.llm_batch
        for s in range(0, len(todo), step):
            part = todo[s : s + step]
            inputs = [([self.name(k) for k in m[:30]], texts(self.community_chunks(m, 3))) for _, m in part]
            try:
                replies = llm.summaries(inputs)
            except Exception as e:
                log.warning("community summaries failed for %d communities (%s)", len(part), e)
                continue
            for (lb, m), text in zip(part, replies, strict=True):
                text = " ".join(str(text).split())
                if text:
                    self.summaries[lb] = GraphSummary(lb, members_hash(m), text)
                    st.summarised += 1

    def with_query_settings(self, cfg: GraphConfig) -> GraphIndex:
        """Search settings (damping, iterations, chunk score) come from the live config, not the
        file: they change no stored state."""
        if cfg != self.cfg:
            self.cfg, self._matrix = cfg, None
        return self
