"""Training on a tiny in-test BEIR dataset produces a loadable cross-encoder that separates
positives from negatives; mining never uses a test split."""

from __future__ import annotations

import json

import numpy as np
import pytest
from rerank_fixtures import DOCS, write_beir

from rerank.training.beir import load_beir
from rerank.training.mining import CorpusRetriever, mine_negatives, ndcg_at_k
from rerank.training.train import TrainConfig, train_cross_encoder


def test_training_run_separates_positives_from_negatives(tiny_cross_encoder):
    from sentence_transformers import CrossEncoder

    path, info = tiny_cross_encoder
    assert info["steps"] > 0 and info["train_rows"] == 4 * len(DOCS)  # 1 positive + 3 negatives each
    assert json.loads((path / "training.json").read_text())["kind"] == "cross-encoder"
    assert not (path / "checkpoints").exists()
    model = CrossEncoder(str(path), max_length=64)
    pos, neg = [], []
    for i, (_, title, text, query, _) in enumerate(DOCS):
        pos.append((query, f"{title}\n{text}"))
        j = (i + 3) % len(DOCS)
        neg.append((query, f"{DOCS[j][1]}\n{DOCS[j][2]}"))
    sp, sn = model.predict(pos), model.predict(neg)
    assert float(np.mean(sp)) > float(np.mean(sn)) + 0.2
    assert float(np.mean(sp > sn)) >= 0.8


def test_refuses_to_train_on_test_split(tmp_path):
    root = write_beir(tmp_path / "beir", split="test")
    with pytest.raises(ValueError, match="test split"):
        train_cross_encoder(TrainConfig(datasets=[str(root)], out=str(tmp_path / "m"), split="test", mine="bm25"))


def test_per_dataset_split_spec(tmp_path):
    """`DIR:SPLIT` picks a split per dataset; `DIR:test` is refused like --split test."""
    from rerank.training.beir import dataset_spec
    from rerank.training.train_data import mine_examples

    assert dataset_spec("/data/squad:dev", "train") == ("/data/squad", "dev")
    assert dataset_spec("/data/scifact", "train") == ("/data/scifact", "train")
    dev = write_beir(tmp_path / "dev", split="dev")
    assert mine_examples([f"{dev}:dev"], "train", negatives=1, mode="bm25")
    test = write_beir(tmp_path / "t", split="test")
    with pytest.raises(ValueError, match="test split"):
        mine_examples([f"{test}:test"], "train", negatives=1, mode="bm25")


def test_loader_mining_and_ndcg(tmp_path):
    data = load_beir(write_beir(tmp_path / "beir"), "train")
    assert len(data.queries) == len(DOCS) and data.positives("q-eiffel") == ["eiffel"]
    texts = data.texts()
    retriever = CorpusRetriever(list(texts), list(texts.values()))
    run = retriever.search_many(data.queries, k=5, mode="bm25")
    negs = mine_negatives(run, data.qrels, n=2, seed=1)
    assert all(d not in data.qrels[q] for q, ds in negs.items() for d in ds)
    assert negs == mine_negatives(run, data.qrels, n=2, seed=1)  # deterministic
    perfect = {q: {next(iter(r)): 1.0} for q, r in data.qrels.items()}
    assert ndcg_at_k(perfect, data.qrels) == pytest.approx(1.0)
    assert 0.0 < ndcg_at_k(run, data.qrels) <= 1.0


def test_training_ndcg_is_the_evaluation_ndcg():
    """Graded qrels: training's nDCG must equal `rag eval`'s (linear gain, as trec_eval/BEIR/ranx).
    Catches a second gain definition (the old `2**g - 1`, which gives 0.7967 here, not 0.8597)."""
    from retrieval.metrics import evaluate_run

    qrels = {"q": {"a": 2, "b": 1, "c": 0}}
    run = {"q": {"b": 3.0, "a": 2.0, "x": 1.0}}
    want = evaluate_run(run, qrels, ks=(10,), names=("ndcg",))[0]["ndcg@10"]
    assert ndcg_at_k(run, qrels, 10) == pytest.approx(want, abs=1e-12)
    assert want == pytest.approx((1 + 2 / np.log2(3)) / (2 + 1 / np.log2(3)))


