"""`rag rerank train|eval`: train a cross-encoder on BEIR data, measure it on a BEIR split."""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from ._common import add_config_args, config_from, print_json


def add_train_args(p: argparse.ArgumentParser, default_out: str) -> None:
    p.add_argument("--dataset", action="append", required=True, metavar="DIR",
                   help="BEIR folder (corpus.jsonl, queries.jsonl, qrels/<split>.tsv or qa/<split>.jsonl), "
                        "optionally DIR:SPLIT to override --split for it; repeatable")
    p.add_argument("--base", help="base encoder dir or HF id (default: the packaged all-MiniLM-L6-v2)")
    p.add_argument("--out", default=default_out, help=f"output dir (default {default_out})")
    p.add_argument("--split", default="train")
    p.add_argument("--max-steps", type=int, default=-1)
    p.add_argument("--epochs", type=float, default=1.0)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--lr", type=float)
    p.add_argument("--max-length", type=int, default=256)
    p.add_argument("--negatives", type=int, default=3)
    p.add_argument("--mine", choices=("bm25", "hybrid"), default="hybrid")
    p.add_argument("--max-queries", type=int, help="per dataset (quick runs)")
    p.add_argument("--holdout", type=float, default=0.0, metavar="F",
                   help="never train on this fraction of each split's queries (tune on them with "
                        "`rag rerank eval --split train --holdout F`)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--resume", action="store_true", help="continue from the last checkpoint in OUT/checkpoints")
    p.add_argument("--head-lr-multiplier", type=float, default=None,
                   help="cross-encoder: learning-rate factor of the new scoring head (default from TrainConfig)")
    p.add_argument("--freeze-embeddings", action="store_true",
                   help="keep the word-embedding matrix fixed (a large multilingual vocabulary "
                        "makes every optimizer step slow on CPU)")
    p.add_argument("--precision", choices=("auto", "fp32", "bf16"), default="auto",
                   help="bf16 autocast (auto: where the CPU/GPU has fast bf16)")


def add_train_eval(sub, name: str, help: str, train_help: str, eval_help: str, default_out: str,
                   run_train, run_eval) -> argparse.ArgumentParser:
    """`rag NAME train|eval` (rerank, embed): the train parser with `add_train_args`, and the eval
    parser with the config and BEIR split options both evals take; returned for its own flags."""
    p = sub.add_parser(name, help=help)
    actions = p.add_subparsers(dest=f"{name}_command", metavar="ACTION", required=True)
    t = actions.add_parser("train", help=train_help)
    add_config_args(t)
    add_train_args(t, default_out)
    t.set_defaults(func=run_train)
    e = actions.add_parser("eval", help=eval_help)
    add_config_args(e)
    e.add_argument("--dataset", required=True, metavar="DIR")
    e.add_argument("--split", default="test")
    e.set_defaults(func=run_eval)
    return e


def train_config(args: argparse.Namespace, lr: float):
    from rerank.training.train import TrainConfig

    extra = {"base": args.base} if args.base else {}
    if args.head_lr_multiplier:
        extra["head_lr_multiplier"] = args.head_lr_multiplier
    if getattr(args, "freeze_embeddings", False):
        extra["freeze_embeddings"] = True
    return TrainConfig(datasets=args.dataset, out=args.out, split=args.split, max_steps=args.max_steps,
                       epochs=args.epochs, batch_size=args.batch_size, lr=args.lr or lr,
                       max_length=args.max_length, negatives=args.negatives, mine=args.mine,
                       max_queries=args.max_queries, holdout=args.holdout, seed=args.seed, resume=args.resume,
                       precision=args.precision, **extra)


def mining_embedder(args: argparse.Namespace):
    """The configured retrieval embedder with the storage's embedding cache (re-runs are cheap)."""
    if args.mine == "bm25":
        return None
    from retrieval.embeddings import make_embedder

    cfg = config_from(args)
    return make_embedder(cfg.retrieval.embedder, cfg.storage_path / "embeddings.sqlite")


