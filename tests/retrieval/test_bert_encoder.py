"""The plain-torch BERT forward (retrieval/embeddings/bert.py) against transformers' BertModel on the
packaged embedding models' own directories."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from retrieval.embeddings.bert import BertEncoder
from retrieval.embeddings.models import resolve_embedding_model

TEXTS = ["The capital city of Zarnovia is Velmora.", "  spaces around  ", "x", "中文文本的检索测试",
         "word " * 400, "", "A leather couch costs 900 euros."]


@pytest.mark.parametrize("name", ["minilm", "multilingual-e5-small"])
def test_hidden_states_equal_transformers(name):
    """Catches a wrong op or order (post-LN residuals, the GELU, the attention scale), padding that
    leaks into real tokens' attention, positions or token types offset, and weights bound to the
    wrong layer: every real token's hidden state must be transformers' own, bit for bit (the same
    ops in the same order), in a padded batch and alone."""
    from transformers import AutoModel, AutoTokenizer

    path = resolve_embedding_model(name)
    tok = AutoTokenizer.from_pretrained(path)
    ref, ours = AutoModel.from_pretrained(path).eval(), BertEncoder.load(path)
    assert ours is not None
    for batch in (TEXTS, TEXTS[:1], TEXTS[4:5]):
        feats = tok(batch, padding=True, truncation=True, max_length=256, return_tensors="pt")
        with torch.inference_mode():
            want, got = ref(**feats).last_hidden_state, ours(**feats).last_hidden_state
        real = feats["attention_mask"].bool()
        assert torch.equal(got[real], want[real]), (got[real] - want[real]).abs().max()


def _copy(src: Path, dst: Path, **config) -> Path:
    """`src` with its config.json changed (weights and tokenizer linked)."""
    dst.mkdir()
    for f in src.iterdir():
        if f.is_file() and f.name != "config.json":
            (dst / f.name).symlink_to(f)
    cfg = json.loads((src / "config.json").read_text())
    (dst / "config.json").write_text(json.dumps({**cfg, **config}))
    return dst


def test_anything_else_is_left_to_transformers(tmp_path):
    """Catches the plain forward taking a model it would run wrongly: another architecture, another
    activation or position scheme, a config its weights do not fit (a missing or misshapen tensor)."""
    src = Path(resolve_embedding_model("minilm"))
    for i, change in enumerate(({"model_type": "roberta"}, {"hidden_act": "relu"},
                                {"position_embedding_type": "relative_key"}, {"num_hidden_layers": 7},
                                {"intermediate_size": 1024})):
        assert BertEncoder.load(_copy(src, tmp_path / str(i), **change)) is None, change
    assert BertEncoder.load(tmp_path) is None  # no config at all
