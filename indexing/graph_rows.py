"""Rows of a collection's entity graph as the document stores keep them (SQLite and Postgres).

Why the graph lives in the store and not in index files: it is the one derived structure that
is expensive to recompute (LLM triples, entity embeddings, community summaries), so it gets the
store's guarantees: every sync writes its changes in one transaction (`graph_write`), so a process
killed at any point leaves the graph exactly as the last completed sync left it. The state is per
chunk (the hash of the text it was extracted from, its mentions, its triples); entities carry
their community label and embedding; summaries are keyed by community label with a hash of the
members they were written for. `retrieval/graph/` owns what the rows mean; the stores only keep
them, so indexing still imports nothing above itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Triple = tuple[str, str, str]  # (head key, relation, tail key)


@dataclass
class GraphChunk:
    """What the graph holds about one chunk; `hash` is of the text it was extracted from."""

    int_id: int
    hash: str
    mentions: dict[str, str]  # entity key -> surface form
    triples: list[Triple] = field(default_factory=list)


@dataclass
class GraphEntity:
    """An entity row: its community label (None: hub or no communities) and embedding bytes
    (float32, None when entity embeddings are off)."""

    key: str
    community: str | None = None
    vector: bytes | None = None


@dataclass
class GraphSummary:
    label: str
    members_hash: str  # hash of the sorted member keys it was written for: a change makes it stale
    text: str


@dataclass
class GraphState:
    """Everything `graph_load` returns; `meta` is None for a collection never graph-synced."""

    meta: dict[str, Any] | None = None
    chunks: list[GraphChunk] = field(default_factory=list)
    entities: list[GraphEntity] = field(default_factory=list)
    summaries: list[GraphSummary] = field(default_factory=list)


@dataclass
class GraphDelta:
    """One sync's changes, applied by `graph_write` in a single transaction. `reset` deletes the
    collection's graph rows first (a rebuild). Drops are applied before puts, so a changed chunk
    is dropped and put in the same delta."""

    meta: dict[str, Any]
    reset: bool = False
    drop_chunks: list[int] = field(default_factory=list)
    put_chunks: list[GraphChunk] = field(default_factory=list)
    drop_entities: list[str] = field(default_factory=list)
    put_entities: list[GraphEntity] = field(default_factory=list)
    drop_summaries: list[str] = field(default_factory=list)
    put_summaries: list[GraphSummary] = field(default_factory=list)

    def empty(self) -> bool:
        return not (self.reset or self.drop_chunks or self.put_chunks or self.drop_entities or self.put_entities
                    or self.drop_summaries or self.put_summaries)


GRAPH_TABLES = ("graph_chunks", "graph_mentions", "graph_triples", "graph_entities", "graph_summaries", "graph_meta")


def graph_schema(blob: str, json_type: str) -> str:
    """The graph tables for both stores (`blob`: BLOB or BYTEA, `json_type`: TEXT or JSONB)."""
    return f"""
CREATE TABLE IF NOT EXISTS graph_chunks (
    collection TEXT NOT NULL, int_id BIGINT NOT NULL, hash TEXT NOT NULL,
    PRIMARY KEY (collection, int_id));
CREATE TABLE IF NOT EXISTS graph_mentions (
    collection TEXT NOT NULL, int_id BIGINT NOT NULL, key TEXT NOT NULL, surface TEXT NOT NULL,
    PRIMARY KEY (collection, int_id, key));
CREATE TABLE IF NOT EXISTS graph_triples (
    collection TEXT NOT NULL, int_id BIGINT NOT NULL, seq INTEGER NOT NULL,
    head TEXT NOT NULL, relation TEXT NOT NULL, tail TEXT NOT NULL,
    PRIMARY KEY (collection, int_id, seq));
CREATE TABLE IF NOT EXISTS graph_entities (
    collection TEXT NOT NULL, key TEXT NOT NULL, community TEXT, vector {blob},
    PRIMARY KEY (collection, key));
CREATE TABLE IF NOT EXISTS graph_summaries (
    collection TEXT NOT NULL, label TEXT NOT NULL, members_hash TEXT NOT NULL, summary TEXT NOT NULL,
    PRIMARY KEY (collection, label));
CREATE TABLE IF NOT EXISTS graph_meta (
    collection TEXT PRIMARY KEY, meta {json_type} NOT NULL);
