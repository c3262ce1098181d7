"""Issue #28 item 5: `rag eval retrieval|qa|calibrate` show a bar while embedding the corpus and
while answering, and `--no-progress` silences both. Real runs: MiniLM embeddings, SmolLM2 answers."""

from __future__ import annotations

import json

import pytest

from rag.cli import main


@pytest.fixture
def tiny_set(tmp_path):
    ds = tmp_path / "tiny_set"
    (ds / "qa").mkdir(parents=True)
    (ds / "qrels").mkdir()
    paras = {"p0": "Velmora is the capital city of Zarnovia. It lies on the river Ost.",
             "p1": "The XR-300 drone flies for 42 minutes on one battery charge.",
             "p2": "The Lumen lighthouse was built in 1887 by the engineer Ada Kettle."}
    (ds / "corpus.jsonl").write_text("".join(json.dumps({"_id": k, "title": k, "text": v}) + "\n"
                                             for k, v in paras.items()))
    qs = [("What is the capital city of Zarnovia?", ["Velmora"], "p0"),
          ("Who painted the Lumen lighthouse?", [], "p2")]
    (ds / "qa" / "dev.jsonl").write_text("".join(
        json.dumps({"id": f"q{i}", "question": q, "answers": a, "is_impossible": not a, "gold_doc_id": d}) + "\n"
        for i, (q, a, d) in enumerate(qs)))
    (ds / "queries.jsonl").write_text("".join(json.dumps({"_id": f"q{i}", "text": q}) + "\n"
                                              for i, (q, _, _) in enumerate(qs)))
    (ds / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\nq0\tp0\t1\nq1\tp2\t1\n")
    return ds


def _run(capsys, tmp_path, name: str, *argv: str) -> str:
    capsys.readouterr()
    rc = main(["eval", *argv, "--set", "generator.engine.model=smollm2", "--set", f"storage.path={tmp_path / name}"])
    err = capsys.readouterr().err
    assert rc == 0, err
    return err


def test_eval_commands_show_embedding_and_answering_bars(tiny_set, tmp_path, capsys):
    """Catches a silent embedding step (SciFact sat 15 minutes without output), a missing answering
    bar, and --no-progress not reaching one of them."""
    ds = str(tiny_set)
    err = _run(capsys, tmp_path, "r", "retrieval", "--dataset", ds, "--split", "dev", "--ks", "1,3")
    assert "embedding/indexing tiny_set" in err and "eval tiny_set" in err
    err = _run(capsys, tmp_path, "q", "qa", "--dataset", ds, "--split", "dev")
    assert "embedding/indexing tiny_set" in err and "qa tiny_set" in err and "2/2" in err
    err = _run(capsys, tmp_path, "c", "calibrate", "--dataset", ds, "--limit", "2", "--exclude-limit", "0",
               "--out", str(tmp_path / "cal.json"))
    assert "embedding/indexing tiny_set" in err and "calibrate" in err and "2/2" in err
    err = _run(capsys, tmp_path, "q2", "qa", "--dataset", ds, "--split", "dev", "--no-progress")
    assert "embedding/indexing" not in err and "qa tiny_set" not in err and "|" not in err
