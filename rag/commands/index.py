"""`rag index PATH...`: load, clean, chunk and store documents, then bring the indexes up to date."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from ..app import build_ingestor, build_retriever, open_store
from ._common import command, config_from, print_json
from ._progress import index_progress

if TYPE_CHECKING:
    from ..config import RagConfig
    from ..warm_kv import WarmReport


def register(sub) -> None:
    p = command(sub, "index", "index files or directories into a collection", run)
    p.add_argument("paths", nargs="+", metavar="PATH")
    p.add_argument("--collection", default="default")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.add_argument("--no-sync", action="store_true", help="only update the store; build indexes later")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--ray", action="store_true",
                   help="postgres backend: chunk, embed and write on Ray actors (RAY_ADDRESS, else a local Ray)")
    p.add_argument("--ray-workers", type=int, default=2, help="actors per stage with --ray")
    p.add_argument("--warm-kv", action="store_true",
                   help="then precompute the engine's passage KV cache for the collection's chunks (needs "
                        "generator.engine.passage_cache.enabled and disk_path; resumes: chunks on disk are skipped)")


def run(args: argparse.Namespace) -> int:
    cfg = config_from(args)
    warm_kv = getattr(args, "warm_kv", False)
    if warm_kv:
        from ..warm_kv import WarmKVError, check_warmable

        try:
            check_warmable(cfg)  # before indexing: a refusal should not cost the indexing first
        except WarmKVError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    warmed = None
    with open_store(cfg) as store:
        if getattr(args, "ray", False):
            from ..ray_ingest import ingest_with_ray

            report = ingest_with_ray(cfg, store, build_retriever(cfg, store), args.paths, args.collection,
                                     progress=not args.no_progress, workers=args.ray_workers)
        else:
            report = build_ingestor(cfg, store).ingest(
                args.paths, collection=args.collection, progress=not args.no_progress
            )
        synced = choice = None
        if not args.no_sync:
            try:
                retriever = build_retriever(cfg, store)
            except ImportError:
                retriever = None
            if retriever is not None:
                with index_progress(f"indexing {args.collection}", not args.no_progress) as bar:
                    synced = retriever.sync(args.collection, on_progress=bar)
                if hasattr(retriever, "language_choice"):
                    choice = retriever.language_choice(args.collection)
        if warm_kv:
            warmed = _warm(cfg, store, args.collection, not args.no_progress)
    if args.json:
        out = report.to_dict()
        if synced is not None:
            out["index_sync"] = synced
        if choice is not None:
            out["retrieval"] = choice.to_dict()
        if warmed is not None:
            out["warm_kv"] = warmed.to_dict()
        print_json(out)
    else:
        print(report.summary())
        if synced is not None:
            print(f"indexes: {synced}")
        if choice is not None:
            print(choice.summary())
        if warmed is not None:
            print(warmed.summary())
    return 1 if report.failed else 0


def _warm(cfg: RagConfig, store: Any, collection: str, progress: bool) -> WarmReport:
    """The passage KV warm-up on a generator of its own, closed after (this command answers nothing)."""
    from ..generation import build_generator
    from ..generation.auto_model import resolve_config_model
    from ..warm_kv import warm

    if cfg.compress.type != "off":
        print("warning: compress.type is on: prompts show compressed passages, which the warmed (whole) "
              "chunks do not match", file=sys.stderr)
    resolve_config_model(cfg)
    gen = build_generator(cfg.generator)
    try:
        with index_progress(f"warming passage KV {collection}", progress) as bar:
            return warm(cfg, store, gen, collection, on_progress=bar)
    finally:
        gen.close()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(run(argparse.Namespace()))
