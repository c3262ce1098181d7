"""Refusal calibration: the split excludes the reported sample, and the threshold honours the
false-refusal cap; `--answers` writes one scored line per question."""

from __future__ import annotations

import json

import pytest

from eval.calibrate import Point, calibration_items, fit_refusal_model, pick_margin, score_threshold
from eval.datasets import QAItem, sample_ids
from eval.qa_eval import QAOutput, evaluate_qa


def _items(n: int) -> list[QAItem]:
    return [QAItem(id=f"q{i}", question=f"question {i}?", answers=[] if i % 3 == 0 else [f"ans {i}"],
                   is_impossible=i % 3 == 0) for i in range(n)]


def test_calibration_split_is_disjoint_from_the_reported_sample():
    """Catches tuning on the questions whose scores are published."""
    items = _items(400)
    reported = set(sample_ids([i.id for i in items], 100, True, 0))
    cal = calibration_items(items, 80, 1, 100, 0)
    assert len(cal) == 80
    assert not reported & {i.id for i in cal}


def test_threshold_refuses_high_margins_within_the_false_refusal_cap():
    """Catches an inverted threshold direction and an ignored false-refusal limit."""
    pts = [Point(2.0, True, 0.0), Point(1.5, True, 0.0), Point(-3.0, False, 1.0), Point(-2.5, False, 0.8),
           Point(1.0, False, 1.0), Point(-1.0, True, 0.0)]
    best = pick_margin(pts, max_false_refusal=0.0)
    assert 1.0 < best["refuse_margin"] < 1.5  # refuse the two high-margin unanswerables only
    assert best["false_refusal"] == 0.0 and best["refusal_acc"] == 2 / 3
    loose = pick_margin(pts, max_false_refusal=0.5)
    assert loose["f1"] >= best["f1"]
    assert score_threshold(pts, 1e9)["refusal_acc"] == 0.0


def test_answers_jsonl_has_the_contract_fields(tmp_path):
    """Catches missing or renamed fields in `rag eval qa --answers`."""
    items = _items(3)
    outs = {"question 0?": QAOutput(text="I don't know based on the provided documents.", refused=True),
            "question 1?": QAOutput(text="ans 1 [1]"), "question 2?": QAOutput(text="wrong")}
    path = tmp_path / "a.jsonl"
    evaluate_qa(items, lambda q: outs[q], progress=False, warmup=False, answers_path=path)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) == 3
    for key in ("question", "gold", "answer", "citations", "refused", "f1"):
        assert all(key in r for r in rows), key
    by_q = {r["question"]: r for r in rows}
    assert by_q["question 0?"]["refused"] and by_q["question 0?"]["f1"] == 1.0
    assert by_q["question 1?"]["f1"] == 1.0 and by_q["question 1?"]["gold"] == ["ans 1"]
    assert by_q["question 2?"]["f1"] == 0.0 and not by_q["question 2?"]["refused"]


def test_min_logprob_threshold_catches_guessed_spans():
    """Catches the second signal being ignored when the margin alone cannot separate."""
    pts = [Point(-5.0, True, 0.0, -6.0), Point(-5.0, True, 0.0, -4.0), Point(-5.0, False, 1.0, -0.2),
           Point(-5.0, False, 1.0, -0.5)]
    best = pick_margin(pts, max_false_refusal=0.0)
    assert best["refusal_acc"] == 1.0 and best["f1"] == 1.0
    assert -4.0 < best["refuse_min_logprob"] < -0.5
    assert pick_margin(pts, 0.0, use_min_logprob=False)["refusal_acc"] == 0.0


def _pt(imp: bool, f1: float, check: float, margin: float = -5.0) -> Point:
    return Point(margin, imp, f1, -0.5, {"margin": margin, "min_logprob": -0.5, "check_passage": check})


