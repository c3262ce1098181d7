"""Analyzer: CJK bigrams+unigrams, mixed Chinese/English in one pass, and BM25 that scores Chinese."""

from __future__ import annotations

from retrieval.analyzer import Analyzer
from retrieval.bm25 import BM25Index
from retrieval.config import AnalyzerConfig, BM25Config


def test_chinese_run_becomes_unigrams_and_bigrams():
    toks = Analyzer()("梵語研究")
    assert set(toks) == {"梵", "語", "研", "究", "梵語", "語研", "研究"}
    assert Analyzer(AnalyzerConfig(cjk="bigram"))("梵語研究") == ["梵語", "語研", "研究"]
    assert Analyzer(AnalyzerConfig(cjk="bigram"))("梵") == ["梵"]  # a lone character still indexes


def test_mixed_chinese_english_one_pass():
    toks = Analyzer()("使用PyTorch訓練Models，準確率95%")
    assert "pytorch" in toks and "model" in toks  # lowercased and stemmed
    assert "訓練" in toks and "準確" in toks and "95" in toks
    assert not any("pytorch" in t and len(t) > len("pytorch") for t in toks)  # no run glued to latin


def test_english_options():
    a = Analyzer(AnalyzerConfig(stemming="english", stopwords="english"))
    assert a("The runners were running quickly") == ["runner", "run", "quick"]
    b = Analyzer(AnalyzerConfig(stemming=None, stopwords=None, lowercase=False))
    assert b("The Runners") == ["The", "Runners"]
    assert Analyzer()("ＡＢＣ１２３") == ["abc123"]  # full-width forms normalised (NFKC)


def test_chinese_bm25_scores_positive_and_ranks_right_doc():
    docs = ["梵語是印度的古典語言，在歐洲有很多學術研究。", "台北是台灣最大的城市，有很多捷運路線。",
            "天城文成為梵語的標準書寫系統。", "Python is a programming language 程式語言"]
    an = Analyzer()
    idx = BM25Index(BM25Config())
    idx.add(range(len(docs)), [an(d) for d in docs])
    scores = idx.get_scores(an("梵語的書寫系統是什麼？"))
    assert scores.max() > 0 and int(scores.argmax()) == 2
    ids, _ = idx.search(an("台灣的城市"), k=1)
    assert list(ids) == [1]
    ids, _ = idx.search(an("programming 語言"), k=1)
    assert list(ids) == [3]
