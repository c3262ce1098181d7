"""Embedding cache: SQLite file keyed by (embedder name, content hash).

Re-indexing unchanged chunks (a reindex, an index rebuilt after a crash, a new FAISS index type)
never re-embeds them; only texts whose hash is unseen for this embedder go to the model.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from indexing.sqlite_connect import connect_wal
from indexing.types import content_hash

from .base import Embedder


class EmbeddingCache:
    def __init__(self, path: str | Path, fp16: bool = False):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fp16 = fp16
        self._lock = threading.Lock()
        self._db = connect_wal(self.path)
        self._db.execute("CREATE TABLE IF NOT EXISTS embeddings (model TEXT NOT NULL, hash TEXT NOT NULL, "
                         "dtype TEXT NOT NULL, vec BLOB NOT NULL, PRIMARY KEY (model, hash))")

    def get(self, model: str, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        with self._lock:
            for i in range(0, len(hashes), 500):
                part = list(hashes[i : i + 500])
                marks = ",".join("?" * len(part))
                for h, dt, blob in self._db.execute(
                    f"SELECT hash, dtype, vec FROM embeddings WHERE model=? AND hash IN ({marks})", [model, *part]
                ):
                    out[h] = np.frombuffer(blob, dtype=dt).astype(np.float32)
        return out

    def put(self, model: str, hashes: Sequence[str], vecs: np.ndarray) -> None:
        dt = np.float16 if self.fp16 else np.float32
        rows = [(model, h, np.dtype(dt).name, np.asarray(v, dtype=dt).tobytes()) for h, v in zip(hashes, vecs, strict=False)]
        with self._lock:
            self._db.execute("BEGIN")
            self._db.executemany("INSERT OR REPLACE INTO embeddings VALUES (?,?,?,?)", rows)
            self._db.execute("COMMIT")

    def count(self, model: str | None = None) -> int:
        if model is None:
            return self._db.execute("SELECT COUNT(*) FROM embeddings").fetchone()[0]
        return self._db.execute("SELECT COUNT(*) FROM embeddings WHERE model=?", (model,)).fetchone()[0]

    def close(self) -> None:
        self._db.close()


class CachedEmbedder(Embedder):
    """Wraps an embedder; documents go through the cache, queries go straight to the model."""

    def __init__(self, inner: Embedder, cache: EmbeddingCache, chunk_size: int = 512):
        self.inner, self.cache, self.chunk_size = inner, cache, chunk_size
        self.name, self.dim = inner.name, inner.dim
        self.hits = 0
        self.misses = 0

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self.inner.encode_queries(texts)

    def encode_documents(self, texts: Sequence[str]) -> np.ndarray:
        hashes = [content_hash(t) for t in texts]
        found = self.cache.get(self.name, list(dict.fromkeys(hashes)))
        todo = list(dict.fromkeys(h for h in hashes if h not in found))
        self.hits += sum(1 for h in hashes if h in found)
        self.misses += len(todo)
        text_of = dict(zip(hashes, texts, strict=False))
        # Embed and store in slices so an interrupted long run keeps what it finished.
        for i in range(0, len(todo), self.chunk_size):
            part = todo[i : i + self.chunk_size]
            vecs = self.inner.encode_documents([text_of[h] for h in part])
            self.cache.put(self.name, part, vecs)
            found.update(zip(part, vecs, strict=False))
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([found[h] for h in hashes]).astype(np.float32)
