"""Multi-turn chat: second-turn TTFT against a cold prompt of the same length.

Each conversation is asked as a user would (`Pipeline.ask` with the history, so the follow-up is
condensed, retrieved and answered with the conversation in the prompt). Turn 2's prompt starts with
turn 1's prompt and answer, so the engine's prefix cache serves them. The same turn-2 token ids are
then replayed twice with `max_tokens=1`: once after clearing the prefix cache (cold: every token
prefilled) and once with only the system prompt cached (what a layout that does not extend the
previous turn gets). Reported: TTFT of each, the median ratios, cached tokens, how many of turn
2's passages turn 1 already showed (named, not repeated: the ratio depends on it), and the CPU.

    python bench/multiturn.py --model qwen2.5-0.5b [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import ROOT  # noqa: E402  (sets the offline environment)

CONVERSATIONS = [
    ("How does the prefix cache work?", "And how do I clear it?"),
    ("What does hybrid retrieval combine?", "How are their results fused?"),
    ("What is the short answer mode?", "When does it refuse?"),
    ("How are documents chunked?", "Can I preview them before indexing?"),
    # follow-ups that move on: their passages are mostly new, so less of turn 2 is cached
    ("What does rag doctor report?", "And how do I install the bigger models?"),
    ("How is the BM25 index built?", "What about the GPU paths of the engine?"),
]


def _ttft_ms(gen, ids: list[int]) -> float:
    from inference.sampling_params import SamplingParams

    out = gen.generate([ids], SamplingParams(max_tokens=1, temperature=0.0))[0]
    return out.metrics.ttft * 1000


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen2.5-0.5b")
    ap.add_argument("--corpus", default=str(ROOT / "docs" / "guide"))
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--json", dest="json_out")
    args = ap.parse_args()

    from inference.cpu_features import cpu_model
    from rag.app import build_ingestor
    from rag.chat import ChatTurn
    from rag.config import load_config
    from rag.pipeline import Pipeline

    load = os.getloadavg()
    print(f"CPU: {cpu_model()}; {os.cpu_count()} cores; load average before: {load[0]:.2f}")
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    print(next((ln.strip() for ln in lscpu.splitlines() if ln.startswith("Model name")), ""))
    store = tempfile.mkdtemp(prefix="rag-multiturn-")
    cfg = load_config(None, [f"storage.path={store}", f"generator.engine.model={args.model}",
                             "generator.engine.max_model_len=4096", "generator.engine.kv_cache_memory=1.0"])
    pipe = Pipeline.from_config(cfg)
    build_ingestor(cfg, pipe.store).ingest([args.corpus], progress=False)
    pipe.retriever.sync("default")
    gen = pipe.generator
    rows = []
    for q1, q2 in CONVERSATIONS:
        a1 = pipe.ask(q1, max_tokens=args.max_tokens)
        history = [ChatTurn.from_answer(a1)]
        _, built2, _ = pipe.prepare(q2, history=history)  # the exact prompt turn 2 sends
        a2 = pipe.ask(q2, history=history, max_tokens=args.max_tokens)
        gen.clear_prefix_cache()
        cold = _ttft_ms(gen, built2.token_ids)
        gen.clear_prefix_cache()
        _ttft_ms(gen, pipe.prepare("What is this documentation about?")[1].token_ids)  # caches the system prompt
        system_only = _ttft_ms(gen, built2.token_ids)
        row = {"q1": q1, "q2": q2, "standalone_query": a2.chat.get("standalone_query"),
               "condense": a2.chat.get("condense"), "turn1_prompt_tokens": a1.tokens["prompt"],
               "turn2_prompt_tokens": a2.tokens["prompt"], "turn2_cached_tokens": a2.tokens["cached"],
               "turn2_new_passages": len(a2.passages),
               "turn2_passages_shown_before": len({p.chunk_id for p in a2.passages} & {p.chunk_id for p in a1.passages}),
               "turn2_ttft_ms": a2.timings_ms["prefill"], "cold_ttft_ms": cold, "system_only_ttft_ms": system_only}
        row["ratio_vs_cold"] = cold / row["turn2_ttft_ms"]
        row["ratio_vs_system_only"] = system_only / row["turn2_ttft_ms"]
        rows.append(row)
        print(f"{q2!r}: {row['turn2_prompt_tokens']} tokens, {row['turn2_cached_tokens']} cached, "
              f"{row['turn2_passages_shown_before']}/{row['turn2_new_passages']} passages shown in turn 1; "
              f"TTFT turn 2 {row['turn2_ttft_ms']:.0f} ms, cold {cold:.0f} ms ({row['ratio_vs_cold']:.1f}x), "
              f"system prompt only {system_only:.0f} ms ({row['ratio_vs_system_only']:.1f}x); "
              f"searched {row['standalone_query']!r} ({row['condense']})")
    pipe.close()
    res = {"model": args.model, "cpu_model": cpu_model(), "load_before": load[0], "conversations": rows,
           "ttft_ratio_vs_cold_p50": statistics.median(r["ratio_vs_cold"] for r in rows),
           "ttft_ratio_vs_system_only_p50": statistics.median(r["ratio_vs_system_only"] for r in rows),
           "turn2_ttft_ms_p50": statistics.median(r["turn2_ttft_ms"] for r in rows),
           "cold_ttft_ms_p50": statistics.median(r["cold_ttft_ms"] for r in rows)}
    print(f"median second-turn TTFT ratio: {res['ttft_ratio_vs_cold_p50']:.1f}x vs cold, "
          f"{res['ttft_ratio_vs_system_only_p50']:.1f}x vs system prompt cached only "
          f"(turn 2 {res['turn2_ttft_ms_p50']:.0f} ms, cold {res['cold_ttft_ms_p50']:.0f} ms)")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
