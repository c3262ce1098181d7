"""Passage KV cache benchmark (issue 25): a RAG workload where passages recur.

Workload: `--questions` SQuAD questions (squad_v2_half under ../shared/datasets), each with
`--passages` passages drawn Zipf(`--zipf`) over the first `--corpus` corpus passages, in random
order, in the RAG short-answer prompt layout (system prompt, numbered passages, question). Greedy,
`--max-tokens` new tokens, one request at a time.

Two engines, one after the other (never two models in memory): prefix caching alone, then prefix
caching + `passage_cache` (`--ratio` recompute) whose cache is warmed first with every passage the
workload uses (what `rag index --warm-kv` would do). Both get the system prompt cached by one
request before timing. Reports TTFT and end-to-end p50 of each, their ratios
(`ttft_ratio_passage_cache`, `e2e_ratio_passage_cache`: prefix-only / passage cache, higher is
better), `passage_cache_hit_rate` over the timed questions and `greedy_agreement` (identical
outputs). `--json OUT` writes them.

`--cold` skips the warm-up: the passage cache starts empty and fills as the workload runs (what a
server sees before `rag index --warm-kv`), so a passage's first use is a miss; with
`--miss-compute alone|prompt` (`passage_cache.miss_compute`) that measures what a miss costs.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import DATASETS, agreement, p50_ratios, report  # noqa: E402  (sets the offline environment)
from inference import LLM, SamplingParams  # noqa: E402
from inference.config import PassageCacheConfig  # noqa: E402
from inference.kv_reuse import join_segments  # noqa: E402
from rag.prompt import DEFAULT_REFUSAL, DEFAULT_SHORT_SYSTEM  # noqa: E402

DATA = DATASETS / "squad_v2_half"


def load(corpus_n: int) -> tuple[list[dict], list[str]]:
    passages = []
    with open(DATA / "corpus.jsonl") as fh:
        for line in fh:
            passages.append(json.loads(line))
            if len(passages) >= corpus_n:
                break
    with open(DATA / "queries.jsonl") as fh:
        questions = [json.loads(line)["text"] for line in fh]
    return passages, questions


def workload(n_q: int, k: int, corpus: list[dict], questions: list[str], zipf: float, seed: int):
    rng = random.Random(seed)
    weights = [1.0 / (r + 1) ** zipf for r in range(len(corpus))]
    items = []
    for q in rng.sample(questions, n_q):
        chosen: list[int] = []
        while len(chosen) < k:
            i = rng.choices(range(len(corpus)), weights)[0]
            if i not in chosen:
                chosen.append(i)
        items.append((q, chosen))
    return items


def prompt(tok, q: str, chosen: list[int], corpus: list[dict], max_chars: int):
    system = DEFAULT_SHORT_SYSTEM.replace("{refusal}", DEFAULT_REFUSAL)
    full = tok.apply_chat_template([{"role": "system", "content": system}, {"role": "user", "content": "\x00"}],
                                   tokenize=False, add_generation_prompt=True)
    head, tail = full.split("\x00")
    pieces = [(head + "Context passages:\n\n", False)]
    for j, i in enumerate(chosen):
        p = corpus[i]
        pieces += [(f"[{j + 1}] ", False), (f"{p.get('title', '')}\n{p['text'][:max_chars]}", True), ("\n\n", False)]
    pieces.append((f"Question: {q}" + tail, False))
    return join_segments(tok, pieces)


def run(args, passage_cache: bool, items, corpus) -> dict:
    engine_args = {"model": args.model, "max_model_len": 4096, "kv_cache_memory": 2.0}
    if passage_cache:
        engine_args["passage_cache"] = {"enabled": True, "max_gb": args.max_gb, "recompute_ratio": args.ratio,
                                        "miss_compute": args.miss_compute}
    llm = LLM(**engine_args)
    tok = llm.tokenizer
    prompts = [prompt(tok, q, chosen, corpus, args.max_chars) for q, chosen in items]
    one = SamplingParams(temperature=0.0, max_tokens=1)
    head = prompts[0][0][:prompts[0][1][0][0]]  # the template before the first passage
    llm.generate([head], one)  # caches the system prompt alone (a whole prompt would be a prefix hit later)
    if passage_cache and not args.cold:  # warm the passage cache: every distinct passage once
        seen: set[int] = set()
        for q, chosen in items:
            for i in chosen:
                if i not in seen:
                    seen.add(i)
                    ids, spans = prompt(tok, q, [i], corpus, args.max_chars)
                    llm.generate([ids], one, passage_spans=[spans])
    before = llm.stats()
    sp = SamplingParams(temperature=0.0, max_tokens=args.max_tokens)
    ttft, e2e, outs = [], [], []
    for ids, spans in prompts:
        t = time.monotonic()
        out = llm.generate([ids], sp, passage_spans=[spans] if passage_cache else None)[0]
        e2e.append(time.monotonic() - t)
        ttft.append(out.metrics.ttft)
        outs.append(out.token_ids)
    after = llm.stats()
    hits = after["passage_cache_hits"] - before["passage_cache_hits"]
    misses = after.get("passage_cache_misses", 0) - before.get("passage_cache_misses", 0)
    return {"ttft_p50_s": statistics.median(ttft), "e2e_p50_s": statistics.median(e2e), "e2e_total_s": sum(e2e),
            "outputs": outs,
            "prompt_tokens_mean": statistics.mean(len(p[0]) for p in prompts),
            "passage_cache_hit_rate": hits / (hits + misses) if hits + misses else 0.0,
            "recomputed_tokens": after["recomputed_tokens"] - before["recomputed_tokens"],
            "passage_cache_tokens_reused": after["passage_cache_tokens_reused"] - before["passage_cache_tokens_reused"],
            "passage_prefix_hits": after.get("passage_prefix_hits", 0) - before.get("passage_prefix_hits", 0)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen2.5-0.5b")
    ap.add_argument("--questions", type=int, default=64)
    ap.add_argument("--passages", type=int, default=5)
    ap.add_argument("--corpus", type=int, default=200, help="passages the Zipf draw is over")
    ap.add_argument("--zipf", type=float, default=1.0)
    ap.add_argument("--max-chars", type=int, default=600, help="each passage is cut to this many characters")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--ratio", type=float, default=PassageCacheConfig().recompute_ratio,
                    help="passage_cache.recompute_ratio (default: the engine's)")
    ap.add_argument("--max-gb", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cold", action="store_true", help="no warm-up: the passage cache starts empty")
    ap.add_argument("--miss-compute", choices=["prompt", "alone"], default="prompt",
                    help="passage_cache.miss_compute: a miss computed in the prompt's prefill or apart")
    ap.add_argument("--json", dest="json_out")
    args = ap.parse_args()
    corpus, questions = load(args.corpus)
    items = workload(args.questions, args.passages, corpus, questions, args.zipf, args.seed)
    base = run(args, False, items, corpus)
    pc = run(args, True, items, corpus)
    agree = agreement(base.pop("outputs"), pc.pop("outputs"))
    result = {"model": args.model, "questions": args.questions, "passages": args.passages, "ratio": args.ratio,
              "warm": not args.cold, "miss_compute": args.miss_compute,
              **p50_ratios(base, pc, "passage_cache"),
              "passage_cache_hit_rate": pc["passage_cache_hit_rate"], "greedy_agreement": agree,
              "prefix_only": base, "passage_cache": pc}
    report(result, args.json_out)


if __name__ == "__main__":
    main()