def test_refusal_model_learns_the_check_signal_the_margin_lacks():
    """Catches a fit that ignores the answerability check (or has its sign inverted): the margin is
    equal for all points, only `check_passage` separates unanswerable from answerable."""
    from rag.calibration import RefusalModel

    pts = [_pt(True, 0.0, c) for c in (-3.0, -2.5, -2.0, -1.0)] + \
          [_pt(False, 1.0, c) for c in (1.0, 2.0, 2.5, 3.0)] + [_pt(False, 0.0, -1.5)]
    fitted = fit_refusal_model(pts, max_false_refusal=0.25)
    model = RefusalModel.from_dict(fitted["refusal_model"])
    assert "check_passage" in model.features and "check_answer" not in model.features  # absent signal dropped
    assert fitted["refusal_acc"] == 1.0 and fitted["false_refusal"] <= 0.25
    assert model.refuses({"margin": -5.0, "min_logprob": -0.5, "check_passage": -4.0})
    assert not model.refuses({"margin": -5.0, "min_logprob": -0.5, "check_passage": 4.0})
    assert model.refuses({"margin": -5.0}) is None  # a missing check: no decision, not a refusal


def test_sentence_model_reads_only_signals_a_sentence_has():
    """Catches a sentence refusal model that reads a span signal (an explanation has no margin or
    span log-probability: every sentence would be kept undecided) or is written without the answer
    check it exists for: fitted on the same points, it learns the answer check that separates them."""
    from eval.calibrate import fit_sentence_model
    from rag.calibration import RefusalModel

    def pt(imp: bool, check: float) -> Point:
        return Point(-5.0, imp, 0.0 if imp else 1.0, -0.5, {"margin": -5.0, "min_logprob": -0.5,
                                                              "check_passage": 1.0, "check_answer": check})

    pts = [pt(True, c) for c in (-3.0, -2.0, -1.0, 0.0)] + [pt(False, c) for c in (0.5, 1.0, 2.0, 3.0)]
    model = RefusalModel.from_dict(fit_sentence_model(pts, 0.25))
    assert model.features == ["check_passage", "check_answer"]
    assert model.refuses({"check_passage": 1.0, "check_answer": -2.5})
    assert not model.refuses({"check_passage": 1.0, "check_answer": 2.5})
    no_check = [Point(p.margin, p.impossible, p.f1, -0.5, {"margin": -5.0, "check_passage": 1.0}) for p in pts]
    assert fit_sentence_model(no_check, 0.25) is None


def test_sentence_threshold_is_chosen_again_on_sentences():
    """Catches a sentence model kept at the cut its spans gave when sentences read higher (every
    unanswerable question's sentence then passes), a question whose sentences were all dropped by
    grounding counted as answered, or a model reading a signal the answers lack accepted silently."""
    import pytest

    from eval.calibrate import rechoose_sentence_threshold

    model = {"features": ["check_answer"], "mean": [0.0], "std": [1.0], "coef": [-1.0], "bias": 0.0,
             "threshold": 3.0}  # refuses a sentence whose answer check is below -3: none here

    def ans(imp: bool, check: float | None, right: bool = False) -> dict:
        sent = [{"text": "s", "path": "kept", "signals": {"check_answer": check}}] if check is not None else []
        return {"is_impossible": imp, "right": right, "grounding": {"sentences": sent}}

    answers = [ans(True, c) for c in (0.5, 0.8, 1.0)] + [ans(False, c, True) for c in (1.5, 2.0, 2.5)] + \
              [ans(False, None)]
    r = rechoose_sentence_threshold(model, answers)
    assert -1.5 < r["model"]["threshold"] < -1.0  # between the answerable and unanswerable checks
    assert r["refusal_acc"] == 1.0 and r["false_refusal"] == pytest.approx(1 / 4)  # the dropped one
    assert r["model"]["coef"] == model["coef"] and model["threshold"] == 3.0  # only the cut moves
    with pytest.raises(ValueError):
        rechoose_sentence_threshold({**model, "features": ["check_probe"]}, answers)


def test_refusal_model_threshold_honours_the_false_refusal_cap():
    """Catches a cut chosen for F1 alone: refusing the answerable outlier would raise F1 here
    (its span is wrong) but breaks a zero false-refusal cap."""
    pts = [_pt(True, 0.0, -3.0), _pt(True, 0.0, -2.0), _pt(False, 0.0, -2.5), _pt(False, 1.0, 2.0),
           _pt(False, 1.0, 3.0)]
    strict = fit_refusal_model(pts, max_false_refusal=0.0)
    assert strict["false_refusal"] == 0.0
    loose = fit_refusal_model(pts, max_false_refusal=0.5)
    assert loose["f1"] > strict["f1"]


