"""`rag chunk FILE`: show how a file would be chunked, for tuning splitters; stores nothing."""

from __future__ import annotations

import argparse
import sys

from ..app import indexing_config
from ._common import command, config_from, print_json


def register(sub) -> None:
    p = command(sub, "chunk", "print the chunks of a file with their metadata (nothing is stored)", run)
    p.add_argument("file", metavar="FILE")
    p.add_argument("--json", action="store_true")
    p.add_argument("--width", type=int, default=100, help="characters of chunk text to show")


def run(args: argparse.Namespace) -> int:
    from indexing.pipeline import Ingestor

    _, per_doc, errors = Ingestor(None, indexing_config(config_from(args))).preview(args.file)
    for e in errors:
        print(f"error: {e}", file=sys.stderr)
    chunks = [c for doc_chunks in per_doc for c in doc_chunks]
    if args.json:
        print_json([c.to_dict() for c in chunks])
        return 0
    for c in chunks:
        text = " ".join(c.text.split())
        print(f"[{c.chunk_id}] {c.granularity} chars {c.start}-{c.end} section={c.section!r} page={c.page} "
              f"parent={c.parent_id} lang={c.language}")
        print(f"    {text[: args.width]}{'…' if len(text) > args.width else ''}")
    print(f"{len(chunks)} chunk(s)")
    return 1 if errors else 0
