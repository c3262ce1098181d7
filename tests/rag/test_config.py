"""Pipeline config: embedded defaults, YAML files, dotted overrides and error messages."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rag.config import RagConfig, load_config
from rag.config_loader import ConfigError, apply_overrides

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def test_default_yaml_is_the_embedded_defaults():
    # configs/default.yaml documents the defaults; it must not drift from the code.
    assert load_config(CONFIGS / "default.yaml").to_dict() == RagConfig().to_dict()


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_config_validates_and_round_trips(path, tmp_path):
    cfg = load_config(path)
    dumped = tmp_path / "dump.yaml"
    dumped.write_text(cfg.to_yaml())
    assert load_config(dumped).to_dict() == cfg.to_dict()


def test_overrides_are_typed_and_reach_nested_lists():
    cfg = load_config(None, ["retrieval.fusion.k=30", "retrieval.mode=bm25", "storage.path=/tmp/x",
                             "indexing.chunking.chunkers.0.chunk_size=128"])
    assert cfg.retrieval.fusion.k == 30
    assert cfg.retrieval.mode == "bm25"
    assert cfg.storage.path == "/tmp/x"
    assert cfg.indexing.chunking.chunkers[0].chunk_size == 128


def test_off_stays_a_string_in_files_and_overrides(tmp_path):
    """YAML 1.1 would read `off` as False; option values like compress.type: off must survive."""
    p = tmp_path / "c.yaml"
    p.write_text("compress:\n  type: off\nrerank:\n  type: none\n  fp16: true\n")
    cfg = load_config(str(p), ["query.rewrite.enabled=false"])
    assert cfg.compress.type == "off" and cfg.rerank.fp16 is True and cfg.query.rewrite.enabled is False
    assert load_config(None, ["compress.type=off"]).compress.type == "off"


def test_override_can_replace_a_list_with_yaml():
    cfg = load_config(None, ["indexing.chunking.chunkers=[{type: none}]"])
    assert [c.type for c in cfg.indexing.chunking.chunkers] == ["none"]


def test_unknown_key_names_path_and_allowed_keys(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text(yaml.safe_dump({"retrieval": {"fusion": {"kk": 3}}}))
    with pytest.raises(ConfigError) as e:
        load_config(f)
    msg = str(e.value)
    assert "retrieval.fusion.kk: unknown key" in msg
    assert "allowed keys:" in msg and "weights" in msg


def test_bad_value_names_path_and_allowed_values():
    with pytest.raises(ConfigError) as e:
        load_config(None, ["retrieval.mode=sparse"])
    msg = str(e.value)
    assert "retrieval.mode" in msg and "'bm25', 'dense', 'hybrid' or 'graph'" in msg and "sparse" in msg


def test_unknown_top_level_section():
    with pytest.raises(ConfigError, match="retriever: unknown key; allowed keys: storage, indexing"):
        load_config(None, ["retriever.k=3"])


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("retrieval: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("just a string")
    with pytest.raises(ConfigError, match="must be a mapping"):
        load_config(scalar)


@pytest.mark.parametrize("item", ["novalue", "=3", "indexing.chunking.chunkers.9.chunk_size=1"])
def test_malformed_overrides(item):
    with pytest.raises(ConfigError):
        apply_overrides(RagConfig().to_dict(), [item])
