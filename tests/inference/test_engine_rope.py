"""RoPE scaling variants agree with transformers' own implementation."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from inference.layers.rotary import inv_frequencies, rope_params


@pytest.mark.parametrize("scaling", [
    {"rope_type": "linear", "factor": 4.0},
    {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "original_max_position_embeddings": 8192},
])
def test_scaled_inv_freq_matches_transformers(scaling):
    cfg = LlamaConfig(hidden_size=256, num_attention_heads=4, rope_parameters={"rope_theta": 500000.0, **scaling},
                      max_position_embeddings=131072)
    ours = inv_frequencies(64, rope_params(cfg))
    theirs, _ = ROPE_INIT_FUNCTIONS[scaling["rope_type"]](cfg, "cpu")
    assert torch.allclose(ours, theirs.float(), rtol=1e-6, atol=0)