def test_refusal_cut_is_chosen_again_on_new_points():
    """Catches the cut-only re-choice moving the coefficients or the selector, ignoring the cap,
    scoring the wrong candidate (the selector picks the one the refusal model reads: a point whose
    first candidate is the wrong one would count as refused-right), or accepting points that lack a
    feature the model reads. Here every answerable span came out surer by 2 on `check_passage` after
    a pipeline change, but the kept cut (refuse below 0.5) now also refuses the unanswerable ones
    less; the new points need the cut between -1.5 and -0.5."""
    import pytest

    from eval.calibrate import cut_cv, rechoose_refusal_threshold

    model = {"features": ["check_passage"], "mean": [0.0], "std": [1.0], "coef": [-1.0], "bias": 0.0,
             "threshold": -0.5}  # refuses at check_passage <= 0.5
    selector = {"features": ["check_probe"], "mean": [0.0], "std": [1.0], "coef": [1.0], "bias": 0.0}
    entry = {"refusal_model": model, "span_selector": selector, "probe": {"kept": True}}

    def pt(imp: bool, check: float) -> Point:
        right = {"signals": {"check_probe": 1.0, "check_passage": check, "margin": -5.0}, "f1": 0.0 if imp else 1.0,
                 "span": "right"}
        decoy = {"signals": {"check_probe": -1.0, "check_passage": 9.0, "margin": -6.0}, "f1": 0.0, "span": "decoy"}
        return Point(-6.0, imp, 0.0, -0.5, dict(decoy["signals"]), [decoy, right])

    wrong = pt(False, -2.5)  # an answerable question whose span is wrong: refusing it would raise F1
    wrong = Point(wrong.margin, False, 0.0, -0.5, wrong.signals, [wrong.candidates[0], {**wrong.candidates[1], "f1": 0.0}])
    pts = [pt(True, c) for c in (-2.0, -1.8, -1.6, -1.5, -1.7)] + [pt(False, c) for c in (-0.5, 0.0, 0.3, 1.0, 2.0)]
    r = rechoose_refusal_threshold(entry, [*pts, wrong], max_false_refusal=0.2)
    cut = r["entry"]["refusal_model"]
    assert r["from"] == -0.5 and 0.5 < cut["threshold"] < 1.5  # refuses check_passage below -1.5 .. -0.5
    assert (r["false_refusal"], r["refusal_acc"]) == (pytest.approx(1 / 6), 1.0)
    strict = rechoose_refusal_threshold(entry, [*pts, wrong], max_false_refusal=0.0)  # the cap binds
    assert strict["false_refusal"] == 0.0 and strict["f1"] < r["f1"]
    assert {k: v for k, v in cut.items() if k != "threshold"} == {k: v for k, v in model.items() if k != "threshold"}
    assert r["entry"]["span_selector"] == selector and r["entry"]["probe"] == {"kept": True}
    assert entry["refusal_model"]["threshold"] == -0.5  # the given entry is not changed in place
    cv = cut_cv(entry, pts, max_false_refusal=0.0, folds=5, shuffles=2)
    assert 0.0 <= cv["false_refusal"] <= 0.4 and cv["f1"] >= 0.6
    with pytest.raises(ValueError, match="lack signals"):
        rechoose_refusal_threshold({**entry, "refusal_model": {**model, "features": ["check_answer"]}}, pts)
    with pytest.raises(ValueError, match="no refusal model"):
        rechoose_refusal_threshold({"span_selector": selector}, pts)


def _cand(probe: float, margin: float, f1: float, rank: int) -> dict:
    return {"signals": {"check_probe": probe, "margin": margin, "span_logprob": -0.5, "check_answer": 0.0,
                        "span_tokens": 2.0, "passage_rank": float(rank)}, "f1": f1, "span": f"span {rank}"}


def _selector_points() -> list[Point]:
    """Answerable questions whose right span (f1 1) has the higher probe but a worse first-token
    margin than a wrong one; one unanswerable point, whose candidates must not train the selector."""
    pts = []
    for k in range(6):
        right, wrong = _cand(2.0 + k / 10, -3.0, 1.0, 1), _cand(-2.0 - k / 10, -6.0, 0.0, 0)
        pts.append(Point(-6.0, False, 0.0, -0.5, dict(wrong["signals"]), [wrong, right]))
    imp = [_cand(5.0, -8.0, 0.0, 0), _cand(-5.0, -1.0, 0.0, 1)]
    pts.append(Point(-8.0, True, 0.0, -0.5, dict(imp[0]["signals"]), imp))
    return pts


