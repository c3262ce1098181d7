"""The transformer + pooling embedder path (retrieval/embeddings/pooled.py) against the reference,
sentence-transformers itself, on the same model directories."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from retrieval.embeddings.models import resolve_embedding_model
from retrieval.embeddings.pooled import PooledEncoder, plain_layout

TEXTS = ["The capital city of Zarnovia is Velmora.", "  spaces around  ", "x", "中文文本的检索测试",
         "word " * 400, "Oak dining tables are sold with six chairs.", "", "A leather couch costs 900 euros."]


@pytest.fixture(scope="module")
def minilm_dir() -> Path:
    return Path(resolve_embedding_model("minilm"))


def _variant(src: Path, dst: Path, pooling: dict, modules: list[dict]) -> Path:
    """`src` with another pooling config and module list (weights and tokenizer linked)."""
    dst.mkdir()
    for f in src.iterdir():
        if f.is_file() and f.name != "modules.json":
            (dst / f.name).symlink_to(f)
    (dst / "1_Pooling").mkdir()
    (dst / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 384, **pooling}))
    (dst / "modules.json").write_text(json.dumps(modules))
    return dst


MODULES = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
           {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
NORMALIZE = {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}


def test_vectors_equal_sentence_transformers(minilm_dir, tmp_path):
    """Catches a pooling that counts padding, a missing or extra normalisation, other truncation or
    batches (padding changes the float sums), rows returned out of input order, and the CLS branch
    pooling the wrong position: mean + normalize (the packaged MiniLM) and CLS without it."""
    from sentence_transformers import SentenceTransformer

    cls_dir = _variant(minilm_dir, tmp_path / "cls", {"pooling_mode_cls_token": True,
                                                      "pooling_mode_mean_tokens": False}, MODULES)
    for path, layout in ((minilm_dir, ("mean", 256, True)), (cls_dir, ("cls", 256, False))):
        assert plain_layout(path) == layout
        ours = PooledEncoder.load(path)
        ref = SentenceTransformer(str(path), device="cpu")
        assert ours.max_seq_length == ref.max_seq_length
        for batch in (3, 32):
            got = ours.encode(TEXTS, batch_size=batch)
            want = ref.encode(TEXTS, batch_size=batch, convert_to_numpy=True, normalize_embeddings=False,
                              show_progress_bar=False)
            assert got.shape == want.shape == (len(TEXTS), 384)
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    assert ours.encode([]).shape == (0, 384)


def test_other_layouts_are_left_to_sentence_transformers(minilm_dir, tmp_path):
    """Catches the light path taking a model it would embed wrongly: max pooling, a dense layer
    after the pooling, lower-casing, a default prompt, a format it does not read (the current
    save format keeps its length elsewhere), or a hub id (no local directory)."""
    from retrieval.config import EmbedderConfig
    from retrieval.embeddings.sentence_transformers import SentenceTransformerEmbedder

    maxpool = _variant(minilm_dir, tmp_path / "max", {"pooling_mode_max_tokens": True}, MODULES)
    dense = _variant(minilm_dir, tmp_path / "dense", {"pooling_mode_mean_tokens": True},
                     [*MODULES, {"idx": 2, "name": "2", "path": "2_Dense",
                                 "type": "sentence_transformers.models.Dense"}])
    lower = _variant(minilm_dir, tmp_path / "lower", {"pooling_mode_mean_tokens": True}, [*MODULES, NORMALIZE])
    (lower / "sentence_bert_config.json").unlink()
    (lower / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 256, "do_lower_case": True}))
    prompted = _variant(minilm_dir, tmp_path / "prompted", {"pooling_mode_mean_tokens": True}, [*MODULES, NORMALIZE])
    (prompted / "config_sentence_transformers.json").unlink()
    (prompted / "config_sentence_transformers.json").write_text(json.dumps(
        {"prompts": {"query": "query: "}, "default_prompt_name": "query"}))
    from sentence_transformers import SentenceTransformer

    resaved = tmp_path / "resaved"  # sentence-transformers' own current save format
    SentenceTransformer(str(minilm_dir), device="cpu").save(str(resaved))
    for d in (maxpool, dense, lower, prompted, resaved):
        assert plain_layout(d) is None and PooledEncoder.load(d) is None, d
    assert PooledEncoder.load("sentence-transformers/all-MiniLM-L6-v2") is None
    emb = SentenceTransformerEmbedder(EmbedderConfig(model=str(maxpool), cache=False))
    assert type(emb.model).__name__ == "SentenceTransformer"


def test_default_embedder_does_not_import_sentence_transformers():
    """Catches the default English embedder going back through sentence-transformers, whose import
    cost every `rag ask` / `rag index` process ~1.5 s of its start on a 2-core CPU, or through
    transformers' model code (`AutoModel`: 2.5 s of imports; retrieval/embeddings/bert.py), or
    through transformers at all once its tokenizer snapshot exists (~1.2 s more;
    retrieval/embeddings/encoder_tokenizer.py)."""
    from retrieval.embeddings.encoder_tokenizer import EncoderTokenizer

    EncoderTokenizer(resolve_embedding_model("minilm"))  # the snapshot, as any earlier process leaves it
    code = ("import sys\nfrom retrieval.config import EmbedderConfig\nfrom retrieval.embeddings import make_embedder\n"
            "e = make_embedder(EmbedderConfig(cache=False))\nv = e.encode_queries(['what is a qubit'])\n"
            "print(type(e.model).__name__, v.shape, 'sentence_transformers' in sys.modules,\n"
            "      'transformers.modeling_utils' in sys.modules, 'transformers' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       cwd=Path(__file__).resolve().parents[2])
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["PooledEncoder", "(1,", "384)", "False", "False", "False"], r.stdout
