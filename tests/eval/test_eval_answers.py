"""Answer metrics (SQuAD EM/F1, Chinese char F1, refusals, citations, RGB) and cost aggregation."""

import pytest
from pydantic import ValidationError

from eval.answers import (
    Cited,
    RefusalConfig,
    char_f1,
    citation_scores,
    exact_match,
    is_refusal,
    normalize_answer,
    refusal_scores,
    rgb_correct,
    rgb_scores,
    token_f1,
)
from eval.cost import aggregate_costs, latency_summary


def test_squad_normalisation_and_exact_match():
    assert normalize_answer("The  Eiffel Tower!") == "eiffel tower"
    assert exact_match("The Eiffel Tower!", ["eiffel tower"]) == 1.0
    assert exact_match("Eiffel", ["eiffel tower"]) == 0.0
    assert exact_match("an apple", ["Banana", "apple"]) == 1.0


def test_squad_token_f1_is_max_over_golds():
    # "in 10th century" vs "10th and 11th centuries": one common token, p=1/3, r=1/4.
    assert token_f1("in the 10th century", ["10th and 11th centuries"]) == pytest.approx(2 / 7)
    assert token_f1("Denmark", ["Norway", "Denmark, Iceland"]) == pytest.approx(2 / 3)
    assert token_f1("France", ["France", "france."]) == 1.0


def test_unanswerable_gold_matches_only_empty_prediction():
    assert exact_match("", []) == 1.0
    assert token_f1("", []) == 1.0
    assert exact_match("France", []) == 0.0
    assert token_f1("France", []) == 0.0


def test_chinese_character_f1_and_auto_mode():
    assert char_f1("北京大学", ["北京"]) == pytest.approx(2 / 3)
    assert token_f1("北京大学", ["北京"]) == pytest.approx(2 / 3)  # auto picks char level
    assert token_f1("北京大学", ["北京"], mode="en") == 0.0  # whitespace tokens: all or nothing
    assert exact_match("「歐洲」。", ["歐洲"]) == 1.0
    assert exact_match("２０２１年", ["2021年"]) == 1.0  # full-width digits (NFKC)
    # Latin words and numbers stay whole tokens inside Chinese text.
    assert char_f1("2021年", ["2021年1月"]) == pytest.approx(2 / 3)


def test_refusal_detection_en_zh_and_config():
    assert is_refusal("I don’t know.")
    assert is_refusal("The context does not mention it.")
    assert is_refusal("抱歉，文件中沒有提到，無法回答。")
    assert is_refusal("")
    assert not is_refusal("Paris")
    assert is_refusal("no idea", RefusalConfig(extra=["no idea"]))
    assert not is_refusal("I don't know", RefusalConfig(phrases=["pass"]))
    with pytest.raises(ValidationError):
        RefusalConfig(phrase=["x"])
    s = refusal_scores(["I don't know", "Paris", "insufficient information", "Rome"], [True, True, False, False])
    assert s["refusal_acc"] == 0.5 and s["false_refusal"] == 0.5


def test_citation_precision_recall():
    cited = [Cited("d1", "Normandy is a region in France."), Cited("d2", "Unrelated text.")]
    assert citation_scores(cited, ["France"], ["d3"]) == {"citation_precision": 0.5, "citation_recall": 0.0}
    assert citation_scores(cited, ["France"], ["d2"]) == {"citation_precision": 1.0, "citation_recall": 1.0}
    # Without gold documents recall says whether any cited passage holds the answer.
    assert citation_scores(cited, ["France"], [])["citation_recall"] == 1.0
    # Whole-word containment: "Frances" does not contain the answer "France".
    assert citation_scores([Cited("x", "Frances Smith")], ["France"], [])["citation_precision"] == 0.0
    assert citation_scores([Cited("x", "位於歐洲西部")], ["歐洲"], [])["citation_precision"] == 1.0
    assert citation_scores([], ["France"], ["d1"]) is None


def test_rgb_accuracy_rules():
    assert rgb_correct("It was held in Tampa, Florida.", ["Tampa, Florida"])
    assert rgb_correct("宣誓在1月3日，首次会议在1月12日", ["1月3日", "1月12日"])
    assert not rgb_correct("宣誓在1月3日", ["1月3日", "1月12日"])
    assert rgb_correct("死亡12名", [["12人", "12名"]])
    s = rgb_scores(["12人死亡", "信息不足，无法回答"], [["12人"], ["70"]])
    assert s == {"rgb_acc": 0.5, "rgb_reject": 0.5}


def test_cost_aggregation():
    recs = [
        {"timings_ms": {"total": t, "retrieve": t / 2}, "tokens_in": 100, "tokens_out": 10,
         "context_tokens_before": 400, "context_tokens_after": 100, "prefix_cached_tokens": 50}
        for t in (10.0, 20.0, 30.0, 40.0)
    ]
    recs[0]["timings_ms"].pop("retrieve")
    c = aggregate_costs(recs)
    assert c["latency_ms"]["total"]["p50"] == 25.0
    assert c["latency_ms"]["total"]["p95"] == pytest.approx(38.5)
    assert c["latency_ms"]["retrieve"]["p50"] == 15.0  # over the 3 queries that report it
    assert c["tokens_in"] == {"total": 400.0, "mean": 100.0}
    assert c["compression_ratio"] == 4.0
    assert c["prefix_cache_hit_rate"] == 0.5
    assert list(latency_summary([{"a": 1.0, "total": 2.0}])) == ["total", "a"]
    assert "compression_ratio" not in aggregate_costs([{"timings_ms": {"total": 1.0}}])


def test_citation_markers_are_stripped():
    from eval.answers import strip_citation_markers

    assert strip_citation_markers("Paris [1][2].") == "Paris."
    assert strip_citation_markers("Paris [1, 3] and Rome [2]") == "Paris and Rome"
    assert strip_citation_markers("北京【1】") == "北京"
    assert strip_citation_markers("in [the] 1990s") == "in [the] 1990s"


def test_grounding_counts_keep_the_two_gates_apart():
    """Catches explanatory answers judged by sentence counted as held to the short-answer span gate
    (`gated` / `gate_refused` would then mix two decisions, and how often each fires is lost)."""
    from eval.qa_eval import QAOutput, grounding_counts

    def out(gate: dict | None) -> QAOutput:
        g = {"counts": {"kept": 1}, **({"gate": gate} if gate is not None else {})}
        return QAOutput("x", grounding=g)

    c = grounding_counts([out({"refused": True}), out({"refused": False, "answer": "a", "marker": 1}),
                          out({"kind": "sentences", "refused": True, "judged": 1, "dropped": 1}),
                          out({"kind": "sentences", "refused": False, "judged": 2, "dropped": 0}), out(None)])
    assert (c["answers"], c["gated"], c["gate_refused"]) == (5, 2, 1)
    assert (c["sentence_gated"], c["sentence_gate_refused"]) == (2, 1)
    assert "sentence_gated" not in grounding_counts([out({"refused": False, "answer": "a", "marker": 1})])