def test_span_selector_learns_which_candidate_is_right():
    """Catches a selector fitted with its sign inverted, on unanswerable candidates, or not applied
    when points are re-chosen (then each answerable point keeps the wrong, lower-margin span)."""
    from eval.calibrate import fit_span_selector, select_candidates
    from rag.calibration import SpanSelector

    pts = _selector_points()
    sel = fit_span_selector(pts, features=("check_probe",))
    assert sel is not None and sel["coef"][0] > 0
    assert SpanSelector.from_dict(sel).choose([{"check_probe": -1.0}, {"check_probe": 1.0}]) == 1
    chosen = select_candidates(pts, sel)
    assert [p.f1 for p in chosen[:6]] == [1.0] * 6
    assert all(p.signals["passage_rank"] == 1.0 for p in chosen[:6])
    unchosen = select_candidates(pts, None)  # no selector: the lowest margin, as the single decode
    assert [p.f1 for p in unchosen[:6]] == [0.0] * 6
    assert fit_span_selector([Point(0.0, False, 1.0)]) is None  # no candidates: nothing to fit


def test_span_selector_ties_and_missing_signals():
    """Catches a tie going to the worse-ranked passage and a missing signal read as 0."""
    from rag.calibration import SpanSelector

    sel = SpanSelector(["check_probe"], [0.0], [1.0], [1.0], 0.0)
    assert sel.choose([{"check_probe": 1.0}, {"check_probe": 1.0}]) == 0
    assert sel.choose([{"check_probe": 1.0}, {"margin": 3.0}]) is None


