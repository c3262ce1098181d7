"""An encoder directory's tokenizer as transformers builds it, kept so later processes skip transformers.

Why: `import transformers` plus `AutoTokenizer.from_pretrained` is ~1.2 s of every process that
embeds a query (`rag ask`, `rag search`, `rag index`), while the Rust tokenizer it wraps loads in
~0.1 s. The directory's own tokenizer.json is not enough: transformers' tokenizer classes complete
the pipeline in Python (multilingual-e5's `<s>`, `<pad>`, `</s>`, `<unk>`, `<mask>` come from
tokenizer_config, not tokenizer.json; Qwen2's class adds an NFC normaliser). So the first load
asks transformers and writes down its Rust tokenizer and the settings a call reads (padding and
truncation sides, pad token, input names, length limit) under `<cache root>/tokenizers/`, keyed
by the directory, its tokenizer files' sizes and times, and the transformers version (another
version is asked again). Best effort: an unwritable cache means asking transformers each time.
The engine keeps its own snapshot beside each GGUF conversion (`inference/tokenizer.py`;
`inference/` stands alone).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from .e5_package import cache_root

_FORMAT = 1
_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
          "vocab.txt", "sentencepiece.bpe.model", "tokenizer.model")


def _key(root: Path) -> str:
    try:
        version = metadata.version("transformers")
    except metadata.PackageNotFoundError:
        version = "none"
    parts = [str(root.resolve()), version]
    for name in _FILES:
        try:
            st = (root / name).stat()
            parts.append(f"{name}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}")
        except OSError:
            continue
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:24]


def _take(root: Path) -> dict[str, Any]:
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(str(root))
    backend = getattr(hf, "backend_tokenizer", None)
    if backend is None:
        raise ValueError(f"tokenizer of {str(root)!r} has no fast (Rust) backend")
    return {"format": _FORMAT, "tokenizer": backend.to_str(), "padding_side": hf.padding_side,
            "truncation_side": hf.truncation_side, "pad_token": hf.pad_token, "pad_token_id": hf.pad_token_id,
            "pad_token_type_id": int(getattr(hf, "pad_token_type_id", 0) or 0),
            "model_input_names": list(hf.model_input_names),
            "model_max_length": min(int(hf.model_max_length), int(1e30))}


def load(path: str | Path) -> tuple[Tokenizer, dict[str, Any]]:
    """(a new Rust tokenizer with truncation and padding off, the call settings) of a local model
    directory, exactly as transformers would build them."""
    root = Path(path)
    file = cache_root() / "tokenizers" / f"{_key(root)}.json"
    try:
        snap = json.loads(file.read_text(encoding="utf-8"))
        if not isinstance(snap, dict) or snap.get("format") != _FORMAT:
            snap = None
    except (OSError, ValueError):
        snap = None
    if snap is None:
        snap = _take(root)
        try:
            file.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".snapshot-", dir=file.parent)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    json.dump(snap, f)
                os.chmod(tmp, 0o644)  # the cache is shared between users
                os.replace(tmp, file)
            finally:
                Path(tmp).unlink(missing_ok=True)
        except OSError:
            pass
    tok = Tokenizer.from_str(snap["tokenizer"])
    tok.no_truncation()
    tok.no_padding()
    return tok, {k: v for k, v in snap.items() if k != "tokenizer"}
