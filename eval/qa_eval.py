"""End-to-end answer evaluation: questions through an answer function, scored against gold.

Why an answer *function*: the pipeline (retrieve, rerank, compress, generate) is the lead's to
compose; this module only needs question -> answer text, cited passages, timings and token
counts. Unanswerable questions follow SQuAD v2: a refusal counts as the correct empty answer.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from eval.answers import (
    Cited,
    Mode,
    RefusalConfig,
    citation_scores,
    contains_answer,
    exact_match,
    is_refusal,
    strip_citation_markers,
    supported_sentences,
    token_f1,
)
from eval.cache import QueryCache, run_resumable
from eval.cost import TOTAL, aggregate_costs
from eval.datasets import QAItem
from eval.retrieval_eval import EvalResult
from rag.answer import Citation
from retrieval.types import Candidate

COST_KEYS = ("tokens_in", "tokens_out", "context_tokens_before", "context_tokens_after", "prefix_cached_tokens")


@dataclass
class QAOutput:
    """What an answer function returns; `refused` is the pipeline's own flag (phrases count too)."""

    text: str
    citations: list[Cited] = field(default_factory=list)
    timings_ms: dict[str, float] = field(default_factory=dict)
    refused: bool | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None
    context_tokens_before: int | None = None
    context_tokens_after: int | None = None
    prefix_cached_tokens: int | None = None
    signals: dict[str, float] = field(default_factory=dict)  # refusal signals (margin, span logprob)
    passages: dict[str, str] = field(default_factory=dict)  # marker ("1") -> title + text the model saw
    # long answers with `answer.long_grounding` on: each sentence's path and their counts (`Answer.grounding`)
    grounding: dict[str, Any] = field(default_factory=dict)
    # a comparison of two named options (`Answer.comparison`): the options' questions, answers, `used`
    comparison: dict[str, Any] = field(default_factory=dict)
    # a refusal tried in two steps (`Answer.two_hop`): the two questions, their answers, `used`
    two_hop: dict[str, Any] = field(default_factory=dict)


AnswerFn = Callable[[str], Any]


def _cited(c: Any, passages: Mapping[Any, str]) -> Cited:
    """One citation as (doc_id, text); a citation that only names a marker or chunk id (as
    `rag.answer.Citation` does) takes its text from the passage the model was shown."""
    if isinstance(c, Cited):
        return c
    if isinstance(c, Mapping):
        return Cited(str(c.get("doc_id", "")), str(c.get("text", "")))
    if isinstance(c, Candidate):
        return Cited(str(c.chunk.doc_id), c.chunk.text)
    if isinstance(c, Citation):
        text = passages.get(c.marker) or passages.get(c.chunk_id) or ""
        return Cited(str(c.doc_id), str(text))
    return Cited(str(c[0]), str(c[1]) if len(c) > 1 else "")


