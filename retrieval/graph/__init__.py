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

Layout: `base.py` (the engine and embedder contracts, build settings, `SyncStats`), `state.py`
(mentions, edges, hubs, communities and their incremental updates), `search.py` (entity linking,
PPR, global search) and `sync.py` (`GraphIndex`: loaded from and synced to the store's rows), each
class building on the one before.
"""

from __future__ import annotations

from .base import HUB_MIN_CHUNKS, Embeds, GraphLLM, SyncStats, chunk_hash, graph_build_settings
from .search import GraphSearch
from .state import GraphState
from .sync import GraphIndex

__all__ = ["HUB_MIN_CHUNKS", "Embeds", "GraphIndex", "GraphLLM", "GraphSearch", "GraphState", "SyncStats",
           "chunk_hash", "graph_build_settings"]
