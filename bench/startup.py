"""Tokenizer start-up in a fresh process, against transformers' AutoTokenizer on the same directory.

Every `rag ask`, `rag search`, `rag index` and `rag serve` process loads two tokenizers: the
generator's (a GGUF conversion) and the embedder's. Ours (`inference/tokenizer.py`,
`retrieval/embeddings/encoder_tokenizer.py`) read a snapshot of the Rust tokenizer transformers
builds; the peer is `from transformers import AutoTokenizer; AutoTokenizer.from_pretrained(dir)`.
Each sample is a fresh Python process with torch already imported (the engine imports it anyway),
timed from before the tokenizer's import to the first chat prompt encoded (generators) or the
first padded batch (embedders). Peers alternate (A B A B ...); the median of `--repeats` is
reported, with `ratio_vs_transformers` = peer / ours (higher is better). Run:
`.venv/bin/python bench/startup.py [--models qwen2.5-0.5b smollm2] [--repeats 5] [--json out.json]`.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import ROOT, report  # noqa: E402  (sets the offline environment)

_PRE = "import time, torch\nt0 = time.perf_counter()\n"
_MSGS = "[{'role': 'system', 'content': 'Answer from the passages.'}, {'role': 'user', 'content': 'When?'}]"
_GEN = {
    "ours": "from inference.tokenizer import FastTokenizer\ntok = FastTokenizer.load({d!r})\n",
    "transformers": "from transformers import AutoTokenizer\ntok = AutoTokenizer.from_pretrained({d!r})\n",
}
_GEN_USE = (f"ids = tok.encode(tok.apply_chat_template({_MSGS}, tokenize=False, add_generation_prompt=True),"
            " add_special_tokens=False)\n")
_ENC = {
    "ours": "from retrieval.embeddings.encoder_tokenizer import EncoderTokenizer\ntok = EncoderTokenizer({d!r})\n",
    "transformers": "from transformers import AutoTokenizer\ntok = AutoTokenizer.from_pretrained({d!r})\n",
}
_ENC_USE = "f = tok(['what is a qubit', 'a longer query about harbours'], padding=True, truncation=True," \
           " max_length=256, return_tensors='pt')\n"


def _sample(code: str) -> float:
    out = subprocess.run([sys.executable, "-c", _PRE + code + "print(time.perf_counter() - t0)"],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return float(out.stdout.strip().splitlines()[-1])


def compare(kind: str, name: str, directory: Path, repeats: int) -> dict:
    loads, use = (_GEN, _GEN_USE) if kind == "generator" else (_ENC, _ENC_USE)
    _sample(loads["ours"].format(d=str(directory)) + use)  # takes the snapshot if none exists yet
    times: dict[str, list[float]] = {"ours": [], "transformers": []}
    for _ in range(repeats):
        for side in ("ours", "transformers"):
            times[side].append(_sample(loads[side].format(d=str(directory)) + use))
    ours, peer = statistics.median(times["ours"]), statistics.median(times["transformers"])
    return {"kind": kind, "model": name, "ours_s": ours, "transformers_s": peer,
            "ratio_vs_transformers": peer / ours}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=["qwen2.5-0.5b", "smollm2"], help="generators (catalogue names)")
    p.add_argument("--embedders", nargs="+", default=["minilm", "multilingual-e5-small"])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)

    from inference.cpu_features import ENGINE_FLAGS, cpu_flags, cpu_model
    from inference.model_loader import resolve_model_dir
    from retrieval.embeddings.models import resolve_embedding_model

    rows = [compare("generator", m, resolve_model_dir(m, weights=False), args.repeats) for m in args.models]
    rows += [compare("embedder", e, Path(resolve_embedding_model(e)), args.repeats) for e in args.embedders]
    have = cpu_flags()
    result = {"cpu_model": cpu_model(), "cpu_flags": [f for f in ENGINE_FLAGS if f in have], "rows": rows}
    print(f"CPU: {result['cpu_model']}; flags: {' '.join(result['cpu_flags'])}")
    for r in rows:
        print(f"{r['kind']:9s} {r['model']:22s} ours {r['ours_s']:.2f} s  transformers {r['transformers_s']:.2f} s"
              f"  ratio {r['ratio_vs_transformers']:.2f}x")
    report(result, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