def normalise_answer_output(out: Any) -> QAOutput:
    """Accept a QAOutput, a plain string, a mapping or an object with the same field names.

    Objects shaped like `rag.answer.Answer` also work: `tokens` {prompt, completion, cached}
    fills the token counts and `passages` supply the text of marker-only citations.
    """
    if isinstance(out, QAOutput):
        return out
    if isinstance(out, str):
        return QAOutput(text=out)
    get = out.get if isinstance(out, Mapping) else (lambda k, d=None: getattr(out, k, d))
    text = get("text", None)
    if text is None:
        text = get("answer", "")
    passages: dict[Any, str] = {}
    shown: dict[str, str] = {}  # by marker, as the answer's [n] names them (supported_sentence_rate)
    for p in get("passages", None) or []:
        pget = p.get if isinstance(p, Mapping) else (lambda k, d=None, p=p: getattr(p, k, d))
        ptext = pget("text", "") or ""
        for key in ("marker", "chunk_id"):
            v = pget(key, None)
            if v is not None:
                passages[v] = ptext
        if pget("marker", None) is not None:
            shown[str(pget("marker"))] = f"{pget('title', '') or ''}\n{ptext}".strip()
    tokens = get("tokens", None) or {}
    kw = {k: get(k, None) for k in COST_KEYS}
    for k, alias in (("tokens_in", "prompt"), ("tokens_out", "completion"), ("prefix_cached_tokens", "cached"),
                     ("context_tokens_before", "context_before"), ("context_tokens_after", "context_after")):
        if kw[k] is None:
            kw[k] = tokens.get(alias, tokens.get(k))
    comp = get("compression", None) or {}  # rag Answer: the compressor's own token counts
    if kw["context_tokens_before"] is None and comp:
        kw["context_tokens_before"], kw["context_tokens_after"] = comp.get("tokens_in"), comp.get("tokens_out")
    return QAOutput(text=str(text), citations=[_cited(c, passages) for c in get("citations", None) or []],
                    timings_ms=dict(get("timings_ms", None) or {}), refused=get("refused", None),
                    signals=dict(get("signals", None) or {}), passages=shown,
                    grounding=dict(get("grounding", None) or {}),
                    comparison=dict(get("comparison", None) or {}), two_hop=dict(get("two_hop", None) or {}),
                    **kw)


def score_item(item: QAItem, out: QAOutput, mode: Mode, refusal: RefusalConfig | None,
               sentences: bool = False) -> dict[str, float]:
    """One question's scores; `sentences` (long answers) also counts its supported sentences."""
    # Either signal counts: the pipeline's own flag, or a refusal phrase in the text.
    refused = bool(out.refused) or is_refusal(out.text, refusal)
    pred = "" if refused else strip_citation_markers(out.text)
    gold = [] if item.is_impossible else item.answers
    s = {"em": exact_match(pred, gold, mode), "f1": token_f1(pred, gold, mode), "refused": float(refused)}
    if item.is_impossible:
        # the worst answer a RAG system can give: an invented fact shown with a citation
        s["cited_invention"] = float(not refused and bool(out.citations))
        s["right"] = float(refused)
    else:
        s["answer_contained"] = float(contains_answer(pred, item.answers))  # long answers: F1 is diluted
        s["right"] = s["answer_contained"]  # a refusal's prediction is empty: never contains
        cs = citation_scores(out.citations, item.answers, item.gold_docs)
        if cs is not None:
            s.update(cs)
    if sentences and not refused:
        s["supported_sentences"], s["sentences"] = map(float, supported_sentences(out.text, out.passages,
                                                                                 item.question))
    return s


