"""BM25 on scipy sparse matrices: precomputed per-term-per-document weights, query = sum of rows.

Scores equal `rank_bm25.BM25Okapi/BM25L/BM25Plus` on the same tokens (same formulas, same float64
evaluation order, including Okapi's idf floor `epsilon * mean(idf)` for terms in more than half of
the documents), but a query touches only the postings of its own terms instead of looping over every
document in Python.

Updates: new documents are appended as rows and deletions are tombstones, so nothing is re-tokenised;
idf/avgdl change with every update, so the weight matrix is recomputed lazily (vectorised, O(nnz))
on the next query. Tombstoned rows are compacted away on save when they pass a quarter of the rows.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from .config import BM25Config

_ARRAYS = ("tf_data", "tf_indices", "tf_indptr", "doc_len", "ids", "alive", "w_data", "w_indices", "w_indptr",
           "idf")


class BM25Index:
    """Documents are rows keyed by an int64 id (the chunk's `int_id`); terms are columns."""

    def __init__(self, cfg: BM25Config | None = None):
        self.cfg = cfg or BM25Config()
        self.vocab: dict[str, int] = {}
        self._tf = sp.csr_matrix((0, 0), dtype=np.float64)
        self._pending: list[sp.csr_matrix] = []
        self.doc_len = np.zeros(0, dtype=np.float64)
        self.ids = np.zeros(0, dtype=np.int64)
        self.alive = np.zeros(0, dtype=bool)
        self._row: dict[int, int] = {}
        self._wt: sp.csr_matrix | None = None  # term-major weights, None = stale
        self.idf = np.zeros(0)
        self._base = np.zeros(0)  # BM25+ adds delta*idf to every document, matched or not

    # ---- building -------------------------------------------------------------------
    def add(self, ids: Sequence[int], docs: Iterable[Sequence[str]]) -> None:
        """Append tokenised documents; an id already present is replaced (old row tombstoned)."""
        ids = [int(i) for i in ids]
        self.delete(i for i in ids if i in self._row)
        docs = list(docs)
        if len(docs) != len(ids):
            raise ValueError(f"{len(ids)} ids but {len(docs)} documents")
        if not ids:
            return
        lens = np.fromiter((len(d) for d in docs), dtype=np.int64, count=len(docs))
        vocab = self.vocab
        # Term ids numbered in order of first appearance (rank_bm25's dict order, which its Okapi
        # idf mean is summed in); setdefault keeps this one C-level dict operation per token.
        cols = np.fromiter((vocab.setdefault(t, len(vocab)) for d in docs for t in d), dtype=np.int64,
                           count=int(lens.sum()))
        rows = np.repeat(np.arange(len(docs)), lens)
        part = sp.coo_matrix((np.ones(len(cols)), (rows, cols)), shape=(len(docs), len(self.vocab))).tocsr()
        part.sum_duplicates()
        part.indices = part.indices.astype(np.int32)
        start = len(self.ids)
        self._pending.append(part)
        self.doc_len = np.concatenate([self.doc_len, lens.astype(np.float64)])
        self.ids = np.concatenate([self.ids, np.asarray(ids, dtype=np.int64)])
        self.alive = np.concatenate([self.alive, np.ones(len(ids), dtype=bool)])
        for j, i in enumerate(ids):
            self._row[i] = start + j
        self._wt = None

    def delete(self, ids: Iterable[int]) -> int:
        rows = [self._row.pop(int(i)) for i in ids if int(i) in self._row]
        if rows:
            if not self.alive.flags.writeable:
                self.alive = self.alive.copy()
            self.alive[rows] = False
            self._wt = None
        return len(rows)

    def __len__(self) -> int:
        return len(self._row)

    def __contains__(self, int_id: int) -> bool:
        return int(int_id) in self._row

    def live_ids(self) -> np.ndarray:
        return self.ids[self.alive]

    # ---- weights ----------------------------------------------------------------------
    def _merged_tf(self) -> sp.csr_matrix:
        if self._pending:
            V = len(self.vocab)
            old = sp.csr_matrix((self._tf.data, self._tf.indices, self._tf.indptr),
                                shape=(self._tf.shape[0], V))
            parts = [old] + [sp.csr_matrix((p.data, p.indices, p.indptr), shape=(p.shape[0], V))
                             for p in self._pending]
            self._tf = sp.vstack(parts, format="csr")
            self._pending = []
        return self._tf

    def _refresh(self) -> sp.csr_matrix:
        """Recompute idf and the term-major weight matrix from tf, live rows only."""
        if self._wt is not None:
            return self._wt
        tf = self._merged_tf()
        cfg, V = self.cfg, len(self.vocab)
        n_live = int(self.alive.sum())
        row_of_nz = np.repeat(np.arange(tf.shape[0]), np.diff(tf.indptr))
        live_nz = self.alive[row_of_nz]
        df = np.bincount(tf.indices[live_nz], minlength=V).astype(np.float64)
        present = df > 0
        N = float(n_live)
        avgdl = float(self.doc_len[self.alive].sum()) / N if n_live else 1.0
        idf = np.zeros(V)
        if cfg.variant == "okapi":
            raw = np.log(N - df[present] + 0.5) - np.log(df[present] + 0.5)
            if present.any():
                # rank_bm25 averages the raw idf over all terms, then floors negatives at eps * mean.
                eps = cfg.epsilon * (sum(raw.tolist()) / len(raw))
                raw = np.where(raw < 0, eps, raw)
            idf[present] = raw
        elif cfg.variant == "bm25l":
            idf[present] = math.log(N + 1) - np.log(df[present] + 0.5)
        else:
            idf[present] = np.log((N + 1) / df[present])
        k1, b, delta = cfg.k1, cfg.b, cfg.effective_delta()
        q = tf.data[live_nz]
        dl = self.doc_len[row_of_nz[live_nz]]
        w_idf = idf[tf.indices[live_nz]]
        if cfg.variant == "okapi":
            w = w_idf * (q * (k1 + 1) / (q + k1 * (1 - b + b * dl / avgdl)))
        elif cfg.variant == "bm25l":
            ctd = q / (1 - b + b * dl / avgdl)
            w = w_idf * q * (k1 + 1) * (ctd + delta) / (k1 + ctd + delta)
        else:  # bm25plus: the delta*idf part is added to every document in _base
            w = w_idf * ((q * (k1 + 1)) / (k1 * (1 - b + b * dl / avgdl) + q))
        W = sp.csr_matrix((w, tf.indices[live_nz], np.concatenate([[0], np.cumsum(np.bincount(
            row_of_nz[live_nz], minlength=tf.shape[0]))])), shape=(tf.shape[0], V))
        self._wt = W.T.tocsr()
        self._wt.sort_indices()
        self.idf = idf
        self._base = idf * delta if cfg.variant == "bm25plus" else np.zeros(V)
        return self._wt

    # ---- scoring -------------------------------------------------------------------------
    def _query_cols(self, tokens: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        counts = Counter(t for t in tokens if t in self.vocab)
        cols = np.fromiter((self.vocab[t] for t in counts), dtype=np.int64, count=len(counts))
        mult = np.fromiter(counts.values(), dtype=np.float64, count=len(counts))
        return cols, mult

    def _scores_and_hits(self, tokens: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        wt = self._refresh()
        n = wt.shape[1]
        cols, mult = self._query_cols(tokens)
        if len(cols) == 0:
            return np.zeros(n), np.zeros(n, dtype=bool)
        starts, ends = wt.indptr[cols], wt.indptr[cols + 1]
        lens = ends - starts
        take = np.concatenate([np.arange(s, e) for s, e in zip(starts, ends, strict=False)]) if len(cols) > 1 else \
            np.arange(starts[0], ends[0])
        idx = wt.indices[take]
        vals = wt.data[take] * np.repeat(mult, lens)
        scores = np.bincount(idx, weights=vals, minlength=n)
        hits = np.bincount(idx, minlength=n) > 0
        base = float(np.dot(self._base[cols], mult))
        if base:
            scores += base
        return scores, hits

    def get_scores(self, tokens: Sequence[str]) -> np.ndarray:
        """Scores of every live document in insertion order (what rank_bm25.get_scores returns)."""
        scores, _ = self._scores_and_hits(tokens)
        return scores[self.alive]

    def must_mask(self, must: Sequence[Sequence[str]]) -> np.ndarray:
        """Rows containing every term of every must-clause (each clause = one analysed phrase)."""
        wt = self._refresh()
        mask = np.ones(wt.shape[1], dtype=bool)
        for clause in must:
            for term in clause:
                col = self.vocab.get(term)
                m = np.zeros(wt.shape[1], dtype=bool)
                if col is not None:
                    m[wt.indices[wt.indptr[col]:wt.indptr[col + 1]]] = True
                mask &= m
        return mask

    def mask_for_ids(self, allowed: np.ndarray) -> np.ndarray:
        """Boolean row mask from a set of allowed int ids (the filter pre-selection)."""
        return np.isin(self.ids, allowed)

    def search(self, tokens: Sequence[str], k: int, mask: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-k (int ids, scores) among live documents that match at least one query term and pass
        `mask` (row mask), best first."""
        scores, hits = self._scores_and_hits(tokens)
        ok = hits & self.alive
        if mask is not None:
            ok &= mask
        rows = np.flatnonzero(ok)
        if len(rows) == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        s = scores[rows]
        if len(rows) > k:
            part = np.argpartition(-s, k - 1)[:k]
            rows, s = rows[part], s[part]
        order = np.lexsort((rows, -s))
        return self.ids[rows[order]], s[order]

    # ---- persistence ---------------------------------------------------------------------
    def compact(self) -> None:
        """Drop tombstoned rows (renumbers rows; ids are unchanged)."""
        tf = self._merged_tf()
        if self.alive.all():
            return
        keep = np.flatnonzero(self.alive)
        self._tf = tf[keep]
        self.doc_len, self.ids = self.doc_len[keep], self.ids[keep]
        self.alive = np.ones(len(keep), dtype=bool)
        self._row = {int(i): r for r, i in enumerate(self.ids)}
        self._wt = None

    def save(self, path: Path) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        if len(self.alive) and (~self.alive).sum() * 4 > len(self.alive):
            self.compact()
        tf, wt = self._merged_tf(), self._refresh()
        arrays = dict(tf_data=tf.data, tf_indices=tf.indices, tf_indptr=tf.indptr, doc_len=self.doc_len,
                      ids=self.ids, alive=self.alive, w_data=wt.data, w_indices=wt.indices, w_indptr=wt.indptr,
                      idf=self.idf)
        for name, arr in arrays.items():
            np.save(path / f"{name}.npy", np.ascontiguousarray(arr))
        terms = [""] * len(self.vocab)
        for t, i in self.vocab.items():
            terms[i] = t
        (path / "vocab.json").write_text(json.dumps(terms, ensure_ascii=False))
        (path / "bm25.json").write_text(self.cfg.model_dump_json())

    @classmethod
    def load(cls, path: Path, mmap: bool = True) -> BM25Index:
        path = Path(path)
        cfg = BM25Config.model_validate_json((path / "bm25.json").read_text())
        a = {n: np.load(path / f"{n}.npy", mmap_mode="r" if mmap else None) for n in _ARRAYS}
        self = cls(cfg)
        terms = json.loads((path / "vocab.json").read_text())
        self.vocab = {t: i for i, t in enumerate(terms)}
        V, n = len(terms), len(a["ids"])
        self._tf = sp.csr_matrix((a["tf_data"], a["tf_indices"], a["tf_indptr"]), shape=(n, V), copy=False)
        self.doc_len, self.ids, self.alive = a["doc_len"], a["ids"], a["alive"]
        self._row = {int(i): r for r, i in enumerate(self.ids) if self.alive[r]}
        self._wt = sp.csr_matrix((a["w_data"], a["w_indices"], a["w_indptr"]), shape=(V, n), copy=False)
        self.idf = a["idf"]
        self._base = self.idf * cfg.effective_delta() if cfg.variant == "bm25plus" else np.zeros(V)
        return self
