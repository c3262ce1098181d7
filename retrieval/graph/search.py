"""Searching the entity graph: the question's entities (linking), personalised PageRank from
them, chunks scored by the PPR mass of the entities they mention; corpus-level questions ranked
over the community summaries (global mode)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..entities import extract, normalize, question_keys
from .base import Embeds
from .state import GraphState


class GraphSearch(GraphState):
    """Ranking over a `GraphState`; the matrices are built on first search and dropped by
    `finish` (and by a search-settings change)."""

    def _build_matrix(self) -> tuple[list[str], dict[str, int], sp.csr_matrix, sp.csr_matrix, np.ndarray]:
        """Transition matrix over non-hub entities and the chunk x entity scoring matrix."""
        if self._matrix is not None:
            return self._matrix
        keys = sorted(k for k in self.chunks_of if k not in self.hubs)
        index = {k: i for i, k in enumerate(keys)}
        rows, cols, vals = [], [], []
        for k in keys:
            i = index[k]
            for o, w in self.edges[k].items():
                j = index.get(o)
                if j is not None:
                    rows.append(i)
                    cols.append(j)
                    vals.append(float(w))
        n = len(keys)
        adj = sp.csr_matrix((vals, (rows, cols)), shape=(n, n))
        out = np.asarray(adj.sum(axis=1)).ravel()
        inv = np.divide(1.0, out, out=np.zeros(n), where=out > 0)
        trans = (sp.diags(inv) @ adj).T.tocsr()  # column-stochastic: p' = trans @ p
        df = np.array([len(self.chunks_of[k]) for k in keys], dtype=np.float64)
        chunk_ids = np.array(sorted(self.mentions), dtype=np.int64)
        crow, ccol, cval = [], [], []
        for r, cid in enumerate(chunk_ids.tolist()):
            for k in self.mentions[cid]:
                j = index.get(k)
                if j is not None:
                    crow.append(r)
                    ccol.append(j)
                    cval.append(1.0 / df[j] if self.cfg.chunk_score == "specificity" else 1.0)
        score = sp.csr_matrix((cval, (crow, ccol)), shape=(len(chunk_ids), n))
        self._matrix = (keys, index, trans, score, chunk_ids)
        self._df = df
        return self._matrix

    def link(self, question: str, embed: Embeds | None = None) -> list[str]:
        """Graph entities the question names (hubs excluded: they would seed everything): every
        known key its words spell (retrieval/entities.py: question_keys), then, for each name it
        contains that is no key ("Ken Hughs", "the Beatles band"), the nearest entity by embedding
        when the cosine reaches `link_min_similarity`."""
        found = [k for k in question_keys(question, self.chunks_of, self.cfg.max_words) if k not in self.hubs]
        if embed is None or not self.vectors or embed.name != self.embedding_model:
            return found
        unknown = [s for k, s in extract(question, max_words=self.cfg.max_words).items()
                   if k not in self.chunks_of and not any(k in f or f in k for f in found)]
        if not unknown:
            return found
        keys, mat = self._vectors()
        sims = mat @ np.asarray(embed.encode_queries([normalize(u) for u in unknown]), dtype=np.float32).T
        for j in range(sims.shape[1]):
            i = int(np.argmax(sims[:, j]))
            if sims[i, j] >= self.cfg.link_min_similarity and keys[i] not in found:
                found.append(keys[i])
        return found

    def _vectors(self) -> tuple[list[str], np.ndarray]:
        if self._vec_matrix is None:
            keys = sorted(k for k in self.vectors if k not in self.hubs)
            dim = next(iter(self.vectors.values())).shape[0] if self.vectors else 0
            mat = np.stack([self.vectors[k] for k in keys]) if keys else np.zeros((0, dim), np.float32)
            self._vec_matrix = (keys, mat)
        return self._vec_matrix

    def ppr(self, seeds: Sequence[str]) -> np.ndarray:
        """Personalised PageRank by power iteration; the restart vector weights each seed by its
        specificity (1 / chunks mentioning it) and dangling mass returns to the seeds."""
        keys, index, trans, _, _ = self._build_matrix()
        s = np.zeros(len(keys))
        for k in seeds:
            if k in index:
                s[index[k]] = 1.0 / self._df[index[k]]
        if s.sum() == 0:
            return s
        s /= s.sum()
        d, p = self.cfg.damping, s.copy()
        for _ in range(self.cfg.iterations):
            moved = trans @ p
            nxt = d * moved + (1.0 - d * moved.sum()) * s  # lost (dangling) mass restarts
            if np.abs(nxt - p).sum() < self.cfg.tolerance:
                p = nxt
                break
            p = nxt
        return p

    def search(self, question: str, k: int, allowed: np.ndarray | None = None,
               embed: Embeds | None = None) -> list[tuple[int, float]]:
        """Top-k (chunk int id, score); empty when the question names no graph entity."""
        if not self.mentions:
            return []
        seeds = self.link(question, embed)
        if not seeds:
            return []
        _, _, _, score, chunk_ids = self._build_matrix()
        p = self.ppr(seeds)
        scores = score @ p
        ok = scores > 0
        if allowed is not None:
            ok &= np.isin(chunk_ids, allowed)
        rows = np.flatnonzero(ok)
        if len(rows) > k:
            rows = rows[np.argpartition(-scores[rows], k - 1)[:k]]
        rows = rows[np.lexsort((chunk_ids[rows], -scores[rows]))]
        return [(int(chunk_ids[r]), float(scores[r])) for r in rows]

    # ---- global mode: community summaries ------------------------------------------------
    def global_search(self, question: str, k: int, chunks_per: int = 3,
                      embed: Embeds | None = None) -> list[dict[str, Any]]:
        """Corpus-level questions ("What are the main themes?"): the top-k community summaries
        with their member chunks. Ranked by the question's entities inside a community (PPR mass),
        else by community size; an empty list when no summary is written."""
        if not self.summaries:
            return []
        members = self.members()
        mass: dict[str, float] = {}
        seeds = self.link(question, embed) if self.mentions else []
        if seeds:
            keys, index, *_ = self._build_matrix()
            p = self.ppr(seeds)
            for key, i in index.items():
                lb = self.community.get(key)
                if lb is not None:
                    mass[lb] = mass.get(lb, 0.0) + float(p[i])
        ranked = sorted(self.summaries.values(),
                        key=lambda s: (-mass.get(s.label, 0.0), -len(members.get(s.label, ())), s.label))
        return [{"community": s.label, "name": self.name(s.label), "summary": s.text,
                 "entities": [self.name(m) for m in members.get(s.label, [])[:20]],
                 "size": len(members.get(s.label, ())), "score": mass.get(s.label, 0.0),
                 "chunks": self.community_chunks(members.get(s.label, []), chunks_per)} for s in ranked[:k]]
