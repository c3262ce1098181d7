"""Fusion arithmetic on hand-made rankings."""

from __future__ import annotations

import pytest

from retrieval.fusion import convex, normalize, rrf


def test_rrf_values_by_hand():
    bm25 = [(1, 9.0), (2, 5.0), (3, 1.0)]
    dense = [(3, 0.9), (1, 0.8), (4, 0.1)]
    fused = dict(rrf({"bm25": bm25, "dense": dense}, k=60))
    assert fused[1] == pytest.approx(1 / 61 + 1 / 62)
    assert fused[3] == pytest.approx(1 / 63 + 1 / 61)
    assert fused[2] == pytest.approx(1 / 62)
    assert fused[4] == pytest.approx(1 / 63)
    assert [d for d, _ in rrf({"bm25": bm25, "dense": dense}, k=60)] == [1, 3, 2, 4]


def test_rrf_weights_and_k():
    a, b = [(1, 1.0), (2, 0.5)], [(2, 1.0), (1, 0.5)]
    fused = dict(rrf({"bm25": a, "dense": b}, k=10, weights={"bm25": 2.0, "dense": 0.5}))
    assert fused[1] == pytest.approx(2 / 11 + 0.5 / 12)
    assert fused[2] == pytest.approx(2 / 12 + 0.5 / 11)
    assert rrf({"bm25": a, "dense": b}, weights={"bm25": 0.0})[0][0] == 2  # weight 0 drops a retriever
    # ties are broken by id so results are deterministic
    assert [d for d, _ in rrf({"x": [(5, 1.0)], "y": [(4, 1.0)]})] == [4, 5]


def test_convex_minmax():
    fused = dict(convex({"bm25": [(1, 10.0), (2, 5.0), (3, 0.0)], "dense": [(2, 0.9), (3, 0.5)]},
                        weights={"bm25": 0.3, "dense": 0.7}))
    assert fused[1] == pytest.approx(0.3 * 1.0)
    assert fused[2] == pytest.approx(0.3 * 0.5 + 0.7 * 1.0)
    assert fused[3] == pytest.approx(0.0)
    assert list(normalize([3.0, 3.0])) == [1.0, 1.0]
    assert normalize([1.0, 2.0, 3.0], "zscore").mean() == pytest.approx(0.0)
