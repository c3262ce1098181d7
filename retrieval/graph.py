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

Persistence: the graph lives in the document store's database (SQLite or Postgres tables,
indexing/graph_rows.py), not in index files. `sync(store, ...)` diffs the store's chunks against
the graph's own per-chunk hashes, updates only the changed chunks' mentions, the entities, hubs
and communities they touch, and the summaries of communities whose members changed, and writes
exactly those rows in one transaction; a kill -9 at any point leaves the last completed sync.
Because the graph keeps its own hashes, it does not depend on the BM25/FAISS manifest being
published in the same instant: a graph written just before a kill is simply current next time.
Search reads the in-memory GraphIndex, loaded from those rows.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import scipy.sparse as sp

from indexing.graph_rows import GraphChunk, GraphDelta, GraphEntity, GraphSummary, Triple
from indexing.types import content_hash

from .config import GraphConfig
from .entities import EXTRACTOR_VERSION, extract, normalize, question_keys
from .triples import parse_triples

log = logging.getLogger(__name__)
HUB_MIN_CHUNKS = 20

# Graph settings that change what the graph holds (the others only change how it is searched).
_GRAPH_BUILD = ("extractor", "max_words", "max_chunk_share", "communities", "community_min_weight", "resolution",
                "seed")


def graph_build_settings(cfg: GraphConfig) -> dict[str, Any]:
    """The part of `retrieval.graph` a graph is built with (manifest, graph_meta, eval index keys)."""
    return {**{k: v for k, v in cfg.model_dump(mode="json").items() if k in _GRAPH_BUILD},
            "extractor_version": EXTRACTOR_VERSION}


class GraphLLM(Protocol):
    """What the graph asks an engine for (rag/graph_llm.py implements it; retrieval cannot import
    the engine). Both return one raw reply per input, in order; parsing is the graph's job."""

    def triples(self, chunks: Sequence[tuple[str, str]]) -> list[str]:
        """(title, text) of each chunk -> the model's triples reply (retrieval/triples.py format)."""
        ...

    def summaries(self, communities: Sequence[tuple[list[str], list[str]]]) -> list[str]:
        """(entity names, passage excerpts) of each community -> a short summary."""
        ...


class Embeds(Protocol):
    name: str

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray: ...


@dataclass
class SyncStats:
    added: int = 0
    removed: int = 0
    skipped_replies: int = 0  # LLM extraction replies that did not parse (their chunk got no triples)
    embedded: int = 0
    summarised: int = 0
    summaries_dropped: int = 0
    written: dict[str, int] = field(default_factory=dict)


def chunk_hash(text: str, title: str) -> str:
    """What a chunk's graph entry was extracted from (title included: it is an entity)."""
    return content_hash(title + "\x00" + text)


class GraphIndex:
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
            parsed = parse_triples(reply, self.cfg.max_words)
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

    # ---- communities and their summaries (global mode) ----------------------------------
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
        from .entities import normalize

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
            if m is None or self.summaries[lb].members_hash != _members_hash(m) or lb not in want:
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
                    self.summaries[lb] = GraphSummary(lb, _members_hash(m), text)
                    st.summarised += 1

    def with_query_settings(self, cfg: GraphConfig) -> GraphIndex:
        """Search settings (damping, iterations, chunk score) come from the live config, not the
        file: they change no stored state."""
        if cfg != self.cfg:
            self.cfg, self._matrix = cfg, None
        return self


def _members_hash(members: Sequence[str]) -> str:
    return content_hash("\x00".join(sorted(members)))
