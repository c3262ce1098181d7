"""The synthetic own-corpus generator (eval/synth_own.py): every negative is really unsupported by
its group, the set is deterministic, splits that are reported on are kept out, and the groups
are small corpora the pipeline can retrieve from one at a time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eval.answers import contains_answer
from eval.datasets import read_jsonl, sample_ids
from eval.synth_own import SynthConfig, entity_negative, generate, number_negative, unsupported

TOPICS = {
    "Harbour": [
        "Port Elvra harbour has 72 moorings. The harbour master Ilse Marrow was appointed in 2019.",
        "Mooring at Port Elvra costs 18 euros per day; boats over 12 metres pay 26 euros.",
        "The Port Elvra lighthouse was first lit in 1874 and is run by Tomas Brenner.",
        "Port Elvra fish market opens at 6 in the morning and closes at noon.",
    ],
    "Library": [
        "Hollin Library lends books for 21 days. The librarian Marta Quell founded the reading club in 2004.",
        "Hollin Library has 3 reading rooms and a garden opened in 2011.",
        "The children's corner of Hollin Library was painted by Oskar Veil.",
        "Hollin Library closes on Mondays.",
    ],
    "Bakery": [
        "Ferrow Bakery bakes 400 loaves a day. Its founder Jonas Reth opened it in 1998.",
        "Ferrow Bakery sells rye bread for 4 euros.",
        "The Ferrow Bakery oven was built by Helga Stroem in 1962.",
    ],
}
QUESTIONS = [  # (doc, question, answer)
    ("Harbour_0", "How many moorings does Port Elvra harbour have?", "72"),
    ("Harbour_0", "Who is the harbour master of Port Elvra?", "Ilse Marrow"),
    ("Harbour_1", "How much does mooring at Port Elvra cost per day?", "18 euros"),
    ("Harbour_2", "Who runs the Port Elvra lighthouse?", "Tomas Brenner"),
    ("Harbour_2", "When was the Port Elvra lighthouse first lit in 1874 by Tomas Brenner?", "1874"),
    ("Harbour_3", "When does Port Elvra fish market open?", "6 in the morning"),
    ("Library_0", "Who founded the reading club of Hollin Library?", "Marta Quell"),
    ("Library_0", "What did Marta Quell found in 2004?", "the reading club"),
    ("Library_1", "How many reading rooms has Hollin Library?", "3"),
    ("Library_2", "Who painted the children's corner of Hollin Library?", "Oskar Veil"),
    ("Library_3", "When does Hollin Library close?", "Mondays"),
    ("Bakery_0", "Who opened Ferrow Bakery in 1998?", "Jonas Reth"),
    ("Bakery_1", "How much is rye bread at Ferrow Bakery?", "4 euros"),
    ("Bakery_2", "Who built the Ferrow Bakery oven in 1962?", "Helga Stroem"),
]
IMPOSSIBLE = [("Harbour_1", "How much does mooring at Port Elvra cost per week?"),
              ("Library_1", "When did the Hollin Library garden close?"),
              ("Bakery_1", "How much is white bread at Ferrow Bakery?")]


def _dataset(root: Path, split: str = "train") -> Path:
    root.mkdir(parents=True)
    (root / "qa").mkdir()
    with open(root / "corpus.jsonl", "w") as fh:
        for title, paras in TOPICS.items():
            for i, text in enumerate(paras):
                fh.write(json.dumps({"_id": f"{title}_{i}", "title": title, "text": text}) + "\n")
    with open(root / "qa" / f"{split}.jsonl", "w") as fh:
        for n, (doc, q, a) in enumerate(QUESTIONS):
            fh.write(json.dumps({"id": f"q{n}", "question": q, "answers": [a], "is_impossible": False,
                                 "gold_doc_id": doc, "title": doc.split("_")[0]}) + "\n")
        for n, (doc, q) in enumerate(IMPOSSIBLE):
            fh.write(json.dumps({"id": f"i{n}", "question": q, "answers": [], "is_impossible": True,
                                 "gold_doc_id": doc, "title": doc.split("_")[0]}) + "\n")
    return root


CFG = SynthConfig(groups=3, group_min=2, group_max=3, answerable=2, negatives=1, seed=0)


def _read(out: Path):
    corpus = list(read_jsonl(out / "corpus.jsonl"))
    qa = list(read_jsonl(out / "qa" / "train.jsonl"))
    by_group: dict[str, list[str]] = {}
    for d in corpus:
        by_group.setdefault(d["metadata"]["group"], []).append(f"{d['title']}\n{d['text']}")
    return corpus, qa, by_group


def test_negatives_are_unsupported_by_their_group(tmp_path):
    """Catches a negative whose answer, swapped-in name or rewritten number is in the group (an
    answerable question labelled unanswerable), and answerables whose gold is not in the group."""
    out = generate(_dataset(tmp_path / "ds"), tmp_path / "out", CFG)
    corpus, qa, by_group = _read(out)
    originals = {q: a for _, q, a in QUESTIONS}
    kinds = {r["kind"] for r in qa}
    assert {"answerable", "neighbour", "entity", "number", "own"} <= kinds, kinds
    assert all(3 >= len(t) >= 2 for t in by_group.values())
    src = {f"q{n}": (q, a) for n, (_, q, a) in enumerate(QUESTIONS)}
    for r in qa:
        texts = by_group[r["group"]]
        if r["kind"] == "answerable":
            assert not r["is_impossible"] and any(contains_answer(t, r["answers"]) for t in texts), r
            continue
        assert r["is_impossible"] and r["answers"] == []
        if r["kind"] == "neighbour":  # a question about the topic whose passage is not in the group
            assert r["question"] in originals and not any(contains_answer(t, [originals[r["question"]]]) for t in texts)
        if r["kind"] in ("entity", "number"):
            old_q, _ = src[r["source_id"]]
            new = [w for w in r["question"].replace("?", "").split() if w not in old_q.replace("?", "").split()]
            assert new, r  # the question was rewritten
            assert unsupported(texts, names=[" ".join(new)] if r["kind"] == "entity" else [],
                               numbers=new if r["kind"] == "number" else []), r
            for w in new:
                assert not any(w in t for t in texts), (w, r)


def test_rewrites_keep_only_supported_sources_and_swap_to_absent_values():
    """Catches a number rewrite to a number the passages hold, an entity swap to a name the group
    mentions, and rewriting a question whose name or number the group never states."""
    import random

    texts = ["The oven was built in 1962 and 1963 by Helga Stroem.", "It bakes 400 loaves."]
    for seed in range(20):
        q, new = number_negative("Who built the oven in 1962?", texts, random.Random(seed))
        assert new not in ("1962", "1963") and new in q and "1962" not in q
    assert number_negative("Who built the oven in 1850?", texts, random.Random(0)) is None
    pool = ["Helga Stroem", "Jonas Reth", "Oskar"]
    q, new = entity_negative("What did Helga Stroem build?", texts, [], pool, random.Random(0))
    assert new == "Jonas Reth" and q == "What did Jonas Reth build?"  # same word count, absent from the group
    assert entity_negative("What did Mara Lund build?", texts, [], pool, random.Random(0)) is None


def test_deterministic_for_a_seed_and_different_across_seeds(tmp_path):
    """Catches unseeded randomness (a calibration set that changes between the lead's runs)."""
    ds = _dataset(tmp_path / "ds")
    a = generate(ds, tmp_path / "a", CFG)
    b = generate(ds, tmp_path / "b", CFG)
    c = generate(ds, tmp_path / "c", CFG.model_copy(update={"seed": 5}))
    for f in ("corpus.jsonl", "qa/train.jsonl"):
        assert (a / f).read_text() == (b / f).read_text()
    assert (a / "qa/train.jsonl").read_text() != (c / "qa/train.jsonl").read_text()


def test_test_split_refused_and_dev_keeps_the_reported_sample_out(tmp_path):
    """Catches calibrating on the test split, and on the reported dev sample's questions or
    paragraphs (the questions whose scores are published)."""
    with pytest.raises(ValueError, match="test split"):
        generate(_dataset(tmp_path / "t", "test"), tmp_path / "o", CFG, split="test")
    ds = _dataset(tmp_path / "d", "dev")
    cfg = CFG.model_copy(update={"exclude_limit": 4, "exclude_seed": 0})
    out = generate(ds, tmp_path / "o2", cfg)
    rows = list(read_jsonl(ds / "qa" / "dev.jsonl"))
    held = set(sample_ids([r["id"] for r in rows], 4, True, 0))
    held_docs = {r["gold_doc_id"] for r in rows if r["id"] in held}
    corpus, qa, _ = _read(out)
    assert not held & {r["source_id"] for r in qa}
    assert not held_docs & {d["_id"] for d in corpus}


@pytest.mark.parametrize("name", ["squad_v2_half", "drcd", "hotpotqa_pooled", "scifact"])
def test_real_datasets_make_groups_with_checked_negatives(shared_datasets, tmp_path, name):
    """Catches a source layout the generator cannot read (HotpotQA's two golds, SciFact's claims),
    groups sharing passages (one `metadata.group` per passage) and copied passages."""
    out = generate(shared_datasets / name, tmp_path / name, SynthConfig(groups=4, seed=1))
    corpus, qa, by_group = _read(out)
    assert len({d["_id"] for d in corpus}) == len(corpus)
    # no passage text twice: the ingest's duplicate filter would drop the copy and empty its group
    assert len({d["text"] for d in corpus}) == len(corpus)
    assert any(r["is_impossible"] for r in qa) and any(not r["is_impossible"] for r in qa)
    qa_files = sorted((shared_datasets / name / "qa").glob("*.jsonl"))
    gold = {str(r["id"]): r.get("answers") or [] for f in qa_files for r in read_jsonl(f)}
    for r in qa:
        assert r["group"] in by_group
        if r["kind"] == "neighbour" and gold.get(r["source_id"]):  # SciFact claims have no answer string
            assert not any(contains_answer(t, gold[r["source_id"]]) for t in by_group[r["group"]]), r
