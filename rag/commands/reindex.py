"""`rag reindex`: rebuild the derived indexes of a collection from the SQLite store."""

from __future__ import annotations

import argparse

from ..app import build_retriever, open_store
from ._common import command, config_from


def register(sub) -> None:
    p = command(sub, "reindex", "rebuild the FAISS and BM25 indexes from the document store", run)
    p.add_argument("--collection", help="one collection (default: all)")


def run(args: argparse.Namespace) -> int:
    cfg = config_from(args)
    with open_store(cfg) as store:
        retriever = build_retriever(cfg, store)
        for c in [args.collection] if args.collection else store.collections():
            for name, stats in retriever.reindex(c).items():
                print(f"{name}: {stats}")
    return 0
