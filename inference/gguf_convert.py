"""Convert a GGUF checkpoint once into a cached HF-style directory.

Why: turning the GGUF vocabulary into a fast tokenizer costs ~13 s and dequantising costs a few
more; doing it on every start would dominate start-up. The directory is keyed by the GGUF's path,
size and mtime so an edited file gets a fresh conversion, and it is written into a temporary
directory then renamed so a crash never leaves a half-written cache behind.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch

from inference.cache_dir import cache_root

# llama.cpp's converter permutes Q/K rows of these architectures for its RoPE layout.
_PERMUTED_ARCHS = {"llama", "mistral"}

_LAYER_MAP = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}
_TOP_MAP = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}


# bump when the converted layout changes, so old conversions are not reused
CONVERT_FORMAT = 1


def cache_dir_for(gguf_path: Path) -> Path:
    """Keyed by the file's content, not its path: every virtualenv or clone holding the same GGUF
    shares one conversion (keying by path left one 514 MB copy per checkout)."""
    st = gguf_path.stat()
    digest = _content_digest(str(gguf_path.resolve()), st.st_size, st.st_mtime_ns)
    return cache_root() / f"{gguf_path.stem}-{digest}"


@functools.lru_cache(maxsize=16)
def _content_digest(path: str, size: int, mtime_ns: int) -> str:
    """~0.1 s per 100 MB, paid once per process and file version (size/mtime are part of the key)."""
    with open(path, "rb") as f:
        digest = hashlib.file_digest(f, "sha1")
    digest.update(f"|format={CONVERT_FORMAT}".encode())
    return digest.hexdigest()[:16]


def hf_name(gguf_name: str) -> str | None:
    if gguf_name in _TOP_MAP:
        return _TOP_MAP[gguf_name]
    parts = gguf_name.split(".")
    if parts[0] != "blk" or len(parts) != 4:
        return None
    mapped = _LAYER_MAP.get(parts[2])
    if mapped is None:
        return None
    return f"model.layers.{parts[1]}.{mapped}.{parts[3]}"


def unpermute(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Undo llama.cpp's interleaved-pair RoPE permutation (works for weights and biases)."""
    shape = w.shape
    return w.reshape(n_heads, shape[0] // n_heads // 2, 2, *shape[1:]).swapaxes(1, 2).reshape(shape)


def read_weights(gguf_path: Path) -> tuple[dict[str, torch.Tensor], str]:
    """Dequantise every tensor to float32 in HF naming and layout."""
    import gguf
    from gguf.quants import dequantize

    reader = gguf.GGUFReader(str(gguf_path))
    arch = str(reader.fields["general.architecture"].contents())
    n_head = int(reader.fields[f"{arch}.attention.head_count"].contents())
    kv_field = reader.fields.get(f"{arch}.attention.head_count_kv")
    n_kv = int(kv_field.contents()) if kv_field is not None else n_head
    out: dict[str, torch.Tensor] = {}
    for t in reader.tensors:
        name = hf_name(t.name)
        if name is None:
            continue
        arr = np.array(dequantize(t.data, t.tensor_type), dtype=np.float32)
        if arch in _PERMUTED_ARCHS:
            if ".q_proj." in name:
                arr = unpermute(arr, n_head)
            elif ".k_proj." in name:
                arr = unpermute(arr, n_kv)
        out[name] = torch.from_numpy(np.ascontiguousarray(arr))
    return out, arch


def convert(gguf_path: str | Path, force: bool = False) -> Path:
    """Return the cached HF-style directory for `gguf_path`, converting it on first use."""
    from safetensors.torch import save_file
    from transformers import AutoConfig, AutoTokenizer

    gguf_path = Path(gguf_path)
    target = cache_dir_for(gguf_path)
    if (target / "model.safetensors").exists() and not force:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=target.parent))
    try:
        folder, fname = str(gguf_path.parent), gguf_path.name
        config = AutoConfig.from_pretrained(folder, gguf_file=fname)
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=fname)
        weights, arch = read_weights(gguf_path)
        if "lm_head.weight" not in weights:
            config.tie_word_embeddings = True
        config.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        save_file(weights, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        (tmp / "source.json").write_text(json.dumps({"gguf": str(gguf_path.resolve()), "arch": arch}))
        os.chmod(tmp, 0o755)  # mkdtemp makes it private; the cache is meant to be shared
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target