def corpus_chooser(args: argparse.Namespace):
    """Per corpus, the embedder and fusion weights its language gets in `rag index` (`embedder.model:
    auto`: e5 and BM25-leaning weights for Chinese, MiniLM 1/1 for English); an explicit model is
    used for every corpus, as before. Cached in the storage's embedding cache."""
    from rerank.training.mining import language_aware

    cfg = config_from(args)
    return language_aware(cfg.retrieval, cfg.storage_path / "embeddings.sqlite")


def _weights(text: str) -> list[float]:
    try:
        ws = [float(w) for w in text.split(",") if w.strip()]
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"--fuse takes weights like 0.5 or 0.3,0.5,0.7: {e}") from None
    if any(not 0 <= w <= 1 for w in ws):
        raise argparse.ArgumentTypeError("--fuse weights lie in [0, 1]")
    return [w for w in ws if w > 0]


def register(sub) -> None:
    e = add_train_eval(sub, "rerank", "train or evaluate rerankers",
                       "train a cross-encoder with hard negatives mined by our retriever",
                       "nDCG@10 of hybrid retrieval before/after reranking on a BEIR split", ".rag/models/reranker",
                       run_train, run_eval)
    e.add_argument("--type", default="cross-encoder", choices=("cross-encoder", "bi-encoder", "llm"))
    e.add_argument("--model", default=".rag/models/reranker")
    e.add_argument("--depth", type=int, default=50)
    e.add_argument("--max-length", type=int, default=256)
    e.add_argument("--max-queries", type=int)
    e.add_argument("--holdout", type=float, default=0.0, metavar="F",
                   help="score only the queries a model trained with the same --holdout never saw")
    e.add_argument("--bf16", action="store_true", help="bf16 weights (fast on AVX512-BF16/AMX CPUs and GPUs)")
    e.add_argument("--cache", help="JSONL of reranker scores per query (resumes an interrupted run)")
    e.add_argument("--fuse", type=_weights, default=[0.5], metavar="W[,W...]",
                   help="also report a reciprocal-rank blend of reranker and retriever order with this "
                        "weight (several: a sweep, and the best one is named)")


def run_train(args: argparse.Namespace) -> int:
    from rerank.training.train import train_cross_encoder

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    chooser = corpus_chooser(args) if args.mine != "bm25" else None
    info = train_cross_encoder(train_config(args, lr=5e-5), embedder=None if chooser else mining_embedder(args),
                               chooser=chooser)
    print_json(info)
    return 0


def run_eval(args: argparse.Namespace) -> int:
    from rerank import build_reranker
    from rerank.training.beir import load_beir
    from rerank.training.evaluate import fuse_ranks, report, rerank_run, retrieval_runs
    from retrieval.embeddings import make_embedder

    cfg = config_from(args)
    emb = make_embedder(cfg.retrieval.embedder, cfg.storage_path / "embeddings.sqlite")
    data = load_beir(args.dataset, args.split, max_queries=args.max_queries, holdout=args.holdout,
                     part="holdout" if args.holdout else "rest")
    # the hybrid this corpus's language gets by default (BM25 reported beside it: the floor)
    runs = retrieval_runs(data, emb, modes=("bm25", "hybrid"), chooser=corpus_chooser(args))
    reranker = build_reranker({"type": args.type, "model": args.model, "depth": args.depth,
                               "max_length": args.max_length, "bf16": args.bf16}, embedder=emb)
    runs["hybrid+rerank"], secs = rerank_run(data, runs["hybrid"], reranker, args.depth, args.cache)
    for w in args.fuse:
        runs[f"hybrid+rerank(rrf w={w})"] = fuse_ranks(runs["hybrid"], runs["hybrid+rerank"], w)
    scores = report(data, runs)
    fused = {w: scores[f"hybrid+rerank(rrf w={w})"] for w in args.fuse}
    best = max(fused, key=lambda w: (fused[w], -w)) if fused else None
    print(json.dumps({"dataset": Path(args.dataset).name, "split": args.split, "holdout": args.holdout,
                      "queries": len(data.queries), "best_fuse_weight": best,
                      "depth": args.depth, "ndcg@10": scores, "rerank_s": round(secs, 1),
                      "pairs_per_s": round(len(data.queries) * args.depth / secs, 1) if secs else None}, indent=2))
    return 0
