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
    """Catches markers forced onto a refusal, onto a sentence that already has one, or after the
    last full stop onto an empty sentence."""
    tok = _tok()
    eos = tok.eos_token_id
    bias = torch.zeros(len(tok))
    bias[eos] = 10.0
    # "[1]." then EOS: the sentence after the full stop is empty, so no "[n]" may be appended
    # (it was: "Velmora is the capital [1]. [3]", a marker citing nothing the answer says)
    for text in ("I don't know based on the provided documents.", "Velmora [1]", "Velmora is the capital [1].",
                 "Velmora is the capital [1].\n"):
        p = CitationMarkerProcessor(tok, 3, eos, "I don't know based on the provided documents.")
        ids = tok.encode(text, add_special_tokens=False)
        assert int(p(ids, bias.clone()).argmax()) == eos


def test_a_marker_closed_with_its_full_stop_starts_a_new_sentence():
    """Catches "]." (one token in SmolLM2's vocabulary) not counting as a closed marker plus a
    sentence end: the next sentence must again get a marker before it ends, and only then."""
    tok = _tok()
    eos = tok.eos_token_id
    stop = tok.encode(".", add_special_tokens=False)[0]
    bias = torch.zeros(len(tok))
    bias[stop] = 10.0  # the model wants to end the second sentence
    p = CitationMarkerProcessor(tok, 3, eos)
    ids = tok.encode("Velmora is the capital [1]. It lies on the river Ost", add_special_tokens=False)
    assert any(tok.decode([i]) == "]." for i in ids)  # the case this test is about
    forced = p(ids, bias.clone())
    assert int(forced.argmax()) in p.open_ids  # uncited second sentence: "[" first
