"""`rag ask "question"`: a cited answer from the indexed documents; `rag ask --chat`: a conversation.

`--chat` reads one question per line from stdin (a terminal or a pipe) until an empty line or
EOF; each follow-up is condensed with the turns before it into the query that is searched, and
answered with the conversation in the prompt (whose cached prefix the next turn extends).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections.abc import Iterable
from typing import Any, TextIO

from ._common import command, config_from, print_json
from ._hints import collection_hint


def register(sub) -> None:
    p = command(sub, "ask", "answer a question from the index, with citations", run)
    p.add_argument("question", nargs="?", help="the question (with --chat: the first one, optional)")
    p.add_argument("--chat", action="store_true",
                   help="a conversation: one question per line on stdin, empty line or EOF ends")
    p.add_argument("--filter", dest="filters", action="append", default=[], metavar="KEY=VALUE",
                   help="metadata filter (repeatable), same syntax as `rag search`")
    p.add_argument("--collection")
    p.add_argument("--k", type=int, help="passages given to the model (answer.context_k; a grounded short answer "
                                                   "reads the top answer.short_k of them)")
    p.add_argument("--stream", action="store_true", help="print the answer as it is generated")
    p.add_argument("--json", action="store_true", help="print the Answer as one JSON object")
    p.add_argument("--max-tokens", type=int)
    p.add_argument("--mode", choices=["short", "long"],
                   help="short: the answer span and its citation; long: a cited explanation (default: answer.mode)")


def run(args: argparse.Namespace) -> int:
    from ..answer import Answer
    from ..pipeline import Pipeline

    if not args.chat and not args.question:
        print("error: a question is required (or --chat to read questions from stdin)", file=sys.stderr)
        return 2
    pipe = Pipeline.from_config(config_from(args))
    sampling = {"max_tokens": args.max_tokens} if args.max_tokens else {}
    if args.chat:
        lines = sys.stdin if args.question is None else itertools.chain([args.question], sys.stdin)
        try:
            return chat_loop(pipe, lines, args, sampling, sys.stdout, prompt=sys.stdin.isatty())
        finally:
            pipe.close()
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


def print_sources(answer, out: TextIO | None = None) -> None:
    out = out or sys.stdout
    if answer.citations:
        print("\nSources:", file=out)
        for c in answer.citations:
            where = c.title or c.source
            extra = "".join([f" § {c.section}" if c.section else "", f", p.{c.page}" if c.page else ""])
            flag = " (inferred)" if c.inferred else ""
            print(f"  [{c.marker}] {where}{extra} — {c.source}{flag}", file=out)
    cmp = answer.comparison
    if cmp.get("used"):  # what was compared: each option's question and its cited answer
        print("\nCompared:", file=out)
        for q, a in zip(cmp["sub_questions"], cmp["answers"], strict=True):
            print(f"  {q} {a}", file=out)
    hop = answer.two_hop
    if hop.get("used"):  # a refused question answered in two steps: each step and its answer
        print("\nIn two steps:", file=out)
        for q, a in zip(hop["questions"], hop["answers"], strict=True):
            print(f"  {q} {a}", file=out)
    t = answer.timings_ms
    keys = [k for k in ("condense", "rewrite", "retrieve", "fuse", "rerank", "compress", "compare", "two_hop", "prefill",
                        "decode", "total") if k in t]
    print("\n" + "  ".join(f"{k} {t[k]:.0f}ms" for k in keys)
          + f"  tokens {answer.tokens.get('prompt', 0)} in ({answer.tokens.get('cached', 0)} cached), "
          f"{answer.tokens.get('completion', 0)} out", file=out)


def chat_loop(pipe: Any, lines: Iterable[str], args: argparse.Namespace, sampling: dict[str, Any], out: TextIO,
              prompt: bool = False) -> int:
    """Answer each line as the next turn of one conversation; returns the exit code (2 when a
    question was rejected, after the others were answered)."""
    from ..answer import Answer
    from ..chat import ChatTurn

    history: list[ChatTurn] = []
    code = 0
    it = iter(lines)
    while True:
        if prompt:
            print("> ", end="", file=sys.stderr, flush=True)
        line = next(it, None)
        if line is None or not line.strip():
            return code
        answer = None
        try:
            for item in pipe.stream(line.strip(), filters=args.filters or None, collection=args.collection,
                                    k=args.k, mode=args.mode, history=history, **sampling):
                if isinstance(item, Answer):
                    answer = item
                elif args.stream and not args.json:
                    out.write(item)
                    out.flush()
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            code = 2
            continue
        assert answer is not None
        history.append(ChatTurn.from_answer(answer))
        if args.json:
            out.write(json.dumps(answer.to_dict(), ensure_ascii=False, default=str) + "\n")
            out.flush()
            continue
        out.write("\n" if args.stream else answer.text + "\n")
        if answer.chat.get("condense") in ("model", "fallback"):
            how = " (fallback: previous question + this one)" if answer.chat["condense"] == "fallback" else ""
            out.write(f"searched: {answer.chat['standalone_query']}{how}\n")
        print_sources(answer, out)
        out.write("\n")
        out.flush()
