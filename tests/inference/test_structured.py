"""JSON-schema constrained decoding: the automaton and the token mask over a real vocabulary."""

from __future__ import annotations

import json

import pytest
import torch

from inference.structured import JsonAutomaton, JsonSchemaLogitsProcessor, SchemaError

SCHEMA = {
    "type": "object",
    "properties": {
        "queries": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3},
        "n": {"type": "integer"},
        "kind": {"enum": ["fact", "howto"]},
        "ok": {"type": "boolean"},
        "score": {"type": "number"},
    },
}


@pytest.mark.parametrize(
    "text,complete",
    [
        ('{"queries":["a b","c\\"d"],"n":-12,"kind":"fact","ok":true,"score":0.5}', True),
        ('{"queries":["x"],"n":0,"kind":"howto","ok":false,"score":-3}', True),
        ('{"queries":[],"n":1,"kind":"fact","ok":true,"score":1}', False),  # minItems
        ('{"queries":["a","b","c","d"],"n":1,"kind":"fact","ok":true,"score":1}', False),  # maxItems
        ('{"queries":["x"],"n":01,"kind":"fact","ok":true,"score":1}', False),  # leading zero
        ('{"queries":["x"],"n":1.5,"kind":"fact","ok":true,"score":1}', False),  # integer
        ('{"queries":["x"],"n":1,"kind":"other","ok":true,"score":1}', False),  # enum
        ('{"n":1}', False),  # key order and required keys
        ('{"queries":["x"], "n":1,"kind":"fact","ok":true,"score":1}', False),  # no whitespace
    ],
)
def test_automaton_accepts_exactly_the_schema(text, complete):
    a = JsonAutomaton(SCHEMA)
    state = a.feed(a.start, text)
    assert a.is_complete(state) is complete
    if complete:
        json.loads(text)


def test_unsupported_schema_is_rejected():
    with pytest.raises(SchemaError):
        JsonAutomaton({"type": "tuple"})


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from inference.model_loader import resolve_model_dir

    return AutoTokenizer.from_pretrained(resolve_model_dir("smollm2"))


def test_masked_random_decoding_always_parses(tokenizer):
    # Even with random logits (a model that knows nothing), the output must parse and match.
    schema = {"type": "object", "properties": {"queries": {"type": "array", "items": {"type": "string",
              "maxLength": 12}, "minItems": 1, "maxItems": 2}, "ok": {"type": "boolean"}}}
    for seed in range(3):
        proc = JsonSchemaLogitsProcessor(schema, tokenizer)
        g = torch.Generator().manual_seed(seed)
        ids: list[int] = []
        for _ in range(200):
            logits = proc(ids, torch.randn(len(tokenizer), generator=g))
            nxt = int(torch.argmax(logits))
            if nxt == tokenizer.eos_token_id:
                break
            ids.append(nxt)
        else:
            pytest.fail("constrained decoding did not finish")
        out = json.loads(tokenizer.decode(ids))
        assert set(out) == {"queries", "ok"} and 1 <= len(out["queries"]) <= 2
        assert all(len(q) <= 12 for q in out["queries"]) and isinstance(out["ok"], bool)


def test_string_masks_equal_feeding_every_token(tokenizer):
    """The in-string fast path (plain tokens cut to the room left under maxLength) against the
    reference: feeding every vocabulary token to the automaton. Bug: a token longer than the room
    left allowed (an over-long string, then a dead state), one that fits refused, or a quote /
    escape token mishandled."""
    schema = {"type": "object", "properties": {"q": {"type": "array", "items": {"type": "string", "maxLength": 10}},
                                               "free": {"type": "string"}}}
    proc = JsonSchemaLogitsProcessor(schema, tokenizer)
    a, vocab = proc.automaton, proc.vocab
    states = [a.feed(a.start, '{"q":["'), a.feed(a.start, '{"q":["abcdefg'), a.feed(a.start, '{"q":["abcdefghij'),
              a.feed(a.start, '{"q":["ab","cd'), a.feed(a.start, '{"q":[],"free":"abc')]
    for state in states:
        assert state is not None and state[-1][0] == "S"
        ref = torch.tensor([s is not None and a.feed(state, s) is not None for s in vocab.strings])
        got = proc.allowed(state)
        assert torch.equal(got, ref), (state, int((got != ref).sum()))
    assert int(proc.allowed(states[2]).sum()) < int(proc.allowed(states[0]).sum())  # the cap bites


def test_eos_only_when_complete(tokenizer):
    proc = JsonSchemaLogitsProcessor({"type": "array", "items": {"type": "integer"}}, tokenizer)
    prefix = tokenizer.encode("[1,2", add_special_tokens=False)
    logits = proc(prefix, torch.zeros(len(tokenizer)))
    assert logits[tokenizer.eos_token_id] == float("-inf")
    done = tokenizer.encode("[1,2]", add_special_tokens=False)
    proc2 = JsonSchemaLogitsProcessor({"type": "array", "items": {"type": "integer"}}, tokenizer)
    logits = proc2(done, torch.zeros(len(tokenizer)))
    assert torch.isfinite(logits).sum() == 1 and logits[tokenizer.eos_token_id] == 0


def test_budget_closes_the_document_in_time(tokenizer):
    schema = {"type": "object", "properties": {"queries": {"type": "array", "items": {"type": "string"},
                                                          "minItems": 1}}}
    a = JsonAutomaton(schema)
    state = a.feed(a.start, '{"queries":["abc')
    assert a.completion(state) == '"]}'
    assert a.completion(a.start) == '{"queries":[""]}'
    for budget in (12, 20, 40):
        proc = JsonSchemaLogitsProcessor(schema, tokenizer, max_tokens=budget)
        g = torch.Generator().manual_seed(budget)
        ids: list[int] = []
        while len(ids) < budget:
            nxt = int(torch.argmax(proc(ids, torch.randn(len(tokenizer), generator=g))))
            if nxt == tokenizer.eos_token_id:
                break
            ids.append(nxt)
        assert json.loads(tokenizer.decode(ids))["queries"]


def test_sampling_params_json_schema_through_the_engine(engine_factory):
    from inference import SamplingParams

    llm = engine_factory()
    schema = {"type": "object", "properties": {"colors": {"type": "array", "items": {"type": "string",
              "maxLength": 15}, "minItems": 2, "maxItems": 3}}}
    out = llm.chat([{"role": "user", "content": "Name three colors as JSON."}],
                   SamplingParams(temperature=0, max_tokens=40, json_schema=schema))[0]
    data = json.loads(out.text)
    assert 2 <= len(data["colors"]) <= 3


def test_a_per_tokenizer_table_goes_with_its_tokenizer():
    """Bugs caught: tables kept by id alone, so every engine a process built kept its ~150k-entry
    tables for good, and a new tokenizer allocated at a dead one's address received the dead
    one's table (another vocabulary's token bytes); and two callers building one table twice."""
    import gc
    import threading
    import weakref

    from inference.structured.token_bytes import per_tokenizer

    class Tok:
        pass

    class Table:
        def __init__(self, tok):
            self.owner = id(tok)
            built.append(self.owner)

    built: list[int] = []
    get = per_tokenizer(Table)
    a = Tok()
    threads = [threading.Thread(target=get, args=(a,)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert built == [id(a)] and get(a).owner == id(a)
    gone = weakref.ref(get(a))
    del a
    gc.collect()
    assert gone() is None
    for _ in range(50):  # new objects, some at the dead one's address: each gets its own table
        b = Tok()
        assert get(b).owner == id(b)
        del b
