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


def _drive(p: CitationMarkerProcessor, tok, ids: list[int], wants: list[str], eos: int, steps: int = 12) -> str:
    """Greedy decode where the model wants to write `wants` token by token, then EOS: each step
    the next wanted token gets the highest bias (the processor may override it)."""
    plan = [tok.encode(w, add_special_tokens=False) for w in wants]
    flat = [t for ts in plan for t in ts]
    out: list[int] = []
    at = 0
    two = tok.encode("2", add_special_tokens=False)[0]
    for _ in range(steps + len(flat)):
        bias = torch.zeros(len(tok))
        bias[two] = 3.0  # if it must cite, passage 2
        bias[flat[at] if at < len(flat) else eos] = 10.0
        t = int(p(ids + out, bias).argmax())
        out.append(t)
        if at < len(flat) and t == flat[at]:
            at += 1
        if t == eos:
            break
    return tok.decode(out[:-1] if out[-1] == eos else out)


def test_a_decimal_point_is_not_a_sentence_end():
    """Catches the forced marker cutting a decimal number at its point ("charges 0 [2]." for 0.20:
    the long answers of own-11/13/31 lost their prices this way), while a sentence that does end
    after a number still gets its marker, placed after the full stop."""
    tok = _tok()
    eos = tok.eos_token_id
    ids = tok.encode("The fee is", add_special_tokens=False)
    price = _drive(CitationMarkerProcessor(tok, 3, eos), tok, ids, [" 0", ".", "2", "0", " euros", "."], eos)
    assert price.replace(" ", "") == "0.20euros[2]."
    year = _drive(CitationMarkerProcessor(tok, 3, eos), tok, ids, [" 1", "8", "7", "4", "."], eos)
    assert year.replace(" ", "") == "1874.[2]"
    # and the next sentence needs its own marker again
    two = _drive(CitationMarkerProcessor(tok, 3, eos), tok, ids, [" 1", "8", "7", "4", ".", " It", " was", "."], eos)
    assert two.replace(" ", "") == "1874.[2]Itwas[2]."


def test_a_list_number_gets_no_marker():
    """Catches "1." at the head of a numbered list being cited as if it were a claim."""
    tok = _tok()
    eos = tok.eos_token_id
    ids = tok.encode("Steps:\n", add_special_tokens=False)
    got = _drive(CitationMarkerProcessor(tok, 3, eos), tok, ids, ["1", ".", " Book", " online", "."], eos)
    assert got.replace(" ", "") == "1.Bookonline[2]."
