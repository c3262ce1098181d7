"""Grounded extractive decoding over real tokenizers (SmolLM2's GPT-2-style BPE, and Qwen2.5's
byte-level BPE with CJK when its GGUF packages are installed), without running a model."""

from __future__ import annotations

import random

import pytest
import torch

from inference.structured import GroundedSpanProcessor, span_sources
from inference.structured.span_constraint import normalize_passage, word_edges
from inference.structured.token_bytes import token_bytes

PASSAGES = [
    "The Eiffel Tower was completed in 1889 for the World's Fair in Paris.",
    "Mount Everest, at 8,849 metres, is Earth's highest mountain above sea level.",
    "臺北市是中華民國的首都，龍山寺建於1738年。",
]
REFUSAL = "I don't know based on the provided documents."


@pytest.fixture(scope="module", params=["smollm2", "qwen"])
def tok(request):
    """Both tokenizer families: SmolLM2's and Qwen's byte-level BPE (the packaged Qwen is
    assembled by the shared `qwen_name` fixture, which skips only when its packages are absent)."""
    from inference.model_loader import load_tokenizer, resolve_model_dir

    name = request.getfixturevalue("qwen_name") if request.param == "qwen" else "smollm2"
    return load_tokenizer(resolve_model_dir(name))


def _eos(tok) -> int:
    return tok.eos_token_id


def _drive(proc, tok, ids: list[int], vocab: int) -> list[bool]:
    """Feed `ids` one by one; report whether each was allowed, then whether EOS was."""
    ok = []
    for k in range(len(ids) + 1):
        masked = proc(ids[:k], torch.zeros(vocab))
        want = ids[k] if k < len(ids) else _eos(tok)
        ok.append(bool(torch.isfinite(masked[want])))
    return ok


def test_token_bytes_round_trip_cjk_and_english(tok):
    """Catches a wrong byte map: concatenated token bytes must equal the UTF-8 of the text."""
    tb = token_bytes(tok)
    for text in PASSAGES + ["龍與鳳凰 in 2024", " naïve café"]:
        ids = tok.encode(text, add_special_tokens=False)
        assert b"".join(tb.bytes_of[i] for i in ids) == text.encode("utf-8")


def test_any_whole_word_substring_is_allowed_as_the_model_would_tokenise_it(tok):
    """Catches whole-word spans refused because they start or end mid-token of the passage
    ("849" inside "8,849", "Tower" after "Eiffel"), and split CJK characters refused."""
    vocab = len(tok) + 64  # logits rows are often padded past the tokenizer size
    rng = random.Random(0)
    subs = ["Paris", "1889", "Eiffel Tower", "849 metres", "龍山寺", "1738年", "中華民國的首都", "mountain above",
            "Earth's highest", "Tower was"]
    for _ in range(20):
        p = rng.choice(PASSAGES)
        starts, ends = word_edges(p)
        b = p.encode("utf-8")
        a = rng.choice(starts)
        e = rng.choice(sorted(x for x in ends if a < x <= a + 30) or [len(b)])
        subs.append(b[a:e].decode("utf-8").strip() or p)
    for sub in subs:
        proc = GroundedSpanProcessor(PASSAGES, tok, REFUSAL, eos_token_id=_eos(tok))
        ids = tok.encode(sub, add_special_tokens=False)
        assert all(_drive(proc, tok, ids, vocab)), sub


def test_spans_are_whole_words(tok):
    """Catches a span that starts inside a word ("iffel Tower", "se names") or stops inside one
    ("Pari"): the answer is whole words of the passage, whatever the model's tokens are."""
    vocab = len(tok) + 64
    for sub in ("iffel Tower", "untain above"):
        proc = GroundedSpanProcessor(PASSAGES, tok, REFUSAL, eos_token_id=_eos(tok))
        assert not all(_drive(proc, tok, tok.encode(sub, add_special_tokens=False), vocab)), sub
    proc = GroundedSpanProcessor(PASSAGES, tok, REFUSAL, eos_token_id=_eos(tok))
    ok = _drive(proc, tok, tok.encode(" Pari", add_special_tokens=False), vocab)
    assert all(ok[:-1]) and not ok[-1]  # every token fits, but EOS is masked mid-word


def test_text_outside_the_passages_is_masked(tok):
    """Catches a mask that lets the model continue past or outside every passage."""
    vocab = len(tok) + 64
    proc = GroundedSpanProcessor(PASSAGES, tok, REFUSAL, eos_token_id=_eos(tok))
    ids = tok.encode(" Paris is lovely", add_special_tokens=False)
    assert not all(_drive(proc, tok, ids, vocab)[:-1])
    proc = GroundedSpanProcessor(PASSAGES, tok, REFUSAL, eos_token_id=_eos(tok))
    first = proc([], torch.zeros(vocab))
    assert not torch.isfinite(first[_eos(tok)])  # an empty span is not an answer


