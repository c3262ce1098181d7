"""Issue #16 items 5 and 6 on the command line: a search that finds nothing in the default
collection says where the documents are; an empty query is an error; a file in another encoding
fails with the setting that fixes it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from indexing.config import IndexingConfig
from indexing.pipeline import Ingestor
from indexing.store import DocumentStore
from rag.commands._hints import collection_hint


def rag(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "rag", *args], capture_output=True, text=True, env=env,
                          timeout=300)


def test_search_in_an_empty_collection_names_the_full_one(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Alpha\n\nThe alpha reactor runs on thorium salts.\n")
    common = ["--set", f"storage.path={tmp_path / 'store'}", "--set", "retrieval.mode=bm25"]
    r = rag("index", str(docs), "--no-progress", "--no-sync", "--collection", "papers", *common)
    assert r.returncode == 0, r.stderr
    r = rag("search", "thorium reactor", *common)
    assert r.returncode == 0 and "0 result(s)" in r.stdout
    assert "papers (1 docs)" in r.stderr and "--collection papers" in r.stderr  # was: no hint at all
    r = rag("search", "thorium reactor", "--collection", "papers", *common)
    assert "Alpha" in r.stdout and "hint" not in r.stderr
    assert "indexing papers" in r.stderr  # the stale index caught up with a progress bar, not silently
    r = rag("search", "thorium reactor", "--collection", "papers", *common)
    assert "indexing" not in r.stderr  # nothing to do: no bar
    r = rag("search", "  ", *common)
    assert r.returncode == 2 and "empty" in r.stderr  # was: exit 0 and every chunk


def test_collection_hint_for_ask(tmp_path):
    with DocumentStore(tmp_path / "s.sqlite") as store:
        assert "empty" in collection_hint(store, None, "default")
        (tmp_path / "n.txt").write_text("Notes about kestrels.", encoding="utf-8")
        Ingestor(store, IndexingConfig()).ingest([tmp_path / "n.txt"], collection="birds", progress=False)
        assert "birds (1 docs)" in collection_hint(store, None, "default")
        assert collection_hint(store, "birds", "default") is None


@pytest.mark.parametrize("name,data", [
    ("legacy.txt", "“Smart quotes” from Windows, café".encode("cp1252")),
    # JSONL records go through their own streaming reader: it must give the same hint
    ("legacy.jsonl", '{"_id": "a", "text": "caf\u00e9 \u201cquoted\u201d"}\n'.encode("cp1252")),
], ids=["text", "jsonl"])
def test_undecodable_file_names_the_encoding_setting(tmp_path, name, data):
    """Catches a decode failure reported without the setting that fixes it, or the setting ignored."""
    f = tmp_path / name
    f.write_bytes(data)
    with DocumentStore(tmp_path / "s.sqlite") as store:
        report = Ingestor(store, IndexingConfig()).ingest([f], progress=False)
        assert len(report.failed) == 1 and "indexing.loader.encoding" in report.failed[0].reason
        cfg = IndexingConfig.model_validate({"loader": {"encoding": "cp1252"}})
        report = Ingestor(store, cfg).ingest([f], progress=False)
        assert not report.failed and report.new == 1
