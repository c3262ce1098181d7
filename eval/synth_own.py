"""Synthetic "own corpus" sets: small groups of passages, questions about what is in them and
questions about what is not.

Why: the shipped refusal model was fitted on SQuAD questions over a 646-paragraph corpus, and on a
user's corpus of a few chunks it refused answerable questions and answered unanswerable ones with a
citation. A calibration that transfers needs points from corpora of that size, with the kinds of
unanswerable question a user asks: a neighbouring fact (a question about another part of the same
topic, whose passage is not in the group), a wrong entity (the question's key name swapped for one
the group never mentions), another date or number (the question's number rewritten so no passage
holds it), and the dataset's own unanswerables. Every negative is checked against the group's text
(`unsupported`): the gold answer, the swapped-in name or the rewritten number occurs in none of its
passages.

Each group is one small corpus: its passages carry `metadata.group` and every question its `group`,
so `rag eval calibrate` (and `rag eval qa`) retrieve with the filter `group=<id>` and the model sees
only that group's 3-8 passages, as on a user's few files, while the whole set is indexed once.

Splits: questions are drawn from a training split where the dataset has one (`scifact` train,
`cmrc2018` trial). The SQuAD v2 half, DRCD and HotpotQA copies have only `dev`; from those the
reported samples (`rag eval qa --limit L --sample --seed S`, `exclude`) and every paragraph their
questions come from are left out, the same rule `rag eval calibrate` and `rag eval probe` use. A
`test` split is refused. Deterministic for a seed; the sets are written to a cache directory, never
committed (the datasets' licences).
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from eval.answers import contains_answer, is_cjk
from eval.datasets import CorpusDoc, load_corpus, load_qrels, load_queries, read_jsonl, sample_ids
from eval.synth_negatives import entity_negative, number_negative, text_names, unsupported
from eval.synth_set import NEGATIVE_KINDS, Group, Kind, Passage, SynthQuestion, load_group_ids, write_set
from retrieval.entities import normalize

# the negatives and the set's types and files live in synth_negatives.py / synth_set.py
__all__ = ["NEGATIVE_KINDS", "TRAIN_SPLITS", "Group", "Kind", "Passage", "Source", "SynthConfig", "SynthQuestion",
           "build_groups", "entity_negative", "generate", "load_group_ids", "load_source", "number_negative",
           "unsupported", "write_set"]

TRAIN_SPLITS = ("train", "trial")


class SynthConfig(BaseModel):
    """How many groups, how big, and how many questions of each kind per group."""

    model_config = ConfigDict(extra="forbid")
    groups: int = Field(20, ge=1, description="groups (small corpora) to build")
    group_min: int = Field(3, ge=1, description="fewest passages in a group")
    group_max: int = Field(8, ge=1, description="most passages in a group")
    answerable: int = Field(2, ge=0, description="answerable questions per group")
    negatives: int = Field(1, ge=0, description="questions of each unanswerable kind per group")
    seed: int = 0
    # the reported sample left out of a dev-only dataset: `rag eval qa --limit L --sample --seed S`
    exclude_limit: int = Field(100, ge=0)
    exclude_seed: int = 0


# ----- sources: topics (related passages) and their questions -----


@dataclass
class Source:
    """A dataset read for generation: passages by topic, questions by passage."""

    name: str
    docs: dict[str, CorpusDoc]
    topics: dict[str, list[str]]  # topic -> doc ids, corpus order
    questions: dict[str, list[dict[str, Any]]]  # doc id -> its questions (answerable and not)
    multi: list[dict[str, Any]] = field(default_factory=list)  # HotpotQA: questions needing 2 docs


def _qa_split(dataset: Path, split: str | None) -> str:
    qa = dataset / "qa"
    have = sorted(p.stem for p in qa.glob("*.jsonl")) if qa.is_dir() else []
    if split is None:
        split = next((s for s in TRAIN_SPLITS if s in have), "dev" if "dev" in have else "")
    if split == "test":
        raise ValueError(f"{dataset.name}: the test split is never used to generate calibration sets")
    if split not in have:
        raise ValueError(f"{dataset.name} has no qa/{split}.jsonl (it has: {', '.join(have) or 'none'})")
    return split


def _held_out(rows: list[dict[str, Any]], split: str, cfg: SynthConfig) -> tuple[set[str], set[str]]:
    """Question ids and paragraph ids of the reported sample a dev-only dataset keeps out."""
    if split in TRAIN_SPLITS or not cfg.exclude_limit:
        return set(), set()
    ids = set(sample_ids([str(r["id"]) for r in rows], cfg.exclude_limit, True, cfg.exclude_seed))
    docs = set()
    for r in rows:
        if str(r["id"]) in ids:
            docs.update([str(r.get("gold_doc_id") or "")] + [str(d) for d in r.get("gold_doc_ids") or []])
    return ids, docs - {""}


def load_source(dataset: str | Path, split: str | None, cfg: SynthConfig) -> Source:
    """A QA set (SQuAD/DRCD/CMRC/HotpotQA: `qa/<split>.jsonl`) or SciFact (claims in
    `queries.jsonl` with `qrels/train.tsv`) as topics and questions."""
    ds = Path(dataset)
    docs = load_corpus(ds / "corpus.jsonl")
    if not (ds / "qa").is_dir():
        return _load_claims(ds, docs, split or "train")
    split = _qa_split(ds, split)
    rows = list(read_jsonl(ds / "qa" / f"{split}.jsonl"))
    held_q, held_d = _held_out(rows, split, cfg)
    rows = [r for r in rows if str(r["id"]) not in held_q]
    topics: dict[str, list[str]] = defaultdict(list)
    for d in docs.values():
        if d.doc_id not in held_d:
            topics[d.title or d.doc_id].append(d.doc_id)
    questions: dict[str, list[dict[str, Any]]] = defaultdict(list)
    multi = []
    for r in rows:
        golds = [str(g) for g in r.get("gold_doc_ids") or []]
        if any(g in held_d for g in golds + [str(r.get("gold_doc_id") or "")]):
            continue
        if len(golds) > 1:
            multi.append(r)
        elif r.get("gold_doc_id") in docs:
            questions[str(r["gold_doc_id"])].append(r)
    return Source(ds.name, docs, dict(topics), dict(questions), multi)


def _load_claims(ds: Path, docs: dict[str, CorpusDoc], split: str) -> Source:
    """SciFact: each training claim is a question whose gold abstracts are its qrels; its answer is
    not a span (`answers` empty), so calibration scores an answered claim by its citation."""
    if split == "test":
        raise ValueError(f"{ds.name}: the test split is never used to generate calibration sets")
    qrels_file = ds / "qrels" / f"{split}.tsv"
    if not qrels_file.is_file():
        raise ValueError(f"{ds.name} has no qa/ folder and no qrels/{split}.tsv")
    qrels = load_qrels(qrels_file)
    queries = load_queries(ds / "queries.jsonl")
    multi = [{"id": q, "question": queries[q], "answers": [], "is_impossible": False,
              "gold_doc_ids": sorted(d for d in rel if d in docs)} for q, rel in qrels.items() if q in queries]
    multi = [r for r in multi if r["gold_doc_ids"]]
    return Source(ds.name, docs, {}, {}, multi)


# ----- groups -----


def _answers(r: dict[str, Any]) -> list[str]:
    return [a for a in r.get("answers") or [] if a]


def build_groups(source: Source, cfg: SynthConfig) -> list[Group]:
    """`cfg.groups` groups from one source, deterministic for `cfg.seed`."""
    rng = random.Random(f"{cfg.seed}:{source.name}")
    return _multi_groups(source, cfg, rng) if source.multi else _topic_groups(source, cfg, rng)


def _name_pool(source: Source, doc_ids: Iterable[str]) -> list[str]:
    pool: dict[str, str] = {}
    for d in doc_ids:
        doc = source.docs[d]
        pool.update(text_names(doc.text, doc.title) if not is_cjk(doc.text) else {normalize(doc.title): doc.title})
    return sorted(pool.values())


def _topic_groups(source: Source, cfg: SynthConfig, rng: random.Random) -> list[Group]:
    """SQuAD / DRCD / CMRC: a group is part of one title's paragraphs (topped up with another
    title's when the title is short); neighbouring facts are questions about the title's other
    paragraphs."""
    titles = sorted(t for t, ds in source.topics.items() if any(source.questions.get(d) for d in ds))
    rng.shuffle(titles)
    others = sorted(d for ds in source.topics.values() for d in ds)
    groups: list[Group] = []
    used: set[str] = set()
    for title in titles:
        if len(groups) >= cfg.groups:
            break
        paras = [d for d in source.topics[title] if d not in used]
        if not paras:
            continue
        size = rng.randint(cfg.group_min, cfg.group_max)
        # keep at least one of the title's paragraphs out: its questions are the neighbouring facts
        take = sorted(rng.sample(paras, max(1, min(len(paras) - 1, size))), key=paras.index)
        fill = [d for d in rng.sample(others, min(len(others), 4 * size)) if d not in used and d not in paras]
        rest = [d for d in paras if d not in take]
        if not rest:  # a one-paragraph title (CMRC): the neighbours are other titles' questions
            rest = fill[cfg.group_max:]
        take += fill[: max(0, size - len(take))]
        gid = f"{source.name}-{len(groups):03d}"
        g = Group(gid, [Passage(d, source.docs[d].title, source.docs[d].text) for d in take])
        used.update(take)
        _topic_questions(source, cfg, rng, g, take, rest)
        if any(q.is_impossible for q in g.questions) and any(not q.is_impossible for q in g.questions):
            groups.append(g)
    return groups


def _topic_questions(source: Source, cfg: SynthConfig, rng: random.Random, g: Group, take: list[str],
                     rest: list[str]) -> None:
    texts = [f"{p.title}\n{p.text}" for p in g.passages]
    titles = sorted({p.title for p in g.passages})
    answerable = [r for d in take for r in source.questions.get(d, []) if not r.get("is_impossible") and _answers(r)]
    rng.shuffle(answerable)
    for r in answerable[: cfg.answerable]:
        _add(g, r, "answerable", r["question"], _answers(r), False, r["gold_doc_id"])
    neigh = [r for d in rest for r in source.questions.get(d, []) if not r.get("is_impossible") and _answers(r)]
    rng.shuffle(neigh)
    added = 0
    for r in neigh:
        if added >= cfg.negatives:
            break
        if unsupported(texts, answers=_answers(r)):
            _add(g, r, "neighbour", r["question"], [], True)
            added += 1
    own = [r for d in take for r in source.questions.get(d, []) if r.get("is_impossible")]
    rng.shuffle(own)
    for r in own[: cfg.negatives]:
        _add(g, r, "own", r["question"], [], True)
    pool = _name_pool(source, rng.sample(sorted(source.docs), min(len(source.docs), 200)))
    pool += sorted({source.docs[d].title for d in rng.sample(sorted(source.docs), min(len(source.docs), 200))})
    _rewrites(g, answerable, texts, titles, pool, cfg, rng)


def _rewrites(g: Group, answerable: list[dict[str, Any]], texts: list[str], titles: list[str], pool: list[str],
              cfg: SynthConfig, rng: random.Random) -> None:
    """Wrong-entity and other-number negatives made from the group's answerable questions."""
    ent = num = 0
    for r in answerable:
        if ent < cfg.negatives and (e := entity_negative(r["question"], texts, titles, pool, rng)):
            _add(g, r, "entity", e[0], [], True)
            ent += 1
        elif num < cfg.negatives and (n := number_negative(r["question"], texts, rng)):
            _add(g, r, "number", n[0], [], True)
            num += 1


