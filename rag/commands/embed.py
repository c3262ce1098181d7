"""`rag embed train|eval`: fine-tune the embedder on BEIR data (MNRL + mined negatives), measure it."""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from ._common import config_from, print_json
from .rerank import add_train_eval, mining_embedder, train_config


def register(sub) -> None:
    e = add_train_eval(sub, "embed", "fine-tune or evaluate the embedding model",
                       "fine-tune with MultipleNegativesRankingLoss and mined hard negatives",
                       "nDCG@10 of bm25 / dense / hybrid on a BEIR split with a given embedder",
                       ".rag/models/embedder", run_train, run_eval)
    e.add_argument("--model", help="embedder dir or alias (default: the configured embedder)")


def run_train(args: argparse.Namespace) -> int:
    from rerank.training.train import train_embedder

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    info = train_embedder(train_config(args, lr=2e-5), embedder=mining_embedder(args))
    print_json(info)
    return 0


def run_eval(args: argparse.Namespace) -> int:
    from rerank.training.beir import load_beir
    from rerank.training.evaluate import report, retrieval_runs
    from retrieval.embeddings import make_embedder

    cfg = config_from(args)
    ecfg = cfg.retrieval.embedder.model_copy(update={"model": args.model} if args.model else {})
    emb = make_embedder(ecfg, cfg.storage_path / "embeddings.sqlite")
    data = load_beir(args.dataset, args.split)
    scores = report(data, retrieval_runs(data, emb))
    print(json.dumps({"dataset": Path(args.dataset).name, "split": args.split, "model": ecfg.model,
                      "ndcg@10": scores}, indent=2))
    return 0
