"""RGB runs: the generator alone, fed fixed passages at a chosen noise rate.

Why bypass retrieval: RGB measures how the *generator* copes with noise (noise robustness),
with no evidence at all (negative rejection, noise rate 1.0), with evidence spread over several
passages (information integration, `zh_int`) and with false evidence (counterfactual, `*_fact`),
so the passages are fixed by the benchmark, not by our retriever. The answer function gets the
question and the passages and returns text (or anything `qa_eval.normalise_answer_output` takes).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from typing import Any

from tqdm import tqdm

from eval.answers import RGB_REJECT, rgb_scores
from eval.cache import QueryCache
from eval.cost import TOTAL, latency_summary
from eval.datasets import RGBItem, rgb_passages
from eval.qa_eval import normalise_answer_output
from eval.retrieval_eval import EvalResult

ContextAnswerFn = Callable[[str, list[str]], Any]
FACT_DETECT = ("事实性错误", "事實性錯誤", "factual errors", "factual error")


def counterfactual_passages(item: RGBItem, n_passages: int = 5, seed: int = 0) -> list[str]:
    """Passages for the counterfactual test: the false positives, topped up with negatives."""
    rng = random.Random(f"{seed}:{item.id}")
    wrong = item.positive_wrong[:n_passages]
    out = wrong + rng.sample(item.negative, min(n_passages - len(wrong), len(item.negative)))
    rng.shuffle(out)
    return out


def evaluate_rgb(
    items: Sequence[RGBItem],
    answer_fn: ContextAnswerFn,
    noise_rate: float = 0.0,
    n_passages: int = 5,
    seed: int = 0,
    counterfactual: bool = False,
    progress: bool = True,
    cache: QueryCache | None = None,
    *,
    dataset: str = "rgb",
    split: str = "",
    name: str = "",
    warmup: bool = True,
) -> EvalResult:
    """Accuracy (`rgb_acc`), rejection rate (`rgb_reject`) and, for counterfactual runs, the
    share of answers that flag the factual error (`fact_detect`)."""
    texts: dict[str, str] = {}
    refused: dict[str, bool] = {}
    timings: dict[str, dict[str, float]] = {}
    todo = [it for it in items if cache is None or it.id not in cache]
    if cache is not None:
        for it in items:
            rec = cache.get(it.id)
            if rec is not None:
                texts[it.id], timings[it.id] = rec["text"], rec["timings_ms"]
                refused[it.id] = bool(rec.get("refused"))
    bar = tqdm(total=len(items), initial=len(items) - len(todo), disable=not progress,
               desc=f"rgb {name or dataset}".strip(), unit="q")
    try:
        if warmup and todo:
            answer_fn(todo[0].query, rgb_passages(todo[0], noise_rate, n_passages, seed))
        for it in todo:
            ctx = (counterfactual_passages(it, n_passages, seed) if counterfactual
                   else rgb_passages(it, noise_rate, n_passages, seed))
            t0 = time.perf_counter()
            out = normalise_answer_output(answer_fn(it.query, ctx))
            out.timings_ms.setdefault(TOTAL, (time.perf_counter() - t0) * 1000.0)
            texts[it.id], timings[it.id] = out.text, out.timings_ms
            refused[it.id] = bool(out.refused)
            if cache is not None:
                cache.put(it.id, {"text": out.text, "timings_ms": out.timings_ms, "refused": refused[it.id]})
            bar.update(1)
    finally:
        bar.close()
    preds = [texts[it.id] for it in items]
    metrics = rgb_scores(preds, [it.answer for it in items])
    # The pipeline's own refusal (its configured text) counts as rejection, like RGB's phrase.
    rejected = [refused.get(it.id, False) or any(r in texts[it.id].lower() for r in RGB_REJECT) for it in items]
    metrics["rgb_reject"] = sum(rejected) / max(1, len(items))
    if noise_rate >= 1.0:
        metrics["negative_rejection"] = metrics["rgb_reject"]
    else:
        metrics["noise_robustness"] = metrics["rgb_acc"]
    if counterfactual:
        metrics["fact_detect"] = sum(any(f in p.lower() for f in FACT_DETECT) for p in preds) / max(1, len(preds))
    per_query = {it.id: {"correct": float(rgb_scores([texts[it.id]], [it.answer])["rgb_acc"])} for it in items}
    return EvalResult(
        dataset=dataset, split=split,
        config={"noise_rate": noise_rate, "n_passages": n_passages, "seed": seed, "counterfactual": counterfactual},
        metrics=metrics, latency_ms=latency_summary(timings[it.id] for it in items), n_queries=len(items),
        name=name, per_query=per_query, executed=len(todo),
    )
