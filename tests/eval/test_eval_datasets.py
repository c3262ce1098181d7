"""Dataset loaders, deterministic sampling, fingerprints; the shared datasets when present."""

import json

import pytest

from eval.datasets import (
    config_hash,
    corpus_documents,
    dataset_fingerprint,
    load_beir,
    load_qa,
    load_qrels,
    load_rgb,
    rgb_passages,
    sample_ids,
)


def test_sampling_is_deterministic_and_keeps_order():
    ids = [f"q{i}" for i in range(100)]
    assert sample_ids(ids, 5) == ids[:5]
    a, b = sample_ids(ids, 10, sample=True, seed=3), sample_ids(ids, 10, sample=True, seed=3)
    assert a == b and len(set(a)) == 10
    assert a == sorted(a, key=ids.index)
    assert sample_ids(ids, 10, sample=True, seed=4) != a
    assert sample_ids(ids, None) == ids and sample_ids(ids, 1000) == ids


def test_load_beir_split_limit_and_fingerprint(tiny_dataset):
    ds = load_beir(tiny_dataset, "test", limit=3)
    assert list(ds.queries) == ["q1", "q2", "q3"] and set(ds.qrels) == {"q1", "q2", "q3"}
    assert len(ds.corpus) == 8 and ds.corpus["rome"].title == "Rome"
    full = load_beir(tiny_dataset, "test")
    assert full.qrels["q6"] == {"cairo": 2, "paris": 0}
    fp = dataset_fingerprint(tiny_dataset, "test")
    assert fp == ds.fingerprint == dataset_fingerprint(tiny_dataset, "test")
    with (tiny_dataset / "corpus.jsonl").open("a") as f:
        f.write(json.dumps({"_id": "new", "title": "", "text": "x"}) + "\n")
    assert dataset_fingerprint(tiny_dataset, "test") != fp
    with pytest.raises(FileNotFoundError, match="splits here"):
        load_beir(tiny_dataset, "train")
    docs = list(corpus_documents(full.corpus, source="tiny"))
    assert docs[0].doc_id == "paris" and docs[0].title == "Paris" and docs[0].source == "tiny:paris"


def test_config_hash_is_order_independent():
    assert config_hash({"a": 1, "b": {"c": 2}}) == config_hash({"b": {"c": 2}, "a": 1})
    assert config_hash({"a": 1}) != config_hash({"a": 2})


def test_qrels_header_optional(tmp_path):
    p = tmp_path / "q.tsv"
    p.write_text("q1\td1\t2\nq1\td2\t1\n")
    assert load_qrels(p) == {"q1": {"d1": 2, "d2": 1}}


def test_qa_answerable_only_and_sampling(tiny_dataset):
    assert [i.id for i in load_qa(tiny_dataset, "dev", answerable_only=True)] == ["a1", "a2", "a3"]
    assert len(load_qa(tiny_dataset / "qa" / "dev.jsonl", limit=2, sample=True, seed=0)) == 2


def test_rgb_loader_and_noise_passages(tmp_path):
    p = tmp_path / "rgb.json"
    rows = [
        {"id": 0, "query": "q", "answer": "70", "positive": ["p1", "p2", "p3"], "negative": [f"n{i}" for i in range(7)]},
        {"id": 1, "query": "q2", "answer": ["1月3日", "1月12日"], "positive": [["a1", "a2"], ["b1"]],
         "negative": ["n1", "n2", "n3"]},
    ]
    p.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    flat, grouped = load_rgb(p)
    assert flat.answer == ["70"] and flat.positive == [["p1", "p2", "p3"]]
    assert grouped.answer == ["1月3日", "1月12日"] and grouped.positive == [["a1", "a2"], ["b1"]]
    ps = rgb_passages(flat, 0.4, n_passages=5, seed=0)
    assert len(ps) == 5 and sum(x.startswith("n") for x in ps) == 2
    assert ps == rgb_passages(flat, 0.4, n_passages=5, seed=0)
    assert all(x.startswith("n") for x in rgb_passages(flat, 1.0, n_passages=5))
    ps = rgb_passages(grouped, 0.0, n_passages=2)
    assert sorted(x[0] for x in ps) == ["a", "b"]  # one passage for each answer part


@pytest.mark.shared
def test_shared_scifact_counts(shared_datasets):
    ds = load_beir(shared_datasets / "scifact", "test")
    assert len(ds.queries) == 300 and sum(len(r) for r in ds.qrels.values()) == 339
    assert len(ds.corpus) == 5183
    s1 = load_beir(shared_datasets / "scifact", "test", limit=20, sample=True, seed=0, with_corpus=False)
    s2 = load_beir(shared_datasets / "scifact", "test", limit=20, sample=True, seed=0, with_corpus=False)
    assert list(s1.queries) == list(s2.queries) and len(s1.queries) == 20


@pytest.mark.shared
def test_shared_qa_and_rgb(shared_datasets):
    squad = load_qa(shared_datasets / "squad_v2_half", "dev")
    assert len(squad) == 6078 and sum(not i.is_impossible for i in squad) == 2910
    assert all(i.answers for i in squad if not i.is_impossible)
    drcd = load_qa(shared_datasets / "drcd", "dev", limit=5)
    assert len(drcd) == 5 and drcd[0].gold_doc_id
    zh_int = load_rgb(shared_datasets / "rgb" / "zh_int.json")
    assert len(zh_int) == 100 and all(len(i.positive) >= 1 for i in zh_int)
    en_fact = load_rgb(shared_datasets / "rgb" / "en_fact.json", limit=3)
    assert en_fact[0].fake_answer and en_fact[0].positive_wrong
    assert len(rgb_passages(zh_int[0], 0.2, n_passages=5)) == 5