"""


def load_rows(rows: dict[str, list[tuple]]) -> GraphState:
    """A GraphState from each table's rows (collection column dropped), in any order."""
    meta = rows["graph_meta"]
    state = GraphState(meta=meta[0][0] if meta else None)
    if isinstance(state.meta, str):
        import json

        state.meta = json.loads(state.meta)
    by_chunk: dict[int, GraphChunk] = {}
    for int_id, h in rows["graph_chunks"]:
        by_chunk[int(int_id)] = GraphChunk(int(int_id), h, {})
    for int_id, key, surface in rows["graph_mentions"]:
        by_chunk[int(int_id)].mentions[key] = surface
    for int_id, _, head, rel, tail in sorted(rows["graph_triples"]):
        by_chunk[int(int_id)].triples.append((head, rel, tail))
    state.chunks = [by_chunk[i] for i in sorted(by_chunk)]
    state.entities = [GraphEntity(k, c, bytes(v) if v is not None else None) for k, c, v in rows["graph_entities"]]
    state.summaries = [GraphSummary(label, h, s) for label, h, s in rows["graph_summaries"]]
    return state


def delta_rows(collection: str, delta: GraphDelta) -> dict[str, list[tuple]]:
    """The rows to insert per table (collection column first), for both stores' writers."""
    return {
        "graph_chunks": [(collection, c.int_id, c.hash) for c in delta.put_chunks],
        "graph_mentions": [(collection, c.int_id, k, s) for c in delta.put_chunks for k, s in c.mentions.items()],
        "graph_triples": [(collection, c.int_id, i, h, r, t) for c in delta.put_chunks
                          for i, (h, r, t) in enumerate(c.triples)],
        "graph_entities": [(collection, e.key, e.community, e.vector) for e in delta.put_entities],
        "graph_summaries": [(collection, s.label, s.members_hash, s.text) for s in delta.put_summaries],
    }


SELECTS = {
    "graph_meta": "SELECT meta FROM graph_meta WHERE collection={m}",
    "graph_chunks": "SELECT int_id, hash FROM graph_chunks WHERE collection={m}",
    "graph_mentions": "SELECT int_id, key, surface FROM graph_mentions WHERE collection={m}",
    "graph_triples": "SELECT int_id, seq, head, relation, tail FROM graph_triples WHERE collection={m}",
    "graph_entities": "SELECT key, community, vector FROM graph_entities WHERE collection={m}",
    "graph_summaries": "SELECT label, members_hash, summary FROM graph_summaries WHERE collection={m}",
}


def write_delta(cur: Any, collection: str, delta: GraphDelta, mark: str, meta_json: str) -> None:
    """Apply `delta` through a DB-API cursor inside the caller's transaction (`mark`: the driver's
    placeholder). Updates are delete-then-insert, so the same SQL serves both stores."""
    c = collection
    if delta.reset:
        for table in GRAPH_TABLES:
            cur.execute(f"DELETE FROM {table} WHERE collection={mark}", (c,))
    else:
        gone = sorted({*delta.drop_chunks, *(ch.int_id for ch in delta.put_chunks)})
        for table in ("graph_chunks", "graph_mentions", "graph_triples"):
            if gone:
                cur.executemany(f"DELETE FROM {table} WHERE collection={mark} AND int_id={mark}", [(c, i) for i in gone])
        keys = sorted({*delta.drop_entities, *(e.key for e in delta.put_entities)})
        if keys:
            cur.executemany(f"DELETE FROM graph_entities WHERE collection={mark} AND key={mark}", [(c, k) for k in keys])
        labels = sorted({*delta.drop_summaries, *(s.label for s in delta.put_summaries)})
        if labels:
            cur.executemany(f"DELETE FROM graph_summaries WHERE collection={mark} AND label={mark}",
                            [(c, lb) for lb in labels])
        cur.execute(f"DELETE FROM graph_meta WHERE collection={mark}", (c,))
    for table, rows in delta_rows(c, delta).items():
        if rows:
            marks = ",".join([mark] * len(rows[0]))
            cur.executemany(f"INSERT INTO {table} VALUES ({marks})", rows)
    cur.execute(f"INSERT INTO graph_meta VALUES ({mark}, {mark})", (c, meta_json))
