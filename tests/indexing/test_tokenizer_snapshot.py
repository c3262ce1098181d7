"""indexing/tokenizer_snapshot.py: a model directory's tokenizer, as transformers builds it, kept
in the cache so later processes need no transformers."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from indexing import tokenizer_snapshot
from indexing.models import resolve_model


def _copy(tmp_path: Path) -> Path:
    src = Path(resolve_model("minilm"))
    dst = tmp_path / "model"
    dst.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt", "config.json"):
        if (src / name).is_file():
            shutil.copy(src / name, dst / name)
    return dst


def test_taken_once_then_read_without_transformers(tmp_path, monkeypatch):
    """Bugs caught: every process loading transformers anyway (the snapshot not written, or
    written where it is not looked for), and the snapshot's tokenizer differing from the one
    transformers builds."""
    monkeypatch.setenv("RAG_CACHE_DIR", str(tmp_path / "cache"))
    d = _copy(tmp_path)
    tok, meta = tokenizer_snapshot.load(d)
    files = list((tmp_path / "cache" / "tokenizers").glob("*.json"))
    assert len(files) == 1 and meta["pad_token"] == "[PAD]"
    code = ("import sys\nfrom indexing import tokenizer_snapshot\n"
            f"tok, _ = tokenizer_snapshot.load({str(d)!r})\n"
            "print(tok.encode('Hello, World!').ids, 'transformers' in sys.modules)")
    env = {**os.environ, "RAG_CACHE_DIR": str(tmp_path / "cache")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    ids, imported = out.stdout.rsplit(" ", 1)
    assert imported.strip() == "False"
    from transformers import AutoTokenizer

    assert json.loads(ids) == AutoTokenizer.from_pretrained(str(d)).encode("Hello, World!")


def test_a_changed_tokenizer_is_taken_again(tmp_path, monkeypatch):
    """Bugs caught: a snapshot outliving the files it came from (a tokenizer_config edited to
    lower-case no more, or another pad token, would keep the old behaviour), a corrupt snapshot
    failing the load, an unwritable cache failing it."""
    monkeypatch.setenv("RAG_CACHE_DIR", str(tmp_path / "cache"))
    d = _copy(tmp_path)
    tok, _ = tokenizer_snapshot.load(d)
    assert tok.encode("HELLO").tokens[1] == "hello"
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    cfg["do_lower_case"] = False
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    (d / "tokenizer.json").unlink()  # transformers then builds the WordPiece pipeline from the config
    tok2, _ = tokenizer_snapshot.load(d)
    assert tok2.encode("HELLO").tokens[1] != "hello"
    assert len(list((tmp_path / "cache" / "tokenizers").glob("*.json"))) == 2
    for f in (tmp_path / "cache" / "tokenizers").glob("*.json"):
        f.write_text("{not json")
    assert tokenizer_snapshot.load(d)[0].encode("HELLO").ids == tok2.encode("HELLO").ids
    monkeypatch.setenv("RAG_CACHE_DIR", "/proc/no-such-cache")
    assert tokenizer_snapshot.load(d)[0].encode("HELLO").ids == tok2.encode("HELLO").ids