def evaluate_qa(
    items: Sequence[QAItem],
    answer_fn: AnswerFn,
    *,
    mode: Mode = "auto",
    refusal: RefusalConfig | None = None,
    progress: bool = True,
    cache: QueryCache | None = None,
    dataset: str = "",
    split: str = "",
    config: Mapping[str, Any] | None = None,
    name: str = "",
    warmup: bool = True,
    concurrency: int = 1,
    answers_path: str | Path | None = None,
    sentences: bool = False,
) -> EvalResult:
    """Answer every question and score it (after one untimed warm-up answer when `warmup`).

    Metrics: `em`/`f1` over all questions (SQuAD v2 style), `has_ans_em`/`has_ans_f1` over the
    answerable ones, `refusal_acc` / `false_refusal`, `cited_invention_rate` (unanswerable questions
    answered with a citation), `answer_recall` (answerable answers that contain a gold answer: the
    long-mode measure, where F1 is diluted by the other words), `citation_precision`/`citation_recall` over
    answerable answers that cite something (`cited_rate` says how many did), and token counts,
    compression ratio and prefix-cache hit rate when the answer function reports them.
    `concurrency` > 1 answers that many questions at once (the engine batches them continuously;
    per-question latencies then include queueing behind the others). `answers_path` writes one
    JSON line per question (`write_answers`). `accuracy`: the share of questions answered right in
    the user's sense: the answer contains a gold answer, or is a refusal where nothing answers.
    `sentences` (long mode): `supported_sentence_rate`, the share of the answered questions'
    sentences whose content the passage they cite supports (`eval.answers.sentence_support`).
    `long_grounding` (on the result): how many of the model's sentences took each grounding path
    (kept, recited, dropped_keyfact, ...; `rag/answering/long.py`), summed over the questions;
    `comparisons` / `two_hop`: how many questions tried each answer-in-parts path and how many it
    answered (`path_counts`).
    """
    by_id = {it.id: it for it in items}

    def answer(qid: str) -> QAOutput:
        t0 = time.perf_counter()
        out = normalise_answer_output(answer_fn(by_id[qid].question))
        out.timings_ms.setdefault(TOTAL, (time.perf_counter() - t0) * 1000.0)
        return out

    outputs, executed = run_resumable(
        [it.id for it in items], answer, cache, to_record=lambda out: {"output": asdict(out)},
        from_record=lambda rec: QAOutput(**{**rec["output"], "citations": [Cited(**c) for c in rec["output"]["citations"]]}),
        desc=f"qa {name or dataset}".strip(), progress=progress,
        warmup=(lambda qid: answer_fn(by_id[qid].question)) if warmup else None, threads=max(1, concurrency))
    per_query = {it.id: score_item(it, outputs[it.id], mode, refusal, sentences) for it in items}
    if answers_path is not None:
        write_answers(answers_path, items, outputs, per_query)
    costs = aggregate_costs({"timings_ms": o.timings_ms, **{k: getattr(o, k) for k in COST_KEYS}}
                            for o in (outputs[it.id] for it in items))
    return EvalResult(
        dataset=dataset, split=split, config=dict(config or {}),
        metrics=_qa_metrics(items, per_query, costs), latency_ms=costs["latency_ms"],
        n_queries=len(items), name=name, per_query=per_query, executed=executed,
        long_grounding=grounding_counts(outputs[it.id] for it in items),
        comparisons=path_counts((outputs[it.id] for it in items), "comparison"),
        two_hop=path_counts((outputs[it.id] for it in items), "two_hop"),
    )


def path_counts(outputs: Iterable[QAOutput], path: str) -> dict[str, int]:
    """How many questions tried an answer path that works in parts (`comparison`: two named options
    compared, `rag/answering/compare.py`; `two_hop`: a refusal split in two steps,
    `rag/answering/two_hop.py`) and how many of them it answered (`used`); empty when none tried.
    Records that say their `kind` (a comparison of dates or numbers, a "both", "which", "same" or
    "shared" question, `rag/answering/yes_no.py`) are also counted per kind: `{kind}_asked`,
    `{kind}_used`."""
    counts: Counter[str] = Counter()
    for o in outputs:
        record = getattr(o, path)
        if record:
            kinds = ["", f"{record['kind']}_"] if record.get("kind") else [""]
            for k in kinds:
                counts[f"{k}asked"] += 1
                counts[f"{k}used"] += bool(record.get("used"))
    return {"asked": counts["asked"], "used": counts["used"], **{k: v for k, v in sorted(counts.items())
                                                                if k not in ("asked", "used")}} if counts else {}