def test_random_walks_stay_verbatim_and_cite_their_passage(tok):
    """Catches any path (random logits, greedy) that produces text no passage contains."""
    vocab = len(tok) + 64
    gen = torch.Generator().manual_seed(0)
    for trial in range(12):
        proc = GroundedSpanProcessor(PASSAGES, tok, None, eos_token_id=_eos(tok), max_tokens=8)
        ids: list[int] = []
        for _ in range(8):
            logits = proc(ids, torch.randn(vocab, generator=gen))
            t = int(logits.argmax())
            if t == _eos(tok):
                break
            ids.append(t)
        text = proc.answer_text()  # cut back to whole words when max_tokens stopped it mid-word
        assert text.strip(), trial
        assert text in tok.decode(ids)
        assert any(" ".join(text.split()) in normalize_passage(p) for p in PASSAGES), text
        assert span_sources(text, PASSAGES), text


def test_refusal_path_and_margin(tok):
    """Catches a refusal that cannot be written completely or is not reported as refused, and a
    step-0 margin decision that masks the wrong tokens. The old check of the refusal path
    (`isfinite(out2).sum() <= 4`) passed when every token was masked (the decode would then sample
    from all -inf logits); the allowed set must be exactly the tokens that start the refusal."""
    vocab = len(tok) + 64
    ref_ids = tok.encode(REFUSAL, add_special_tokens=False)
    proc = GroundedSpanProcessor(PASSAGES, tok, REFUSAL, eos_token_id=_eos(tok))
    assert all(_drive(proc, tok, ref_ids, vocab))
    assert proc.refused and proc.margin == 0.0  # flat logits: refusal start as likely as any span
    # A margin threshold decides the path at step 0: above it only the refusal can start.
    bias = torch.zeros(vocab)
    bias[ref_ids[0]] = 5.0
    forced = GroundedSpanProcessor(PASSAGES, tok, REFUSAL, eos_token_id=_eos(tok), refuse_margin=10.0)
    out = forced([], bias)
    assert not torch.isfinite(out[ref_ids[0]])  # "I" occurs in no passage: the span path excludes it
    assert forced.margin == pytest.approx(5.0, abs=1e-4)
    forced2 = GroundedSpanProcessor(PASSAGES, tok, REFUSAL, eos_token_id=_eos(tok), refuse_margin=1.0)
    out2 = forced2([], bias)
    tb = token_bytes(tok)
    starts = {i for i, b in enumerate(tb.bytes_of) if b is not None and REFUSAL.encode("utf-8").startswith(b)}
    assert ref_ids[0] in starts
    assert set(torch.isfinite(out2).nonzero().flatten().tolist()) == starts  # the refusal's first tokens, no EOS
    assert forced2.margin == pytest.approx(5.0, abs=1e-4)
    paris = tok.encode(" Paris", add_special_tokens=False)[0]
    assert bool(torch.isfinite(out[paris]))  # below the margin the span path is open (not all masked either)


def test_span_sources_without_spaces():
    """Catches CJK citations that need word boundaries."""
    assert span_sources("龍山寺", PASSAGES) == [2]
    assert span_sources("Paris", PASSAGES) == [0]
    assert span_sources("Paris  Everest", PASSAGES) == []


def test_token_bytes_equal_the_byte_map_char_by_char(tok):
    """Bug caught: the one-pass `str.translate` conversion of byte-level pieces disagreeing with
    GPT-2's byte map read char by char (a char below 256 that the map never produces, such as a
    raw space, given a byte instead of no bytes; a char above 255 passing through), which would
    let the span constraint allow tokens whose bytes are not in the passage."""
    from inference.structured.token_bytes import _byte_decoder

    dec = _byte_decoder()
    table = token_bytes(tok)
    pieces = tok.convert_ids_to_tokens(list(range(len(tok))))
    special = set(tok.all_special_ids) | set(tok.added_tokens_decoder)
    checked = 0
    for i, piece in enumerate(pieces):
        if i in special or piece is None:
            continue
        want = bytes(dec[c] for c in piece) if all(c in dec for c in piece) else None
        assert table.bytes_of[i] == (want if want and len(want) <= table.max_len else None), (i, piece)
        checked += 1
    assert checked > 45000
    assert _piece_bytes_of(" a") is None and _piece_bytes_of("Ġa") == b" a"


def _piece_bytes_of(piece: str):
    from inference.structured.token_bytes import _byte_decoder, _byte_table, _piece_bytes

    return _piece_bytes(piece, _byte_table(_byte_decoder()), True, None, 0)
