"""The pipeline probe of `model: auto` (`rag/generation/auto_model.py`): time this config's answer step per
question, in the subprocess `speed_probe.probe` starts (`python -m rag.generation.pipeline_probe CONFIG`).

Why apart from auto_model: it runs the pipeline, and the pipeline resolves `auto` through auto_model;
run as a command, not imported, it closes no import cycle. Why the pipeline and not one prompt: a
question's cost is the prompt plus what the config runs around it (per-passage spans, the
answerability checks, the short-answer gate of a long answer, the long answer's sentence checks);
timing a 900-token prompt + 16 tokens said 5-7 s for the 1.5B whose own-corpus p50 was 7.2-7.7 s.
Retrieval (~50 ms here) is left out: the passages are given, so no store or index is needed; they are
given as a ranking (`ranked`), so the short answer or a long answer's gate reads the top `short_k` of
them, as for a retrieved question (read as a caller's own, all five were checked: the 1.5B's long
answer measured 13.6 s on a Zen 4 core where a retrieved question's gate reads three).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rag.config import load_config
from rag.generation.machine import cores
from rag.generation.speed import PROBE_REPEATS
from rag.pipeline import Pipeline

# The probe's questions: a small town's documents, one passage per topic (~190 tokens each: five make a
# prompt of ~1,150 tokens, what the own corpus's questions had), a question the first passage answers; `{town}` and the numbers change per
# question, so no question reuses another's passages from the prefix cache (real questions do not either).
_PROBE_TOPICS = (
    "{town} harbour has {a} moorings, {b} of them kept free for visiting boats. The harbour office on the east "
    "quay is open from 8:00 to 17:00 on weekdays and from 9:00 to 13:00 on Saturdays; it is closed on Sundays "
    "and public holidays. Visitors report their arrival to the office within two hours and pay before leaving.",
    "A mooring in {town} costs {c} euros per night for boats up to 12 metres and {d} euros for longer boats. "
    "Electricity and fresh water are included in the fee; showers cost one euro per token, sold at the office. "
    "Boats staying a full week pay for six nights. Fees are paid by card or in cash at the harbour office.",
    "The {town} library lends books for {b} days and films for seven days. A loan can be renewed twice online "
    "or at the desk unless another reader has reserved it. Late returns cost 20 cents per item and day; a lost "
    "book is replaced at its price plus a handling fee of five euros. Children under twelve borrow for free.",
    "The bakery on {town}'s market square opens at 6:30 and sells rye bread, cinnamon buns and seasonal cakes. "
    "Birthday cakes are ordered at least 48 hours ahead, and gluten-free bread is baked on Tuesdays and Fridays. "
    "The bakery is closed on Mondays and for two weeks in {month}, when the ovens are serviced.",
    "Bicycles can be rented in {town} by the hour or the day: {e} euros per hour or {f} euros per day, helmets "
    "included. Riders must be at least 16 years old for electric bikes. Bikes are returned to any of the three "
    "stations before 22:00; a late return costs a second day. Child seats are available on request.",
)
_PROBE_NOTE = ("This is part {part} of the visitor notes for {town}, last revised in {month}. The town office on "
               "the main street answers letters and e-mails within five working days and keeps printed copies of "
               "every notice at its front desk. Prices are reviewed every spring by the town council; last year's "
               "list stays on the town's website for comparison, and changes are announced in the local paper at "
               "least a month before they apply.")
_PROBE_TOWNS = ("Varnholm", "Ostrava Bay", "Kelmoor", "Lindqvist", "Tarrow", "Miravel", "Quellin", "Brask")
_PROBE_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August")


def probe_question(i: int, k: int) -> tuple[str, list[str]]:
    """Question `i` of the pipeline probe and its `k` passages (the topics repeated past five)."""
    town = _PROBE_TOWNS[i % len(_PROBE_TOWNS)] + (f" {i // len(_PROBE_TOWNS) + 2}" if i >= len(_PROBE_TOWNS) else "")
    n = dict(town=town, a=48 + 3 * i, b=10 + i, c=16 + i, d=24 + i, e=3 + i, f=15 + i,
             month=_PROBE_MONTHS[i % len(_PROBE_MONTHS)])
    passages = [_PROBE_TOPICS[j % len(_PROBE_TOPICS)].format(**n) + " " + _PROBE_NOTE.format(**n, part=j + 1)
                for j in range(max(1, k))]
    return f"How many moorings does {town} harbour have?", passages


def measure(config: str | Path, repeats: int, threads: int) -> dict[str, Any]:
    """Answer one warm-up question and `repeats` timed ones through the pipeline of `config` (a
    `probe_config` file); the median wall time, the engine's token accounting of that question and
    what its answer ran."""
    cfg = load_config(config)
    pipe = Pipeline(cfg)
    try:
        gen = pipe.generator
        k = cfg.answer.context_k

        def one(i: int) -> dict[str, Any]:
            question, passages = probe_question(i, k)
            before = gen.stats()
            wall0, cpu0 = time.perf_counter(), time.process_time()
            a = pipe.ask(question, passages=passages, ranked=True)  # read as retrieved ones are: top short_k
            wall = time.perf_counter() - wall0
            after = gen.stats()
            d = {key: after.get(key, 0) - before.get(key, 0)
                 for key in ("prompt_tokens", "prefix_cache_hits", "generation_tokens")}
            return {"wall": wall, "share": (time.process_time() - cpu0) / max(1e-9, wall * threads), "answer": a,
                    "tokens": d}

        one(0)  # loading, kernel set-up per shape, first touch of the weights: not an answer's cost
        runs = sorted((one(i) for i in range(1, repeats + 1)), key=lambda r: r["wall"])
    finally:
        pipe.close()
    mid = runs[len(runs) // 2]
    a, t = mid["answer"], mid["tokens"]
    gen_tokens = max(1, a.tokens.get("completion", 1))
    return {"question_s": mid["wall"], "work": work_summary(a, t, len(runs)),
            "prefill_s": a.timings_ms.get("prefill", 0.0) / 1000,
            "decode_s": a.timings_ms.get("decode", 0.0) / 1000 / max(1, gen_tokens - 1),
            "prompt_tokens": max(1, a.tokens.get("prompt", 0) - a.tokens.get("cached", 0)),
            "cpu_share": round(min(1.0, max(r["share"] for r in runs)), 3)}


def work_summary(answer: Any, tokens: Mapping[str, int], questions: int) -> dict[str, Any]:
    """What one probe question ran (for `rag models list`'s why): the mode, the short-answer gate and
    per-passage spans, the checks, the long answer's judged sentences, and the engine's tokens
    (prompt tokens computed, served from the prefix cache, generated)."""
    g = answer.grounding or {}
    checks = [k for k in ("check_passage", "check_answer", "check_probe") if k in answer.signals]
    span_gate = "gate" in g and g["gate"].get("kind") != "sentences"  # not an explanatory question's sentence gate
    return {"mode": answer.mode, "gate": span_gate, "per_passage": len(answer.candidates),
            "checks": checks, "sentences": len(g.get("sentences", [])), "refused": answer.refused,
            "prompt_tokens": int(tokens["prompt_tokens"] - tokens["prefix_cache_hits"]),
            "cached_tokens": int(tokens["prefix_cache_hits"]), "generated_tokens": int(tokens["generation_tokens"]),
            "questions": questions}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rag.generation.pipeline_probe")
    p.add_argument("config", help="the config to answer with (speed_probe.probe_config writes it)")
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--repeats", type=int, default=PROBE_REPEATS)
    a = p.parse_args(argv)
    others_load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None  # before this process adds to it
    out = measure(a.config, a.repeats, a.threads)
    print(json.dumps({**out, "runs": a.repeats, "others_load": others_load, "cores": cores()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
