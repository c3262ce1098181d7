"""FAISS dense index: every index type adds/removes by int id, filters inside the search, persists."""

from __future__ import annotations

import numpy as np
import pytest

from retrieval.config import DenseConfig
from retrieval.dense import DenseIndex


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3000, 32)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    ids = rng.choice(2**62, size=3000, replace=False).astype(np.int64)
    return ids, x


@pytest.mark.parametrize("kind", ["flat", "hnsw", "ivf_flat", "ivf_pq"])
def test_index_types_add_remove_filter_persist(kind, data, tmp_path):
    ids, x = data
    cfg = DenseConfig(index=kind, min_train_factor=5, pq_m=8, pq_nbits=6, ivf_nlist=32, hnsw_ef_search=16,
                      hnsw_ef_construction=40)
    d = DenseIndex(32, cfg)
    d.add(ids[:100], x[:100])
    assert d.kind == "flat" or kind == "hnsw"  # IVF waits for enough training vectors
    d.add(ids[100:], x[100:])
    assert d.kind == kind and d.ntotal == 3000
    got, scores = d.search(x[5], 1)[0]
    assert got[0] == ids[5] and scores[0] == pytest.approx(1.0, abs=0.2)
    allowed = ids[::300]  # 10 of 3000 allowed (0.3%)
    for got, _ in d.search(x[:4], 10, allowed):
        assert len(got) == 10 and set(got) <= set(allowed)
    assert d.remove(ids[:50]) == 50 and d.ntotal == 2950
    assert ids[0] not in set(d.search(x[0], 20)[0][0].tolist())
    assert set(d.ids().tolist()) == set(ids[50:].tolist())
    d.save(tmp_path / "d.faiss")
    back = DenseIndex.load(tmp_path / "d.faiss", 32, cfg)
    assert back.kind == kind and back.ntotal == 2950
    assert back.search(x[60], 1)[0][0][0] == ids[60]
    assert back.remove(ids[50:60]) == 10


def test_replace_and_dim_check(data):
    ids, x = data
    d = DenseIndex(32)
    d.add(ids[:10], x[:10])
    d.add(ids[:1], x[5:6])  # same id again replaces the vector
    assert d.ntotal == 10 and set(d.search(x[5], 2)[0][0].tolist()) == {ids[0], ids[5]}
    with pytest.raises(ValueError, match="dim"):
        d.add(ids[:1], np.zeros((1, 16), np.float32))


def test_permissive_filter_oversampling_is_exact(data):
    """A filter keeping half the corpus takes the oversampled unfiltered path; results must equal
    brute-force scoring of the allowed vectors."""
    ids, x = data
    d = DenseIndex(32)
    d.add(ids, x)
    allowed = ids[::2]
    keep = np.isin(ids, allowed)
    for qi in range(5):
        got, scores = d.search(x[qi] * 0.6 + x[qi + 101] * 0.4, 10, allowed)[0]
        s = x[keep] @ (x[qi] * 0.6 + x[qi + 101] * 0.4)
        want = ids[keep][np.argsort(-s)[:10]]
        assert got.tolist() == want.tolist()
        np.testing.assert_allclose(scores, np.sort(s)[::-1][:10], rtol=1e-5)
