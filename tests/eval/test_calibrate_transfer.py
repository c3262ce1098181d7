"""Calibrating on a mix of domains (#28 item 3): leave-one-domain-out CV, the transfer features,
and `rag eval calibrate` over several datasets (a generated own-corpus set asked group by group)
whose entry loads through rag/calibration.py and decides the pipeline's refusals."""

from __future__ import annotations

import json
import random

import pytest

from eval.calibrate import Point, decide, domain_cv, fit_entry, transfer_scores
from rag.answering.signals import (
    CHECK_PASSAGE,
    MARGIN,
    MIN_LOGPROB,
    PASSAGE_RANK,
    SPAN_LOGPROB,
    SPAN_LOGPROB_MEAN,
    SPAN_TOKENS,
    TRANSFER_REFUSAL_FEATURES,
    TRANSFER_SELECTOR_FEATURES,
    with_derived,
)
from tests.eval.qa_case import write_qa_set


def _pt(domain: str, impossible: bool, check: float, rng: random.Random) -> Point:
    m = rng.gauss(-3.0, 1.0)
    sig = with_derived({MARGIN: m, MIN_LOGPROB: rng.gauss(-2, 0.5), SPAN_LOGPROB: -4.0, SPAN_TOKENS: 2.0,
                        CHECK_PASSAGE: check, "check_answer": rng.gauss(0, 1)})
    return Point(m, impossible, 0.0 if impossible else 1.0, sig[MIN_LOGPROB], sig, [], domain)


def _points() -> list[Point]:
    """Domains a, b, d: the passage check separates (high = answerable). Domain c: the reverse."""
    rng = random.Random(0)
    pts = []
    for d in ("a", "b", "d"):
        pts += [_pt(d, False, rng.gauss(2, 0.5), rng) for _ in range(20)]
        pts += [_pt(d, True, rng.gauss(-2, 0.5), rng) for _ in range(20)]
    pts += [_pt("c", False, rng.gauss(-2, 0.5), rng) for _ in range(5)]
    pts += [_pt("c", True, rng.gauss(2, 0.5), rng) for _ in range(5)]
    return pts


def test_domain_cv_holds_each_domain_out():
    """Catches a fold whose model saw the held-out domain (in-sample figures reported as transfer),
    a domain missing from the report, and cited inventions not counted on unanswerables."""
    pts = _points()
    cv = domain_cv(pts, 0.15, TRANSFER_REFUSAL_FEATURES, TRANSFER_SELECTOR_FEATURES)
    assert set(cv) == {"a", "b", "c", "d"}
    for d, m in cv.items():
        test = [p for p in pts if p.domain == d]
        expected = transfer_scores(decide(test, fit_entry([p for p in pts if p.domain != d], 0.15,
                                                          TRANSFER_REFUSAL_FEATURES, TRANSFER_SELECTOR_FEATURES)))
        assert m == expected
        assert m["n"] == len(test) and m["n_unanswerable"] == sum(p.impossible for p in test)
        assert m["cited_invention_rate"] == pytest.approx(1.0 - m["refusal_acc"])
    # a and b transfer to each other; c, whose check reads the other way, does not
    assert cv["a"]["refusal_acc"] >= 0.9 and cv["b"]["refusal_acc"] >= 0.9
    assert cv["c"]["refusal_acc"] <= 0.2 and cv["c"]["cited_invention_rate"] >= 0.8
    assert domain_cv([p for p in pts if p.domain == "a"]) == {}  # one domain: nothing to hold out


def test_transfer_features_drop_rank_and_length_and_old_points_get_the_mean():
    """Catches the transfer entry reading the passage rank or the summed span log-probability (both
    scale with the corpus or the span), and a refit of an old points file lacking the per-token mean."""
    assert PASSAGE_RANK not in TRANSFER_REFUSAL_FEATURES + TRANSFER_SELECTOR_FEATURES
    assert SPAN_LOGPROB not in TRANSFER_REFUSAL_FEATURES and SPAN_LOGPROB_MEAN in TRANSFER_REFUSAL_FEATURES
    assert with_derived({SPAN_LOGPROB: -6.0, SPAN_TOKENS: 3.0})[SPAN_LOGPROB_MEAN] == -2.0
    assert with_derived({SPAN_LOGPROB: -6.0, SPAN_TOKENS: 0.0})[SPAN_LOGPROB_MEAN] == -6.0  # no division by 0


