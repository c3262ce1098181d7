"""Engine precision modes on one model: closeness to float32 and RAG-shaped latency, same process.

For each mode (`float32`, `bfloat16` = float weights; `int8` = int8 linear layers, `gguf` = GGUF
blocks with the native kernels, both with float32 activations):
- closeness: teacher-forced top-1 agreement with the first mode's (normally float32) greedy continuations
  (N tokens after each of a few chat prompts) and perplexity on a fixed text (docs/guide);
- latency per question: a ~900-token RAG prompt (SQuAD v2 paragraphs from ../shared/datasets, or
  docs/guide text without it) + 16 greedy tokens, one request at a time, the system prompt shared
  (as `rag ask` reuses it); p50 over --questions, with prefill and decode rates.

    python bench/engine_quant.py --model qwen2.5-0.5b --modes float32,bfloat16,int8 --threads 2
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import random
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from bench._common import DATASETS  # noqa: E402  (sets the offline environment)
from inference import LLM, SamplingParams  # noqa: E402

CHATS = [
    "Explain in three sentences how a hash table handles collisions.",
    "Write a short paragraph about the history of the printing press.",
    "What are the main differences between TCP and UDP?",
    "Summarise why the sky is blue for a ten-year-old.",
]
SYSTEM = ("You answer questions using only the numbered passages below. Cite passages as [n]. "
          "If the passages do not contain the answer, say that you do not know.")


def mode_args(mode: str) -> dict:
    """int8 / gguf (GGUF blocks + native kernels) take float32 activations; a dtype name is the
    float path (`quantization: none`, else `auto` would pick GGUF blocks for a GGUF model)."""
    if mode in ("int8", "gguf"):
        return {"quantization": mode, "dtype": "float32"}
    return {"quantization": "none", "dtype": mode}


def rag_prompts(tok, n: int, target_tokens: int, seed: int = 0) -> list[list[int]]:
    """Chat-formatted prompts of ~target_tokens: a question, its gold paragraph and distractors."""
    data = DATASETS / "squad_v2_half"
    rng = random.Random(seed)
    if (data / "corpus.jsonl").is_file():
        corpus = {d["_id"]: d["text"] for d in map(json.loads, (data / "corpus.jsonl").read_text().splitlines())}
        qa = [q for q in map(json.loads, (data / "qa" / "dev.jsonl").read_text().splitlines())
              if not q["is_impossible"]]
        rng.shuffle(qa)
        items = [(q["question"], corpus[q["gold_doc_id"]]) for q in qa[:n]]
        pool = list(corpus.values())
    else:
        paras = [p for f in sorted((REPO / "docs" / "guide").glob("*.md")) for p in f.read_text().split("\n\n")
                 if len(p) > 200]
        items = [(f"What does passage {i + 1} say?", paras[i % len(paras)]) for i in range(n)]
        pool = paras
    out = []
    for question, gold in items:
        passages = [gold]
        while len(tok.encode("\n\n".join(passages))) < target_tokens - 120:
            passages.append(rng.choice(pool))
        rng.shuffle(passages)
        body = "\n\n".join(f"[{i + 1}] {p}" for i, p in enumerate(passages))
        msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"{body}\n\nQuestion: {question}"}]
        text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        out.append(tok.encode(text, add_special_tokens=False)[: target_tokens + 64])
    return out


def closeness(llm: LLM, refs: list[list[int]], prompts: list[list[int]], ppl_ids: list[int]) -> dict:
    """Top-1 agreement on the reference continuations (teacher-forced) and perplexity."""
    sp = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=1)
    outs = llm.generate([p + r for p, r in zip(prompts, refs)], sp)
    agree = total = 0
    for o, p, r in zip(outs, prompts, refs):
        for pos, tok in enumerate(r, start=len(p)):
            d = o.prompt_logprobs[pos]
            best = max(d, key=d.get)
            agree += int(best == tok)
            total += 1
    lp = llm.prompt_logprobs([ppl_ids])[0]
    return {"top1_agreement": agree / total, "agreement_tokens": total, "ppl": math.exp(-sum(lp) / len(lp)),
            "ppl_tokens": len(lp)}


def latency(llm: LLM, prompts: list[list[int]], new_tokens: int) -> dict:
    sp = SamplingParams(max_tokens=new_tokens, temperature=0.0, ignore_eos=True)
    llm.generate([prompts[0][:64]], SamplingParams(max_tokens=2, temperature=0.0))  # warm-up
    walls, prefill, decode = [], [], []
    for p in prompts:
        t = time.perf_counter()
        o = llm.generate([p], sp)[0]
        walls.append(time.perf_counter() - t)
        m = o.metrics
        fresh = m.prompt_tokens - m.cached_prompt_tokens
        prefill.append(fresh / m.ttft)
        decode.append(1.0 / m.tpot if m.tpot else float("nan"))
    return {"p50_s": statistics.median(walls), "max_s": max(walls), "mean_prompt_tokens":
            statistics.mean(len(p) for p in prompts), "prefill_tok_s": statistics.median(prefill),
            "decode_tok_s": statistics.median(decode)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen2.5-0.5b")
    ap.add_argument("--modes", default="float32,bfloat16,int8")  # also: gguf
    ap.add_argument("--questions", type=int, default=8)
    ap.add_argument("--prompt-tokens", type=int, default=900)
    ap.add_argument("--new-tokens", type=int, default=16)
    ap.add_argument("--ref-tokens", type=int, default=64, help="greedy float32 tokens per closeness prompt")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    modes = args.modes.split(",")
    results: dict[str, dict] = {}
    refs: list[list[int]] | None = None
    for mode in modes:
        t = time.perf_counter()
        llm = LLM(args.model, max_num_seqs=8, max_model_len=4096, kv_cache_memory=1.5, **mode_args(mode))
        load_s = time.perf_counter() - t
        tok = llm.tokenizer
        chat_prompts = [llm.encode_chat([{"role": "user", "content": c}]) for c in CHATS]
        ppl_ids = tok.encode((REPO / "docs" / "guide" / "inference.md").read_text())[:512]
        if refs is None:
            refs = [o.token_ids for o in llm.generate(chat_prompts, SamplingParams(
                max_tokens=args.ref_tokens, temperature=0.0, ignore_eos=True))]
        res = {"load_s": load_s, **closeness(llm, refs, chat_prompts, ppl_ids)}
        res.update(latency(llm, rag_prompts(tok, args.questions, args.prompt_tokens), args.new_tokens))
        results[mode] = res
        print(f"{mode:9} " + " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                      for k, v in res.items()), flush=True)
        del llm
        gc.collect()
    base = results[modes[0]]["ppl"]
    for mode in modes:
        results[mode]["ppl_delta_pct"] = 100 * (results[mode]["ppl"] / base - 1)
    print(f"\n{args.model}, {torch.get_num_threads()} threads, {args.questions} questions x "
          f"~{args.prompt_tokens} prompt tokens + {args.new_tokens} new")
    print(f"{'mode':9} {'p50 s':>7} {'prefill t/s':>11} {'decode t/s':>10} {'top1 agree':>10} {'ppl':>8} {'dppl %':>7}")
    for mode, r in results.items():
        print(f"{mode:9} {r['p50_s']:7.2f} {r['prefill_tok_s']:11.1f} {r['decode_tok_s']:10.1f} "
              f"{r['top1_agreement']:10.3f} {r['ppl']:8.3f} {r['ppl_delta_pct']:7.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"model": args.model, "threads": torch.get_num_threads(),
                                               "results": results}, indent=2))


if __name__ == "__main__":
    main()
