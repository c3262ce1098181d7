"""Chunking throughput (MB/s of UTF-8 text) on the SciFact corpus, per chunker, beside
langchain's plain RecursiveCharacterTextSplitter (character length) on the same text.

Our chunkers measure in word pieces of the embedder's tokenizer and guarantee the 256-token
limit, so the character splitter is the cheap baseline, not an equal; the "langchain + HF
tokenizer length" row shows what token-aware splitting costs when every piece is re-tokenised.

    python bench/chunking.py [--corpus PATH] [--limit N]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from langchain_text_splitters import RecursiveCharacterTextSplitter  # noqa: E402

from indexing.chunking import build_chunkers, chunk_documents  # noqa: E402
from indexing.config import ChunkingConfig, NoneSpec, RecursiveSpec, SlidingSpec, SmallToBigSpec  # noqa: E402
from indexing.tokens import TokenCounter  # noqa: E402
from indexing.types import Document  # noqa: E402

DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "scifact" / "corpus.jsonl"
BATCH = 64  # what the ingest pipeline uses


def load(path: Path, limit: int | None) -> list[Document]:
    docs = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            r = json.loads(line)
            docs.append(Document(str(r["_id"]), r["text"], str(path), title=r.get("title", "")))
            if limit and len(docs) >= limit:
                break
    return docs


def timed(fn) -> tuple[float, int]:
    t = time.perf_counter()
    n = fn()
    return time.perf_counter() - t, n


def ours(docs: list[Document], spec, counter: TokenCounter):
    chunkers = build_chunkers(ChunkingConfig(chunkers=[spec]), counter)
    return lambda: sum(len(cs) for i in range(0, len(docs), BATCH)
                       for cs in chunk_documents(docs[i : i + BATCH], chunkers))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, default=DEFAULT)
    ap.add_argument("--limit", type=int, default=None, help="first N documents only")
    ap.add_argument("--token-baseline-limit", type=int, default=1000,
                    help="documents for the slow re-tokenising langchain row")
    args = ap.parse_args()
    if not args.corpus.is_file():
        print(f"skipped: {args.corpus} not found (needs ../shared/datasets/scifact)")
        return
    docs = load(args.corpus, args.limit)
    mb = sum(len(d.text.encode("utf-8")) for d in docs) / 1e6
    counter = TokenCounter("minilm", 256)
    texts = [d.text for d in docs]

    char_split = RecursiveCharacterTextSplitter(chunk_size=1000, chunk_overlap=200)
    rows: list[tuple[str, float, float, int]] = []
    base_s, base_n = timed(lambda: sum(len(char_split.split_text(t)) for t in texts))
    rows.append(("langchain RecursiveCharacterTextSplitter (1000 chars, 200 overlap)", mb, base_s, base_n))

    # The floor for any token-exact chunker: one batched tokenisation (with offsets) of the text.
    s, n = timed(lambda: sum(len(e.ids) for i in range(0, len(texts), BATCH)
                             for e in counter.tok.encode_batch(texts[i : i + BATCH], add_special_tokens=False)))
    rows.append(("MiniLM tokenizer alone (encode_batch, offsets), no chunking", mb, s, 0))

    sub = docs[: args.token_baseline_limit]
    sub_mb = sum(len(d.text.encode("utf-8")) for d in sub) / 1e6
    tok = counter.tok
    tok_split = RecursiveCharacterTextSplitter(
        chunk_size=254, chunk_overlap=30,
        length_function=lambda s: len(tok.encode(s, add_special_tokens=False).ids))
    s, n = timed(lambda: sum(len(tok_split.split_text(d.text)) for d in sub))
    rows.append((f"langchain + HF tokenizer length (254 tok, {len(sub)} docs)", sub_mb, s, n))

    specs = [
        SlidingSpec(chunk_size=256, overlap=32),
        RecursiveSpec(chunk_size=200, overlap=30),
        SmallToBigSpec(child_size=128, child_overlap=16),
        SmallToBigSpec(mode="sentence_window", window=2),
        NoneSpec(),
    ]
    for spec in specs:
        ours(docs[:50], spec, counter)()  # warm caches and imports
        s, n = timed(ours(docs, spec, counter))
        name = spec.granularity if spec.type != "small_to_big" else f"{spec.granularity} + {spec.parent_granularity}"
        rows.append((f"ours {spec.type}: {name}", mb, s, n))

    print(f"corpus: {args.corpus} ({len(docs)} docs, {mb:.2f} MB)")
    print(f"{'chunker':<72} {'MB/s':>7} {'x char':>7} {'chunks':>8} {'sec':>7}")
    base_rate = mb / base_s
    for name, size, sec, n in rows:
        rate = size / sec
        print(f"{name:<72} {rate:7.2f} {rate / base_rate:7.3f} {n:8d} {sec:7.2f}")


if __name__ == "__main__":
    main()
