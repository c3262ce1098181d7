"""`rag ask "question"`: a cited answer from the indexed documents."""

from __future__ import annotations

import argparse
import sys

from ._common import command, config_from, print_json
from ._hints import collection_hint


def register(sub) -> None:
    p = command(sub, "ask", "answer a question from the index, with citations", run)
    p.add_argument("question")
    p.add_argument("--filter", dest="filters", action="append", default=[], metavar="KEY=VALUE",
                   help="metadata filter (repeatable), same syntax as `rag search`")
    p.add_argument("--collection")
    p.add_argument("--k", type=int, help="passages given to the model (answer.context_k)")
    p.add_argument("--stream", action="store_true", help="print the answer as it is generated")
    p.add_argument("--json", action="store_true", help="print the Answer as one JSON object")
    p.add_argument("--max-tokens", type=int)
    p.add_argument("--mode", choices=["short", "long"],
                   help="short: the answer span and its citation; long: a cited explanation (default: answer.mode)")


def run(args: argparse.Namespace) -> int:
    from ..answer import Answer
    from ..pipeline import Pipeline

    pipe = Pipeline.from_config(config_from(args))
    sampling = {"max_tokens": args.max_tokens} if args.max_tokens else {}
    try:
        answer = None
        for item in pipe.stream(args.question, filters=args.filters or None, collection=args.collection,
                                k=args.k, mode=args.mode, **sampling):
            if isinstance(item, Answer):
                answer = item
            elif args.stream and not args.json:
                sys.stdout.write(item)
                sys.stdout.flush()
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    else:
        hint = collection_hint(pipe.store, args.collection, pipe.cfg.retrieval.default_collection) \
            if answer is not None and (answer.refused or not answer.citations) else None
    finally:
        pipe.close()
    assert answer is not None
    if hint:
        print(hint, file=sys.stderr)
    if args.json:
        print_json(answer.to_dict())
        return 0
    print(("\n" if args.stream else "") + (answer.text if not args.stream else ""))
    print_sources(answer)
    return 0


def print_sources(answer) -> None:
    if answer.citations:
        print("\nSources:")
        for c in answer.citations:
            where = c.title or c.source
            extra = "".join([f" § {c.section}" if c.section else "", f", p.{c.page}" if c.page else ""])
            flag = " (inferred)" if c.inferred else ""
            print(f"  [{c.marker}] {where}{extra} — {c.source}{flag}")
    t = answer.timings_ms
    keys = [k for k in ("rewrite", "retrieve", "fuse", "rerank", "compress", "prefill", "decode", "total") if k in t]
    print("\n" + "  ".join(f"{k} {t[k]:.0f}ms" for k in keys)
          + f"  tokens {answer.tokens.get('prompt', 0)} in ({answer.tokens.get('cached', 0)} cached), "
          f"{answer.tokens.get('completion', 0)} out")
