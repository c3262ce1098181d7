"""The one BEIR-format reader: corpus, queries and relevance judgements of one split.

Why here: evaluation (`eval/`) and reranker training (`rerank/training/`) both read BEIR folders,
and `retrieval/` is the lowest package both may import (indexing knows nothing of queries).
QA sets (SQuAD, CMRC, DRCD) ship `qa/<split>.jsonl` with a `gold_doc_id` per question and may
lack `qrels/<split>.tsv`; both are read into the same `BeirDataset`, so callers never care which
format a folder used. Sampling and holdouts are deterministic (seeded / hashed) so that the same
queries are picked on every run and machine, which per-query caches and comparisons rely on.
"""

from __future__ import annotations

import csv
import hashlib
import json
import random
import zlib
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


def in_holdout(qid: str, fraction: float, seed: int = 0) -> bool:
    """Deterministic, order-free membership: the same query is held out on every run and machine."""
    return zlib.crc32(f"{seed}:{qid}".encode()) % 10_000 < round(fraction * 10_000)


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

    @property
    def full_text(self) -> str:
        """What a reranker or embedder reads: the title helps (SciFact titles carry key terms)."""
        return f"{self.title}\n{self.text}" if self.title else self.text


def load_corpus(path: str | Path) -> dict[str, CorpusDoc]:
    out: dict[str, CorpusDoc] = {}
    for row in read_jsonl(path):
        did = str(row["_id"])
        out[did] = CorpusDoc(did, row.get("text", ""), row.get("title", "") or "", row.get("metadata") or {})
    return out


def load_queries(path: str | Path) -> dict[str, str]:
    return {str(r["_id"]): r["text"] for r in read_jsonl(path)}


def load_qrels(path: str | Path) -> dict[str, dict[str, int]]:
    """Read `qrels/<split>.tsv` (tab separated, header `query-id corpus-id score` optional)."""
    qrels: dict[str, dict[str, int]] = {}
    with Path(path).open(encoding="utf-8", newline="") as f:
        for n, row in enumerate(csv.reader(f, delimiter="\t")):
            if not row or (n == 0 and row[0] == "query-id"):
                continue
            if len(row) < 3:
                raise ValueError(f"{path}:{n + 1}: expected 'query-id<TAB>corpus-id<TAB>score'")
            qrels.setdefault(row[0], {})[row[1]] = int(float(row[2]))
    return qrels


def _qa_judgements(path: Path) -> tuple[dict[str, str], dict[str, dict[str, int]]]:
    """A QA file as queries + qrels: each answerable question judges its gold document relevant."""
    queries: dict[str, str] = {}
    qrels: dict[str, dict[str, int]] = {}
    for r in read_jsonl(path):
        if r.get("is_impossible") or not r.get("gold_doc_id"):
            continue
        qid = str(r["id"])
        queries[qid] = r["question"]
        gold = r.get("gold_doc_ids") or [r["gold_doc_id"]]  # multi-hop sets judge every supporting doc
        qrels[qid] = {str(d): 1 for d in gold}
    return queries, qrels


def _qa_types(path: Path) -> dict[str, str]:
    """Question types of a QA file (HotpotQA: bridge / comparison), for per-type metrics."""
    if not path.is_file():
        return {}
    return {str(r["id"]): str(r["type"]) for r in read_jsonl(path) if r.get("type")}


@dataclass
class BeirDataset:
    """A BEIR folder restricted to one split: the queries that have judgements in that split."""

    name: str
    split: str
    corpus: dict[str, CorpusDoc]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    fingerprint: str = ""
    types: dict[str, str] = field(default_factory=dict)  # qid -> question type, when the QA file has one

    def positives(self, qid: str) -> list[str]:
        return [d for d, g in self.qrels.get(qid, {}).items() if g > 0 and d in self.corpus]

    def texts(self) -> dict[str, str]:
        """doc id -> "title\\ntext", in corpus order (what training and reranking read)."""
        return {d: doc.full_text for d, doc in self.corpus.items()}


def load_beir(
    path: str | Path,
    split: str = "test",
    limit: int | None = None,
    sample: bool = False,
    seed: int = 0,
    with_corpus: bool = True,
    holdout: float = 0.0,
    part: str = "rest",
    max_queries: int | None = None,
) -> BeirDataset:
    """Load one split of a BEIR folder (qrels, or a QA file's gold documents).

    `limit`/`sample` cut the queries only (first N in file order, or a seeded sample); the corpus
    stays whole so the retrieval task is not made easier by a smaller haystack. `holdout` sets
    aside that fraction of the queries: `part="rest"` keeps the others (to train on),
    `part="holdout"` only them (to tune on queries a model never saw). `max_queries` keeps the
    first N query ids in sorted order after the holdout (what training runs record).
    """
    if part not in ("rest", "holdout"):
        raise ValueError(f"part must be 'rest' or 'holdout', not {part!r}")
    root = Path(path)
    qrels_path, qa_path = root / "qrels" / f"{split}.tsv", root / "qa" / f"{split}.jsonl"
    if qrels_path.is_file():
        qrels = load_qrels(qrels_path)
        all_queries = load_queries(root / "queries.jsonl")
        queries = {q: t for q, t in all_queries.items() if q in qrels}
    elif qa_path.is_file():
        queries, qrels = _qa_judgements(qa_path)
    else:
        have = sorted({p.stem for p in (root / "qrels").glob("*.tsv")} | {p.stem for p in (root / "qa").glob("*.jsonl")})
        raise FileNotFoundError(f"{root}: neither qrels/{split}.tsv nor qa/{split}.jsonl; splits here: {have}")
    if with_corpus and not (root / "corpus.jsonl").is_file():
        raise FileNotFoundError(f"{root}: no corpus.jsonl (expected a BEIR-format folder)")
    qids = list(queries)
    if holdout > 0:
        want = part == "holdout"
        qids = [q for q in qids if in_holdout(q, holdout) == want]
    if max_queries is not None:
        qids = sorted(qids)[:max_queries]
    qids = sample_ids(qids, limit, sample, seed)
    return BeirDataset(
        name=root.name,
        split=split,
        corpus=load_corpus(root / "corpus.jsonl") if with_corpus else {},
        queries={q: queries[q] for q in qids},
        qrels={q: qrels[q] for q in qids},
        fingerprint=dataset_fingerprint(root, split),
        types={q: t for q, t in _qa_types(qa_path).items() if q in set(qids)},
    )
