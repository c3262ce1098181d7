"""Answerability probe training: pairs leave out held-out questions and their paragraphs, AUC is
the textbook one (ties count half), and the folded probe scores exactly what it was fitted on."""

from __future__ import annotations

import numpy as np
import pytest

from eval.datasets import CorpusDoc, QAItem
from eval.probe import ProbePair, cross_validate, fit_probe, passage_order, probe_pairs, roc_auc
from tests.eval.qa_case import write_qa_set


def test_roc_auc_hand_computed_with_ties():
    """Catches an AUC that ranks ties arbitrarily or swaps the classes."""
    assert roc_auc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]) == pytest.approx(0.75)
    assert roc_auc([0.5, 0.5, 0.5, 0.9], [0, 1, 0, 1]) == pytest.approx(0.75)  # tie 0.5 vs 0.5 counts half
    assert roc_auc([3.0, 2.0, 1.0], [0, 1, 1]) == pytest.approx(0.0)
    with pytest.raises(ValueError):
        roc_auc([1.0, 2.0], [1, 1])


def _corpus() -> dict[str, CorpusDoc]:
    docs = {}
    for t in ("A", "B"):
        for k in range(4):
            docs[f"{t}_{k}"] = CorpusDoc(f"{t}_{k}", f"Article {t} paragraph {k} says the value is {t}{k}.", t)
    return docs


