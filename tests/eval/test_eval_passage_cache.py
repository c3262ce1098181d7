"""`rag eval qa` with the passage KV cache on (issue 25's quality sweep runs exactly this command):
the `--set generator.engine.passage_cache.*` keys reach the engine through the pipeline, and the
result JSON reports what the engine reused. Real run: SmolLM2, BM25, the four-paragraph set, a local
calibration entry so the short path asks the answerability checks as the Qwen entries make it."""

from __future__ import annotations

import json

from eval.retrieval_eval import EvalResult, format_table
from rag.cli import main
from tests.eval.qa_case import never_refusing_entry, write_qa_set

QUESTIONS = [("What is the capital city of Zarnovia?", ["Velmora"], "p0"),
             ("How long does the XR-300 drone fly on one charge?", ["42 minutes"], "p1"),
             ("Who painted the Lumen lighthouse?", [], "p2")]


def test_eval_qa_with_the_passage_cache_reports_the_engines_reuse(tmp_path, capsys):
    """Bugs caught: the `--set` keys not reaching the engine the eval builds (an on/off sweep would
    compare two identical runs), the pipeline passing no spans on the eval's short path, a result
    JSON that cannot show either (no `engine` block), and one that does not say which model
    answered (`config.model`: with `model: auto` it depends on the CPU and the mode)."""
    ds = write_qa_set(tmp_path / "set", QUESTIONS, "dev")
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps({"smollm2": never_refusing_entry()}))
    out = tmp_path / "on.json"
    capsys.readouterr()
    rc = main(["eval", "qa", "--dataset", str(ds), "--split", "dev", "--mode", "short", "--no-progress",
               "--json", str(out),
               "--set", "generator.engine.model=smollm2", "--set", f"storage.path={tmp_path / 'st'}",
               "--set", "retrieval.mode=bm25", "--set", f"answer.calibration={cal}",
               "--set", "generator.engine.passage_cache.enabled=true",
               "--set", "generator.engine.passage_cache.recompute_ratio=0.15",
               # misses computed on their own: every reuse is then a passage-cache hit (with `prompt`,
               # the default, the prefix cache serves most of them: see test_engine_kv_reuse.py)
               "--set", "generator.engine.passage_cache.miss_compute=alone"])
    printed = capsys.readouterr().out
    assert rc == 0
    result = json.loads(out.read_text())
    assert result["config"]["model"] == "smollm2" and result["config"]["mode"] == "short"
    engine = result["engine"]
    # BM25 gives each question its own paragraph: a miss for the answer prompt and one for the passage
    # check (another template), each computed alone and blended (`alone`: a reuse pass each, and the
    # 0.15 recompute); the answer check shares the passage check's blocks through its passage and
    # the timed first question repeats the warm-up's prompts, so both are prefix-cache hits on the
    # blended (salted) branch, not new lookups
    assert engine["passage_cache_misses"] >= 3 and engine["reuse_prefills"] >= 3, engine
    assert engine["recomputed_tokens"] > 0 and engine["passage_prefix_hits"] >= 3, engine
    assert "passage_cache_hit_rate" in engine
    assert engine["kv_shift_reused_tokens"] == 0
    assert "engine set: " in printed and "passage_cache_hits" in printed


def test_engine_line_only_for_runs_that_reused():
    """The table names the engine's reuse only when there was some (a cache-off run prints nothing new)."""
    base = {"dataset": "d", "split": "dev", "config": {}, "metrics": {"f1": 0.5}, "latency_ms": {}, "n_queries": 1}
    off = EvalResult(**base, engine={"prompt_tokens": 900.0, "passage_cache_hits": 0.0, "passage_cache_misses": 0.0})
    on = EvalResult(**base, engine={"passage_cache_hits": 4.0, "passage_cache_misses": 1.0})
    assert "engine" not in format_table(off)
    assert "engine d: passage_cache_hits 4, passage_cache_misses 1" in format_table(on)
    assert off.to_dict()["engine"]["prompt_tokens"] == 900.0
