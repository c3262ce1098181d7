"""`rag reindex`: rebuild the derived indexes of a collection from the SQLite store."""

from __future__ import annotations

import argparse

from ..app import build_retriever, open_store
from ._common import command, config_from
from ._progress import index_progress


def register(sub) -> None:
    p = command(sub, "reindex", "rebuild the FAISS and BM25 indexes from the document store", run)
    p.add_argument("--collection", help="one collection (default: all)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def run(args: argparse.Namespace) -> int:
    cfg = config_from(args)
    with open_store(cfg) as store:
        retriever = build_retriever(cfg, store)
        for c in [args.collection] if args.collection else store.collections():
            with index_progress(f"indexing {c}", not args.no_progress) as bar:
                results = retriever.reindex(c, on_progress=bar)
            for name, stats in results.items():
                print(f"{name}: {stats}")
    return 0