def _multi_groups(source: Source, cfg: SynthConfig, rng: random.Random) -> list[Group]:
    """HotpotQA (two supporting paragraphs) and SciFact claims (their abstracts). Groups alternate:
    an answerable one holds the question's gold passages plus distractors (HotpotQA: its own context
    paragraphs); a neighbouring-fact one holds the same kind of group without the gold that holds the
    answer (SciFact: without any gold), so the question is unsupported there. Each question gets one
    of the two, never both: a copied passage would be dropped by the ingest's duplicate filter and
    leave its group empty."""
    rows = sorted(source.multi, key=lambda r: str(r["id"]))
    rng.shuffle(rows)
    all_docs = sorted(source.docs)
    groups: list[Group] = []
    used: set[str] = set()
    pool = _name_pool(source, rng.sample(all_docs, min(len(all_docs), 200)))
    for r in rows:
        if len(groups) >= cfg.groups:
            break
        golds = [d for d in r.get("gold_doc_ids") or [] if d in source.docs]
        if not golds or used & set(golds) or len(golds) > cfg.group_max - 1:
            continue
        answers = _answers(r)
        if answers and any(a.lower() in ("yes", "no") for a in answers):
            continue
        size = rng.randint(max(cfg.group_min, len(golds) + 1), cfg.group_max)
        ctx = [d for d in r.get("context_doc_ids") or [] if d in source.docs and d not in golds and d not in used]
        if len(ctx) < size:
            ctx += [d for d in rng.sample(all_docs, min(len(all_docs), 8 * size)) if d not in golds and d not in used
                    and d not in ctx]
        gid = f"{source.name}-{len(groups):03d}"
        if len(groups) % 2 == 0:  # answerable: the golds and distractors
            take = golds + ctx[: size - len(golds)]
            rng.shuffle(take)
            g = Group(gid, [Passage(d, source.docs[d].title, source.docs[d].text) for d in take])
            _add(g, r, "answerable", r["question"], answers, False, golds[0], golds)
            texts = [f"{p.title}\n{p.text}" for p in g.passages]
            _rewrites(g, [r], texts, sorted({p.title for p in g.passages}), pool, cfg, rng)
        else:  # neighbouring fact: without the gold that holds the answer
            keep = [] if not answers else [d for d in golds if not contains_answer(source.docs[d].text, answers)]
            take = keep + ctx[: size - len(keep)]
            rng.shuffle(take)
            texts = [f"{source.docs[d].title}\n{source.docs[d].text}" for d in take]
            if len(take) < cfg.group_min or (answers and not unsupported(texts, answers=answers)):
                continue
            g = Group(gid, [Passage(d, source.docs[d].title, source.docs[d].text) for d in take])
            _add(g, r, "neighbour", r["question"], [], True)
        used.update(take)
        groups.append(g)
    return groups


