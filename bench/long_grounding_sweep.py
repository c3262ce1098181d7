"""Choose `answer.long_check_min` from one long-mode run instead of one run per threshold.

Why: the engine's answer check is one forward pass per sentence, and a run of the own-corpus set in
long mode takes minutes; its threshold decides how many right answers become refusals and how many
cited inventions survive. Run once with the engine check asked and never deciding, keeping every
sentence's log-odds (`check` in the `--answers` rows), then replay thresholds here:

    rag eval qa --dataset eval/data/own_corpus --mode long --set generator.engine.model=qwen2.5-0.5b \\
        --set answer.long_check_min=-1000 --answers own_long_all.jsonl
    python bench/long_grounding_sweep.py own_long_all.jsonl --thresholds=-2,-1.5,-1.2,-1,-0.5,0

For each threshold: the answer is the sentences the run kept whose check reaches it (none: the
refusal), scored as `rag eval qa` scores it (`eval.answers.contains_answer`, refusal on the
unanswerable). An approximation: a sentence the threshold would drop is not re-cited here (strict
would try another passage first), so accuracy is a lower bound.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from eval.answers import contains_answer

SHOWN = ("kept", "recited", "uncited")


def replay(rows: list[dict[str, Any]], threshold: float) -> dict[str, float]:
    """accuracy, answer_recall, refusal_acc, cited_invention_rate and kept sentences at `threshold`."""
    ans = right_ans = imp = refused_imp = invented = kept = 0
    for r in rows:
        sentences = (r.get("grounding") or {}).get("sentences", [])
        shown = [s.get("cited_as") or s["text"] for s in sentences
                 if s["path"] in SHOWN and (s.get("check") is None or s["check"] >= threshold)]
        kept += len(shown)
        text = " ".join(shown)
        if r["is_impossible"]:
            imp += 1
            refused_imp += not shown
            invented += bool(shown) and any("[" in s for s in shown)
        else:
            ans += 1
            right_ans += bool(shown) and contains_answer(text, r["gold"])
    n = max(1, ans + imp)
    return {"threshold": threshold, "accuracy": (right_ans + refused_imp) / n,
            "answer_recall": right_ans / max(1, ans), "refusal_acc": refused_imp / max(1, imp),
            "cited_invention_rate": invented / max(1, imp), "kept_sentences": kept}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("answers", type=Path, help="--answers JSONL of a long-mode run with answer.long_check_min=-1000")
    ap.add_argument("--thresholds", default="-2,-1.5,-1.2,-1,-0.5,0")
    args = ap.parse_args(argv)
    rows = [json.loads(line) for line in args.answers.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not any(s.get("check") is not None for r in rows for s in (r.get("grounding") or {}).get("sentences", [])):
        print(f"error: no sentence in {args.answers} has an engine check (run with --set answer.long_check_min=-1000 "
              "and a model the check is asked of)")
        return 2
    print(f"{'threshold':>9}  {'accuracy':>8}  {'recall':>6}  {'refusal':>7}  {'cited_inv':>9}  kept")
    for t in (float(x) for x in args.thresholds.split(",")):
        m = replay(rows, t)
        print(f"{t:>9.2f}  {m['accuracy']:>8.3f}  {m['answer_recall']:>6.3f}  {m['refusal_acc']:>7.3f}  "
              f"{m['cited_invention_rate']:>9.3f}  {m['kept_sentences']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
