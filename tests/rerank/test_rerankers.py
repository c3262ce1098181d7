"""Reranker behaviour on hand-built cases: order, threshold, top_n, depth, batching, config."""

from __future__ import annotations

import numpy as np
import pytest
from rerank_fixtures import DOCS, candidates

from rerank import RerankerConfig, build_reranker

EN_QUERY = "Which planet is the largest in our solar system?"
EN_PASSAGES = [
    "Bananas are rich in potassium and easy to digest.",
    "The stock market closed higher on Friday after strong earnings.",
    "Jupiter is the largest planet in the solar system, more than twice as massive as all others combined.",
    "Mount Everest is the highest mountain above sea level.",
]
ZH_QUERY = "大熊猫吃什么？"
ZH_PASSAGES = [
    "上海是中国最大的城市之一，也是重要的金融中心。",
    "大熊猫主要以竹子为食，每天要吃十几公斤竹子。",
    "长城是古代修建的军事防御工程。",
]


def test_bi_encoder_orders_english(minilm_embedder, no_network):
    r = build_reranker({"type": "bi-encoder"}, embedder=minilm_embedder)
    ranked = r.rank(EN_QUERY, candidates(EN_PASSAGES))
    assert ranked[0].text == EN_PASSAGES[2]
    assert [c.score for c in ranked] == sorted((c.score for c in ranked), reverse=True)
    top = ranked[0]
    assert top.ranks["retrieval"] == 3 and top.ranks["rerank"] == 1
    assert top.scores["rerank"] == top.score and top.scores["bm25"] == pytest.approx(0.98)


def test_bi_encoder_orders_chinese(minilm_embedder):
    r = build_reranker({"type": "bi-encoder"}, embedder=minilm_embedder)
    assert r.rank(ZH_QUERY, candidates(ZH_PASSAGES))[0].text == ZH_PASSAGES[1]


def test_threshold_top_n_and_depth(minilm_embedder):
    cands = candidates(EN_PASSAGES)
    full = build_reranker({"type": "bi-encoder"}, embedder=minilm_embedder).rank(EN_QUERY, cands)
    cut = (full[0].score + full[1].score) / 2
    r = build_reranker({"type": "bi-encoder", "threshold": cut}, embedder=minilm_embedder)
    assert [c.chunk_id for c in r.rank(EN_QUERY, cands)] == [full[0].chunk_id]
    r = build_reranker({"type": "bi-encoder", "top_n": 2}, embedder=minilm_embedder)
    assert [c.chunk_id for c in r.rank(EN_QUERY, cands)] == [c.chunk_id for c in full[:2]]
    assert len(r.rank(EN_QUERY, cands, top_n=3)) == 3  # the call overrides the config
    r = build_reranker({"type": "bi-encoder", "depth": 2}, embedder=minilm_embedder)
    deep = r.rank(EN_QUERY, cands)
    # Only the top 2 are reranked; the unscored rest follows unchanged, in retrieval order (the one
    # depth rule: the pipeline no longer re-appends it itself).
    assert {c.chunk_id for c in deep[:2]} == {"c0", "c1"} and all("rerank" in c.scores for c in deep[:2])
    assert deep[2:] == cands[2:]
    assert len(r.rank(EN_QUERY, cands, top_n=3)) == 3  # top_n cuts after the tail is appended
    assert r.fetch_depth(5) == 5 and r.fetch_depth(1) == 2
    assert r.rank(EN_QUERY, []) == []


def test_fuse_weight_blends_with_retrieval_order(minilm_embedder):
    """fuse_weight=1 keeps the retriever's order, 0 the reranker's; the raw rerank score is kept."""
    cands = candidates(EN_PASSAGES)
    plain = build_reranker({"type": "bi-encoder"}, embedder=minilm_embedder).rank(EN_QUERY, cands)
    keep = build_reranker({"type": "bi-encoder", "fuse_weight": 1.0}, embedder=minilm_embedder).rank(EN_QUERY, cands)
    assert [c.chunk_id for c in keep] == ["c0", "c1", "c2", "c3"]
    half = build_reranker({"type": "bi-encoder", "fuse_weight": 0.5, "fuse_k": 1},
                          embedder=minilm_embedder).rank(EN_QUERY, cands)
    plain_rank = {c.chunk_id: c.ranks["rerank"] for c in plain}
    for c in half:
        assert c.ranks["rerank"] == plain_rank[c.chunk_id]
        assert c.score == c.scores["fused"] == pytest.approx(0.5 / (1 + c.ranks["rerank"]) + 0.5 / (1 + c.ranks["retrieval"]))
    assert [c.score for c in half] == sorted((c.score for c in half), reverse=True)


def test_none_keeps_retrieval_order():
    r = build_reranker({"type": "none", "top_n": 3})
    cands = candidates(EN_PASSAGES)
    assert r.rank(EN_QUERY, cands) == cands[:3]  # untouched: same scores, no rerank ranks added
    deep = build_reranker({"type": "none", "depth": 2})
    assert deep.rank(EN_QUERY, cands) == cands and deep.fetch_depth(3) == 3  # depth means nothing here


