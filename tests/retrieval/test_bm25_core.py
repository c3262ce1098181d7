"""BM25 core: scores equal rank_bm25 on the same tokens, updates, persistence, masks."""

from __future__ import annotations

import mmap

import numpy as np
import pytest
import rank_bm25

from retrieval.analyzer import Analyzer
from retrieval.bm25 import BM25Index
from retrieval.config import AnalyzerConfig, BM25Config

TEXTS = [
    "The quick brown fox jumps over the lazy dog",
    "A fast brown fox leaped over lazy dogs in the park",
    "Dogs and cats are common household pets",
    "The stock market crashed and investors lost money",
    "Investors bought stocks after the market recovered",
    "Cats sleep most of the day; dogs need walks",
    "Quantum computers use qubits instead of bits",
    "The fox is a small omnivorous mammal",
    "Market analysts expect the fox news ratings to rise",
    "bits bits bits of information theory",
]
QUERIES = ["brown fox", "lazy dogs and cats", "market investors", "qubits", "fox fox market", "unknownterm",
           "the"]
VARIANTS = [("okapi", rank_bm25.BM25Okapi, {}), ("bm25l", rank_bm25.BM25L, {"delta": 0.5}),
            ("bm25plus", rank_bm25.BM25Plus, {"delta": 1.0})]


def _tok():
    return Analyzer(AnalyzerConfig(stemming="english", stopwords=None))


@pytest.mark.parametrize("variant,cls,extra", VARIANTS)
@pytest.mark.parametrize("k1,b", [(1.5, 0.75), (0.9, 0.4)])
def test_scores_equal_rank_bm25(variant, cls, extra, k1, b):
    tok = _tok()
    docs = [tok(t) for t in TEXTS]
    ref = cls(docs, k1=k1, b=b, **extra)
    idx = BM25Index(BM25Config(variant=variant, k1=k1, b=b))
    idx.add(list(range(100, 100 + len(docs))), docs)
    for q in QUERIES:
        qt = tok(q)
        np.testing.assert_allclose(idx.get_scores(qt), ref.get_scores(qt), rtol=1e-12, atol=1e-12)


def test_okapi_epsilon_floor_matches():
    # "a" is in every document: its raw idf is negative and rank_bm25 floors it at eps * mean idf.
    docs = [["a", "b"], ["a", "c"], ["a", "b", "d"], ["a"], ["a", "e", "e"]]
    ref = rank_bm25.BM25Okapi(docs, k1=1.2, b=0.75, epsilon=0.25)
    idx = BM25Index(BM25Config(variant="okapi", k1=1.2, b=0.75, epsilon=0.25))
    idx.add(range(5), docs)
    for q in (["a"], ["a", "b"], ["e", "a", "a"]):
        np.testing.assert_allclose(idx.get_scores(q), ref.get_scores(q), rtol=1e-12, atol=1e-12)
    assert idx.get_scores(["a"])[0] > 0


@pytest.mark.parametrize("variant,cls,extra", VARIANTS)
def test_incremental_delete_and_add_equal_fresh_build(variant, cls, extra):
    tok = _tok()
    docs = [tok(t) for t in TEXTS]
    idx = BM25Index(BM25Config(variant=variant, k1=1.5))
    idx.add(range(6), docs[:6])
    idx.get_scores(tok("fox"))  # force weights, then mutate
    idx.add(range(6, 10), docs[6:])
    idx.delete([2, 7])
    idx.add([3], [tok("replacement text about foxes and markets")])  # replace id 3
    keep = [0, 1, 4, 5, 6, 8, 9, 3]
    fresh_docs = [docs[i] for i in keep[:-1]] + [tok("replacement text about foxes and markets")]
    ref = cls(fresh_docs, k1=1.5, **extra)
    order = {i: r for r, i in enumerate(idx.ids[idx.alive].tolist())}
    perm = [order[i] for i in keep]
    for q in QUERIES:
        ours = idx.get_scores(tok(q))[perm]
        np.testing.assert_allclose(ours, ref.get_scores(tok(q)), rtol=1e-12, atol=1e-12)
    assert len(idx) == 8 and 7 not in idx


def test_search_topk_mask_and_must_terms():
    tok = _tok()
    idx = BM25Index(BM25Config())
    idx.add(range(len(TEXTS)), [tok(t) for t in TEXTS])
    ids, scores = idx.search(tok("fox market"), k=3)
    full = idx.get_scores(tok("fox market"))
    assert list(ids) == list(np.argsort(-full, kind="stable")[:3])
    assert np.all(np.diff(scores) <= 0)
    mask = idx.mask_for_ids(np.array([3, 4]))
    ids, _ = idx.search(tok("fox market"), k=5, mask=mask)
    assert set(ids) <= {3, 4} and len(ids) == 2
    must = idx.must_mask([tok("market")])
    ids, _ = idx.search(tok("fox"), k=10, mask=must)
    assert list(ids) == [8]  # the only document with both a fox and a market
    assert len(idx.search(tok("unknownterm"), k=5)[0]) == 0


def _is_mapped(arr) -> bool:
    while arr is not None:
        if isinstance(arr, (np.memmap, mmap.mmap)):
            return True
        arr = getattr(arr, "base", None)
    return False


def test_save_load_mmap_roundtrip(tmp_path):
    tok = _tok()
    idx = BM25Index(BM25Config(variant="bm25plus"))
    idx.add(range(len(TEXTS)), [tok(t) for t in TEXTS])
    idx.delete([1])
    idx.save(tmp_path / "bm25")
    back = BM25Index.load(tmp_path / "bm25", mmap=True)
    assert _is_mapped(back._wt.data) and _is_mapped(back._tf.data)  # weights read straight from the file
    for q in QUERIES:
        np.testing.assert_array_equal(back.get_scores(tok(q)), idx.get_scores(tok(q)))
        a, b = back.search(tok(q), 5), idx.search(tok(q), 5)
        np.testing.assert_array_equal(a[0], b[0])
    back.add([50], [tok("a new fox document")])  # mmap arrays are read-only: updates must copy
    back.delete([0])
    assert 50 in back and 0 not in back and back.search(tok("new fox"), 1)[0][0] == 50