def _items() -> list[QAItem]:
    out = []
    for n in range(40):
        t, k = "AB"[n % 2], (n // 2) % 4
        imp = n % 3 == 0
        out.append(QAItem(f"q{n}", f"question {n}?", [] if imp else [f"{t}{k}"], imp, f"{t}_{k}", t))
    return out


def test_pairs_leave_out_held_questions_and_their_paragraphs():
    """Catches training the probe on a paragraph the reported or calibration sample uses (a leak
    into the numbers it is judged by), wrong labels, and 'other' passages that hold the answer."""
    items, corpus = _items(), _corpus()
    held = {"q0", "q5"}  # paragraphs A_0 and B_2
    pairs = probe_pairs(items, corpus, 100, seed=3, held_ids=held, other_share=1.0)
    by_id = {i.id: i for i in items}
    held_texts = {corpus["A_0"].text, corpus["B_2"].text}
    assert pairs and not {p.qid for p in pairs} & held
    assert not {p.passage for p in pairs} & held_texts
    for p in pairs:
        it = by_id[p.qid]
        if p.kind == "gold":
            assert p.passage == corpus[it.gold_doc_id].text and p.label == int(not it.is_impossible)
        else:
            assert p.label == 0 and not it.is_impossible
            assert p.passage != corpus[it.gold_doc_id].text and it.answers[0] not in p.passage
            assert f"Article {it.title} " in p.passage  # same article: the hard negative
    assert any(p.kind == "other" for p in pairs)
    assert probe_pairs(items, corpus, 5, seed=3, held_ids=held)[0].qid == pairs[0].qid  # seeded


def test_passage_order_groups_each_passages_pairs_and_keeps_every_pair():
    """Catches an order that drops or repeats a pair (its check would be missing or run twice) or
    leaves a passage's pairs apart (the prefix cache would compute the passage again)."""
    pairs = [ProbePair(f"q{i}", f"question {i}?", text, i % 2, "gold")
             for i, text in enumerate(["P one", "P two", "P one", "P three", "P two", "P one"])]
    order = passage_order(pairs)
    assert sorted(order) == list(range(len(pairs)))
    assert order == [0, 2, 5, 1, 4, 3]  # first seen first; a passage's pairs in their own order
    assert passage_order([]) == []


def test_folded_probe_scores_raw_features_and_separates_a_planted_direction():
    """Catches a standardisation that is not folded back (scores on raw states would be off) and
    a cross-validation that leaks a question's pairs across folds (perfect AUC from memorising)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 20)) * rng.uniform(0.5, 5.0, size=20) + rng.normal(size=20) * 3
    y = (x[:, 3] / x[:, 3].std() - x[:, 7] / x[:, 7].std() + 0.3 * rng.normal(size=300) > 0).astype(int)
    w, b = fit_probe(x, y, l2=1.0)
    assert roc_auc(x @ w + b, y) > 0.97
    mean, std = x.mean(0), x.std(0) + 1e-6
    from eval.calibrate import _logistic

    w0, b0 = _logistic((x - mean) / std, y.astype(float), 1.0)
    assert np.allclose(x @ w + b, ((x - mean) / std) @ w0 + b0, atol=1e-6)
    groups = [f"q{i // 2}" for i in range(300)]
    assert roc_auc(cross_validate(x, y, groups, 1.0), y) > 0.9
    noise = rng.integers(0, 2, size=300)
    assert roc_auc(cross_validate(x, noise, groups, 1.0), noise) < 0.65  # no signal, no score


def test_cli_trains_a_probe_file_that_calibrate_accepts_only_for_its_model(shared_datasets, tmp_path, capsys):
    """Catches `rag eval probe` writing a probe of the wrong width or layer, or without the fields
    calibration and docs read, and `rag eval calibrate --probe` taking another model's probe."""
    import json

    from eval.cli_calibrate import _load_probe
    from rag.cli import main

    out = tmp_path / "probe.json"
    rc = main(["eval", "probe", "--dataset", str(shared_datasets / "squad_v2_half"), "--limit", "24",
               "--layer", "12", "--l2", "10,100", "--out", str(out), "--no-progress",
               "--set", "generator.engine.model=smollm2", "--set", f"storage.path={tmp_path / 'store'}"])
    assert rc == 0, capsys.readouterr()
    data = json.loads(out.read_text())
    assert data["model"] == "smollm2" and data["layer"] == 12 and data["layers"] == 30
    assert len(data["probe"]["weights"]) == 576 and data["probe"]["layer"] == 12
    assert data["l2"] in (10.0, 100.0) and 0.0 <= data["cv_auc"] <= 1.0 and 0.0 <= data["check_auc"] <= 1.0
    assert data["pairs"] >= 24 and 0 < data["answerable_pairs"] < data["pairs"]
    probe, trained = _load_probe(str(out), "smollm2")
    assert probe.layer == 12 and trained["pairs"] == data["pairs"] and "probe" not in trained
    with pytest.raises(SystemExit, match="trained for 'smollm2'"):
        _load_probe(str(out), "qwen2.5-1.5b")
    assert main(["eval", "probe", "--dataset", str(tmp_path / "missing"), "--out", str(out)]) == 2
    assert "needs qa/dev.jsonl and corpus.jsonl" in capsys.readouterr().err
    assert main(["eval", "probe", "--dataset", str(shared_datasets / "drcd"), "--limit", "5",
                 "--out", str(out)]) == 2  # no unanswerable questions: nothing to learn "no" from
    assert "needs answerable and unanswerable" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(SystemExit, match="not a probe file"):
        _load_probe(str(bad), "smollm2")


def test_calibrate_with_a_probe_fits_on_its_score_and_stores_it(tmp_path, capsys):
    """Catches `rag eval calibrate --probe` fitting a refusal model over `check_probe` but storing an
    entry without the probe (the pipeline could then never compute the feature), or not recording
    the probe's score at all. A tiny QA set, SmolLM2, a hand-made probe on layer 10."""
    import json

    from rag.cli import main

    qs = [("What is the capital city of Zarnovia?", ["Velmora"], "p0"),
          ("How long does the XR-300 drone fly?", ["42 minutes"], "p1"),
          ("Who built the Lumen lighthouse?", ["Ada Kettle"], "p2"),
          ("Where is Glimmer tea grown?", ["Mount Sorrel"], "p3"),
          ("What is the capital city of Ostland?", [], "p0"),
          ("How much does the XR-300 drone weigh?", [], "p1"),
          ("Who painted the Lumen lighthouse?", [], "p2"),
          ("Who sells Glimmer tea in Velmora?", [], "p3")]
    ds = write_qa_set(tmp_path / "qa_set", qs, "dev")
    probe = {"model": "smollm2", "layer": 10, "pairs": 0,
             "probe": {"layer": 10, "bias": 0.1, "weights": [((i % 5) - 2) / 40 for i in range(576)]}}
    (tmp_path / "probe.json").write_text(json.dumps(probe))
    out, points = tmp_path / "cal.json", tmp_path / "points.jsonl"
    rc = main(["eval", "calibrate", "--dataset", str(ds), "--limit", "8", "--exclude-limit", "0",
               "--probe", str(tmp_path / "probe.json"), "--out", str(out), "--points", str(points),
               "--no-progress", "--set", "generator.engine.model=smollm2",
               "--set", f"storage.path={tmp_path / 'store'}"])
    assert rc == 0, capsys.readouterr()
    rows = [json.loads(line) for line in points.read_text().splitlines()]
    spans = [r for r in rows if r["signals"].get("span_tokens", 0) > 0]
    assert spans and all("check_probe" in r["signals"] for r in spans)
    entry = json.loads(out.read_text())["smollm2"]
    assert entry["probe"]["layer"] == 10 and len(entry["probe"]["weights"]) == 576
    assert entry["probe_trained"]["model"] == "smollm2"
    assert "check_probe" in entry["refusal_model"]["features"]
    # per-passage candidates are recorded by default, each with the probe the selector reads
    cands = [c for r in rows for c in r["candidates"]]
    assert all(len(r["candidates"]) == 4 for r in rows)  # the four paragraphs, one span each
    assert all("check_probe" in c["signals"] and "passage_rank" in c["signals"] for c in cands if c["span"])
    right = {c["f1"] >= 0.5 for r in rows if not r["impossible"] for c in r["candidates"]}
    assert ("span_selector" in entry) == (right == {True, False})
