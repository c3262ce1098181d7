"""`make demo`: index the bundled docs (this project's own user guide) and answer a question.

Runs on the embedded defaults with nothing beside the clone: no ../shared, no network.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from .app import build_ingestor, build_retriever, open_store
from .config import load_config

CORPUS = Path(__file__).resolve().parents[1] / "docs" / "guide"
QUESTION = "How does the engine reuse the shared system prompt across requests?"


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    p = argparse.ArgumentParser(prog="rag-demo")
    p.add_argument("--question", default=QUESTION)
    p.add_argument("--storage", default=".rag/demo")
    args = p.parse_args(argv)
    cfg = load_config(None, [f"storage.path={args.storage}"])
    with open_store(cfg) as store:
        t0 = time.perf_counter()
        report = build_ingestor(cfg, store).ingest([str(CORPUS)], collection="default", progress=False)
        print(report.summary())
        print(f"chunks in store: {store.count_chunks('default')} "
              f"({', '.join(store.granularities('default'))}); ingest {time.perf_counter() - t0:.1f}s")
        retriever = build_retriever(cfg, store)
        retriever.sync("default")
        result = retriever.search(args.question, k=3)
    print(f"\nQ: {args.question}")
    for i, c in enumerate(result.candidates, 1):
        ch = c.chunk
        print(f"[{i}] {ch.title} § {ch.section} ({Path(ch.source).name}) score={c.score:.4f}")
        print("    " + " ".join(ch.text.split())[:300])
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
