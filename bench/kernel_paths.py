"""The GGUF kernels' ISA paths against each other on one engine, same process: single-stream
decode tokens/s and uncached 1,000-token prefill tokens/s per path, rounds alternating.

    python bench/kernel_paths.py --model qwen2.5-0.5b --threads 2 --rounds 5 --json OUT

Why: a path (e.g. `avxvnni` against `avx2`) is a choice the dispatch makes for every user of that
CPU class, and a shared VM's speed moves by up to 1.5x within minutes, so the paths are switched
at run time (`ops.set_isa`) inside one loaded engine and measured round by round; the medians and
the ratios against the first path are what to read. Only the native GGUF kernels change between
paths: torch's own float kernels (attention, norms) keep the CPU's best unless ATEN_CPU_CAPABILITY /
ONEDNN_MAX_CPU_ISA cap them for the whole run. Greedy tokens of each path are compared with the
first path's (`token_agreement`: integer sums are the same on every path, float summation order
may differ). `--llama-cpp` adds llama.cpp's figures on the same GGUF (one run, its own build).
`--shapes` adds a per-tensor table: the first layer's weight groups and the output head, each
multiplied by 1, 16 and 256 activation rows on every path in turn (GMAC/s, median of `--reps`
alternating calls): the engine-level figures on a shared VM move more than a path's gain.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

import bench._common  # noqa: E402, F401  (sets the offline environment)
from bench._common import agreement, report  # noqa: E402
from bench.engine import LlamaCppSingle, cpu_description, single_stream, text  # noqa: E402
from inference import LLM, SamplingParams  # noqa: E402
from inference.kernels import ops  # noqa: E402
from inference.layers.gguf_linear import GGUFLinear, type_name  # noqa: E402

ROWS = (1, 16, 256)


def shape_table(model: torch.nn.Module, paths: list[str], reps: int) -> list[dict]:
    """GMAC/s per (weight group, activation rows, path) for the first layer's groups and the head."""
    seen: dict[tuple[int, int, int], torch.Tensor] = {}
    for name, mod in model.named_modules():
        if isinstance(mod, GGUFLinear) and (".0." in name or "lm_head" in name):
            for g in mod.groups:
                if g.qtype in ops.SUPPORTED_TYPES:
                    seen.setdefault((g.qtype, g.n, g.k), g.rows)
    out = []
    for (qtype, n, k), w in seen.items():
        for m in ROWS:
            x = torch.randn(m, k)
            times: dict[str, list[float]] = {p: [] for p in paths}
            for r in range(reps + 1):
                for p in paths if r % 2 == 0 else paths[::-1]:
                    ops.set_isa(p)
                    t = time.perf_counter()
                    ops.quant_matmul(x, w, qtype, k)
                    if r:  # the first round warms each path's buffers
                        times[p].append(time.perf_counter() - t)
            gmacs = {p: m * n * k / statistics.median(times[p]) / 1e9 for p in paths}
            out.append({"type": type_name(qtype), "n": n, "k": k, "rows": m,
                        "gmac_s": {p: round(v, 1) for p, v in gmacs.items()},
                        "ratio_vs_baseline": {p: round(gmacs[p] / gmacs[paths[0]], 3) for p in paths}})
    ops.set_isa(None)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description="the GGUF kernels' ISA paths against each other on one engine")
    ap.add_argument("--model", default="qwen2.5-0.5b", help="a catalogue name or a .gguf path")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--isas", default=None,
                    help="comma-separated paths, first = the baseline (default: every SIMD path this CPU runs)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--prefill-tokens", type=int, default=1000)
    ap.add_argument("--llama-cpp", action="store_true", help="also llama.cpp on the same GGUF (one run)")
    ap.add_argument("--shapes", action="store_true", help="also the per-tensor GMAC/s table")
    ap.add_argument("--reps", type=int, default=15, help="calls per path and shape (--shapes)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    if not ops.available():
        sys.exit(f"kernel_paths: the native kernels are not available: {ops.load_error()}")
    paths = args.isas.split(",") if args.isas else [p for p in ops.supported_isas() if p != "scalar"]
    unknown = [p for p in paths if p not in ops.supported_isas()]
    if unknown:
        sys.exit(f"kernel_paths: {unknown} not run by this CPU (supported: {ops.supported_isas()})")
    llm = LLM(args.model, dtype="float32", quantization="gguf", num_threads=args.threads)
    tok = llm.tokenizer
    rng = random.Random(0)
    decode_prompt = llm.encode_chat([{"role": "user", "content": "Explain in three sentences how a hash table "
                                                                 "handles collisions."}])
    tokens: dict[str, list[int]] = {}
    runs: dict[str, list[dict]] = {p: [] for p in paths}
    try:
        for p in paths:  # warm-up per path: buffers, panels, greedy tokens for agreement
            ops.set_isa(p)
            out = llm.generate([decode_prompt], SamplingParams(temperature=0.0, max_tokens=args.new_tokens,
                                                               ignore_eos=True))[0]
            tokens[p] = list(out.token_ids)
        for r in range(args.rounds):
            order = paths if r % 2 == 0 else paths[::-1]
            for p in order:
                ops.set_isa(p)
                # a fresh prompt every time: nothing of it can come from the prefix cache
                prefill = tok.encode(text(rng, int(args.prefill_tokens * 0.8)))[: args.prefill_tokens]
                runs[p].append(single_stream(llm, decode_prompt, prefill, args.new_tokens))
    finally:
        ops.set_isa(None)
    base = paths[0]
    result: dict = {"model": args.model, "threads": args.threads, "rounds": args.rounds, **cpu_description(),
                    "baseline": base, "paths": {}}
    med = {p: {k: statistics.median(x[k] for x in runs[p]) for k in ("decode_tok_s", "prefill_tok_s")}
           for p in paths}
    for p in paths:
        result["paths"][p] = {**med[p],
                              "decode_ratio_vs_baseline": med[p]["decode_tok_s"] / med[base]["decode_tok_s"],
                              "prefill_ratio_vs_baseline": med[p]["prefill_tok_s"] / med[base]["prefill_tok_s"],
                              # the same ratios per round, then their median: robust to a VM's drift
                              **{f"{k}_ratio_paired": statistics.median(
                                  a[f"{k}_tok_s"] / b[f"{k}_tok_s"] for a, b in zip(runs[p], runs[base], strict=True))
                                 for k in ("decode", "prefill")},
                              "token_agreement": agreement(tokens[p], tokens[base]),
                              "decode_runs": [round(x["decode_tok_s"], 2) for x in runs[p]],
                              "prefill_runs": [round(x["prefill_tok_s"], 1) for x in runs[p]]}
    if args.shapes:
        result["shapes"] = shape_table(llm.engine.model, paths, args.reps)
    if args.llama_cpp:
        prefill = tok.encode(text(rng, int(args.prefill_tokens * 0.8)))[: args.prefill_tokens]
        peer = LlamaCppSingle(args.model, len(prefill) + args.new_tokens + 16, args.threads)
        result.update(peer(decode_prompt, prefill, args.new_tokens))
    report(result, args.json)


if __name__ == "__main__":
    main()
