"""`rag docs list|show|delete|dropped`: inspect and remove stored documents, see what ingest dropped."""

from __future__ import annotations

import argparse

from ..app import build_retriever, open_store
from ._common import command, config_from, print_json


def register(sub) -> None:
    p = sub.add_parser("docs", help="list, show or delete stored documents")
    dsub = p.add_subparsers(dest="docs_command", metavar="ACTION", required=True)
    lp = command(dsub, "list", "list documents", run_list)
    lp.add_argument("--collection")
    lp.add_argument("--limit", type=int, default=None)
    lp.add_argument("--json", action="store_true")
    sp = command(dsub, "show", "show one document's metadata", run_show)
    sp.add_argument("doc_id", metavar="ID")
    sp.add_argument("--collection")
    dp = command(dsub, "delete", "delete a document by id (or every document of a source)", run_delete)
    dp.add_argument("doc_id", metavar="ID")
    dp.add_argument("--collection")
    dp.add_argument("--source", action="store_true", help="treat ID as a source path and delete its documents")
    xp = command(dsub, "dropped", "documents the ingest dropped (empty, duplicate, filtered) and why", run_dropped)
    xp.add_argument("--collection")
    xp.add_argument("--limit", type=int, default=None)
    xp.add_argument("--json", action="store_true")


def run_list(args: argparse.Namespace) -> int:
    with open_store(config_from(args)) as store:
        docs = store.list_documents(args.collection, limit=args.limit)
        total = store.count_documents(args.collection)
    if args.json:
        print_json({"documents": docs, "total": total})
        return 0
    for d in docs:
        print(f"{d['collection']}\t{d['doc_id']}\t{d['n_chunks']} chunks\t{d['title'][:50]}\t{d['source']}")
    print(f"{total} document(s)")
    return 0


def run_show(args: argparse.Namespace) -> int:
    with open_store(config_from(args)) as store:
        doc = store.get_document(args.doc_id, args.collection)
    if doc is None:
        print(f"no document with id {args.doc_id!r}")
        return 1
    doc["text"] = doc["text"][:500]
    print_json(doc)
    return 0


def run_dropped(args: argparse.Namespace) -> int:
    with open_store(config_from(args)) as store:
        lister = getattr(store, "list_dropped", None)
        rows = lister(args.collection, limit=args.limit) if lister else []
    if args.json:
        print_json({"dropped": rows, "total": len(rows)})
        return 0
    for r in rows:
        dup = f"\tduplicate of {r['duplicate_of']}" if r["duplicate_of"] else ""
        print(f"{r['collection']}\t{r['doc_id']}\t{r['reason']}{dup}\t{r['source']}")
    print(f"{len(rows)} dropped document(s)")
    return 0


def run_delete(args: argparse.Namespace) -> int:
    cfg = config_from(args)
    with open_store(cfg) as store:
        colls = [args.collection] if args.collection else store.collections()
        n = (store.delete_source if args.source else store.delete)(args.doc_id, args.collection)
        if n:
            try:
                retriever = build_retriever(cfg, store)
                for c in colls:
                    retriever.sync(c)
            except ImportError:
                pass
    print(f"deleted {n} document(s)")
    return 0 if n else 1
