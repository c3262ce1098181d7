"""Analyzer: CJK bigrams+unigrams, mixed Chinese/English in one pass, and BM25 that scores Chinese."""

from __future__ import annotations

from retrieval.analyzer import Analyzer
from retrieval.bm25 import BM25Index
from retrieval.config import AnalyzerConfig, BM25Config


def test_chinese_run_becomes_unigrams_and_bigrams():
    toks = Analyzer(AnalyzerConfig(cjk_fold="none"))("梵語研究")
    assert set(toks) == {"梵", "語", "研", "究", "梵語", "語研", "研究"}
    assert Analyzer(AnalyzerConfig(cjk="bigram", cjk_fold="none"))("梵語研究") == ["梵語", "語研", "研究"]
    assert Analyzer(AnalyzerConfig(cjk="bigram"))("梵") == ["梵"]  # a lone character still indexes


def test_mixed_chinese_english_one_pass():
    toks = Analyzer()("使用PyTorch訓練Models，準確率95%")
    assert "pytorch" in toks and "model" in toks  # lowercased and stemmed
    assert "训练" in toks and "准确" in toks and "95" in toks  # Han folded to Simplified
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


def test_traditional_and_simplified_fold_to_the_same_terms():
    """Catches: no script folding (or folding one side only), where a Simplified query shares
    almost no bigram with the Traditional document it asks about."""
    trad, simp = "陸特和漢斯雷頓開創了歐洲對梵語的學術研究", "陆特和汉斯雷顿开创了欧洲对梵语的学术研究"
    assert Analyzer()(trad) == Analyzer()(simp)
    raw = Analyzer(AnalyzerConfig(cjk_fold="none"))
    assert raw(trad) != raw(simp)
    assert Analyzer()("后来") == Analyzer()("後來")  # already-Simplified text stays as written


def test_simplified_query_finds_traditional_document_by_bm25():
    """A Simplified query on a Traditional corpus (and the reverse) must rank the right document
    first. Catches: the analyzer building bigrams from the raw script, where the only characters a
    Simplified query shares with the Traditional corpus (哪一种语言) make an unrelated document win."""
    docs = ["梵語是印度的古典語言，歐洲學者對它有很多學術研究。",
            "臺灣鐵路管理局負責經營環島鐵路，車站遍及各縣市。",
            "電腦網絡讓資訊傳遞變得更快，軟體開發也隨之興盛。",
            "哪一種語言的書寫系統最複雜？這是語言學的老問題。"]
    an = Analyzer()
    idx = BM25Index(BM25Config())
    idx.add(range(len(docs)), [an(d) for d in docs])
    for query, want in [("欧洲学者对梵语的学术研究", 0), ("台湾铁路管理局经营哪些车站", 1), ("软件开发与网络资讯", 2),
                        ("电脑网络的资讯传递是哪一种语言", 2)]:
        ids, _ = idx.search(an(query), k=1)
        assert list(ids) == [want], query
    simp_docs = ["梵语是印度的古典语言，欧洲学者对它有很多学术研究。", "台湾铁路管理局负责经营环岛铁路，车站遍及各县市。",
                 "电脑网络让资讯传递变得更快，软件开发也随之兴盛。", "哪一种语言的书写系统最复杂？这是语言学的老问题。"]
    simp_idx = BM25Index(BM25Config())
    simp_idx.add(range(len(simp_docs)), [an(d) for d in simp_docs])
    ids, _ = simp_idx.search(an("電腦網絡與資訊傳遞"), k=1)  # Traditional query, Simplified corpus
    assert list(ids) == [2]

    raw_cfg = BM25Config(analyzer=AnalyzerConfig(cjk_fold="none"))
    raw, raw_idx = Analyzer(raw_cfg.analyzer), BM25Index(raw_cfg)
    raw_idx.add(range(len(docs)), [raw(d) for d in docs])
    ids, _ = raw_idx.search(raw("电脑网络的资讯传递是哪一种语言"), k=1)
    assert list(ids) == [3]  # without folding the shared question words (哪一种语言) win: the bug
