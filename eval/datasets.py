"""Loaders for the evaluation layouts: BEIR folders, QA files and RGB JSON lines.

Why plain dataclasses and dicts: the metrics and runners only need ids and text, and keeping the
loaders free of pipeline types lets users point them at their own data in the same layout.
Sampling is deterministic (seeded) so that `--limit N --sample` picks the same queries every run,
which the per-query caches and ablation comparisons rely on.
"""

from __future__ import annotations

import csv
import hashlib
import json
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def read_jsonl(path: str | Path) -> Iterator[dict[str, Any]]:
    with Path(path).open(encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}:{n}: not a JSON line: {e}") from e


def sample_ids(ids: Sequence[str], limit: int | None = None, sample: bool = False, seed: int = 0) -> list[str]:
    """The first `limit` ids, or a seeded random `limit` of them (kept in input order)."""
    ids = list(ids)
    if limit is None or limit >= len(ids):
        return ids
    if limit < 0:
        raise ValueError("limit must be >= 0")
    if not sample:
        return ids[:limit]
    keep = set(random.Random(seed).sample(range(len(ids)), limit))
    return [x for i, x in enumerate(ids) if i in keep]


def config_hash(obj: Any) -> str:
    """Stable short hash of a JSON-able object (sorted keys), for cache keys."""
    blob = json.dumps(obj, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def dataset_fingerprint(path: str | Path, split: str | None = None) -> str:
    """Content hash of a dataset's files (corpus, queries, and the split's qrels / QA file).

    Content rather than mtimes, so a copied dataset keeps its cache and an edited one does not.
    """
    root = Path(path)
    if root.is_file():
        files = [root]
    else:
        files = [root / "corpus.jsonl", root / "queries.jsonl"]
        if split:
            files += [root / "qrels" / f"{split}.tsv", root / "qa" / f"{split}.jsonl"]
    h = hashlib.sha256()
    for f in files:
        if f.exists():
            h.update(f.name.encode())
            with f.open("rb") as fh:
                for block in iter(lambda fh=fh: fh.read(1 << 20), b""):
                    h.update(block)
    return h.hexdigest()[:16]


@dataclass
class CorpusDoc:
    doc_id: str
    text: str
    title: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)


def load_corpus(path: str | Path) -> dict[str, CorpusDoc]:
    out: dict[str, CorpusDoc] = {}
    for row in read_jsonl(path):
        did = str(row["_id"])
        out[did] = CorpusDoc(did, row.get("text", ""), row.get("title", "") or "", row.get("metadata") or {})
    return out


def load_queries(path: str | Path) -> dict[str, str]:
    return {str(r["_id"]): r["text"] for r in read_jsonl(path)}


def load_qrels(path: str | Path) -> dict[str, dict[str, int]]:
    """Read `qrels/<split>.tsv` (tab separated, header `query-id corpus-id score`)."""
    qrels: dict[str, dict[str, int]] = {}
    with Path(path).open(encoding="utf-8", newline="") as f:
        for n, row in enumerate(csv.reader(f, delimiter="\t")):
            if not row or (n == 0 and row[0] == "query-id"):
                continue
            if len(row) < 3:
                raise ValueError(f"{path}:{n + 1}: expected 'query-id<TAB>corpus-id<TAB>score'")
            qrels.setdefault(row[0], {})[row[1]] = int(float(row[2]))
    return qrels


@dataclass
class BeirDataset:
    """A BEIR folder restricted to one split: the queries that have judgements in that split."""

    name: str
    split: str
    corpus: dict[str, CorpusDoc]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    fingerprint: str = ""


def load_beir(
    path: str | Path,
    split: str = "test",
    limit: int | None = None,
    sample: bool = False,
    seed: int = 0,
    with_corpus: bool = True,
) -> BeirDataset:
    """Load a BEIR folder. `limit`/`sample` cut the queries only; the corpus stays whole so the
    retrieval task is not made easier by a smaller haystack."""
    root = Path(path)
    qrels_path = root / "qrels" / f"{split}.tsv"
    if not qrels_path.exists():
        have = sorted(p.stem for p in (root / "qrels").glob("*.tsv"))
        raise FileNotFoundError(f"{qrels_path} not found; splits here: {have}")
    qrels = load_qrels(qrels_path)
    all_queries = load_queries(root / "queries.jsonl")
    qids = [q for q in all_queries if q in qrels]
    qids = sample_ids(qids, limit, sample, seed)
    corpus = load_corpus(root / "corpus.jsonl") if with_corpus else {}
    return BeirDataset(
        name=root.name,
        split=split,
        corpus=corpus,
        queries={q: all_queries[q] for q in qids},
        qrels={q: qrels[q] for q in qids},
        fingerprint=dataset_fingerprint(root, split),
    )


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

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "question": self.question, "answers": self.answers,
                "is_impossible": self.is_impossible, "gold_doc_id": self.gold_doc_id, "title": self.title}


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
