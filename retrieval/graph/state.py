"""The in-memory entity graph: mentions per chunk (the state), the edges and hubs derived from
them, Louvain communities per connected component; its incremental updates and the reads that
inspect it. Why it is shaped so: retrieval/graph/__init__.py."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np
import scipy.sparse as sp

from indexing.graph_rows import GraphChunk, GraphSummary, Triple

from ..config import GraphConfig
from ..entities import extract, normalize
from ..triples import parse_triples
from .base import HUB_MIN_CHUNKS, chunk_hash


class GraphState:
    """Mentions per chunk and what derives from them; `GraphSearch` ranks over it, `GraphIndex`
    stores it."""

    def __init__(self, cfg: GraphConfig | None = None):
        self.cfg = cfg or GraphConfig()
        self.mentions: dict[int, dict[str, str]] = {}  # chunk int id -> entity key -> surface form
        self.triples: dict[int, list[Triple]] = {}  # chunk int id -> LLM triples (extractor llm/both)
        self.hashes: dict[int, str] = {}  # chunk int id -> chunk_hash it was extracted from
        self.chunks_of: dict[str, set[int]] = {}
        self.edges: dict[str, Counter[str]] = {}  # symmetric weights (co-occurrence + triples), hubs included
        self.community: dict[str, str] = {}  # key -> label (smallest key of its community)
        self.hubs: set[str] = set()
        self.vectors: dict[str, np.ndarray] = {}  # key -> unit embedding of the key (entity linking)
        self.summaries: dict[str, GraphSummary] = {}  # community label -> summary
        self.embedding_model: str | None = None
        self.skipped_replies = 0
        self._dirty: set[str] = set()
        self._matrix: tuple[list[str], dict[str, int], sp.csr_matrix, sp.csr_matrix, np.ndarray] | None = None
        self._vec_matrix: tuple[list[str], np.ndarray] | None = None

    # ---- extraction ------------------------------------------------------------------
    def extract(self, cid: int, text: str, title: str, reply: str | None = None) -> GraphChunk:
        """One chunk's graph entry: heuristic entities (cooccurrence/both), the title entity, and
        the entities and triples of the LLM reply (llm/both; None: no reply was asked for)."""
        ents: dict[str, str] = {}
        if self.cfg.extractor in ("cooccurrence", "both"):
            ents = extract(text, title, self.cfg.max_words)
        elif title:
            ents = extract("", title, self.cfg.max_words)  # the title is how other chunks cite this one
        triples: list[Triple] = []
        if reply is not None:
            parsed = parse_triples(reply, self.cfg.max_words, passage=f"{title}\n{text}")
            if parsed is None:
                self.skipped_replies += 1
            else:
                for (hs, rel, ts) in parsed[: self.cfg.llm_max_triples]:
                    h, t = normalize(hs), normalize(ts)
                    ents.setdefault(h, hs)
                    ents.setdefault(t, ts)
                    if (h, rel, t) not in triples:
                        triples.append((h, rel, t))
        return GraphChunk(cid, chunk_hash(text, title), ents, triples)

    def _pairs(self, cid: int) -> Counter[tuple[str, str]]:
        """Edge weight contributions of one chunk: 1 per co-mentioned pair (cooccurrence/both), +1
        per LLM triple's (head, tail) pair."""
        out: Counter[tuple[str, str]] = Counter()
        keys = sorted(self.mentions.get(cid, ()))
        if self.cfg.extractor in ("cooccurrence", "both"):
            for i, a in enumerate(keys):
                for b in keys[i + 1 :]:
                    out[(a, b)] += 1
        for pair in {tuple(sorted((h, t))) for h, _, t in self.triples.get(cid, ()) if h != t}:
            out[pair] += 1  # type: ignore[index]
        return out

    # ---- updates ---------------------------------------------------------------------
    def add(self, items: Iterable[tuple[int, str, str]]) -> None:
        """(chunk int id, text, title) triples, heuristic extraction; an id already present is replaced."""
        self.put(self.extract(cid, text, title) for cid, text, title in items)

    def put(self, chunks: Iterable[GraphChunk]) -> None:
        """Graph entries (from `extract` or the store); an id already present is replaced."""
        for ch in chunks:
            self.delete([ch.int_id])
            self.hashes[ch.int_id] = ch.hash
            if not ch.mentions:
                continue
            self.mentions[ch.int_id] = dict(ch.mentions)
            if ch.triples:
                self.triples[ch.int_id] = list(ch.triples)
            for k in ch.mentions:
                self.chunks_of.setdefault(k, set()).add(ch.int_id)
                self.edges.setdefault(k, Counter())
            for (a, b), w in self._pairs(ch.int_id).items():
                self.edges[a][b] += w
                self.edges[b][a] += w
            self._dirty.update(ch.mentions)

    def delete(self, ids: Iterable[int]) -> None:
        for cid in ids:
            cid = int(cid)
            self.hashes.pop(cid, None)
            if cid not in self.mentions:
                continue
            pairs = self._pairs(cid)
            ents = self.mentions.pop(cid)
            self.triples.pop(cid, None)
            for (a, b), w in pairs.items():
                for x, y in ((a, b), (b, a)):
                    row = self.edges[x]
                    row[y] -= w
                    if row[y] <= 0:
                        del row[y]
            for k in ents:
                chunks = self.chunks_of[k]
                chunks.discard(cid)
                if not chunks:  # no chunk supports it any more: the entity goes
                    del self.chunks_of[k], self.edges[k]
                    self.community.pop(k, None)
                    self.vectors.pop(k, None)
            self._dirty.update(ents)

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

    # ---- communities ---------------------------------------------------------------------
    def members(self) -> dict[str, list[str]]:
        """Community label -> sorted member keys."""
        out: dict[str, list[str]] = {}
        for key, label in self.community.items():
            out.setdefault(label, []).append(key)
        return {lb: sorted(ks) for lb, ks in out.items()}

    def community_chunks(self, members: Sequence[str], limit: int) -> list[int]:
        """The chunks that mention most of a community's members (ties: smaller id)."""
        hits: Counter[int] = Counter()
        for k in members:
            for c in self.chunks_of.get(k, ()):
                hits[c] += 1
        return [c for c, _ in sorted(hits.items(), key=lambda x: (-x[1], x[0]))[:limit]]

    def summarisable(self) -> dict[str, list[str]]:
        """Communities big enough for a summary (`summary_min_size`), largest first, capped at
        `summary_max_communities`: the corpus's themes, not every pair of co-mentioned names."""
        groups = [(lb, m) for lb, m in self.members().items() if len(m) >= self.cfg.summary_min_size]
        groups.sort(key=lambda x: (-len(x[1]), x[0]))
        return dict(groups[: self.cfg.summary_max_communities])

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
                "communities": len(sizes), "triples": sum(len(t) for t in self.triples.values()),
                "summaries": len(self.summaries), "skipped_replies": self.skipped_replies, "largest_communities": [
                    {"label": self.name(c), "size": n} for c, n in sorted(sizes.items(), key=lambda x: (-x[1], x[0]))[:10]]}

    def show(self, entity: str, limit: int = 20) -> dict[str, object] | None:
        key = normalize(entity)
        if key not in self.chunks_of:
            return None
        neigh = sorted(self.edges[key].items(), key=lambda x: (-x[1], x[0]))[:limit]
        rels: dict[str, list[str]] = {}  # LLM relations to each neighbour, either direction
        for c in self.chunks_of[key]:
            for h, r, t in self.triples.get(c, ()):
                other = t if h == key else h if t == key else None
                if other is not None and r not in rels.setdefault(other, []):
                    rels[other].append(r)
        comm = self.community.get(key)
        return {"key": key, "name": self.name(key), "hub": key in self.hubs, "chunks": sorted(self.chunks_of[key]),
                "community": comm, "community_size": sum(1 for v in self.community.values() if v == comm) if comm else 0,
                "neighbours": [{"key": o, "name": self.name(o), "weight": w, "relations": rels.get(o, [])}
                               for o, w in neigh],
                "summary": self.summaries[comm].text if comm in self.summaries else None}

    def signature(self) -> tuple:
        """Entities, weighted edges and community membership (labels are the smallest member key,
        so equal partitions compare equal): what a rebuild from scratch must reproduce."""
        edges = {(a, b, w) for a, row in self.edges.items() for b, w in row.items() if a < b}
        groups: dict[str, set[str]] = {}
        for k, c in self.community.items():
            groups.setdefault(c, set()).add(k)
        return (sorted(self.chunks_of), sorted(edges), sorted(sorted(g) for g in groups.values()), sorted(self.hubs))
