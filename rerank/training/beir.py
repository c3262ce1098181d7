"""BEIR-format training/evaluation data: corpus, queries and relevance judgements.

QA sets (SQuAD, CMRC, DRCD) ship `qa/<split>.jsonl` with a `gold_doc_id` per question and may
lack `qrels/<split>.tsv`; both are read into the same `BeirData`, so training and evaluation code
never care which format a folder used.
"""

from __future__ import annotations

import csv
import json
import zlib
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class BeirData:
    name: str
    corpus: dict[str, str]  # doc id -> "title\ntext"
    queries: dict[str, str]  # query id -> text (only queries judged in the split)
    qrels: dict[str, dict[str, int]] = field(default_factory=dict)  # query id -> {doc id: grade}

    def positives(self, qid: str) -> list[str]:
        return [d for d, g in self.qrels.get(qid, {}).items() if g > 0 and d in self.corpus]


def doc_text(title: str, text: str) -> str:
    return f"{title}\n{text}" if title else text


def _read_jsonl(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def in_holdout(qid: str, fraction: float, seed: int = 0) -> bool:
    """Deterministic, order-free membership: the same query is held out on every run and machine."""
    return zlib.crc32(f"{seed}:{qid}".encode()) % 10_000 < round(fraction * 10_000)


def load_beir(folder: str | Path, split: str = "train", max_queries: int | None = None,
              holdout: float = 0.0, part: str = "rest") -> BeirData:
    """Read one BEIR folder (training callers refuse SciFact `test` via `guard_split`).

    `holdout` sets aside that fraction of the split's queries: `part="rest"` keeps the others (to
    train on), `part="holdout"` keeps only them (to tune e.g. a blend weight on queries the model
    never saw). `max_queries` applies after the holdout.
    """
    if part not in ("rest", "holdout"):
        raise ValueError(f"part must be 'rest' or 'holdout', not {part!r}")
    root = Path(folder)
    if not (root / "corpus.jsonl").is_file():
        raise FileNotFoundError(f"{root}: no corpus.jsonl (expected a BEIR-format folder)")
    corpus = {str(d["_id"]): doc_text(d.get("title", ""), d.get("text", "")) for d in _read_jsonl(root / "corpus.jsonl")}
    qrels: dict[str, dict[str, int]] = {}
    queries: dict[str, str] = {}
    qrel_path, qa_path = root / "qrels" / f"{split}.tsv", root / "qa" / f"{split}.jsonl"
    if qrel_path.is_file():
        with qrel_path.open(encoding="utf-8") as f:
            for row in csv.DictReader(f, delimiter="\t"):
                qrels.setdefault(str(row["query-id"]), {})[str(row["corpus-id"])] = int(row["score"])
        all_q = {str(q["_id"]): q["text"] for q in _read_jsonl(root / "queries.jsonl")}
        queries = {q: all_q[q] for q in qrels if q in all_q}
    elif qa_path.is_file():
        for r in _read_jsonl(qa_path):
            if r.get("is_impossible") or not r.get("gold_doc_id"):
                continue
            qid = str(r["id"])
            queries[qid] = r["question"]
            qrels[qid] = {str(r["gold_doc_id"]): 1}
    else:
        raise FileNotFoundError(f"{root}: neither qrels/{split}.tsv nor qa/{split}.jsonl")
    if holdout > 0:
        want = part == "holdout"
        queries = {q: t for q, t in queries.items() if in_holdout(q, holdout) == want}
        qrels = {q: r for q, r in qrels.items() if q in queries}
    if max_queries is not None:
        keep = sorted(queries)[:max_queries]
        queries = {q: queries[q] for q in keep}
        qrels = {q: qrels[q] for q in keep}
    return BeirData(root.name, corpus, queries, qrels)


def dataset_spec(entry: str | Path, default_split: str) -> tuple[str, str]:
    """`DIR` or `DIR:SPLIT` (e.g. `squad_v2_half:dev` next to SciFact's `train`)."""
    head, sep, tail = str(entry).rpartition(":")
    if sep and head and tail and "/" not in tail:
        return head, tail
    return str(entry), default_split


def guard_split(folder: str | Path, split: str) -> None:
    """Training on the benchmark's test split would make every reported number meaningless."""
    if split == "test":
        raise ValueError(f"refusing to train on the test split of {folder}: it is the evaluation set")
