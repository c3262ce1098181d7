"""Ablation grids: expansion, one row per variant, and resuming after an interruption."""

import json

import pytest
from pydantic import ValidationError

from eval.ablation import run_ablation
from eval.datasets import load_beir
from eval.grid import Grid, apply_overrides, load_grid
from eval.report import write_report

GRID_YAML = """
base: {retrieval.k: 20}
variants:
  - {name: bm25, set: {retrieval.mode: bm25}}
  - {name: reversed, set: {retrieval.mode: reversed}}
axes:
  retrieval.k: [1, 5]
"""


def test_grid_expansion_and_overrides(tmp_path):
    p = tmp_path / "grid.yaml"
    p.write_text(GRID_YAML)
    variants = load_grid(p).expand()
    assert [v.name for v in variants] == ["bm25", "reversed", "k=1", "k=5"]
    assert variants[0].set == {"retrieval.k": 20, "retrieval.mode": "bm25"}
    assert variants[2].set == {"retrieval.k": 1}
    cfg = apply_overrides({"retrieval": {"k": 10, "mode": "dense"}}, {"retrieval.mode": "bm25", "rerank.on": True})
    assert cfg == {"retrieval": {"k": 10, "mode": "bm25"}, "rerank": {"on": True}}
    with pytest.raises(ValidationError):
        Grid.model_validate({"variants": [{"name": "x", "sett": {}}]})
    with pytest.raises(ValidationError):
        Grid.model_validate({"base": {"a": 1}})
    with pytest.raises(ValueError, match="duplicate"):
        Grid.model_validate({"variants": [{"name": "x"}, {"name": "x"}]}).expand()


class Factory:
    """Builds the BM25 search for a variant; can be told to crash after N searches."""

    def __init__(self, make_bm25):
        self.make_bm25 = make_bm25
        self.builds: list[dict] = []
        self.searched: list[str] = []
        self.fail_after: int | None = None

    def __call__(self, overrides):
        self.builds.append(overrides)
        search = self.make_bm25(k=overrides.get("retrieval.k", 20),
                                reverse=overrides.get("retrieval.mode") == "reversed")

        def fn(query):
            if self.fail_after is not None and len(self.searched) >= self.fail_after:
                raise KeyboardInterrupt("simulated interruption")
            self.searched.append(query)
            return search(query)

        return fn


def test_ablation_rows_and_resume_after_interruption(tiny_dataset, make_bm25, tmp_path):
    ds = load_beir(tiny_dataset, "test")
    grid = Grid.model_validate({"variants": [{"name": "bm25", "set": {"retrieval.mode": "bm25"}},
                                             {"name": "reversed", "set": {"retrieval.mode": "reversed"}}]})
    out = tmp_path / "abl"
    factory = Factory(make_bm25)
    factory.fail_after = 12  # all 9 queries of 'bm25', then 3 of 'reversed'
    with pytest.raises(KeyboardInterrupt):
        run_ablation(grid, ds.queries, ds.qrels, factory, out, ks=(1, 10), progress=False,
                     dataset=ds.name, split="test", fingerprint=ds.fingerprint, warmup=False)
    assert len(factory.searched) == 12
    assert [r["name"] for r in json.loads((out / "results.json").read_text())] == ["bm25"]

    factory.fail_after, factory.searched, factory.builds = None, [], []
    results = run_ablation(grid, ds.queries, ds.qrels, factory, out, ks=(1, 10), progress=False,
                           dataset=ds.name, split="test", fingerprint=ds.fingerprint, warmup=False)
    # Only the 6 missing queries of 'reversed' ran; 'bm25' was complete so it was not even built.
    assert len(factory.searched) == 6
    assert [b.get("retrieval.mode") for b in factory.builds] == ["reversed"]
    assert [r.executed for r in results] == [0, 6]
    assert results[0].metrics["ndcg@10"] > results[1].metrics["ndcg@10"]

    # The resumed numbers equal those of an uninterrupted run.
    fresh = run_ablation(grid, ds.queries, ds.qrels, Factory(make_bm25), tmp_path / "fresh", ks=(1, 10),
                         progress=False, dataset=ds.name, split="test", fingerprint=ds.fingerprint, warmup=False)
    assert [r.metrics for r in fresh] == [r.metrics for r in results]
    rows = json.loads((out / "results.json").read_text())
    assert [r["name"] for r in rows] == ["bm25", "reversed"] and rows[1]["config"]["variant"] == "reversed"

    paths = write_report(results, out / "report", title="ablation")
    assert "against bm25 (paired randomization test)" in paths["markdown"].read_text()
    vs = json.loads(paths["json"].read_text())[1]["vs_baseline"]["ndcg@10"]
    assert vs["delta"] < 0 and vs["ci_high"] < 0


def test_new_dataset_version_is_not_resumed(tiny_dataset, make_bm25, tmp_path):
    ds = load_beir(tiny_dataset, "test")
    grid = [v for v in Grid.model_validate({"variants": [{"name": "bm25"}]}).expand()]
    f1 = Factory(make_bm25)
    run_ablation(grid, ds.queries, ds.qrels, f1, tmp_path, ks=(10,), progress=False, fingerprint="v1", warmup=False)
    f2 = Factory(make_bm25)
    run_ablation(grid, ds.queries, ds.qrels, f2, tmp_path, ks=(10,), progress=False, fingerprint="v2", warmup=False)
    assert len(f1.searched) == len(f2.searched) == 9
