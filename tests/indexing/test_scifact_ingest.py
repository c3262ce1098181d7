"""The acceptance run: SciFact's BEIR corpus.jsonl ingests as is, and a second run is a no-op."""

from __future__ import annotations

from pathlib import Path

import pytest

from indexing.pipeline import ingest


@pytest.mark.shared
@pytest.mark.slow
def test_scifact_ingest_then_noop(tmp_path: Path, shared_datasets: Path):
    corpus = shared_datasets / "scifact" / "corpus.jsonl"
    if not corpus.is_file():
        pytest.skip(f"{corpus} is absent")
    first = ingest([corpus], tmp_path / "store.sqlite", progress=False)
    assert (first.new, first.changed, first.failed) == (5183, 0, [])
    assert first.chunks["recursive-200"] > 5183
    second = ingest([corpus], tmp_path / "store.sqlite", progress=False)
    assert (second.new, second.changed, second.unchanged) == (0, 0, 5183)
    assert second.timings["chunk"] == 0.0
