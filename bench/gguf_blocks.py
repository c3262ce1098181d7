"""GGUF blocks (`quantization: gguf`) against the float paths on one model, same process: weight
bytes, closeness to float32 and single-stream decode speed.

    python bench/gguf_blocks.py --model qwen2.5-0.5b --threads 1

Closeness: teacher-forced top-1 agreement on float32's greedy continuations of fixed prompts,
perplexity and per-token log-prob |diff| on docs/guide/inference.md. Speed: one request, 32 new
tokens after a chat prompt, best of 2; read ratios, not absolute rates, on a shared box.
"""

from __future__ import annotations

import argparse
import gc
import math
import sys
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

import bench._common  # noqa: E402, F401  (sets the offline environment)
from inference import LLM, SamplingParams  # noqa: E402
from inference.layers.gguf_linear import weight_bytes  # noqa: E402

PROMPTS = ["The capital of France is", "def fibonacci(n):\n   ",
           "Once upon a time, in a small village by the sea, there lived an old fisherman who", "List three colors:"]
CHATS = ["Explain in three sentences how a hash table handles collisions.",
         "What are the main differences between TCP and UDP?"]
MODES = {"float32": {"dtype": "float32", "quantization": "none"},
         "bfloat16": {"dtype": "bfloat16", "quantization": "none"},
         "gguf": {"dtype": "float32", "quantization": "gguf"}}


def decode(llm: LLM) -> tuple[float, float]:
    """(decode tok/s, TTFT s) for one chat request, best of two after a warm-up."""
    ids = llm.encode_chat([{"role": "user", "content": CHATS[0]}])
    llm.generate([ids[:8]], SamplingParams(max_tokens=2, temperature=0.0))
    best = (0.0, 0.0)
    for _ in range(2):
        m = llm.generate([ids], SamplingParams(max_tokens=32, temperature=0.0, ignore_eos=True))[0].metrics
        if 1 / m.tpot > best[0]:
            best = (1 / m.tpot, m.ttft)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--new-tokens", type=int, default=16, help="greedy float32 tokens per closeness prompt")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore")
    rows: dict[str, dict] = {}
    ref_conts = ref_lp = prompts = text = None
    for mode, kw in MODES.items():
        llm = LLM(args.model, num_blocks=128, **kw)
        if prompts is None:
            prompts = [llm.tokenizer.encode(p) for p in PROMPTS] + [
                llm.encode_chat([{"role": "user", "content": c}]) for c in CHATS]
            text = llm.tokenizer.encode((REPO / "docs" / "guide" / "inference.md").read_text())[:300]
        row: dict = {"weights_mb": weight_bytes(llm.engine.model) / 1e6}
        lp = torch.tensor(llm.prompt_logprobs([text])[0])
        row["ppl"] = math.exp(-lp.mean().item())
        if ref_conts is None:
            ref_conts = [o.token_ids for o in llm.generate(prompts, SamplingParams(
                temperature=0.0, max_tokens=args.new_tokens, ignore_eos=True))]
            ref_lp = lp
        outs = llm.generate([p + c for p, c in zip(prompts, ref_conts)],
                            SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=1))
        hits = sum(int(max(o.prompt_logprobs[pos], key=o.prompt_logprobs[pos].get) == tok)
                   for o, p, c in zip(outs, prompts, ref_conts) for pos, tok in enumerate(c, start=len(p)))
        row["top1"] = hits / sum(len(c) for c in ref_conts)
        row["lp_diff_mean"], row["lp_diff_max"] = (lp - ref_lp).abs().mean().item(), (lp - ref_lp).abs().max().item()
        row["decode_tok_s"], row["ttft_s"] = decode(llm)
        rows[mode] = row
        del llm
        gc.collect()
    print(f"\n{args.model}, {args.threads} thread(s)")
    print(f"{'mode':9} {'weights MB':>10} {'top1':>6} {'ppl':>8} {'|dlp| mean':>10} {'max':>6} {'decode t/s':>10} {'TTFT ms':>8}")
    for mode, r in rows.items():
        print(f"{mode:9} {r['weights_mb']:10.1f} {r['top1']:6.3f} {r['ppl']:8.3f} {r['lp_diff_mean']:10.4f} "
              f"{r['lp_diff_max']:6.3f} {r['decode_tok_s']:10.1f} {r['ttft_s'] * 1000:8.0f}")


if __name__ == "__main__":
    main()
