"""A question in a language no calibration entry covers (issue #28, bad input): the decoder's own
no-answer path decides, and the answer's metadata says the refusal is uncalibrated. Real pipeline:
SmolLM2, BM25 over one Markdown file, a local calibration entry fitted "for English"."""

from __future__ import annotations

import json

from rag.config import load_config
from rag.pipeline import Pipeline


def test_question_in_an_uncovered_language_is_decided_by_the_decoder_and_says_so(tmp_path):
    """Catches an English-only entry deciding a German question (it would refuse it: the entry
    refuses everything), and an answer whose metadata does not say its refusal was uncalibrated."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "lumen.md").write_text(
        "# Lumen\n\nThe Lumen lighthouse was built in 1887 by the engineer Ada Kettle.\n"
        "Der Leuchtturm Lumen wurde 1887 von der Ingenieurin Ada Kettle gebaut.\n", encoding="utf-8")
    refuse_all = {"features": ["margin"], "mean": [0.0], "std": [1.0], "coef": [0.0], "bias": 0.0,
                  "threshold": -1e9}
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps({"smollm2": {"refusal_model": refuse_all, "languages": ["en"]}}))
    cfg = load_config(None, [f"storage.path={tmp_path / 'st'}", "retrieval.mode=bm25",
                             "generator.engine.model=smollm2", f"answer.calibration={cal}"])
    pipe = Pipeline(cfg)
    try:
        from rag.app import build_ingestor

        build_ingestor(cfg, pipe.store).ingest([str(tmp_path / "docs")], progress=False)
        pipe.retriever.sync()
        en = pipe.ask("Who built the Lumen lighthouse?", mode="short")
        de = pipe.ask("Wer hat den Leuchtturm Lumen gebaut und in welchem Jahr wurde er errichtet?", mode="short")
    finally:
        pipe.close()
    # English: the entry decides (and refuses, as fitted)
    assert en.refusal_calibration == {"calibrated": True, "by": "refusal_model", "language": "en"}
    assert en.refused and "p_unanswerable" in en.signals
    # German: no entry covers it; the decoder's own path decides, and the metadata says so
    assert de.refusal_calibration == {"calibrated": False, "by": "decoder", "language": "de"}
    assert "p_unanswerable" not in de.signals and "check_passage" not in de.signals  # no checks were paid for
    assert de.to_dict()["refusal_calibration"]["calibrated"] is False
    assert de.refused == bool(not de.signals.get("span_tokens"))  # refused only where the decoder wrote the refusal
