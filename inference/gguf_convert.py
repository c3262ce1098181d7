"""Convert a GGUF checkpoint once into a cached HF-style directory.

Why: turning the GGUF vocabulary into a fast tokenizer costs ~13 s and dequantising costs a few
more; doing it on every start would dominate start-up. The directory is keyed by the GGUF's content
(and `CONVERT_FORMAT`), and it is written into a temporary directory then renamed (the weights file
alone: temp file, then rename) so a crash never leaves a half-written cache behind.

Two levels: `convert_meta` writes only config + tokenizer (what the GGUF-block loader,
`inference.gguf_loader`, needs: its weights come straight from the GGUF); `convert` adds the
float32 `model.safetensors` for the float paths (`quantization: none` / `int8`). A directory from
either level is a valid cache for the other, so the layout did not change.
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
    path = str(gguf_path.resolve())
    version = f"{path}|{st.st_size}|{st.st_mtime_ns}|{st.st_ctime_ns}|{st.st_ino}"
    return cache_root() / f"{gguf_path.stem}-{_content_digest(path, version)}"


_DIGESTS = "gguf_digests.json"  # file version -> content digest, in the cache root
_DIGESTS_KEPT = 64


@functools.lru_cache(maxsize=16)
def _content_digest(path: str, version: str) -> str:
    """The digest of the file at `path` in its `version` (path, size, mtime, ctime, inode: any write
    or replacement changes one of them; ctime cannot be set back). Hashing reads the whole file,
    0.4 s for the 0.5B and 0.8 s for the 1.5B on a 2-core EPYC, which every process that loads
    the model paid (`rag ask` each time), so the result is remembered on disk per version."""
    memo = cache_root() / _DIGESTS
    try:
        known = json.loads(memo.read_text())
    except (OSError, ValueError):
        known = {}
    if not isinstance(known, dict):
        known = {}
    key = f"{version}|format={CONVERT_FORMAT}"
    if isinstance(known.get(key), str):
        return known[key]
    with open(path, "rb") as f:
        digest = hashlib.file_digest(f, "sha1")
    digest.update(f"|format={CONVERT_FORMAT}".encode())
    value = digest.hexdigest()[:16]
    known.pop(key, None)
    known[key] = value
    kept = dict(list(known.items())[-_DIGESTS_KEPT:])
    tmp = None
    try:  # best effort: a read-only cache or a concurrent writer only means hashing again later
        memo.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=memo.parent, prefix=".digests-")
        with os.fdopen(fd, "w") as out:
            json.dump(kept, out)
        os.chmod(tmp, 0o644)  # mkstemp makes it private; the cache is shared (as model_install)
        os.replace(tmp, memo)
    except OSError:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
    return value


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


class GGUFFileError(ValueError):
    """A file that is not a complete, readable GGUF; the message names the file."""


def open_gguf(gguf_path: str | Path):
    """`gguf.GGUFReader` (memory-mapped) with the failure modes of a bad file turned into one error
    naming it. A truncated file otherwise fails deep inside the reader ("cannot reshape array of
    size 399424 into shape (576,960)") or only once a tensor is read."""
    import gguf

    path = Path(gguf_path)
    try:
        size = path.stat().st_size
        reader = gguf.GGUFReader(str(path))
    except (ValueError, IndexError, OSError, KeyError, TypeError) as e:
        raise GGUFFileError(f"{path}: not a complete GGUF file (truncated or corrupt; {e})") from e
    end = max((t.data_offset + t.n_bytes for t in reader.tensors), default=0)
    if end > size:
        raise GGUFFileError(f"{path}: truncated GGUF: its tensors need {end} bytes, the file has {size}")
    return reader


def read_weights(gguf_path: Path, reader=None) -> tuple[dict[str, torch.Tensor], str]:
    """Dequantise every tensor to float32 in HF naming and layout."""
    from gguf.quants import dequantize

    reader = reader if reader is not None else open_gguf(gguf_path)
    arch, n_head, n_kv = head_counts(reader)
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


def head_counts(reader) -> tuple[str, int, int]:
    """(architecture, query heads, KV heads) from the GGUF header."""
    arch = str(reader.fields["general.architecture"].contents())
    n_head = int(reader.fields[f"{arch}.attention.head_count"].contents())
    kv_field = reader.fields.get(f"{arch}.attention.head_count_kv")
    n_kv = int(kv_field.contents()) if kv_field is not None else n_head
    return arch, n_head, n_kv


TABLE = "tensors.json"


def tensor_table(reader) -> dict:
    """What the block loader needs from the header: architecture, head counts and every tensor's
    name, type, shape and absolute byte range."""
    arch, n_head, n_kv = head_counts(reader)
    return {"arch": arch, "n_head": n_head, "n_kv": n_kv,
            "tensors": [{"name": t.name, "type": int(t.tensor_type), "shape": [int(d) for d in t.shape],
                         "offset": int(t.data_offset), "n_bytes": int(t.n_bytes)} for t in reader.tensors]}


def cached_tensor_table(gguf_path: str | Path) -> dict:
    """`tensor_table` kept in the conversion directory (`tensors.json`). Why: `GGUFReader` parses
    the whole vocabulary field by field (8 s for SmolLM2's 49k tokens on this box) though the
    loader needs only the tensor index. Written temp-then-rename, and only into a complete
    conversion directory; a file shorter than its tensors is refused, naming it."""
    gguf_path = Path(gguf_path)
    target = cache_dir_for(gguf_path)
    f = target / TABLE
    if f.exists():
        table = json.loads(f.read_text())
    else:
        table = tensor_table(open_gguf(gguf_path))
        if _meta_done(target):
            tmp = target / f".{TABLE}.tmp-{os.getpid()}"
            try:
                tmp.write_text(json.dumps(table))
                os.chmod(tmp, 0o644)
                os.replace(tmp, f)
            except OSError:
                pass  # a read-only shared cache: the table is rebuilt next time
            finally:
                tmp.unlink(missing_ok=True)
    size = gguf_path.stat().st_size
    end = max((t["offset"] + t["n_bytes"] for t in table["tensors"]), default=0)
    if end > size:
        raise GGUFFileError(f"{gguf_path}: truncated GGUF: its tensors need {end} bytes, the file has {size}")
    return table


def _meta_done(target: Path) -> bool:
    # source.json is written last inside the temp dir, so it marks a complete conversion (old
    # full conversions have it too)
    return (target / "source.json").exists() and (target / "config.json").exists()


def convert_meta(gguf_path: str | Path, force: bool = False) -> Path:
    """Config + tokenizer only (no float weights): the cached directory for the GGUF-block loader."""
    gguf_path = Path(gguf_path)
    target = cache_dir_for(gguf_path)
    if _meta_done(target) and not force:
        return target
    _build(gguf_path, target, open_gguf(gguf_path), weights=False)
    return target


def convert(gguf_path: str | Path, force: bool = False) -> Path:
    """Return the cached HF-style directory for `gguf_path` with float32 weights, converting it on
    first use (a config+tokenizer-only directory from `convert_meta` just gains its weights file)."""
    gguf_path = Path(gguf_path)
    target = cache_dir_for(gguf_path)
    if (target / "model.safetensors").exists() and not force:
        return target
    reader = open_gguf(gguf_path)  # a bad file fails here, naming it, before anything is written
    if _meta_done(target) and not force:
        from safetensors.torch import save_file

        weights, _ = read_weights(gguf_path, reader)
        tmp = target / f".model.safetensors.tmp-{os.getpid()}"
        try:
            save_file(weights, str(tmp), metadata={"format": "pt"})
            os.chmod(tmp, 0o644)
            os.replace(tmp, target / "model.safetensors")
        finally:
            tmp.unlink(missing_ok=True)
        return target
    _build(gguf_path, target, reader, weights=True)
    return target


def _build(gguf_path: Path, target: Path, reader, weights: bool) -> None:
    from safetensors.torch import save_file
    from transformers import AutoConfig, AutoTokenizer

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=target.parent))
    try:
        folder, fname = str(gguf_path.parent), gguf_path.name
        config = AutoConfig.from_pretrained(folder, gguf_file=fname)
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=fname)
        arch, _, _ = head_counts(reader)
        if not any(t.name == "output.weight" for t in reader.tensors):
            config.tie_word_embeddings = True
        config.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if weights:
            state, _ = read_weights(gguf_path, reader)
            save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
            os.chmod(tmp / "model.safetensors", 0o644)
        (tmp / TABLE).write_text(json.dumps(tensor_table(reader)))
        (tmp / "source.json").write_text(json.dumps({"gguf": str(gguf_path.resolve()), "arch": arch}))
        os.chmod(tmp, 0o755)  # mkdtemp makes it private; the cache is meant to be shared
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
