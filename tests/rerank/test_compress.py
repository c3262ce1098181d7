"""Prompt compression: forced markers survive verbatim, the budget holds, nothing touches the network."""

from __future__ import annotations

import re

import numpy as np
import pytest

from rerank import CompressorConfig, build_compressor

QUESTION = "How tall is the Eiffel Tower and when was it built?"
CONTEXTS = [
    "[1] The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France. It is named "
    "after the engineer Gustave Eiffel, whose company designed and built the tower from 1887 to 1889 as the "
    "entrance arch to the 1889 World's Fair.",
    "[2] Photosynthesis is a process used by plants and other organisms to convert light energy into chemical "
    "energy that, through cellular respiration, can later be released to fuel the organism's activities.",
    "[3] The tower is 330 metres tall, about the same height as an 81-storey building, and the tallest "
    "structure in Paris. Its base is square, measuring 125 metres on each side.",
]


@pytest.fixture(scope="module")
def engine_compressor():
    return build_compressor({"type": "engine", "target_tokens": 60})


def _markers(text: str) -> list[str]:
    return re.findall(r"\[\d+\]", text)


def test_engine_keeps_markers_and_budget(engine_compressor, no_network):
    res = engine_compressor.compress(QUESTION, CONTEXTS)
    assert res.tokens_in > 120 and res.tokens_out <= 60
    assert res.ratio > 2.0 and res.seconds > 0
    assert [c[:3] for c in res.contexts] == ["[1]", "[2]", "[3]"]
    assert _markers(res.text()) == ["[1]", "[2]", "[3]"]
    assert "330" in res.contexts[2] and "1889" in res.contexts[0]  # numbers are kept
    # Question-aware: the off-topic context keeps the smallest share of its tokens.
    kept = [engine_compressor.count_tokens(o) / engine_compressor.count_tokens(i)
            for o, i in zip(res.contexts, CONTEXTS, strict=True)]
    assert kept[1] < min(kept[0], kept[2])


def test_engine_ratio_budget_and_passthrough(engine_compressor):
    loose = build_compressor({"type": "engine", "ratio": 0.5, "target_tokens": None}, model=(
        engine_compressor.tok, engine_compressor.model))
    res = loose.compress(QUESTION, CONTEXTS)
    assert res.tokens_out <= round(res.tokens_in * 0.5) + 2  # decode/re-encode may merge a token or two
    off = build_compressor({"type": "off"})
    assert off.compress(QUESTION, CONTEXTS).contexts == CONTEXTS
    assert loose.to_config()["ratio"] == 0.5 and loose.to_config()["type"] == "engine"


def test_engine_compressor_on_the_shared_engine(engine_compressor, smollm2_engine, no_network):
    """Scored by the in-process engine's prompt logprobs (no second model copy): the same token
    surprisals as the transformers copy, so the same compression."""
    shared = build_compressor({"type": "engine", "target_tokens": 60}, engine=smollm2_engine)
    assert shared.model is None
    ids = [shared.tok(c, add_special_tokens=False).input_ids for c in CONTEXTS]
    q = shared.tok("\nQuestion: " + QUESTION, add_special_tokens=False).input_ids
    for (s_eng, q_eng), (s_hf, q_hf) in zip(shared._score_all(ids, q), engine_compressor._score_all(ids, q),
                                            strict=True):
        np.testing.assert_allclose(s_eng, s_hf, atol=2e-3)
        assert abs(q_eng - q_hf) < 2e-3
    assert shared.compress(QUESTION, CONTEXTS).contexts == engine_compressor.compress(QUESTION, CONTEXTS).contexts


def test_llmlingua_offline_keeps_markers_and_budget(no_network):
    comp = build_compressor({"type": "llmlingua", "target_tokens": 90})
    res = comp.compress(QUESTION, CONTEXTS)
    assert res.tokens_out <= 90 * 1.2  # LLMLingua's budget is approximate (it counts with tiktoken)
    assert res.tokens_out < res.tokens_in
    kept = [c for c in res.contexts if c]
    assert kept, "everything was dropped"
    for i, c in enumerate(res.contexts):
        assert not c or c.startswith(f"[{i + 1}] ")  # a kept context keeps its own marker verbatim
    # The off-topic context keeps the smallest share of its words (any compression shortens every
    # context, so "shorter than before" could not fail; a dropped context keeps 0).
    kept = [len(o.split()) / len(i.split()) for o, i in zip(res.contexts, CONTEXTS, strict=True)]
    assert kept[1] < min(kept[0], kept[2]), kept


def test_config_validation():
    with pytest.raises(ValueError, match="target_tokens or ratio"):
        CompressorConfig(type="engine", ratio=None)
    with pytest.raises(ValueError, match="extra"):
        CompressorConfig.model_validate({"type": "engine", "rate": 0.3})
