"""`rag chunk FILE`: show how a file would be chunked, for tuning splitters; stores nothing."""

from __future__ import annotations

import argparse

from ..app import indexing_config
from ._common import command, config_from, print_json


def register(sub) -> None:
    p = command(sub, "chunk", "print the chunks of a file with their metadata (nothing is stored)", run)
    p.add_argument("file", metavar="FILE")
    p.add_argument("--json", action="store_true")
    p.add_argument("--width", type=int, default=100, help="characters of chunk text to show")


def run(args: argparse.Namespace) -> int:
    from indexing.pipeline import preview_chunks

    chunks = preview_chunks(args.file, indexing_config(config_from(args)))
    if args.json:
        print_json([c.to_dict() for c in chunks])
        return 0
    for c in chunks:
        text = " ".join(c.text.split())
        print(f"[{c.chunk_id}] {c.granularity} chars {c.start}-{c.end} section={c.section!r} page={c.page} "
              f"parent={c.parent_id} lang={c.language}")
        print(f"    {text[: args.width]}{'…' if len(text) > args.width else ''}")
    print(f"{len(chunks)} chunk(s)")
    return 0
