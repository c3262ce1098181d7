"""Rerank fixtures: the tiny BEIR dataset on disk and a cross-encoder trained on it once per session
(a few dozen steps from the packaged MiniLM, BM25-mined negatives)."""

from __future__ import annotations

from pathlib import Path

import pytest
from rerank_fixtures import write_beir


@pytest.fixture(scope="session")
def tiny_beir(tmp_path_factory) -> Path:
    return write_beir(tmp_path_factory.mktemp("tiny_beir"))


@pytest.fixture(scope="session")
def tiny_cross_encoder(tiny_beir, tmp_path_factory) -> tuple[Path, dict]:
    """Path of a cross-encoder trained on `tiny_beir` and the training summary."""
    from rerank.training.train import TrainConfig, train_cross_encoder

    out = tmp_path_factory.mktemp("tiny_ce")
    cfg = TrainConfig(datasets=[str(tiny_beir)], out=str(out), mine="bm25", negatives=3, epochs=16,
                      batch_size=8, lr=1e-4, warmup_ratio=0.1, max_length=64, save_steps=20, seed=42,
                      progress=False)
    return out, train_cross_encoder(cfg)


@pytest.fixture(scope="session")
def minilm_embedder():
    from retrieval.config import EmbedderConfig
    from retrieval.embeddings import make_embedder

    return make_embedder(EmbedderConfig(model="minilm", cache=False))


@pytest.fixture
def no_network(monkeypatch):
    """Any socket connect fails the test: models, tokenizers and tiktoken must all be local."""
    import socket

    def deny(self, *args, **kwargs):
        raise AssertionError(f"network access attempted: {args}")

    monkeypatch.setattr(socket.socket, "connect", deny)
    monkeypatch.setattr(socket.socket, "connect_ex", deny)


@pytest.fixture(scope="session")
def smollm2_engine():
    """One in-process engine for the llm reranker and the engine compressor."""
    pytest.importorskip("inference")
    from inference import LLM

    # fp32 float weights: the engine compressor test compares its log-probs with the fp32 transformers copy
    # (bf16 moves them by ~0.05, GGUF blocks with 8-bit activations by up to ~0.5)
    return LLM("smollm2", num_blocks=256, max_num_seqs=16, dtype="float32", quantization="none")
