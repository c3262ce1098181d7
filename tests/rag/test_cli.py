"""The `rag` command line as a user runs it: real subprocesses on a real store."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


def rag(*args: str, cwd=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "rag", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=600)


@pytest.fixture()
def workdir(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Alpha\n\nThe alpha reactor runs on thorium salts.\n")
    (docs / "b.txt").write_text("Beta notes: the beta cluster has forty nodes.\n")
    (docs / "broken.pdf").write_bytes(b"%PDF-1.4 this is not really a pdf")
    return tmp_path


def test_index_search_docs_delete_round_trip(workdir):
    common = ["--set", f"storage.path={workdir / 'store'}", "--set", "retrieval.mode=bm25"]
    r = rag("index", str(workdir / "docs"), "--no-progress", "--json", *common)
    assert r.returncode == 1, r.stderr  # one corrupt file: reported, the others indexed
    report = json.loads(r.stdout)
    assert report["new"] == 2 and len(report["failed"]) == 1 and "broken.pdf" in report["failed"][0]["path"]
    r = rag("index", str(workdir / "docs" / "a.md"), "--no-progress", *common)
    assert r.returncode == 0 and "0 new, 0 changed, 1 unchanged" in r.stdout
    r = rag("search", "thorium reactor", "--json", "--k", "3", *common)
    hits = json.loads(r.stdout)["results"]
    assert hits[0]["metadata"]["title"] == "Alpha" and set(hits[0]) >= {"chunk_id", "doc_id", "score", "text"}
    listed = json.loads(rag("docs", "list", "--json", *common).stdout)
    assert listed["total"] == 2
    doc_id = hits[0]["doc_id"]
    assert rag("docs", "delete", doc_id, *common).returncode == 0
    r = rag("search", "thorium reactor", "--json", *common)
    assert all(h["doc_id"] != doc_id for h in json.loads(r.stdout)["results"])
    # graph mode on an index built without the graph: a one-line error naming the fix, exit 2
    r = rag("search", "thorium reactor", "--mode", "graph", *common)
    assert r.returncode == 2 and "reindex" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert rag("docs", "delete", "no-such-doc", *common).returncode == 1


def test_the_command_line_and_bm25_search_do_not_import_torch(workdir):
    """Bug caught: an eager import on the config path (`inference/__init__` pulled the engine, hence
    torch, into every config model) costing every command ~1.4 s before it did anything, `rag
    --help` and a BM25-only `rag search` included."""
    probe = ("import sys, runpy; sys.argv = ['rag'] + sys.argv[1:]\n"
             "try:\n    runpy.run_module('rag', run_name='__main__')\n"
             "except SystemExit:\n    pass\n"
             "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH')")
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    docs = workdir / "torchless"
    docs.mkdir()
    (docs / "a.md").write_text("# Alpha\n\nThe alpha reactor runs on thorium salts.\n")
    common = ["--set", f"storage.path={workdir / 'st'}", "--set", "retrieval.mode=bm25"]
    index = subprocess.run([sys.executable, "-m", "rag", "index", str(docs), "--no-progress", *common],
                           capture_output=True, text=True, env=env, timeout=300)
    assert index.returncode == 0, index.stderr
    for args in (["--help"], ["search", "thorium reactor", *common]):
        r = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, env=env, timeout=300)
        assert r.stdout.strip().endswith("NO-TORCH"), (args, r.stdout[-500:], r.stderr[-2000:])
        if args[0] == "search":
            assert "Alpha" in r.stdout


def test_chunk_preview_and_config_errors(workdir):
    r = rag("chunk", str(workdir / "docs" / "a.md"), "--json")
    chunks = json.loads(r.stdout)
    assert chunks and chunks[0]["section"] == "Alpha" and chunks[0]["granularity"].startswith("recursive")
    r = rag("search", "x", "--set", "retrieval.mode=sparse")
    assert r.returncode == 2 and "retrieval.mode" in r.stderr and "'bm25', 'dense', 'hybrid' or 'graph'" in r.stderr
    r = rag("config", "check", "--set", "indexing.chunking.chunk_sise=3")
    assert r.returncode == 2 and "unknown key; allowed keys: chunkers" in r.stderr


def test_help_lists_every_command():
    """Exact names, one per help line (a substring check passed "index" on "reindex" alone)."""
    import re

    from rag.cli import COMMANDS

    out = rag("--help").stdout
    listed = re.findall(r"^    (\w+)\s", out.split("COMMAND", 2)[-1], flags=re.M)
    assert listed == list(COMMANDS)


def test_a_broken_command_fails_loudly(monkeypatch):
    """A command module that cannot be imported stops the CLI with its name; it used to vanish
    from `--help` silently (ImportError swallowed)."""
    from rag import cli

    monkeypatch.setattr(cli, "COMMANDS", (*cli.COMMANDS, "no_such_command"))
    with pytest.raises(cli.CommandImportError, match="'no_such_command' is broken"):
        cli.build_parser()
