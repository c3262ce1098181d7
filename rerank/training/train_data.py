"""Training examples from BEIR folders: positives from qrels, hard negatives from our retriever.

Shared by the cross-encoder trainer (labelled pairs) and the embedder trainer (triplets), so both
models see the same queries and the same mined negatives.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .beir import dataset_spec, guard_split, load_beir
from .mining import Chooser, corpus_retriever, mine_negatives

log = logging.getLogger(__name__)


@dataclass
class Example:
    query: str
    positive: str
    negatives: list[str]


def mine_examples(folders: Sequence[str | Path], default_split: str = "train", negatives: int = 3,
                  mode: str = "hybrid", embedder=None, seed: int = 42, pool: int = 30,
                  max_queries: int | None = None, holdout: float = 0.0,
                  chooser: Chooser | None = None) -> list[Example]:
    """One example per (query, positive) with `negatives` sampled from the retriever's top `pool`.
    A folder may name its own split as `DIR:SPLIT`; `holdout` leaves that fraction of each split's
    queries out (see `load_beir`). `chooser` picks embedder and weights per corpus (language)."""
    out: list[Example] = []
    for entry in folders:
        folder, split = dataset_spec(entry, default_split)
        guard_split(folder, split)
        data = load_beir(folder, split, max_queries=max_queries, holdout=holdout)
        corpus = data.texts()
        ids, texts = list(corpus), list(corpus.values())
        retriever = corpus_retriever(ids, texts, embedder, chooser if mode != "bm25" else None)
        use = mode if retriever.embedder is not None else "bm25"
        run = retriever.search_many(data.queries, k=pool + 10, mode=use)
        negs = mine_negatives(run, data.qrels, negatives, seed=seed, pool=pool)
        _top_up(negs, data.qrels, ids, negatives, seed)
        before = len(out)
        for qid in sorted(data.queries):
            for pos in data.positives(qid):
                if negs.get(qid):
                    out.append(Example(data.queries[qid], corpus[pos], [corpus[d] for d in negs[qid]]))
        log.info("%s/%s: %d examples (%s negatives)", data.name, split, len(out) - before, use)
    random.Random(seed).shuffle(out)
    return out


def _top_up(negs: dict[str, list[str]], qrels: dict[str, dict[str, int]], ids: list[str], n: int,
            seed: int) -> None:
    """Small corpora: a query sharing no term with other documents still gets random negatives."""
    rng = random.Random(seed)
    for qid, lst in negs.items():
        if len(lst) >= n:
            continue
        taken = set(lst) | set(qrels.get(qid, {}))
        rest = [d for d in ids if d not in taken]
        lst.extend(rng.sample(rest, min(n - len(lst), len(rest))))


def as_pairs(examples: Sequence[Example]) -> dict[str, list]:
    """Cross-encoder columns: every positive and every negative as a labelled pair."""
    cols: dict[str, list] = {"query": [], "passage": [], "label": []}
    for ex in examples:
        for text, label in [(ex.positive, 1.0)] + [(n, 0.0) for n in ex.negatives]:
            cols["query"].append(ex.query)
            cols["passage"].append(text)
            cols["label"].append(label)
    return cols


def as_triplets(examples: Sequence[Example]) -> dict[str, list]:
    """Embedder columns (anchor, positive, negative): MNRL adds the in-batch negatives itself."""
    cols: dict[str, list] = {"anchor": [], "positive": [], "negative": []}
    for ex in examples:
        cols["anchor"].append(ex.query)
        cols["positive"].append(ex.positive)
        cols["negative"].append(ex.negatives[0])
    return cols
