"""TREC run files (`qid Q0 docid rank score tag`), so runs can be checked with trec_eval.

Rankings are written in the order given (rank 1 first). trec_eval re-sorts by score, so the
writer makes the written scores strictly non-increasing along the given order: a ranking whose
scores disagree with its order (e.g. a fused list carrying first-stage scores) is written with
rank-derived scores instead and both tools then see the same order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

Ranking = Sequence[tuple[str, float]]


def _consistent(ranking: Ranking) -> bool:
    scores = [s for _, s in ranking]
    return all(a > b for a, b in zip(scores, scores[1:], strict=False))


def write_trec_run(
    rankings: Mapping[str, Ranking] | Mapping[str, Mapping[str, float]],
    path: str | Path,
    tag: str = "ragstack",
) -> Path:
    """Write {qid: [(docid, score), ...]} (ordered) or {qid: {docid: score}} as a TREC run."""
    if any(c.isspace() for c in tag) or not tag:
        raise ValueError(f"run tag must be a non-empty word, got {tag!r}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for qid in rankings:
            items = rankings[qid]
            if isinstance(items, Mapping):
                ranking = sorted(items.items(), key=lambda x: (x[1], x[0]), reverse=True)
            else:
                ranking = [(d, float(s)) for d, s in items]
            if not _consistent(ranking):
                n = len(ranking)
                ranking = [(d, float(n - i)) for i, (d, _) in enumerate(ranking)]
            for rank, (doc_id, score) in enumerate(ranking, start=1):
                if any(c.isspace() for c in qid + doc_id):
                    raise ValueError(f"ids in a TREC run cannot contain whitespace: {qid!r} {doc_id!r}")
                f.write(f"{qid} Q0 {doc_id} {rank} {score:.6f} {tag}\n")
    return path


def read_trec_run(path: str | Path) -> dict[str, dict[str, float]]:
    """Read a TREC run into {qid: {docid: score}} (the form ranx / pytrec_eval take)."""
    run: dict[str, dict[str, float]] = {}
    with Path(path).open(encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 6:
                raise ValueError(f"{path}:{n}: expected 6 columns 'qid Q0 docid rank score tag'")
            qid, _, doc_id, _, score, _ = parts
            run.setdefault(qid, {})[doc_id] = float(score)
    return run


def read_trec_qrels(path: str | Path) -> dict[str, dict[str, int]]:
    """Read TREC qrels (`qid 0 docid rel`) into {qid: {docid: rel}}."""
    qrels: dict[str, dict[str, int]] = {}
    with Path(path).open(encoding="utf-8") as f:
        for line in f:
            parts = line.split()
            if len(parts) == 4:
                qrels.setdefault(parts[0], {})[parts[2]] = int(parts[3])
    return qrels


def write_trec_qrels(qrels: Mapping[str, Mapping[str, int]], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for qid, rels in qrels.items():
            for doc_id, rel in rels.items():
                f.write(f"{qid} 0 {doc_id} {rel}\n")
    return path
