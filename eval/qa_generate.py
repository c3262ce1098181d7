"""Build a QA set from a user's own corpus with an LLM, for users who have no labels.

Why through a `generate(prompts) -> texts` callable: the in-process engine, an HTTP endpoint
and a test double all fit it, and batching prompts lets the engine use its batch scheduler.
Generated pairs are kept only when the answer is copied from the passage (grounded), so the set
measures retrieval of *that* passage and extractive answer quality, not the generator's fantasy.
The result is written in the standard layout (corpus, queries, qrels, qa) so `evaluate_retrieval`
and `evaluate_qa` run on it unchanged.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from eval.answers import is_cjk, normalize_answer, normalize_zh
from eval.datasets import CorpusDoc, QAItem

GenerateFn = Callable[[list[str]], list[str]]

PROMPT_EN = (
    "Read the passage and write one question that it answers, then the answer: a short phrase "
    "copied word for word from the passage.\n\nPassage:\n{passage}\n\n"
    "Reply in exactly this format:\nQuestion: <question>\nAnswer: <answer>\n"
)
PROMPT_ZH = (
    "阅读下面的段落，提出一个可以用段落内容回答的问题，并给出答案：从段落中原样摘录的简短片段。\n\n"
    "段落：\n{passage}\n\n请严格按以下格式回答：\n问题：<问题>\n答案：<答案>\n"
)
_Q = re.compile(r"^\s*(?:question|q|问题|問題)\s*[:：]\s*(.+)$", re.I | re.M)
_A = re.compile(r"^\s*(?:answer|a|答案)\s*[:：]\s*(.+)$", re.I | re.M)


class QAGenConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    n_questions: int = Field(100, ge=1)
    seed: int = 0
    batch_size: int = Field(8, ge=1)
    min_chars: int = Field(120, ge=0, description="skip passages too short to ask about")
    max_chars: int = Field(1500, ge=50, description="passages are cut to this many characters")
    require_grounded: bool = True
    language: Literal["auto", "en", "zh"] = "auto"


@dataclass
class QAGenResult:
    items: list[QAItem]
    n_prompts: int = 0
    dropped: dict[str, int] = field(default_factory=lambda: {"unparsed": 0, "ungrounded": 0, "duplicate": 0})


def build_prompt(doc: CorpusDoc, config: QAGenConfig) -> str:
    text = (f"{doc.title}\n{doc.text}" if doc.title else doc.text)[: config.max_chars]
    zh = config.language == "zh" or (config.language == "auto" and is_cjk(text))
    return (PROMPT_ZH if zh else PROMPT_EN).format(passage=text)


def parse_generation(text: str) -> tuple[str, str] | None:
    """(question, answer) from a 'Question: ... / Answer: ...' reply, or None if malformed."""
    q, a = _Q.search(text), _A.search(text)
    if not q or not a:
        return None
    question, answer = q.group(1).strip(), a.group(1).strip().strip("\"'“”「」")
    return (question, answer) if question and answer else None


def is_grounded(answer: str, passage: str) -> bool:
    """The answer appears in the passage, up to case, punctuation and spacing."""
    if is_cjk(answer):
        return normalize_zh(answer) in normalize_zh(passage)
    a = normalize_answer(answer)
    return bool(a) and f" {a} " in f" {normalize_answer(passage)} "


def generate_qa(
    corpus: Mapping[str, CorpusDoc] | Sequence[CorpusDoc],
    generate: GenerateFn,
    config: QAGenConfig | None = None,
) -> QAGenResult:
    """Ask one question per passage, in a seeded passage order, until n_questions are kept."""
    cfg = config or QAGenConfig()
    docs = list(corpus.values()) if isinstance(corpus, Mapping) else list(corpus)
    pool = [d for d in docs if len(d.text) >= cfg.min_chars]
    random.Random(cfg.seed).shuffle(pool)
    res = QAGenResult(items=[])
    seen: set[str] = set()
    for start in range(0, len(pool), cfg.batch_size):
        if len(res.items) >= cfg.n_questions:
            break
        batch = pool[start : start + cfg.batch_size]
        prompts = [build_prompt(d, cfg) for d in batch]
        replies = generate(prompts)
        if len(replies) != len(prompts):
            raise ValueError(f"generate returned {len(replies)} texts for {len(prompts)} prompts")
        res.n_prompts += len(prompts)
        for doc, reply in zip(batch, replies, strict=True):
            parsed = parse_generation(reply)
            if parsed is None:
                res.dropped["unparsed"] += 1
                continue
            question, answer = parsed
            if cfg.require_grounded and not is_grounded(answer, doc.text):
                res.dropped["ungrounded"] += 1
                continue
            key = normalize_zh(question) if is_cjk(question) else normalize_answer(question)
            if key in seen:
                res.dropped["duplicate"] += 1
                continue
            seen.add(key)
            res.items.append(QAItem(id=f"gen-{len(res.items):05d}", question=question, answers=[answer],
                                    gold_doc_id=doc.doc_id, title=doc.title))
            if len(res.items) >= cfg.n_questions:
                break
    return res


def write_qa_dataset(
    out_dir: str | Path,
    corpus: Mapping[str, CorpusDoc],
    items: Sequence[QAItem],
    split: str = "generated",
) -> Path:
    """Write corpus.jsonl, queries.jsonl, qrels/<split>.tsv and qa/<split>.jsonl (BEIR layout)."""
    out = Path(out_dir)
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    (out / "qa").mkdir(parents=True, exist_ok=True)

    def dump(path: Path, rows: list[dict]) -> None:
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")

    dump(out / "corpus.jsonl", [{"_id": d.doc_id, "title": d.title, "text": d.text, "metadata": d.metadata}
                                for d in corpus.values()])
    dump(out / "queries.jsonl", [{"_id": i.id, "text": i.question, "metadata": {"split": split}} for i in items])
    dump(out / "qa" / f"{split}.jsonl", [i.to_dict() for i in items])
    tsv = ["query-id\tcorpus-id\tscore"] + [f"{i.id}\t{i.gold_doc_id}\t1" for i in items if i.gold_doc_id]
    (out / "qrels" / f"{split}.tsv").write_text("\n".join(tsv) + "\n", encoding="utf-8")
    return out
