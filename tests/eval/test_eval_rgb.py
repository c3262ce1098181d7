"""RGB runs with a real (word-overlap) reader: noise robustness, rejection, counterfactuals."""

import json
import re

from eval.cache import QueryCache
from eval.datasets import load_rgb
from eval.rgb_eval import evaluate_rgb

ROWS = [
    {"id": i, "query": f"capital of {country}", "answer": [city], "fakeanswer": fake,
     "positive": [f"The capital of {country} is {city}.", f"{city} became capital of {country} long ago."],
     "positive_wrong": [f"The capital of {country} is {fake}."],
     "negative": [f"Noise passage number {j} about cooking." for j in range(6)]}
    for i, (country, city, fake) in enumerate([("France", "Paris", "Lyon"), ("Japan", "Tokyo", "Osaka"),
                                               ("Egypt", "Cairo", "Luxor")])
]


def reader(query: str, passages: list[str]) -> str:
    """Answers with the passages that share a content word with the question, else rejects."""
    words = {w for w in re.findall(r"\w+", query.lower()) if len(w) > 3}
    hits = [p for p in passages if words & set(re.findall(r"\w+", p.lower()))]
    return " ".join(hits) if hits else "Insufficient information."


def test_rgb_noise_rejection_and_counterfactual(tmp_path):
    """Catches fact detection that never fires (a `fact_detect == 0.0` check alone passed with a
    detector that counts nothing), one that misses RGB's flag written with capitals or in Chinese,
    and one that counts every counterfactual answer as flagged."""
    p = tmp_path / "en.json"
    p.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    items = load_rgb(p)
    clean = evaluate_rgb(items, reader, noise_rate=0.4, n_passages=4, progress=False)
    assert clean.metrics == {"rgb_acc": 1.0, "rgb_reject": 0.0, "noise_robustness": 1.0}
    assert clean.config["noise_rate"] == 0.4
    noise = evaluate_rgb(items, reader, noise_rate=1.0, n_passages=4, progress=False)
    assert noise.metrics == {"rgb_acc": 0.0, "rgb_reject": 1.0, "negative_rejection": 1.0}
    fact = evaluate_rgb(items, reader, counterfactual=True, n_passages=3, progress=False)
    assert fact.metrics["rgb_acc"] == 0.0 and fact.metrics["fact_detect"] == 0.0
    # A reader that knows two of the capitals flags the false passages there (capitalised English,
    # RGB's Traditional Chinese phrase) and repeats the false answer for Egypt: 2 of 3 detected.
    flags = {"France": "There are Factual Errors in the provided documents.", "Japan": "文件中有事實性錯誤。"}

    def checker(query: str, passages: list[str]) -> str:
        return next((v for k, v in flags.items() if k in query), None) or reader(query, passages)

    flagged = evaluate_rgb(items, checker, counterfactual=True, n_passages=3, progress=False)
    assert flagged.metrics["fact_detect"] == 2 / 3 and flagged.metrics["rgb_acc"] == 0.0
    cache = QueryCache(tmp_path / "rgb.jsonl", "k")
    evaluate_rgb(items[:2], reader, progress=False, cache=cache)
    again = evaluate_rgb(items, reader, progress=False, cache=QueryCache(tmp_path / "rgb.jsonl", "k"))
    assert again.executed == 1 and again.metrics["rgb_acc"] == 1.0


def test_pipeline_refusal_counts_as_rejection(tmp_path):
    """Catches a pipeline refusal (its own wording, `refused` flag) scored as a wrong answer
    instead of a rejection."""
    p = tmp_path / "en.json"
    p.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    items = load_rgb(p)
    res = evaluate_rgb(items, lambda q, ps: {"text": "I don't know based on the provided documents.",
                                             "refused": True}, noise_rate=1.0, n_passages=4, progress=False)
    assert res.metrics["negative_rejection"] == 1.0 and res.metrics["rgb_acc"] == 0.0
