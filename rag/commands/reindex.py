"""`rag reindex`: rebuild the derived indexes of a collection from the SQLite store."""

from __future__ import annotations

import argparse
import shutil

from ..app import build_retriever, open_store
from ._common import command, config_from


def register(sub) -> None:
    p = command(sub, "reindex", "rebuild the FAISS and BM25 indexes from the document store", run)
    p.add_argument("--collection", help="one collection (default: all)")


def run(args: argparse.Namespace) -> int:
    cfg = config_from(args)
    with open_store(cfg) as store:
        colls = [args.collection] if args.collection else store.collections()
        for c in colls:
            shutil.rmtree(cfg.storage_path / "indexes" / c, ignore_errors=True)
        retriever = build_retriever(cfg, store)
        for c in colls:
            print(f"{c}: {retriever.sync(c)}")
    return 0