def test_calibrate_refit_fits_from_a_points_file(tmp_path):
    """Catches `rag eval calibrate --refit` answering questions again (it must not load a model),
    losing the candidates of the points file, accepting a file from another sample, or writing an
    entry without the `check_kv` mode it was measured with."""
    from rag.cli import main

    ds = tmp_path / "ds"
    (ds / "qa").mkdir(parents=True)
    items = _items(40)
    (ds / "qa" / "dev.jsonl").write_text("".join(json.dumps(i.to_dict()) + "\n" for i in items), encoding="utf-8")
    cal = calibration_items(items, 20, 1, 10, 0)
    base = _selector_points()
    rows = []
    for k, it in enumerate(cal):
        p = base[k % 6] if not it.is_impossible else base[6]
        sig = {**p.signals, "check_passage": 1.0 if not it.is_impossible else -1.0, "check_answer": 0.0,
               "min_logprob": -0.5}
        cands = [{**c, "signals": {**c["signals"], "check_passage": sig["check_passage"], "min_logprob": -0.5}}
                 for c in p.candidates]
        rows.append({"id": it.id, "margin": p.margin, "impossible": it.is_impossible, "f1": p.f1,
                     "min_logprob": -0.5, "signals": sig, "candidates": cands, "answer": "x"})
    points = tmp_path / "points.jsonl"
    points.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = tmp_path / "cal.json"
    def args(refit) -> list[str]:
        return ["eval", "calibrate", "--dataset", str(ds), "--limit", "20", "--seed", "1", "--exclude-limit", "10",
                "--refit", str(refit), "--out", str(out), "--set", f"storage.path={tmp_path / 'st'}",
                "--set", "generator.engine.model=/nonexistent/model.gguf"]
    assert main(args(points)) == 0
    entry = json.loads(out.read_text())["/nonexistent/model.gguf"]
    assert set(entry["span_selector"]["features"]) >= {"check_probe", "margin"}
    assert entry["refusal_model"]["features"] and entry["false_refusal"] <= 0.15
    assert entry["n"] == 20.0
    # the sentence judge of explanatory long answers, over the span-free signals the points carry
    assert "check_answer" in entry["sentence_refusal_model"]["features"]
    assert not set(entry["sentence_refusal_model"]["features"]) - {"check_passage", "check_probe", "check_answer"}
    # the entry carries the checks' K/V mode its points were answered with (auto for a model with
    # no entry: exact), so `answer.check_kv: auto` later runs what was calibrated
    assert entry["check_kv"] == "exact"
    assert main([*args(points), "--set", "answer.check_kv=shared"]) == 0
    assert json.loads(out.read_text())["/nonexistent/model.gguf"]["check_kv"] == "shared"
    # and how many passages each answer read: none named when all of them were
    assert "short_k" not in json.loads(out.read_text())["/nonexistent/model.gguf"]
    assert main([*args(points), "--set", "answer.short_k=3"]) == 0
    assert json.loads(out.read_text())["/nonexistent/model.gguf"]["short_k"] == 3
    # `--sentence-answers`: the sentence model's cut chosen again on recorded long answers, where the
    # passage signals separate the questions; a file recorded without sentence signals is an error
    def long_answer(imp: bool) -> dict:
        sig = {"check_passage": -3.0 if imp else 3.0, "check_probe": -3.0 if imp else 3.0, "check_answer": 0.0}
        return {"is_impossible": imp, "right": not imp,
                "grounding": {"sentences": [{"text": "s", "path": "kept", "signals": sig}]}}

    recorded = tmp_path / "long.jsonl"
    recorded.write_text("".join(json.dumps(long_answer(i % 2 == 0)) + "\n" for i in range(10)), encoding="utf-8")
    assert main([*args(points), "--sentence-answers", str(recorded)]) == 0
    cut = json.loads(out.read_text())["/nonexistent/model.gguf"]
    assert cut["sentence_cut"]["n"] == 10 and cut["sentence_cut"]["refusal_acc"] == 1.0
    assert cut["sentence_cut"]["false_refusal"] == 0.0
    assert cut["sentence_cut"]["span_cut"] == entry["sentence_refusal_model"]["threshold"]
    assert cut["sentence_refusal_model"]["coef"] == entry["sentence_refusal_model"]["coef"]
    bare = tmp_path / "bare.jsonl"
    bare.write_text(json.dumps({"is_impossible": True, "grounding": {}}) + "\n", encoding="utf-8")
    assert main([*args(points), "--sentence-answers", str(bare)]) == 2
    # no sentence model to cut (points without the answer check, or checks off): an error, never an
    # entry that silently keeps the span cut as if the answers had chosen it
    unchecked = tmp_path / "unchecked.jsonl"
    def no_answer_check(sig: dict) -> dict:
        return {k: v for k, v in sig.items() if k != "check_answer"}

    unchecked.write_text("".join(json.dumps({**r, "signals": no_answer_check(r["signals"]), "candidates": [
        {**c, "signals": no_answer_check(c["signals"])} for c in r["candidates"]]}) + "\n" for r in rows),
                         encoding="utf-8")
    before = out.read_text()
    assert main([*args(unchecked), "--sentence-answers", str(recorded)]) == 2
    assert main([*args(points), "--sentence-answers", str(recorded), "--set", "answer.verify=false"]) == 2
    assert out.read_text() == before
    short = tmp_path / "short.jsonl"
    short.write_text("".join(json.dumps(r) + "\n" for r in rows[:5]), encoding="utf-8")

    with pytest.raises(SystemExit, match="lacks 15 of the 20"):
        main(args(short))
    # `--cut-only`: the entry in --out keeps everything but its refusal cut, chosen again under the
    # cap on these points and recorded; no entry to re-cut is an error that writes nothing
    assert main(args(points)) == 0
    fitted = json.loads(out.read_text())["/nonexistent/model.gguf"]
    assert main([*args(points), "--cut-only", "--max-false-refusal", "0.0"]) == 0
    recut = json.loads(out.read_text())["/nonexistent/model.gguf"]
    assert recut["refusal_cut"]["from"] == fitted["refusal_model"]["threshold"]
    assert recut["refusal_cut"]["to"] == recut["refusal_model"]["threshold"]
    assert recut["refusal_cut"]["false_refusal"] == 0.0 and recut["refusal_cut"]["n"] == 20.0
    assert recut["refusal_model"]["coef"] == fitted["refusal_model"]["coef"]
    assert {k: v for k, v in recut.items() if k not in ("refusal_model", "refusal_cut")} == \
        {k: v for k, v in fitted.items() if k != "refusal_model"}
    empty = tmp_path / "empty.json"
    assert main([*args(points), "--cut-only", "--out", str(empty)]) == 2
    assert not empty.exists()
    before = out.read_text()  # a sentence cut asked beside --cut-only would be lost: refused up front
    assert main([*args(points), "--cut-only", "--sentence-answers", str(recorded)]) == 2
    assert out.read_text() == before
