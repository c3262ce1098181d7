"""A four-paragraph QA set written to disk for calibration tests (one home for the set that the
probe and the transfer-calibration tests both ask over)."""

from __future__ import annotations

import json
from pathlib import Path

PARAGRAPHS = {"p0": "Velmora is the capital city of Zarnovia. It lies on the river Ost.",
              "p1": "The XR-300 drone flies for 42 minutes on one battery charge.",
              "p2": "The Lumen lighthouse was built in 1887 by the engineer Ada Kettle.",
              "p3": "Glimmer tea is grown on the terraces of Mount Sorrel at 2,000 metres."}


def write_qa_set(ds: Path, questions: list[tuple[str, list[str], str]], split: str) -> Path:
    """corpus.jsonl of PARAGRAPHS and qa/<split>.jsonl of (question, answers, gold paragraph);
    no answers marks the question unanswerable."""
    (ds / "qa").mkdir(parents=True)
    (ds / "corpus.jsonl").write_text("".join(json.dumps({"_id": k, "title": k, "text": v}) + "\n"
                                             for k, v in PARAGRAPHS.items()))
    (ds / "qa" / f"{split}.jsonl").write_text("".join(
        json.dumps({"id": f"q{i}", "question": q, "answers": a, "is_impossible": not a, "gold_doc_id": d,
                    "title": d}) + "\n" for i, (q, a, d) in enumerate(questions)))
    return ds


def never_refusing_entry(selector: bool = True) -> dict:
    """A calibration entry (for any model) whose refusal model never refuses: its presence makes the
    short path ask the answerability checks, and with `selector` decode one span per passage (the
    path the shipped Qwen entries take), on a model that ships none (SmolLM2)."""
    never = {"features": ["margin"], "mean": [0.0], "std": [1.0], "coef": [0.0], "bias": 0.0, "threshold": 1e9}
    entry: dict = {"refusal_model": never, "languages": ["en"]}
    if selector:
        entry["span_selector"] = {"features": ["margin"], "mean": [0.0], "std": [1.0], "coef": [-1.0], "bias": 0.0}
    return entry
