"""`rag graph stats|show ENTITY`: inspect the entity graph `rag index` builds with retrieval.graph.

Why a command: graph search fails silently when extraction misses an entity or a hub swallows it,
so the first question about a bad graph answer is "what does the graph hold for this name?"."""

from __future__ import annotations

import argparse
import sys

from ..app import build_retriever, open_store
from ._common import command, config_from, print_json


def register(sub) -> None:
    p = sub.add_parser("graph", help="inspect the entity graph (retrieval.graph)")
    gsub = p.add_subparsers(dest="graph_command", metavar="ACTION", required=True)
    st = command(gsub, "stats", "entities, edges, hubs and the largest communities", run_stats)
    st.add_argument("--collection")
    st.add_argument("--json", action="store_true")
    sh = command(gsub, "show", "one entity: its chunks, community and strongest neighbours", run_show)
    sh.add_argument("entity", metavar="ENTITY")
    sh.add_argument("--collection")
    sh.add_argument("--limit", type=int, default=20, help="neighbours and documents to list")
    sh.add_argument("--json", action="store_true")


def _graph(args: argparse.Namespace, store):
    cfg = config_from(args)
    name = args.collection or cfg.retrieval.default_collection
    if not cfg.retrieval.graph_built():
        print("error: no graph in this configuration: set retrieval.graph.enabled: true (for example "
              "--config configs/graph.yaml) and run `rag reindex`", file=sys.stderr)
        return name, None
    retriever = build_retriever(cfg, store)
    return name, retriever.index(name).graph


def run_stats(args: argparse.Namespace) -> int:
    with open_store(config_from(args)) as store:
        name, graph = _graph(args, store)
        if graph is None:
            return 2
        stats = {"collection": name, **graph.stats()}
    if args.json:
        print_json(stats)
        return 0
    for k, v in stats.items():
        if k != "largest_communities":
            print(f"{k:>12}: {v}")
    print("largest communities:")
    for c in stats["largest_communities"]:
        print(f"  {c['size']:>6}  {c['label']}")
    return 0


def run_show(args: argparse.Namespace) -> int:
    with open_store(config_from(args)) as store:
        name, graph = _graph(args, store)
        if graph is None:
            return 2
        info = graph.show(args.entity, args.limit)
        if info is None:
            print(f"no entity {args.entity!r} in the graph of {name!r}", file=sys.stderr)
            return 1
        chunks = store.get_chunks_by_int(info["chunks"][: args.limit], name)
        info["documents"] = sorted({c.doc_id for c in chunks})
    if args.json:
        print_json(info)
        return 0
    print(f"{info['name']}  (key {info['key']!r}{', hub' if info['hub'] else ''})")
    print(f"  chunks: {len(info['chunks'])}  community: {info['community']} ({info['community_size']} entities)")
    print(f"  documents: {', '.join(info['documents'])}")
    print("  neighbours:")
    for n in info["neighbours"]:
        rels = f"  ({'; '.join(n['relations'])})" if n.get("relations") else ""
        print(f"    {n['weight']:>4}  {n['name']}{rels}")
    if info.get("summary"):
        print(f"  community summary: {info['summary']}")
    return 0
