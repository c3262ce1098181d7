"""Forced citation markers over the real SmolLM2 tokenizer (no model run)."""

from __future__ import annotations

import torch

from inference.structured.citation_markers import CitationMarkerProcessor


def _tok():
    from inference.model_loader import load_tokenizer, resolve_model_dir

    return load_tokenizer(resolve_model_dir("smollm2"))


def test_uncited_end_gets_a_marker_the_model_picks_then_ends_as_it_wanted():
    """Catches answers that end without a marker, markers naming absent passages, and a forced
    marker that swallows the end the model chose."""
    tok = _tok()
    eos = tok.eos_token_id
    p = CitationMarkerProcessor(tok, 3, eos, "I don't know")
    vocab = len(tok)
    ids = tok.encode("Velmora is the capital", add_special_tokens=False)
    bias = torch.zeros(vocab)
    bias[eos] = 10.0  # the model wants to stop now
    two = tok.encode("2", add_special_tokens=False)[0]
    bias[two] = 5.0  # and, if it must cite, prefers passage 2
    bias[tok.encode("7", add_special_tokens=False)[0]] = 8.0  # no passage 7: never allowed
    out: list[int] = []
    for _ in range(6):
        t = int(p(ids + out, bias.clone()).argmax())
        out.append(t)
        if t == eos:
            break
    assert tok.decode(out[:-1]).strip() == "[2]" and out[-1] == eos


def test_refusal_and_cited_sentences_are_left_alone():
    """Catches markers forced onto a refusal or onto a sentence that already has one."""
    tok = _tok()
    eos = tok.eos_token_id
    bias = torch.zeros(len(tok))
    bias[eos] = 10.0
    for text in ("I don't know based on the provided documents.", "Velmora [1]"):
        p = CitationMarkerProcessor(tok, 3, eos, "I don't know based on the provided documents.")
        ids = tok.encode(text, add_special_tokens=False)
        assert int(p(ids, bias.clone()).argmax()) == eos