def _add(g: Group, r: dict[str, Any], kind: str, question: str, answers: list[str], impossible: bool,
         gold: str = "", golds: Sequence[str] = ()) -> None:
    g.questions.append(SynthQuestion(f"{g.id}-{len(g.questions)}-{kind}", question, list(answers), impossible,
                                     g.id, kind, gold, list(golds) or ([gold] if gold else []), str(r["id"])))


def generate(dataset: str | Path, out: str | Path, cfg: SynthConfig | None = None, split: str | None = None) -> Path:
    """Read `dataset`, build its groups and write the set to `out`."""
    cfg = cfg or SynthConfig()
    if cfg.group_min > cfg.group_max:
        raise ValueError(f"group_min {cfg.group_min} > group_max {cfg.group_max}")
    src = load_source(dataset, split, cfg)
    groups = build_groups(src, cfg)
    if not groups:
        raise ValueError(f"{dataset}: no group with both answerable and unanswerable questions could be built")
    return write_set(groups, out, {"source": src.name, "split": split or "auto", **cfg.model_dump()})


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m eval.synth_own", description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", required=True, metavar="DIR")
    ap.add_argument("--split", default=None, help="default: train/trial where the dataset has one, else dev "
                                                   "without the reported sample and its paragraphs")
    ap.add_argument("--out", required=True, metavar="DIR", help="where the set is written (a cache dir)")
    for name, f in SynthConfig.model_fields.items():
        ap.add_argument("--" + name.replace("_", "-"), type=int, default=f.default, help=f.description)
    args = ap.parse_args(argv)
    cfg = SynthConfig(**{k: getattr(args, k) for k in SynthConfig.model_fields})
    try:
        out = generate(args.dataset, args.out, cfg, args.split)
    except (ValueError, OSError) as e:
        print(f"error: {e}")
        return 2
    print(json.dumps(json.loads((out / "manifest.json").read_text(encoding="utf-8"))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