def test_qa_format_reads_gold_doc_ids(tmp_path):
    root = tmp_path / "qa_set"
    (root / "qa").mkdir(parents=True)
    (root / "corpus.jsonl").write_text(json.dumps({"_id": "p1", "title": "", "text": "水的沸点是一百度。"},
                                                  ensure_ascii=False) + "\n")
    rows = [{"id": "a", "question": "水的沸点是多少？", "answers": ["一百度"], "is_impossible": False,
             "gold_doc_id": "p1"},
            {"id": "b", "question": "无法回答", "answers": [], "is_impossible": True, "gold_doc_id": None}]
    (root / "qa" / "dev.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    data = load_beir(root, "dev")
    assert data.queries == {"a": "水的沸点是多少？"} and data.positives("a") == ["p1"]


def test_embedder_fine_tune_saves_a_loadable_model(tiny_beir, tmp_path):
    from sentence_transformers import SentenceTransformer

    from rerank.training.train import train_embedder

    out = tmp_path / "emb"
    info = train_embedder(TrainConfig(datasets=[str(tiny_beir)], out=str(out), mine="bm25", max_steps=2,
                                      batch_size=4, max_length=48, progress=False))
    assert info["kind"] == "embedder" and info["steps"] == 2 and info["train_rows"] == len(DOCS)
    vecs = SentenceTransformer(str(out)).encode(["honey bees", "蜜蜂"])
    assert vecs.shape == (2, 384) and np.isfinite(vecs).all()


def test_new_head_learns_faster_than_the_encoder(tiny_cross_encoder):
    """A head initialised from scratch gets 40x the encoder's learning rate; an existing reranker's
    head (fine-tuning) the same rate as its encoder. The optimizer is torch's fused AdamW (bug
    caught: the per-tensor loop, ~10x slower a step on CPU and ~30 % of a small training run)."""
    from sentence_transformers.cross_encoder import CrossEncoder

    from rerank.models import minilm_dir
    from rerank.training.train import _head_optimizer

    path, _ = tiny_cross_encoder
    for base, factor in ((str(minilm_dir()), 40.0), (str(path), 1.0)):
        model = CrossEncoder(base, num_labels=1)
        opt = _head_optimizer(model.model, TrainConfig(datasets=["x"], out="y", base=base, lr=1e-4))
        body, head = opt.param_groups
        assert body["lr"] == 1e-4 and head["lr"] == pytest.approx(1e-4 * factor)
        assert len(head["params"]) == 4  # pooler dense + classifier, weights and biases
        assert opt.defaults["fused"] is True


def test_cli_train_with_split_spec_and_flags(tmp_path):
    """`rag rerank train` end to end in a subprocess: DIR:SPLIT, precision and head-LR flags reach
    the trainer and the summary is written next to a loadable model."""
    import os
    import subprocess
    import sys

    root = write_beir(tmp_path / "beir", split="dev")
    out = tmp_path / "model"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    r = subprocess.run([sys.executable, "-m", "rag", "rerank", "train", "--dataset", f"{root}:dev",
                        "--mine", "bm25", "--max-steps", "2", "--batch-size", "4", "--max-length", "64",
                        "--precision", "fp32", "--head-lr-multiplier", "10", "--out", str(out)],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    info = json.loads((out / "training.json").read_text())
    assert info["steps"] == 2 and info["bf16"] is False and info["datasets"] == [f"{root}:dev"]
    assert (out / "model.safetensors").is_file() and not (out / "checkpoints").exists()


def test_holdout_splits_queries_deterministically(tmp_path):
    """`holdout` partitions a split's queries the same way on every run; training never sees the
    held-out part."""
    from rerank.training.beir import in_holdout
    from rerank.training.train_data import mine_examples

    root = write_beir(tmp_path / "beir")
    full = load_beir(root, "train")
    rest = load_beir(root, "train", holdout=0.5)
    held = load_beir(root, "train", holdout=0.5, part="holdout")
    assert rest.queries and held.queries
    assert set(rest.queries).isdisjoint(held.queries) and set(rest.queries) | set(held.queries) == set(full.queries)
    assert set(rest.qrels) == set(rest.queries) and set(held.qrels) == set(held.queries)
    assert held.queries == load_beir(root, "train", holdout=0.5, part="holdout").queries
    assert all(in_holdout(q, 0.5) for q in held.queries)
    assert not any(in_holdout(q, 0.0) for q in full.queries)
    trained_on = {ex.query for ex in mine_examples([root], negatives=1, mode="bm25", holdout=0.5)}
    assert trained_on == set(rest.queries.values())
    with pytest.raises(ValueError, match="part"):
        load_beir(root, "train", holdout=0.5, part="test")


def test_cli_eval_on_holdout_sweeps_blend_weights(tiny_cross_encoder, tmp_path):
    """`rag rerank eval --holdout F --fuse W,W` scores only held-out queries and names the best weight."""
    import os
    import subprocess
    import sys

    path, _ = tiny_cross_encoder
    root = write_beir(tmp_path / "beir")
    held = load_beir(root, "train", holdout=0.5, part="holdout")
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    r = subprocess.run([sys.executable, "-m", "rag", "rerank", "eval", "--dataset", str(root), "--split", "train",
                        "--holdout", "0.5", "--model", str(path), "--depth", "5", "--max-length", "64",
                        "--fuse", "0.3,0.7", "--set", f"storage.path={tmp_path / 'store'}"],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    assert out["queries"] == len(held.queries) and out["holdout"] == 0.5
    assert {"bm25", "hybrid", "hybrid+rerank", "hybrid+rerank(rrf w=0.3)", "hybrid+rerank(rrf w=0.7)"} <= set(out["ndcg@10"])
    assert out["best_fuse_weight"] in (0.3, 0.7)
    bad = subprocess.run([sys.executable, "-m", "rag", "rerank", "eval", "--dataset", str(root), "--fuse", "1.5"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert bad.returncode != 0 and "[0, 1]" in bad.stderr


def test_freeze_embeddings_keeps_the_word_matrix_and_trains_the_rest(tmp_path):
    """`--freeze-embeddings` reaches the trainer: the saved word embeddings equal the base's, the
    encoder layers moved, and the summary records it (a large multilingual vocabulary made every
    optimizer step slow on CPU)."""
    import torch
    from sentence_transformers import CrossEncoder

    from rag.cli import build_parser
    from rag.commands.rerank import train_config
    from rerank.models import minilm_dir

    args = build_parser().parse_args(["rerank", "train", "--dataset", "x", "--freeze-embeddings"])
    assert train_config(args, lr=5e-5).freeze_embeddings is True
    root = write_beir(tmp_path / "beir")
    out = tmp_path / "ce"
    info = train_cross_encoder(TrainConfig(datasets=[str(root)], out=str(out), mine="bm25", max_steps=3,
                                           batch_size=8, lr=1e-3, max_length=48, precision="fp32",
                                           freeze_embeddings=True, progress=False))
    assert info["freeze_embeddings"] is True
    base, trained = CrossEncoder(str(minilm_dir()), num_labels=1).model, CrossEncoder(str(out)).model
    emb = (base.get_input_embeddings().weight, trained.get_input_embeddings().weight)
    assert torch.equal(*emb)
    layer = "encoder.layer.0.attention.self.query.weight"
    moved = dict(base.base_model.named_parameters())[layer], dict(trained.base_model.named_parameters())[layer]
    assert not torch.equal(*moved)
