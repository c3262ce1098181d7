"""Issue #16 item 1: `rag eval retrieval` with configs/bm25.yaml, then configs/dense.yaml, over
the same dataset must not reuse the BM25-only index for the dense run (IndexMismatchError)."""

from __future__ import annotations

from pathlib import Path

from eval.runner import index_key, open_eval_pipeline
from rag.config import load_config

REPO = Path(__file__).resolve().parents[2]


def _cfg(tmp_path: Path, name: str, *overrides: str):
    return load_config(REPO / "configs" / name, [f"storage.path={tmp_path / 'rag'}", *overrides])


def test_index_key_follows_what_the_index_holds(tmp_path):
    bm25, dense = _cfg(tmp_path, "bm25.yaml"), _cfg(tmp_path, "dense.yaml")
    assert index_key(bm25) != index_key(dense)
    # a BM25-only index does not depend on the embedder; a dense one does
    other = "retrieval.embedder.batch_size=7"
    assert index_key(bm25) == index_key(_cfg(tmp_path, "bm25.yaml", other))
    assert index_key(dense) != index_key(_cfg(tmp_path, "dense.yaml", "retrieval.embedder.normalize=false"))


def test_bm25_then_dense_eval_over_one_dataset(tiny_dataset, tmp_path):
    for name in ("bm25.yaml", "dense.yaml"):
        pipe = open_eval_pipeline(tiny_dataset, _cfg(tmp_path, name), progress=False)
        try:
            hits = pipe.search("Where is the Eiffel Tower?", k=3).candidates
            assert hits and hits[0].chunk.doc_id == "paris"
        finally:
            pipe.close()


def test_ablation_caches_are_keyed_by_the_base_config(tmp_path):
    # was: the same grid run over configs/bm25.yaml and then configs/dense.yaml reused the bm25
    # results (the variant caches were keyed by dataset, overrides and depth only)
    from eval.ablation import ablation_fingerprint

    bm25, dense = _cfg(tmp_path, "bm25.yaml"), _cfg(tmp_path, "dense.yaml")
    assert ablation_fingerprint("ds1", bm25.to_dict()) != ablation_fingerprint("ds1", dense.to_dict())
    moved = _cfg(tmp_path / "elsewhere", "bm25.yaml")  # another storage path: same results
    assert ablation_fingerprint("ds1", bm25.to_dict()) == ablation_fingerprint("ds1", moved.to_dict())
    assert ablation_fingerprint("ds1", bm25.to_dict()) != ablation_fingerprint("ds2", bm25.to_dict())
