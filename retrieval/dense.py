"""FAISS dense index keyed by chunk int ids (IndexIDMap2), with pre-filtering by id selectors.

Exact Flat inner product is the default: under ~200k vectors it is fast enough and needs no
training. HNSW and IVF are for larger corpora; IVF starts as Flat and is trained automatically
once there are enough vectors (`min_train_factor * nlist`). Filters are pushed into the search
(`IDSelectorBatch`), and when an approximate index returns fewer than k matches under a very
selective filter we fall back to exact scoring of the allowed vectors, so k matching results
come back whenever k exist.
"""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path

import faiss
import numpy as np

from .config import DenseConfig

log = logging.getLogger(__name__)
_BRUTE_FORCE_MAX = 20_000  # allowed-set size under which exact fallback scoring is cheap
_OVERSAMPLE_MIN_FRACTION = 0.2  # filters keeping more than this are applied after an oversampled search


def gpu_available() -> bool:
    try:
        return hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0
    except Exception:  # noqa: BLE001 - any faiss build quirk means "no GPU"
        return False


class DenseIndex:
    def __init__(self, dim: int, cfg: DenseConfig | None = None, fp16: bool = False):
        self.dim, self.cfg, self.fp16 = dim, cfg or DenseConfig(), fp16
        self.kind = "flat"
        self.index = self._new_index("flat")
        self._gpu = None

    # ---- construction ---------------------------------------------------------------------
    def _nlist(self, n: int) -> int:
        return self.cfg.ivf_nlist or max(8, int(4 * math.sqrt(max(n, 1))))

    def _new_index(self, kind: str, n: int = 0) -> faiss.Index:
        ip = faiss.METRIC_INNER_PRODUCT
        if kind == "hnsw":
            inner = faiss.IndexHNSWFlat(self.dim, self.cfg.hnsw_m, ip)
            inner.hnsw.efConstruction = self.cfg.hnsw_ef_construction
            inner.hnsw.efSearch = self.cfg.hnsw_ef_search
        elif kind in ("ivf_flat", "ivf_pq"):
            quant = faiss.IndexFlatIP(self.dim)
            nlist = self._nlist(n)
            if kind == "ivf_flat":
                inner = faiss.IndexIVFFlat(quant, self.dim, nlist, ip)
            else:
                inner = faiss.IndexIVFPQ(quant, self.dim, nlist, self.cfg.pq_m, self.cfg.pq_nbits, ip)
            inner.nprobe = self.cfg.ivf_nprobe
            # IVF stores external ids itself; IDMap2 over IVF breaks on removal, so no wrapper here.
            inner.set_direct_map_type(faiss.DirectMap.Hashtable)
            return inner
        elif self.fp16:
            inner = faiss.IndexScalarQuantizer(self.dim, faiss.ScalarQuantizer.QT_fp16, ip)
        else:
            inner = faiss.IndexFlatIP(self.dim)
        idx = faiss.IndexIDMap2(inner)
        return idx

    def _wanted_kind(self, n: int) -> str:
        want = self.cfg.index
        if want.startswith("ivf") and n < self.cfg.min_train_factor * self._nlist(n):
            return "flat"  # not enough vectors to train the coarse quantizer well yet
        if want == "ivf_pq" and n < (1 << self.cfg.pq_nbits) * self.cfg.min_train_factor:
            return "flat"
        return want

    def _rebuild(self, kind: str, keep: np.ndarray | None = None) -> None:
        ids = self.ids() if keep is None else keep
        vecs = self.index.reconstruct_batch(ids) if len(ids) else np.zeros((0, self.dim), np.float32)
        new = self._new_index(kind, len(ids))
        if kind.startswith("ivf"):
            new.train(vecs)
        if len(ids):
            new.add_with_ids(vecs, ids)
        self.index, self.kind, self._gpu = new, kind, None
        log.info("dense index rebuilt as %s over %d vectors", kind, len(ids))

    # ---- updates ---------------------------------------------------------------------------
    def add(self, ids: np.ndarray, vecs: np.ndarray) -> None:
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        vecs = np.ascontiguousarray(vecs, dtype=np.float32)
        if vecs.ndim != 2 or vecs.shape[1] != self.dim:
            raise ValueError(f"expected vectors of dim {self.dim}, got {vecs.shape}")
        if len(ids) == 0:
            return
        if self.ntotal:
            present = ids[np.isin(ids, self.ids())]
            if len(present):
                self.remove(present)  # replace semantics, like the store's upsert
        self.index.add_with_ids(vecs, ids)
        self._gpu = None
        want = self._wanted_kind(self.ntotal)
        if want != self.kind:
            self._rebuild(want)

    def remove(self, ids: np.ndarray) -> int:
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        if len(ids) == 0 or self.ntotal == 0:
            return 0
        self._gpu = None
        if isinstance(self.index, faiss.IndexIVF):
            # the IVF hashtable direct map only accepts an id array selector
            return int(self.index.remove_ids(faiss.IDSelectorArray(len(ids), faiss.swig_ptr(ids))))
        try:
            return int(self.index.remove_ids(faiss.IDSelectorBatch(ids)))
        except RuntimeError:  # HNSW cannot delete: rebuild without them (from its own vectors)
            before = self.ntotal
            self._rebuild(self.kind, np.setdiff1d(self.ids(), ids))
            return before - self.ntotal

    @property
    def ntotal(self) -> int:
        return int(self.index.ntotal)

    def ids(self) -> np.ndarray:
        if isinstance(self.index, faiss.IndexIVF):
            inv = self.index.invlists
            parts = [faiss.rev_swig_ptr(inv.get_ids(li), inv.list_size(li)).copy()
                     for li in range(self.index.nlist) if inv.list_size(li)]
            return np.sort(np.concatenate(parts)).astype(np.int64) if parts else np.zeros(0, np.int64)
        return faiss.vector_to_array(self.index.id_map).astype(np.int64)

    def _inner(self) -> faiss.Index:
        if isinstance(self.index, faiss.IndexIVF):
            return self.index
        return faiss.downcast_index(self.index.index)

    # ---- search ---------------------------------------------------------------------------------
    def _params(self, sel: faiss.IDSelector | None):
        inner = self._inner()
        if isinstance(inner, faiss.IndexHNSW):
            p = faiss.SearchParametersHNSW()
            p.efSearch = self.cfg.hnsw_ef_search
        elif isinstance(inner, faiss.IndexIVF):
            p = faiss.SearchParametersIVF()
            p.nprobe = self.cfg.ivf_nprobe
        else:
            p = faiss.SearchParameters()
        if sel is not None:
            p.sel = sel
        return p

    def _searcher(self):
        if self._gpu is None and self.cfg.gpu and self.kind == "flat" and gpu_available():
            try:
                res = faiss.StandardGpuResources()
                self._gpu = (res, faiss.index_cpu_to_gpu(res, 0, self.index))
            except Exception as e:  # noqa: BLE001 - fall back to the CPU index
                log.warning("GPU index unavailable (%s); searching on CPU", e)
                self.cfg = self.cfg.model_copy(update={"gpu": False})
        return self._gpu[1] if self._gpu else self.index

    def search(self, queries: np.ndarray, k: int, allowed: np.ndarray | None = None
               ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per query: (int ids, inner-product scores) best first. `allowed` restricts to those ids."""
        q = np.ascontiguousarray(np.atleast_2d(queries), dtype=np.float32)
        if self.ntotal == 0 or k <= 0:
            return [(np.zeros(0, np.int64), np.zeros(0, np.float32)) for _ in q]
        threads = self.cfg.search_threads
        if not threads or len(q) > 16:
            return self._search(q, k, allowed)
        before = faiss.omp_get_max_threads()
        faiss.omp_set_num_threads(threads)
        try:
            return self._search(q, k, allowed)
        finally:
            faiss.omp_set_num_threads(before)

    def _search(self, q: np.ndarray, k: int, allowed: np.ndarray | None) -> list[tuple[np.ndarray, np.ndarray]]:
        k_eff = min(k, self.ntotal)
        if allowed is None:
            dist, idx = self._searcher().search(q, k_eff)
            return [_strip(d, i) for d, i in zip(dist, idx, strict=False)]
        allowed = np.ascontiguousarray(allowed, dtype=np.int64)
        if len(allowed) == 0:
            return [(np.zeros(0, np.int64), np.zeros(0, np.float32)) for _ in q]
        need = min(k, len(allowed))
        out: list[tuple[np.ndarray, np.ndarray] | None] = [None] * len(q)
        frac = len(allowed) / self.ntotal
        if frac >= _OVERSAMPLE_MIN_FRACTION:
            # A permissive filter: searching unfiltered (BLAS path) for k/frac*2 and dropping the
            # rest is much faster than a selector, which forces a per-vector check.
            srt = np.sort(allowed)
            dist, idx = self._searcher().search(q, min(self.ntotal, int(k / frac * 2) + 16))
            for j, (d, i) in enumerate(zip(dist, idx, strict=True)):
                ids, sc = _strip(d, i)
                pos = np.clip(np.searchsorted(srt, ids), 0, len(srt) - 1)
                keep = srt[pos] == ids
                if keep.sum() >= need:
                    out[j] = (ids[keep][:k], sc[keep][:k])
        rest = [j for j, o in enumerate(out) if o is None]
        if rest:
            sel = faiss.IDSelectorBatch(allowed)
            dist, idx = self.index.search(q[rest], need, params=self._params(sel))
            for j, d, i in zip(rest, dist, idx, strict=True):
                out[j] = _strip(d, i)
                if self.kind != "flat" and len(allowed) <= _BRUTE_FORCE_MAX and len(out[j][0]) < need:
                    out[j] = self._exact(q[j], allowed, k)
        return out  # type: ignore[return-value]

    def _exact(self, q: np.ndarray, allowed: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        present = np.intersect1d(allowed, self.ids())
        if len(present) == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        vecs = self.index.reconstruct_batch(present)
        s = vecs @ q
        order = np.argsort(-s, kind="stable")[:k]
        return present[order], s[order].astype(np.float32)

    # ---- persistence --------------------------------------------------------------------------
    def save(self, path: Path) -> None:
        tmp = Path(f"{path}.tmp-{os.getpid()}")
        faiss.write_index(self.index, str(tmp))
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: Path, dim: int, cfg: DenseConfig, fp16: bool = False) -> DenseIndex:
        self = cls(dim, cfg, fp16)
        self.index = faiss.read_index(str(path))
        if self.index.d != dim:
            raise ValueError(f"{path} holds {self.index.d}-dim vectors, expected {dim}")
        inner = self._inner()
        if isinstance(inner, faiss.IndexIVF) and inner.direct_map.type != faiss.DirectMap.Hashtable:
            inner.set_direct_map_type(faiss.DirectMap.Hashtable)
        self.kind = ("hnsw" if isinstance(inner, faiss.IndexHNSW) else "ivf_pq" if isinstance(inner, faiss.IndexIVFPQ)
                     else "ivf_flat" if isinstance(inner, faiss.IndexIVF) else "flat")
        return self


def _strip(d: np.ndarray, i: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    ok = i >= 0
    return i[ok].astype(np.int64), d[ok].astype(np.float32)