def _plain_set(root):
    """A tiny QA set with a training split (its own domain in the mix)."""
    qs = [("What is the capital city of Zarnovia?", ["Velmora"], "p0"),
          ("How long does the XR-300 drone fly?", ["42 minutes"], "p1"),
          ("Who built the Lumen lighthouse?", ["Ada Kettle"], "p2"),
          ("What is the capital city of Ostland?", [], "p0"),
          ("How much does the XR-300 drone weigh?", [], "p1"),
          ("Who painted the Lumen lighthouse?", [], "p2")]
    return write_qa_set(root / "lumen_set", qs, "train")


def test_calibrate_on_a_mix_writes_a_transfer_entry_the_pipeline_uses(tmp_path, capsys):
    """Catches: generated questions asked over the whole set instead of their group; the CV missing
    from the JSON; an entry over count-dependent features; a refit that differs from the run; and an
    entry the pipeline does not decide with. SmolLM2, a generated set and a plain one."""
    from eval.synth_own import SynthConfig, generate, load_group_ids
    from rag.calibration import load_entry
    from rag.cli import main
    from rag.config import RagConfig
    from tests.eval.test_synth_own import _dataset

    synth = generate(_dataset(tmp_path / "src"), tmp_path / "own_set",
                     SynthConfig(groups=2, group_min=2, group_max=3, answerable=2, negatives=1, seed=0))
    plain = _plain_set(tmp_path)
    out, points, js = tmp_path / "cal.json", tmp_path / "points.jsonl", tmp_path / "cv.json"
    common = ["eval", "calibrate", "--dataset", str(synth), "--dataset", f"{plain}:train", "--limit", "6",
              "--no-progress", "--set", "generator.engine.model=smollm2", "--set", f"storage.path={tmp_path / 'st'}"]
    assert main([*common, "--out", str(out), "--points", str(points), "--json", str(js)]) == 0, capsys.readouterr()
    rows = [json.loads(line) for line in points.read_text().splitlines()]
    assert {r["domain"] for r in rows} == {"own", "lumen_set"}
    groups = load_group_ids(synth)
    sizes = {}
    for d in (json.loads(line) for line in (synth / "corpus.jsonl").read_text().splitlines()):
        sizes[d["metadata"]["group"]] = sizes.get(d["metadata"]["group"], 0) + 1
    own = [r for r in rows if r["domain"] == "own"]
    assert own and all(len(r["candidates"]) <= sizes[groups[r["id"]]] for r in own)  # its group's passages only
    report = json.loads(js.read_text())
    assert set(report["transfer_cv"]) == {"own", "lumen_set"}
    for m in report["transfer_cv"].values():
        assert {"refusal_acc", "false_refusal", "cited_invention_rate", "n"} <= set(m)
    entry = json.loads(out.read_text())["smollm2"]
    assert entry["features"] == "transfer" and entry["languages"] == ["en"]
    assert set(entry["refusal_model"]["features"]) <= set(TRANSFER_REFUSAL_FEATURES)
    assert SPAN_LOGPROB_MEAN in entry["refusal_model"]["features"]
    assert entry["transfer_cv"] == report["transfer_cv"]
    assert "span_selector" not in entry or PASSAGE_RANK not in entry["span_selector"]["features"]
    # the refit reads the same points back (domains and all) and fits the same entry without a model
    refit = tmp_path / "refit.json"
    assert main([*common, "--refit", str(points), "--out", str(refit)]) == 0
    again = json.loads(refit.read_text())["smollm2"]
    assert again["refusal_model"] == entry["refusal_model"] and again["transfer_cv"] == entry["transfer_cv"]
    # the pipeline decides with it: the refusal model's probability is recorded on a short answer
    parsed = load_entry(out, "smollm2", language="en")
    assert parsed.refusal_model is not None
    from eval.runner import open_eval_pipeline

    cfg = RagConfig()
    cfg.generator.engine.model = "smollm2"
    cfg.storage.path = str(tmp_path / "st")
    cfg.answer.calibration = str(out)
    pipe = open_eval_pipeline(plain, cfg, progress=False)
    try:
        a = pipe.ask("Who built the Lumen lighthouse?", mode="short")
    finally:
        pipe.close()
    assert a.signals.get(SPAN_TOKENS) and "p_unanswerable" in a.signals, a.signals


