"""Loaders for the evaluation layouts: BEIR folders, QA files and RGB JSON lines.

Why plain dataclasses and dicts: the metrics and runners only need ids and text, and keeping the
loaders free of pipeline types lets users point them at their own data in the same layout.
Sampling is deterministic (seeded) so that `--limit N --sample` picks the same queries every run,
which the per-query caches and ablation comparisons rely on.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# BEIR folders are read by the one loader in retrieval/ (reranker training reads them too).
from retrieval.beir import (  # noqa: F401 (re-exported for eval callers)
    BeirDataset,
    CorpusDoc,
    dataset_fingerprint,
    load_beir,
    load_corpus,
    load_qrels,
    load_queries,
    read_jsonl,
    sample_ids,
)


def config_hash(obj: Any) -> str:
    """Stable short hash of a JSON-able object (sorted keys), for cache keys."""
    blob = json.dumps(obj, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def corpus_documents(corpus: dict[str, CorpusDoc], source: str = "eval") -> Iterator[Any]:
    """The corpus as `indexing.types.Document`s, ready for the ingest pipeline."""
    from indexing.types import Document  # lazy: loaders stay usable without the indexing package

    for d in corpus.values():
        yield Document(doc_id=d.doc_id, text=d.text, source=f"{source}:{d.doc_id}", title=d.title,
                       metadata=dict(d.metadata))


@dataclass
class QAItem:
    id: str
    question: str
    answers: list[str]
    is_impossible: bool = False
    gold_doc_id: str = ""
    title: str = ""
    # a generated own-corpus set (eval/synth_own.py): the small corpus the question is asked over
    # (`metadata.group` of its passages; retrieval is filtered to it) and every supporting document
    group: str = ""
    gold_doc_ids: list[str] = field(default_factory=list)

    @property
    def gold_docs(self) -> list[str]:
        """Every supporting document: `gold_doc_id` and, for a multi-hop question (hotpotqa_pooled),
        the others in `gold_doc_ids`. Why one list: a comparison cites both options' passages, and
        each is a right citation."""
        return list(dict.fromkeys([*([self.gold_doc_id] if self.gold_doc_id else []), *self.gold_doc_ids]))

    @property
    def filters(self) -> dict[str, str] | None:
        """The retrieval filter that keeps the question inside its group (None: the whole corpus)."""
        return {"group": self.group} if self.group else None

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "question": self.question, "answers": self.answers,
                "is_impossible": self.is_impossible, "gold_doc_id": self.gold_doc_id, "title": self.title,
                **({"group": self.group} if self.group else {}),
                **({"gold_doc_ids": self.gold_doc_ids} if self.gold_doc_ids else {})}


def load_qa(
    path: str | Path,
    split: str = "dev",
    limit: int | None = None,
    sample: bool = False,
    seed: int = 0,
    answerable_only: bool = False,
) -> list[QAItem]:
    """Load `qa/<split>.jsonl` from a dataset folder (or a QA .jsonl file given directly)."""
    p = Path(path)
    if p.is_dir():
        p = p / "qa" / f"{split}.jsonl"
    items = [
        QAItem(
            id=str(r["id"]),
            question=r["question"],
            answers=[a for a in r.get("answers") or [] if a],
            is_impossible=bool(r.get("is_impossible", False)),
            gold_doc_id=str(r.get("gold_doc_id") or ""),
            title=r.get("title", "") or "",
            group=str(r.get("group") or ""),
            gold_doc_ids=[str(d) for d in r.get("gold_doc_ids") or []],
        )
        for r in read_jsonl(p)
    ]
    if answerable_only:
        items = [i for i in items if not i.is_impossible]
    keep = set(sample_ids([i.id for i in items], limit, sample, seed))
    return [i for i in items if i.id in keep]


@dataclass
class RGBItem:
    """One RGB question. `answer` holds the required parts; a part given as a list is a set of
    aliases. `positive` is grouped: one group per answer part for the integration set, a single
    group otherwise."""

    id: str
    query: str
    answer: list[str | list[str]]
    positive: list[list[str]]
    negative: list[str]
    fake_answer: str = ""
    positive_wrong: list[str] = field(default_factory=list)


def load_rgb(path: str | Path, limit: int | None = None, sample: bool = False, seed: int = 0) -> list[RGBItem]:
    """Load an RGB JSON-lines file (`zh_refine.json`, `zh_int.json`, `en_fact.json`, ...)."""
    items = []
    for r in read_jsonl(path):
        ans = r["answer"]
        pos = r.get("positive") or []
        grouped = [list(g) for g in pos] if pos and isinstance(pos[0], list) else [list(pos)]
        items.append(RGBItem(
            id=str(r.get("id", len(items))),
            query=r["query"],
            answer=[ans] if isinstance(ans, str) else list(ans),
            positive=grouped,
            negative=list(r.get("negative") or []),
            fake_answer=r.get("fakeanswer", "") or "",
            positive_wrong=list(r.get("positive_wrong") or []),
        ))
    keep = set(sample_ids([i.id for i in items], limit, sample, seed))
    return [i for i in items if i.id in keep]


def rgb_passages(item: RGBItem, noise_rate: float, n_passages: int = 5, seed: int = 0) -> list[str]:
    """The passages shown to the model for one RGB question at a given noise rate.

    round(n * noise_rate) passages are negatives, the rest positives taken round-robin across
    the answer parts' groups (so integration questions see evidence for every part); the list is
    shuffled with a per-question seed so positives are not always first.
    """
    if not 0.0 <= noise_rate <= 1.0:
        raise ValueError("noise_rate must be in [0, 1]")
    rng = random.Random(f"{seed}:{item.id}")
    n_neg = min(round(n_passages * noise_rate), len(item.negative))
    n_pos = n_passages - n_neg
    groups = [rng.sample(g, len(g)) for g in item.positive if g]
    pos: list[str] = []
    while len(pos) < n_pos and any(groups):
        for g in groups:
            if g and len(pos) < n_pos:
                pos.append(g.pop())
    out = pos + rng.sample(item.negative, n_neg)
    rng.shuffle(out)
    return out
