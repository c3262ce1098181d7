"""A generated own-corpus set: its groups (passages and questions) and the BEIR + QA folder they
are written to and read back from (`corpus.jsonl` with `metadata.group`, `qa/train.jsonl` with
`group`, `manifest.json`); eval/synth_own.py builds the groups."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from eval.datasets import read_jsonl

Kind = Literal["answerable", "neighbour", "entity", "number", "own"]
NEGATIVE_KINDS: tuple[str, ...] = ("neighbour", "entity", "number", "own")


@dataclass
class Passage:
    doc_id: str
    title: str
    text: str


@dataclass
class SynthQuestion:
    id: str
    question: str
    answers: list[str]
    is_impossible: bool
    group: str
    kind: str
    gold_doc_id: str = ""
    gold_doc_ids: list[str] = field(default_factory=list)
    source_id: str = ""  # the dataset question it was made from

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "question": self.question, "answers": self.answers,
                "is_impossible": self.is_impossible, "gold_doc_id": self.gold_doc_id,
                "gold_doc_ids": self.gold_doc_ids, "title": "", "group": self.group, "kind": self.kind,
                "source_id": self.source_id}


@dataclass
class Group:
    id: str
    passages: list[Passage]
    questions: list[SynthQuestion] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "\n".join(f"{p.title}\n{p.text}" for p in self.passages)


def write_set(groups: Sequence[Group], out: str | Path, manifest: dict[str, Any] | None = None) -> Path:
    """A BEIR + QA folder (`corpus.jsonl`, `qa/train.jsonl`, `manifest.json`) that `rag eval qa`
    and `rag eval calibrate` read; passages carry `metadata.group`, questions `group`."""
    out = Path(out)
    (out / "qa").mkdir(parents=True, exist_ok=True)
    seen: set[str] = set()
    with open(out / "corpus.jsonl", "w", encoding="utf-8") as fh:
        for g in groups:
            for p in g.passages:
                if p.doc_id in seen:
                    raise ValueError(f"passage {p.doc_id} is in two groups")
                seen.add(p.doc_id)
                fh.write(json.dumps({"_id": p.doc_id, "title": p.title, "text": p.text,
                                     "metadata": {"group": g.id}}, ensure_ascii=False) + "\n")
    counts: dict[str, int] = defaultdict(int)
    with open(out / "qa" / "train.jsonl", "w", encoding="utf-8") as fh:
        for g in groups:
            for q in g.questions:
                counts[q.kind] += 1
                fh.write(json.dumps(q.to_dict(), ensure_ascii=False) + "\n")
    sizes = [len(g.passages) for g in groups]
    info = {**(manifest or {}), "groups": len(groups), "questions": dict(sorted(counts.items())),
            "passages_per_group": [min(sizes, default=0), max(sizes, default=0)]}
    (out / "manifest.json").write_text(json.dumps(info, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return out


def load_group_ids(path: str | Path, split: str = "train") -> dict[str, str]:
    """question id -> group of a generated set (empty for a dataset without groups)."""
    p = Path(path) / "qa" / f"{split}.jsonl"
    if not p.is_file():
        return {}
    return {str(r["id"]): str(r["group"]) for r in read_jsonl(p) if r.get("group")}
