"""`rag search "query"`: ranked chunks with scores, per-retriever ranks and metadata."""

from __future__ import annotations

import argparse
import sys

from retrieval.collection_index import IndexMismatchError

from ..app import build_retriever, open_store
from ._common import command, config_from, print_json
from ._hints import collection_hint
from ._progress import index_progress


def register(sub) -> None:
    p = command(sub, "search", "search the index (bm25, dense, hybrid, graph; global: community summaries)", run)
    p.add_argument("query")
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--mode", choices=("bm25", "dense", "hybrid", "graph", "global"),
                   help="global: the entity graph's community summaries with their chunks (retrieval.graph.summaries)")
    p.add_argument("--filter", dest="filters", action="append", default=[], metavar="KEY=VALUE",
                   help="metadata filter (repeatable): key=value, key=a|b, key>=x, key<=y, source^=prefix")
    p.add_argument("--collection")
    p.add_argument("--json", action="store_true")
    p.add_argument("--width", type=int, default=160)


def run(args: argparse.Namespace) -> int:
    if not args.query.strip():
        # an empty query matched everything (dense) while `rag ask ""` is rejected: be consistent
        print("error: the query is empty", file=sys.stderr)
        return 2
    cfg = config_from(args)
    filters = args.filters or None
    with open_store(cfg) as store:
        retriever = build_retriever(cfg, store)
        if cfg.retrieval.auto_sync and (args.collection or not cfg.retrieval.collections):
            # catch up with the store here, with a progress bar, rather than silently inside search
            name = args.collection or cfg.retrieval.default_collection
            with index_progress(f"indexing {name}") as bar:
                retriever.sync(name, on_progress=bar)
        try:
            if args.mode == "global":
                return _print_global(retriever.global_search(args.query, args.k, args.collection), args)
            result = retriever.search(args.query, k=args.k, mode=args.mode, filters=filters,
                                      collection=args.collection)
        except IndexMismatchError as e:  # e.g. --mode graph on a collection indexed without the graph
            print(f"error: {e}", file=sys.stderr)
            return 2
        hint = None if result.candidates else collection_hint(store, args.collection,
                                                              cfg.retrieval.default_collection)
    if hint:
        print(hint, file=sys.stderr)
    if args.json:
        print_json({"results": [c.to_dict() for c in result.candidates], "timings_ms": result.timings_ms})
        return 0
    for i, c in enumerate(result.candidates, 1):
        ch = c.chunk
        ranks = " ".join(f"{k}#{v}" for k, v in c.ranks.items())
        where = ch.title or ch.source
        extra = f" p.{ch.page}" if ch.page else ""
        print(f"{i:>2}. {c.score:.4f} [{ranks}] {where}{extra} {('§ ' + ch.section) if ch.section else ''}")
        text = " ".join(ch.text.split())
        print(f"    {text[: args.width]}{'…' if len(text) > args.width else ''}")
    t = " ".join(f"{k}={v:.1f}ms" for k, v in result.timings_ms.items())
    print(f"{len(result.candidates)} result(s)  {t}")
    return 0


def _print_global(communities: list[dict], args: argparse.Namespace) -> int:
    if args.json:
        print_json({"mode": "global", "communities": communities})
        return 0
    if not communities:
        print("no community summaries yet (a corpus too small for communities of retrieval.graph.summary_min_size)",
              file=sys.stderr)
    for i, c in enumerate(communities, 1):
        print(f"{i:>2}. {c['name']} ({c['size']} entities): {c['summary']}")
        for ch in c["chunks"]:
            text = " ".join(ch["text"].split())
            print(f"    - {ch['title'] or ch['source']}: {text[: args.width]}{'…' if len(text) > args.width else ''}")
    return 0
