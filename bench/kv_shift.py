"""KV shifting benchmark (issue 25, `generator.engine.cache_reuse`): prompts that reorder the same passages.

Workload: `--groups` groups of `--passages` SQuAD passages (squad_v2_half under ../shared/datasets,
drawn without replacement from the first `--corpus`), each with one question, in the RAG
short-answer prompt layout of bench/kv_reuse.py (its `load` and `prompt`). Each group is asked
`--orders` times: first in its drawn order (untimed: it fills the prefix cache), then in
`--orders - 1` other orders of the same passages (timed). Greedy, `--max-tokens` new tokens, one
request at a time, the system prompt cached by one request before anything is timed.

Two engines, one after the other (never two models in memory), both with prefix caching:
`cache_reuse: 0` (only the identical prefix is reused) and `cache_reuse: N` (`--cache-reuse`,
default 32 as in llama.cpp's examples: runs of >= N tokens found in cached blocks at another
position are copied with K re-rotated). Reports for each the TTFT and end-to-end p50 over the
timed prompts and the reused tokens (`kv_shift_reused_tokens` from the engine stats, per prompt
and as a share of the prompt tokens), the ratio `ttft_ratio_cache_reuse` (cache_reuse 0 /
cache_reuse N, higher is better) and `greedy_agreement` (share of timed prompts whose greedy
output is identical; `first_token_agreement` too). `--json OUT` writes them.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._common import agreement, p50_ratios, report  # noqa: E402  (sets the offline environment)
from bench.kv_reuse import load, prompt  # noqa: E402
from inference import LLM, SamplingParams  # noqa: E402


def workload(n_groups: int, k: int, orders: int, corpus: list[dict], questions: list[str], seed: int
             ) -> list[tuple[str, list[list[int]]]]:
    """(question, [drawn order, other orders...]) per group; each order a distinct permutation."""
    if k * n_groups > len(corpus):
        raise SystemExit(f"--groups {n_groups} x --passages {k} needs {k * n_groups} passages; --corpus is {len(corpus)}")
    rng = random.Random(seed)
    picked = rng.sample(range(len(corpus)), k * n_groups)
    items = []
    for g, q in enumerate(rng.sample(questions, n_groups)):
        base = picked[g * k:(g + 1) * k]
        perms = [base]
        for _ in range(100 * orders):
            if len(perms) == orders:
                break
            p = rng.sample(base, k)
            if p not in perms:
                perms.append(p)
        if len(perms) < orders:
            raise SystemExit(f"--passages {k} has fewer than --orders {orders} distinct orders")
        items.append((q, perms))
    return items


def run(args, cache_reuse: int, items, corpus) -> dict:
    llm = LLM(model=args.model, max_model_len=4096, kv_cache_memory=args.kv_gb, cache_reuse=cache_reuse)
    tok = llm.tokenizer
    built = [(q, [prompt(tok, q, order, corpus, args.max_chars) for order in perms]) for q, perms in items]
    one = SamplingParams(temperature=0.0, max_tokens=1)
    first_ids, first_spans = built[0][1][0]
    llm.generate([first_ids[:first_spans[0][0]]], one)  # the system prompt alone, as bench/kv_reuse.py
    sp = SamplingParams(temperature=0.0, max_tokens=args.max_tokens)
    ttft, e2e, outs, reused, prompt_tokens = [], [], [], [], 0
    for _q, prompts in built:
        llm.generate([prompts[0][0]], sp)  # the drawn order: cached, untimed
        for ids, _spans in prompts[1:]:
            before = llm.stats()["kv_shift_reused_tokens"]
            t = time.monotonic()
            out = llm.generate([ids], sp)[0]
            e2e.append(time.monotonic() - t)
            ttft.append(out.metrics.ttft)
            outs.append(out.token_ids)
            reused.append(llm.stats()["kv_shift_reused_tokens"] - before)
            prompt_tokens += len(ids)
    stats = llm.stats()
    del llm
    return {"cache_reuse": cache_reuse, "ttft_p50_s": statistics.median(ttft), "e2e_p50_s": statistics.median(e2e),
            "kv_shift_reused_tokens": sum(reused), "reused_tokens_per_prompt": statistics.mean(reused),
            "reused_share": sum(reused) / prompt_tokens, "prompt_tokens_mean": prompt_tokens / len(reused),
            "prefix_cache_hits": stats["prefix_cache_hits"], "timed_prompts": len(reused), "outputs": outs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen2.5-0.5b")
    ap.add_argument("--groups", type=int, default=16, help="distinct passage sets (one question each)")
    ap.add_argument("--passages", type=int, default=5, help="passages per prompt")
    ap.add_argument("--orders", type=int, default=3, help="orders per group: the drawn one (untimed) + the rest")
    ap.add_argument("--corpus", type=int, default=200, help="passages the groups are drawn from")
    ap.add_argument("--max-chars", type=int, default=600, help="each passage is cut to this many characters")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--cache-reuse", type=int, default=32, help="N of cache_reuse: N (llama.cpp --cache-reuse)")
    ap.add_argument("--kv-gb", type=float, default=2.0, help="kv_cache_memory (GiB): holds every group's blocks")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", dest="json_out")
    args = ap.parse_args()
    if args.orders < 2:
        ap.error("--orders must be >= 2 (the drawn order, then at least one reordering)")
    corpus, questions = load(args.corpus)
    items = workload(args.groups, args.passages, args.orders, corpus, questions, args.seed)
    off = run(args, 0, items, corpus)
    on = run(args, args.cache_reuse, items, corpus)
    a, b = off.pop("outputs"), on.pop("outputs")
    result = {"model": args.model, "groups": args.groups, "passages": args.passages, "orders": args.orders,
              "cache_reuse": args.cache_reuse,
              "kv_shift_reused_tokens": on["kv_shift_reused_tokens"],
              **p50_ratios(off, on, "cache_reuse"),
              "greedy_agreement": agreement(a, b),
              "first_token_agreement": agreement([x[:1] for x in a], [y[:1] for y in b]),
              "cache_reuse_off": off, "cache_reuse_on": on}
    report(result, args.json_out)


if __name__ == "__main__":
    main()