def test_eval_qa_asks_a_generated_set_group_by_group(tmp_path, capsys):
    """Catches `rag eval qa` on a generated set searching the whole set (an answer could cite another
    group's passage), and a twin question (same text, two groups) silently answered over one group."""
    from eval.synth_own import SynthConfig, generate, load_group_ids
    from rag.cli import main
    from tests.eval.test_synth_own import _dataset

    synth = generate(_dataset(tmp_path / "src"), tmp_path / "own_set",
                     SynthConfig(groups=2, group_min=2, group_max=3, answerable=2, negatives=1, seed=0))
    answers = tmp_path / "answers.jsonl"
    common = ["--no-progress", "--set", "generator.engine.model=smollm2", "--set", f"storage.path={tmp_path / 'st'}"]
    assert main(["eval", "qa", "--dataset", str(synth), "--split", "train", "--limit", "6", "--answers", str(answers),
                 *common]) == 0, capsys.readouterr()
    groups = load_group_ids(synth)
    group_of_doc = {d["_id"]: d["metadata"]["group"]
                    for d in (json.loads(line) for line in (synth / "corpus.jsonl").read_text().splitlines())}
    rows = [json.loads(line) for line in answers.read_text().splitlines()]
    cited = [(r, c) for r in rows for c in r["citations"]]
    assert cited  # some answer cites, so the check below checks something
    qrows = [json.loads(line) for line in (synth / "qa" / "train.jsonl").read_text().splitlines()]
    group_of_q = {r["question"]: r["group"] for r in qrows}
    assert len(group_of_q) == len(qrows)  # texts are unique in this set
    assert set(groups.values()) == set(group_of_q.values())
    assert all(group_of_doc[c] == group_of_q[r["question"]] for r, c in cited)
    # a twin: the same question in two groups cannot be keyed by its text
    qa = synth / "qa" / "train.jsonl"
    lines = qa.read_text().splitlines()
    twin = json.loads(lines[0])
    other = next(json.loads(x)["group"] for x in lines if json.loads(x)["group"] != twin["group"])
    qa.write_text("\n".join([*lines, json.dumps({**twin, "id": "twin", "group": other})]) + "\n")
    assert main(["eval", "qa", "--dataset", str(synth), "--split", "train", *common]) == 2
    assert "two groups" in capsys.readouterr().err


def test_a_question_refused_before_decoding_is_a_refusal_not_a_missing_feature():
    """Catches one point without signals (its group had no passage left, so nothing was decoded)
    wiping every feature out of the fit (the 0.5B smoke crashed on it), and such a point counted as
    answered in the CV."""
    pts = _points()
    empty = Point(0.0, True, 0.0, 0.0, {}, [], "a")
    fitted = fit_entry([*pts, empty], 0.15, TRANSFER_REFUSAL_FEATURES, TRANSFER_SELECTOR_FEATURES)
    assert CHECK_PASSAGE in fitted["refusal_model"]["features"]
    assert decide([empty], fitted)[0][1] is True
    with_it = transfer_scores(decide([p for p in pts if p.domain == "a"] + [empty], fitted))
    alone = transfer_scores(decide([p for p in pts if p.domain == "a"], fitted))
    assert with_it["n_unanswerable"] == alone["n_unanswerable"] + 1
    assert with_it["refusal_acc"] >= alone["refusal_acc"]  # the empty one is a refusal
