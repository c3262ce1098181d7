"""One resolver for encoder names: every stage resolves an alias to the same packaged directory."""

from __future__ import annotations

from pathlib import Path

from indexing.models import canonical_name, resolve_model


def test_every_stage_resolves_aliases_through_indexing():
    """Catches a stage that keeps its own alias table (four copies had drifted: the cross-encoder
    did not know the `sentence-transformers/...` spelling the embedder accepted)."""
    from rerank.models import minilm_dir, resolve_cross_encoder
    from retrieval.embeddings.models import canonical_model_name, resolve_embedding_model

    want = resolve_model("minilm")
    assert Path(want, "config.json").is_file()
    for alias in ("minilm", "all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"):
        assert resolve_embedding_model(alias) == resolve_cross_encoder(alias) == want
        assert canonical_model_name(alias) == canonical_name(alias) == "all-MiniLM-L6-v2"
    assert str(minilm_dir()) == want


def test_other_names_pass_through():
    assert resolve_model("BAAI/bge-reranker-v2-m3") == "BAAI/bge-reranker-v2-m3"
    assert canonical_name("./models/mine") == "./models/mine"
