"""QUEST sparse decode attention benchmark (issue 25 item 3): passkey retrieval at long contexts.

Each trial hides a random 5-digit pass key at a random depth of filler text padded to `--contexts`
tokens and asks for it; greedy, `--decode-tokens` new tokens (EOS ignored so every trial decodes
the same number), one request at a time. The answer is right when it contains the key.

Dense and QUEST run in ONE engine (`sparse_attention: quest`), trial by trial: the QUEST run
first, then the same prompt dense. The dense run takes its prefill from the prefix cache (prefill
is dense under QUEST too, so it is the same K/V) and switches every layer to exactly the dense code
path (`method: none`: no key bounds written, no selection), so each prompt is prefilled once.

Reported per context and mode: `accuracy`, `decode_attention_ms_per_token` (wall time inside the
attention layers during decode steps, summed over layers, per generated token, measured
in-process; includes the K/V write and, for QUEST, the bounds update and block selection), and
`decode_tok_s` end to end (tokens after the first / time after the first), plus the ratios
dense / QUEST (`attention_speedup`, `decode_speedup`, higher is better) and the share of KV blocks
QUEST skipped. `--json OUT` writes it all with the CPU model and flags (lscpu).

    python bench/quest.py --model qwen2.5-0.5b --contexts 4096 8192 --trials 50 --json quest.json
    python bench/quest.py --trials 50 --dense-every 5 --decode-tokens 16  # accuracy run, ~half the time
    python bench/quest.py --model smollm2 --contexts 512 --trials 1 --token-budget 128  # smoke
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import bench._common  # noqa: E402, F401  (sets the offline environment)
from inference import LLM, SamplingParams  # noqa: E402
from inference.cpu_features import cpu_model  # noqa: E402
from inference.models import llama  # noqa: E402

FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
HEAD = "There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. "
TAIL = "What is the pass key? The pass key is"


def passkey_prompt(tok, context: int, key: int, depth: float) -> list[int]:
    """Token ids of about `context` tokens with the key's sentence at `depth` of the filler."""
    needle = f"The pass key is {key}. Remember it. {key} is the pass key. "
    per = len(tok.encode(FILLER, add_special_tokens=False))
    fixed = len(tok.encode(HEAD + needle + TAIL))
    n = max(1, (context - fixed) // per)
    parts = [FILLER] * n
    parts.insert(int(depth * n), needle)
    return tok.encode(HEAD + "".join(parts) + TAIL)


class AttentionTimer:
    """Wall time spent in the attention layers during pure-decode steps (patched into the model)."""

    def __init__(self, cuda: bool) -> None:
        self.seconds = 0.0
        self.cuda = cuda
        self._orig = llama.paged_attention

    def __call__(self, q, k, v, cache, meta, **kwargs):
        if meta.prefills or not meta.num_decodes:
            return self._orig(q, k, v, cache, meta, **kwargs)
        if self.cuda:
            torch.cuda.synchronize()
        t = time.perf_counter()
        out = self._orig(q, k, v, cache, meta, **kwargs)
        if self.cuda:
            torch.cuda.synchronize()
        self.seconds += time.perf_counter() - t
        return out

    @contextlib.contextmanager
    def installed(self):
        llama.paged_attention = self
        try:
            yield self
        finally:
            llama.paged_attention = self._orig


@contextlib.contextmanager
def dense_mode(llm: LLM):
    """Every layer exactly as with `method: none` (no bounds written, no selection), then back."""
    caches = llm.engine.runner.caches
    saved = [(c.k_min, c.k_max, c.quest_blocks) for c in caches]
    for c in caches:
        c.k_min = c.k_max = None
        c.quest_blocks = 0
    try:
        yield
    finally:
        for c, (lo, hi, qb) in zip(caches, saved, strict=True):
            c.k_min, c.k_max, c.quest_blocks = lo, hi, qb


def one(llm: LLM, ids: list[int], n_tokens: int, timer: AttentionTimer) -> dict:
    eng = llm.engine
    params = SamplingParams(temperature=0.0, max_tokens=n_tokens, ignore_eos=True)
    before = timer.seconds
    rid = eng.add_request(ids, params)
    t_first = None
    out = None
    while eng.has_unfinished_requests():
        for o in eng.step():
            if o.request_id == rid:
                if t_first is None and o.outputs and o.outputs[0].token_ids:
                    t_first = time.perf_counter()
                    first_attn = timer.seconds  # attention of the prefill step is not counted anyway
                out = o
    t_end = time.perf_counter()
    n = len(out.outputs[0].token_ids)
    return {"text": out.outputs[0].text, "tokens": n,
            "decode_s": t_end - t_first, "attention_s": timer.seconds - first_attn,
            "attention_total_s": timer.seconds - before}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen2.5-0.5b")
    ap.add_argument("--contexts", type=int, nargs="+", default=[4096, 8192])
    ap.add_argument("--trials", type=int, default=50)
    ap.add_argument("--token-budget", type=int, default=1024)
    ap.add_argument("--dense-layers", type=int, default=2)
    ap.add_argument("--decode-tokens", type=int, default=32)
    ap.add_argument("--quantization", default="auto")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dense-every", type=int, default=1,
                    help="run the dense reference on every Nth trial only: QUEST's accuracy is over all trials, "
                         "dense accuracy, the speed ratios and answer agreement over the paired trials")
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args()

    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model_line = next((ln.split(":", 1)[1].strip() for ln in lscpu.splitlines() if ln.startswith("Model name")),
                      cpu_model())
    flags = next((ln.split(":", 1)[1].split() for ln in lscpu.splitlines() if ln.startswith("Flags")), [])
    load = os.getloadavg()
    print(f"CPU: {model_line}; {os.cpu_count()} cores; load average before: {load[0]:.2f}")
    print(f"Flags: {' '.join(flags)}")

    block = 16
    longest = max(args.contexts) + args.decode_tokens + 64
    llm = LLM(args.model, quantization=args.quantization, max_model_len=longest,
              num_blocks=-(-longest // block) * 3, max_num_seqs=1, num_threads=args.threads,
              sparse_attention={"method": "quest", "token_budget": args.token_budget,
                                "dense_layers": args.dense_layers})
    eng = llm.engine
    cuda = eng.device == "cuda"
    print(f"model {args.model}: {len(eng.model.layers)} layers, quantization {eng.quant.mode}, dtype {eng.dtype}, "
          f"device {eng.device}, threads {torch.get_num_threads()}; token_budget {args.token_budget}, "
          f"dense_layers {args.dense_layers}")
    rng = random.Random(args.seed)
    timer = AttentionTimer(cuda)
    results: dict = {"model": args.model, "cpu": model_line, "cpu_flags": flags, "cores": os.cpu_count(),
                     "threads": torch.get_num_threads(), "load_before": load[0], "device": eng.device,
                     "quantization": eng.quant.mode, "dtype": str(eng.dtype), "token_budget": args.token_budget,
                     "dense_layers": args.dense_layers, "decode_tokens": args.decode_tokens,
                     "trials": args.trials, "dense_every": args.dense_every, "contexts": {}}
    with timer.installed():
        llm.generate(passkey_prompt(llm.tokenizer, 256, 1, 0.5), SamplingParams(max_tokens=2))  # warm-up
        for ctx in args.contexts:
            rows: dict[str, list[dict]] = {"quest": [], "dense": []}
            paired: list[dict] = []  # the QUEST rows of trials that also ran dense
            skipped = considered = 0
            for trial in range(args.trials):
                key, depth = rng.randint(10000, 99999), rng.random()
                ids = passkey_prompt(llm.tokenizer, ctx, key, depth)
                s0 = eng.stats()
                r = one(llm, ids, args.decode_tokens, timer)
                s1 = eng.stats()
                skipped += s1["sparse_blocks_skipped"] - s0["sparse_blocks_skipped"]
                considered += s1["sparse_blocks_considered"] - s0["sparse_blocks_considered"]
                r["ok"] = str(key) in r["text"]
                rows["quest"].append(r)
                line = (f"ctx {ctx} trial {trial + 1}/{args.trials} ({len(ids)} tokens, key {key} at {depth:.2f}): "
                        f"quest {'ok' if r['ok'] else 'WRONG'} {r['text'][:24]!r}")
                if trial % args.dense_every == 0:
                    with dense_mode(llm):
                        d = one(llm, ids, args.decode_tokens, timer)
                    d["ok"] = str(key) in d["text"]
                    rows["dense"].append(d)
                    paired.append(r)
                    line += f"  dense {'ok' if d['ok'] else 'WRONG'} {d['text'][:24]!r}"
                llm.clear_prefix_cache()  # one prompt's blocks at a time
                print(line, flush=True)
            out = {"prompt_tokens": len(ids), "trials": len(rows["quest"]), "paired_trials": len(paired)}
            for mode, rs in [*rows.items(), ("quest_paired", paired)]:
                toks = sum(x["tokens"] - 1 for x in rs)
                out[mode] = {
                    "accuracy": sum(x["ok"] for x in rs) / len(rs),
                    "decode_attention_ms_per_token": 1000 * sum(x["attention_s"] for x in rs) / toks,
                    "decode_tok_s": toks / sum(x["decode_s"] for x in rs),
                    "decode_tok_s_p50": statistics.median((x["tokens"] - 1) / x["decode_s"] for x in rs),
                }
            qp = out["quest_paired"]  # speed ratios on the same prompts
            out["attention_speedup"] = out["dense"]["decode_attention_ms_per_token"] / qp["decode_attention_ms_per_token"]
            out["decode_speedup"] = qp["decode_tok_s"] / out["dense"]["decode_tok_s"]
            out["answers_equal"] = sum(a["text"] == b["text"] for a, b in zip(paired, rows["dense"],
                                                                               strict=True)) / len(paired)
            out["sparse_blocks_skipped_share"] = skipped / considered if considered else 0.0
            results["contexts"][str(ctx)] = out
            q, d = out["quest"], out["dense"]
            print(f"== ctx {ctx}: accuracy quest {q['accuracy']:.3f} ({out['trials']} trials) dense {d['accuracy']:.3f} "
                  f"({out['paired_trials']}); decode attention {qp['decode_attention_ms_per_token']:.2f} vs {d['decode_attention_ms_per_token']:.2f} ms/token "
                  f"({out['attention_speedup']:.2f}x); decode {qp['decode_tok_s']:.2f} vs {d['decode_tok_s']:.2f} "
                  f"tok/s ({out['decode_speedup']:.2f}x); blocks skipped {out['sparse_blocks_skipped_share']:.2f}; "
                  f"same answer {out['answers_equal']:.2f}", flush=True)
    results["load_after"] = os.getloadavg()[0]
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