def test_registries_name_unknown_types():
    from rerank.base import RERANKERS
    from rerank.compress import COMPRESSORS

    with pytest.raises(ValueError, match="unknown reranker type 'bm42'; known: bi-encoder, cross-encoder"):
        RERANKERS.get("bm42")
    assert COMPRESSORS.get("off").type == "off" and RERANKERS.get("none").type == "none"


def test_config_round_trip_and_strictness(minilm_embedder):
    r = build_reranker({"type": "bi-encoder", "top_n": 5, "depth": 20}, embedder=minilm_embedder)
    cfg = r.to_config()
    assert cfg["top_n"] == 5 and cfg["depth"] == 20 and cfg["type"] == "bi-encoder"
    assert build_reranker(cfg, embedder=minilm_embedder).to_config() == cfg
    with pytest.raises(ValueError, match="extra"):
        RerankerConfig.model_validate({"type": "cross-encoder", "topn": 3})


def test_missing_local_model_says_how_to_build_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="make reranker"):
        build_reranker({"type": "cross-encoder", "model": str(tmp_path / "nope")})
    # the multilingual one names its own target (configs/multilingual_rerank.yaml points there)
    with pytest.raises(FileNotFoundError, match=r"make reranker-zh\b"):
        build_reranker({"type": "cross-encoder", "model": str(tmp_path / "reranker-zh")})


def test_trained_cross_encoder_orders_english_queries(tiny_cross_encoder):
    path, _ = tiny_cross_encoder
    r = build_reranker({"type": "cross-encoder", "model": str(path), "max_length": 64})
    passages = [f"{title}\n{text}" for _, title, text, _, _ in DOCS]
    english = [i for i, d in enumerate(DOCS) if d[3].isascii()]
    for field in (3, 4):  # the training phrasing and a held-out paraphrase
        hits = sum(int(np.argmax(r.score(DOCS[i][field], passages)) == i) for i in english)
        assert hits >= len(english) - 2, f"gold passage first for only {hits}/{len(english)} queries"


def test_trained_cross_encoder_hand_built_cases(tiny_cross_encoder):
    path, _ = tiny_cross_encoder
    r = build_reranker({"type": "cross-encoder", "model": str(path), "max_length": 64})
    ranked = r.rank("what is the largest planet", candidates(
        [DOCS[1][2], DOCS[4][2], DOCS[7][2]], [DOCS[1][1], DOCS[4][1], DOCS[7][1]]))
    assert ranked[0].chunk.title == "Jupiter"
    # Chinese: MiniLM's (bert-base-uncased) vocabulary maps most Hanzi to [UNK] ("熊猫" included),
    # so a MiniLM-based reranker can only use the characters it has (四川, 大, 生, 山, 竹, 古代 ...).
    zh = candidates([DOCS[8][2], DOCS[9][2], DOCS[10][2]])
    assert r.rank("生活在四川的大熊猫", zh)[0].text == DOCS[9][2]
    assert r.rank("中国古代的防御工程", zh)[0].text == DOCS[8][2]


def test_batching_equals_unbatched(tiny_cross_encoder, minilm_embedder):
    path, _ = tiny_cross_encoder
    passages = [f"{title}\n{text}" for _, title, text, _, _ in DOCS]
    one = build_reranker({"type": "cross-encoder", "model": str(path), "batch_size": 1, "max_length": 64})
    many = build_reranker({"type": "cross-encoder", "model": str(path), "batch_size": 8, "max_length": 64})
    np.testing.assert_allclose(one.score("honey bees", passages), many.score("honey bees", passages), atol=1e-5)
    bi = build_reranker({"type": "bi-encoder"}, embedder=minilm_embedder)
    whole = bi.score("honey bees", passages)
    split = np.concatenate([bi.score("honey bees", passages[:5]), bi.score("honey bees", passages[5:])])
    np.testing.assert_allclose(whole, split, atol=1e-5)


def test_bf16_cross_encoder_keeps_the_order(tiny_cross_encoder):
    path, _ = tiny_cross_encoder
    passages = [f"{title}\n{text}" for _, title, text, _, _ in DOCS]
    fp32 = build_reranker({"type": "cross-encoder", "model": str(path), "max_length": 64})
    bf16 = build_reranker({"type": "cross-encoder", "model": str(path), "max_length": 64, "bf16": True})
    a, b = fp32.score("honey bees", passages), bf16.score("honey bees", passages)
    assert b.dtype == np.float64 and np.abs(a - b).max() < 0.05
    assert int(np.argmax(a)) == int(np.argmax(b))


def test_llm_reranker_scores_with_shared_prefix(smollm2_engine):
    """P(yes) scores from the in-process engine; prompts put the instruction first, so the engine's
    prefix cache serves it to every later candidate and query."""
    r = build_reranker({"type": "llm", "max_length": 64}, engine=smollm2_engine)
    r.rank(EN_QUERY, candidates(EN_PASSAGES))
    before = r.engine.stats().get("prefix_cache_hits", 0)
    ranked = r.rank(ZH_QUERY, candidates(ZH_PASSAGES))
    scores = [c.score for c in ranked]
    assert len(ranked) == 3 and all(0.0 < s < 1.0 for s in scores) and scores == sorted(scores, reverse=True)
    assert r.engine.stats().get("prefix_cache_hits", 0) > before  # the shared prefix was computed once
    assert r.to_config()["type"] == "llm"