def grounding_counts(outputs: Iterable[QAOutput]) -> dict[str, int]:
    """Each grounding path's sentence count over the answers, with `dropped` (all dropped paths) and
    `answers` (how many were grounded); with the short-answer gate (`rag/answering/gate.py`) also
    `gated` (answers held to it) and `gate_refused` (refused there, nothing generated), and with the
    sentence gate of explanatory questions `sentence_gated` and `sentence_gate_refused` (every
    sentence refused); empty when nothing was grounded (short mode, `long_grounding: off`)."""
    total: Counter[str] = Counter()
    answers = gated = gate_refused = by_sentence = sentence_refused = 0
    for o in outputs:
        counts = o.grounding.get("counts") or {}
        if counts:
            answers += 1
            total.update({k: int(v) for k, v in counts.items()})
        if (gate := o.grounding.get("gate")) is None:
            continue
        if gate.get("kind") == "sentences":  # an explanatory question: judged by sentence, no span
            by_sentence += 1
            sentence_refused += bool(gate.get("refused"))
        else:
            gated += 1
            gate_refused += bool(gate.get("refused"))
    if not answers:
        return {}
    return {**total, "dropped": sum(v for k, v in total.items() if k.startswith("dropped")), "answers": answers,
            **({"gated": gated, "gate_refused": gate_refused} if gated else {}),
            **({"sentence_gated": by_sentence, "sentence_gate_refused": sentence_refused} if by_sentence else {})}


def write_answers(path: str | Path, items: Sequence[QAItem], outputs: Mapping[str, QAOutput],
                  per_query: Mapping[str, Mapping[str, float]]) -> Path:
    """One JSON line per question, for reading what users would read: question, gold, answer,
    citations, refusal flag, F1/EM, citation scores, refusal signals and latency."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for it in items:
            out, s = outputs[it.id], per_query[it.id]
            row = {"id": it.id, "question": it.question, "gold": [] if it.is_impossible else list(it.answers),
                   "is_impossible": it.is_impossible, "answer": out.text,
                   "citations": [c.doc_id for c in out.citations], "gold_doc_id": it.gold_doc_id,
                   "refused": bool(s["refused"]), "f1": s["f1"], "em": s["em"],
                   "right": bool(s["right"]),
                   **{k: s[k] for k in ("citation_precision", "citation_recall", "supported_sentences", "sentences")
                      if k in s},
                   "signals": out.signals, "latency_ms": round(out.timings_ms.get(TOTAL, 0.0), 1),
                   **({"grounding": out.grounding} if out.grounding else {}),
                   **({"comparison": out.comparison} if out.comparison else {}),
                   **({"two_hop": out.two_hop} if out.two_hop else {})}
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def _qa_metrics(items: Sequence[QAItem], pq: Mapping[str, Mapping[str, float]], costs: Mapping[str, Any]) -> dict[str, float]:
    ans = [pq[i.id] for i in items if not i.is_impossible]
    imp = [pq[i.id] for i in items if i.is_impossible]
    m = {"em": _mean([s["em"] for s in pq.values()]), "f1": _mean([s["f1"] for s in pq.values()]),
         "accuracy": _mean([s["right"] for s in pq.values()])}
    if imp:
        m["has_ans_em"] = _mean([s["em"] for s in ans])
        m["has_ans_f1"] = _mean([s["f1"] for s in ans])
        m["refusal_acc"] = _mean([s["refused"] for s in imp])
        m["cited_invention_rate"] = _mean([s.get("cited_invention", 0.0) for s in imp])
    m["false_refusal"] = _mean([s["refused"] for s in ans])
    if ans:
        m["answer_recall"] = _mean([s.get("answer_contained", 0.0) for s in ans])
    counted = sum(s.get("sentences", 0.0) for s in pq.values())
    if counted:  # micro-average: every sentence a user reads counts once
        m["supported_sentence_rate"] = sum(s.get("supported_sentences", 0.0) for s in pq.values()) / counted
    cited = [s for s in ans if "citation_precision" in s]
    if cited:
        m["citation_precision"] = _mean([s["citation_precision"] for s in cited])
        m["citation_recall"] = _mean([s["citation_recall"] for s in cited])
    m["cited_rate"] = len(cited) / len(ans) if ans else 0.0
    for k in ("tokens_in", "tokens_out"):
        if k in costs:
            m[f"{k}_mean"] = costs[k]["mean"]
    for k in ("compression_ratio", "prefix_cache_hit_rate"):
        if k in costs:
            m[k] = costs[k]
    return m
