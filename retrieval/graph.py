"""Entity co-occurrence graph of a collection, and personalised-PageRank search over it.

Nodes are the entities `retrieval/entities.py` finds in each chunk; two entities are linked with
the number of chunks that mention both. A question's entities seed a personalised PageRank
(HippoRAG), and a chunk scores the PPR mass of the entities it mentions. That is what reaches a
bridge document: "Which team did the director of film X play for?" links X, X's page mentions
its director D, D's page (title D) mentions the team, and D's page shares no word with the question.

Incremental by construction: the state is the mentions per chunk; edges are counts derived from
them, so adding or deleting a chunk touches only its own entities' counts, and an entity whose
last chunk goes disappears with it. Entities in more than `max_chunk_share` of the chunks (and at
least `hub_min_chunks`) are hubs: they keep their mentions but get no edges in the searched graph.
Communities are Louvain (networkx) run per connected component of that graph, on nodes and
edges in sorted order with a fixed seed and labelled by their smallest key, so a component's
communities depend on that component alone: a sync re-runs Louvain only on the components that
hold a changed entity, and the result equals a build from scratch (tests/retrieval/test_graph*).

Persistence: `save(dir)` writes plain files into the index generation directory that
`collection_index.py` then publishes by renaming its manifest, so a kill -9 mid-build leaves the
previous graph in place like the BM25 and FAISS files.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from .config import GraphConfig
from .entities import extract, question_keys

log = logging.getLogger(__name__)
HUB_MIN_CHUNKS = 20


class GraphIndex:
    def __init__(self, cfg: GraphConfig | None = None):
        self.cfg = cfg or GraphConfig()
        if self.cfg.extractor != "cooccurrence":
            raise NotImplementedError(
                f"retrieval.graph.extractor={self.cfg.extractor!r} is not implemented yet; "
                "use extractor: cooccurrence")
        self.mentions: dict[int, dict[str, str]] = {}  # chunk int id -> entity key -> surface form
        self.chunks_of: dict[str, set[int]] = {}
        self.edges: dict[str, Counter[str]] = {}  # symmetric co-occurrence counts, hubs included
        self.community: dict[str, str] = {}  # key -> label (smallest key of its community)
        self.hubs: set[str] = set()
        self._dirty: set[str] = set()
        self._matrix: tuple[list[str], dict[str, int], sp.csr_matrix, sp.csr_matrix, np.ndarray] | None = None

    # ---- updates ---------------------------------------------------------------------
    def add(self, items: Iterable[tuple[int, str, str]]) -> None:
        """(chunk int id, text, title) triples; an id already present is replaced."""
        for cid, text, title in items:
            self.delete([cid])
            ents = extract(text, title, self.cfg.max_words)
            if not ents:
                continue
            self.mentions[cid] = ents
            keys = sorted(ents)
            for k in keys:
                self.chunks_of.setdefault(k, set()).add(cid)
                row = self.edges.setdefault(k, Counter())
                for other in keys:
                    if other != k:
                        row[other] += 1
            self._dirty.update(keys)

    def delete(self, ids: Iterable[int]) -> None:
        for cid in ids:
            ents = self.mentions.pop(int(cid), None)
            if not ents:
                continue
            keys = sorted(ents)
            for k in keys:
                chunks = self.chunks_of[k]
                chunks.discard(int(cid))
                row = self.edges[k]
                for other in keys:
                    if other != k:
                        row[other] -= 1
                        if row[other] <= 0:
                            del row[other]
                if not chunks:  # no chunk supports it any more: the entity goes
                    del self.chunks_of[k], self.edges[k]
                    self.community.pop(k, None)
            self._dirty.update(keys)

    def finish(self) -> None:
        """After a batch of updates: new hub set, communities of the changed components."""
        limit = max(HUB_MIN_CHUNKS, self.cfg.max_chunk_share * len(self.mentions))
        hubs = {k for k, c in self.chunks_of.items() if len(c) > limit}
        changed = hubs ^ self.hubs
        self.hubs = hubs
        dirty = set(self._dirty)
        for h in changed:  # a hub's edges appear or vanish: its neighbours' components change
            dirty.add(h)
            dirty.update(self.edges.get(h, ()))
        self._dirty = set()
        self._matrix = None
        for k in hubs:
            self.community.pop(k, None)
        if self.cfg.communities:
            self._communities({k for k in dirty if k in self.chunks_of and k not in hubs})

    def _neighbours(self, k: str) -> Iterable[str]:
        return (o for o in self.edges.get(k, ()) if o not in self.hubs)

    def _community_neighbours(self, k: str) -> Iterable[str]:
        """Neighbours in the community graph: no hubs, edges of at least `community_min_weight`.
        An edge's weight changes only when a chunk naming both ends changes, so both ends are
        dirty then and the components to recompute are still the ones around dirty entities."""
        least = self.cfg.community_min_weight
        return (o for o, w in self.edges.get(k, {}).items() if w >= least and o not in self.hubs)

    def _communities(self, dirty: set[str]) -> None:
        import networkx as nx

        seen: set[str] = set()
        for start in sorted(dirty):
            if start in seen:
                continue
            comp, stack = {start}, [start]
            while stack:
                for o in self._community_neighbours(stack.pop()):
                    if o not in comp:
                        comp.add(o)
                        stack.append(o)
            seen |= comp
            nodes = sorted(comp)
            if len(nodes) <= 2:
                groups: list[set[str]] = [set(nodes)]
            else:
                g = nx.Graph()
                g.add_nodes_from(nodes)
                g.add_weighted_edges_from((a, b, float(self.edges[a][b])) for a in nodes
                                          for b in sorted(self._community_neighbours(a)) if a < b)
                groups = nx.community.louvain_communities(g, weight="weight", resolution=self.cfg.resolution,
                                                          seed=self.cfg.seed)
            for group in groups:
                label = min(group)
                for k in group:
                    self.community[k] = label

    # ---- search ------------------------------------------------------------------------
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

    def link(self, question: str) -> list[str]:
        """Graph entities the question names (hubs excluded: they would seed everything)."""
        return [k for k in question_keys(question, self.chunks_of, self.cfg.max_words) if k not in self.hubs]

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

    def search(self, question: str, k: int, allowed: np.ndarray | None = None) -> list[tuple[int, float]]:
        """Top-k (chunk int id, score); empty when the question names no graph entity."""
        seeds = self.link(question)
        if not seeds or not self.mentions:
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

    # ---- inspection ----------------------------------------------------------------------
    def name(self, key: str) -> str:
        forms = Counter(self.mentions[c][key] for c in self.chunks_of.get(key, ()))
        return min(forms.items(), key=lambda x: (-x[1], x[0]))[0] if forms else key

    def stats(self) -> dict[str, object]:
        n_edges = sum(1 for k, row in self.edges.items() if k not in self.hubs
                      for o in row if o not in self.hubs and k < o)
        sizes = Counter(self.community.values())
        return {"chunks": len(self.mentions), "entities": len(self.chunks_of), "hubs": len(self.hubs),
                "edges": n_edges, "mentions": sum(len(m) for m in self.mentions.values()),
                "communities": len(sizes), "largest_communities": [
                    {"label": self.name(c), "size": n} for c, n in sorted(sizes.items(), key=lambda x: (-x[1], x[0]))[:10]]}

    def show(self, entity: str, limit: int = 20) -> dict[str, object] | None:
        from .entities import normalize

        key = normalize(entity)
        if key not in self.chunks_of:
            return None
        neigh = sorted(self.edges[key].items(), key=lambda x: (-x[1], x[0]))[:limit]
        comm = self.community.get(key)
        return {"key": key, "name": self.name(key), "hub": key in self.hubs, "chunks": sorted(self.chunks_of[key]),
                "community": comm, "community_size": sum(1 for v in self.community.values() if v == comm) if comm else 0,
                "neighbours": [{"key": o, "name": self.name(o), "weight": w} for o, w in neigh]}

    def signature(self) -> tuple:
        """Entities, weighted edges and community membership (labels are the smallest member key,
        so equal partitions compare equal): what a rebuild from scratch must reproduce."""
        edges = {(a, b, w) for a, row in self.edges.items() for b, w in row.items() if a < b}
        groups: dict[str, set[str]] = {}
        for k, c in self.community.items():
            groups.setdefault(c, set()).add(k)
        return (sorted(self.chunks_of), sorted(edges), sorted(sorted(g) for g in groups.values()), sorted(self.hubs))

    # ---- persistence ---------------------------------------------------------------------
    def save(self, path: Path) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        data = {"mentions": {str(c): m for c, m in self.mentions.items()}, "community": self.community,
                "hubs": sorted(self.hubs)}
        (path / "graph_data.json").write_text(json.dumps(data, ensure_ascii=False))
        (path / "graph.json").write_text(self.cfg.model_dump_json())

    @classmethod
    def load(cls, path: Path) -> GraphIndex:
        path = Path(path)
        self = cls(GraphConfig.model_validate_json((path / "graph.json").read_text()))
        data = json.loads((path / "graph_data.json").read_text())
        for c, m in data["mentions"].items():
            cid = int(c)
            self.mentions[cid] = m
            keys = sorted(m)
            for k in keys:
                self.chunks_of.setdefault(k, set()).add(cid)
                row = self.edges.setdefault(k, Counter())
                for o in keys:
                    if o != k:
                        row[o] += 1
        self.community, self.hubs = data["community"], set(data["hubs"])
        return self

    def with_query_settings(self, cfg: GraphConfig) -> GraphIndex:
        """Search settings (damping, iterations, chunk score) come from the live config, not the
        file: they change no stored state."""
        if cfg != self.cfg:
            self.cfg, self._matrix = cfg, None
        return self
