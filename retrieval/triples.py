"""The LLM triple format of `retrieval.graph.extractor: llm|both`: schema, instruction and parser.

Why here and not beside the engine call (rag/graph_llm.py): the graph decides what a valid reply
is, and retrieval cannot import the engine. The reply is JSON constrained by `schema()` (the engine
masks every token outside it), short on purpose: small models write a few (head, relation, tail)
objects well and long free-form lists badly. At least one triple is asked for: offered an empty
list, the packaged 0.5B model replied `{"triples":[]}` to every passage (docs/results.md). The
price of forcing one is that a model may name what the passage does not say, so a triple whose
head or tail is not written in the passage is dropped (`parse_triples(..., passage=)`): a chunk of
numbers or code still yields no entity. A reply that still does not parse (cut at the token
limit, another backend ignoring the schema, an engine error) makes `parse_triples` return None:
the chunk keeps its other entities, the graph counts the reply (`skipped_replies`) and the ingest
goes on.
"""

from __future__ import annotations

import json

from .entities import normalize


def schema(max_triples: int) -> dict:
    """The reply's JSON schema: 1 to `max_triples` (`retrieval.graph.llm_max_triples`, the number the
    graph keeps) head/relation/tail objects; the list is closed after the last one kept, so no
    token is spent on triples the graph would drop."""
    return {
        "type": "object",
        "properties": {
            "triples": {
                "type": "array", "minItems": 1, "maxItems": max_triples,
                "items": {"type": "object", "properties": {
                    "head": {"type": "string", "maxLength": 48},
                    "relation": {"type": "string", "maxLength": 32},
                    "tail": {"type": "string", "maxLength": 48}}},
            },
        },
    }


INSTRUCTION = (
    "Extract facts from the passage as (head, relation, tail) triples. head and tail are names of "
    "people, places, organisations, works or things named in the passage; relation is a short verb "
    'phrase. Copy head and tail exactly as the passage writes them. Reply as JSON: '
    '{"triples": [{"head": "...", "relation": "...", "tail": "..."}]}.'
)
# one worked example, given as an earlier exchange (title, passage, reply): part of the fixed,
# prefix-cached head of every extraction prompt
EXAMPLE = (
    "Lake Orla",
    "Lake Orla is a reservoir in Albania built by the engineer Petro Nika in 1962. Its dam feeds the Drin River.",
    '{"triples":[{"head":"Lake Orla","relation":"is a reservoir in","tail":"Albania"},'
    '{"head":"Petro Nika","relation":"built","tail":"Lake Orla"},'
    '{"head":"Lake Orla","relation":"feeds","tail":"Drin River"}]}',
)


def parse_triples(reply: str, max_words: int = 6, passage: str | None = None) -> list[tuple[str, str, str]] | None:
    """(head, relation, tail) surface forms of a reply; None when the reply is not valid output
    (not JSON of the schema's shape). Items whose head or tail is no entity (empty, a number,
    longer than `max_words` words) are dropped, and with `passage` (the chunk's title and text)
    so are those whose head or tail the passage does not write (compared as entity keys, whole
    words); an empty list is a valid "nothing here"."""
    written = f" {normalize(passage)} " if passage is not None else None
    try:
        data = json.loads(reply)
    except (TypeError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("triples"), list):
        return None
    out: list[tuple[str, str, str]] = []
    for item in data["triples"]:
        if not isinstance(item, dict):
            return None
        h, r, t = (" ".join(str(item.get(f, "")).split()) for f in ("head", "relation", "tail"))
        if not (h and t) or not _entity(h, max_words) or not _entity(t, max_words) or normalize(h) == normalize(t):
            continue
        if written is not None and not (f" {normalize(h)} " in written and f" {normalize(t)} " in written):
            continue  # named by the model, not by the passage
        out.append((h, r.lower() or "related to", t))
    return out


def _entity(surface: str, max_words: int) -> bool:
    key = normalize(surface)
    return bool(key) and any(ch.isalpha() for ch in key) and len(key.split()) <= max_words
