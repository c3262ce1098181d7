"""Each query transform must change what is retrieved in a way we can check."""

from __future__ import annotations

import json

import pytest

from rag.config import RagConfig
from rag.pipeline import Pipeline
from rag.query.config import QueryConfig
from rag.query.keywords import entity_filters, extract_entities, load_synonyms, synonyms_for
from rag.query.planner import QueryPlanner


def variant(pipeline, **query) -> Pipeline:
    data = pipeline.cfg.to_dict()
    data["query"] = QueryConfig(**query).model_dump()
    cfg = RagConfig.model_validate(data)
    return Pipeline(cfg, store=pipeline.store, generator=pipeline.generator, retriever=pipeline.retriever)


def sources(res) -> list[str]:
    return [c.chunk.source.rsplit("/", 1)[-1] for c in res.candidates]


def test_rule_based_entities():
    ents = extract_entities('Was the XR-200 "night mode" fixed by Ada Lovelace on 2021-03-02 or in 1999?')
    assert ents["code"] == ["XR-200"]
    assert ents["phrase"] == ["night mode"]
    assert ents["date"] == ["2021-03-02"] and ents["year"] == ["1999"]
    assert "Ada Lovelace" in ents["name"]
    assert entity_filters(ents, {"year": "date"}) == {"date": {"gte": "1999-01-01", "lte": "1999-12-31T23:59:59"}}


def test_synonym_file(tmp_path):
    f = tmp_path / "syn.txt"
    f.write_text("sofa: couch, settee\n# comment\n沙發,長椅\n", encoding="utf-8")
    table = load_synonyms(str(f))
    assert synonyms_for("price of a sofa", table) == ["couch", "settee"]
    assert synonyms_for("沙發多少錢", table) == ["長椅"]


def test_expansion_with_synonyms_finds_the_other_word(pipeline, tmp_path):
    syn = tmp_path / "syn.txt"
    syn.write_text("sofa: couch, settee\n")
    plain = variant(pipeline).search("how much is a sofa", k=3, filters=None)
    expanded = variant(pipeline, expansion={"enabled": True, "llm": False, "synonyms_file": str(syn)})
    plan = expanded.planner.plan("how much is a sofa")
    assert [s.origin for s in plan.searches] == ["question", "expansion"]
    assert plan.searches[1].mode == "bm25" and "couch" in plan.searches[1].text
    res = expanded.search("how much is a sofa", k=3)
    assert sources(res)[0] == "couch.md"
    # Keyword search alone: "sofa" is not in couch.md, the expanded query ("couch") finds it first.
    bm25 = pipeline.retriever.search
    assert "couch.md" not in sources(bm25("how much is a sofa", k=3, mode="bm25"))
    assert sources(bm25(plan.searches[1].text, k=3, mode="bm25"))[0] == "couch.md"
    assert plain.candidates  # the plain (hybrid) search is only the baseline here


def test_keywords_become_must_match_terms_and_date_filters(pipeline):
    kw = variant(pipeline, keywords={"enabled": True, "must_match": True, "filters": {"year": "date"}})
    res = kw.search("What is the flight time of the XR-200?", k=5)
    assert sources(res) == ["xr200.md"]
    res = kw.search("Which drone manual was published in 2023?", k=5)
    assert sources(res) == ["xr300.md"]
    plain = variant(pipeline).search("What is the flight time of the XR-200?", k=5)
    assert "xr300.md" in sources(plain)


def test_hyde_adds_a_dense_search_with_a_generated_passage(pipeline):
    hyde = variant(pipeline, hyde={"enabled": True, "max_tokens": 40})
    plan = hyde.planner.plan("What is the capital city of Zarnovia?")
    assert plan.generated["hyde"]
    extra = [s for s in plan.searches if s.origin == "hyde"]
    assert len(extra) == 1 and extra[0].mode == "dense" and extra[0].text == plan.generated["hyde"]
    res = hyde.search("What is the capital city of Zarnovia?", k=3, plan=plan)
    assert res.queries == ["What is the capital city of Zarnovia?", plan.generated["hyde"]]
    # fused by RRF over two lists: scores are sums of 1/(k+rank) terms, not the single-list scores
    assert res.candidates[0].score <= 2 / (pipeline.cfg.retrieval.fusion.k + 1) + 1e-9


def test_multi_query_and_rewrite_outputs_always_parse(pipeline):
    mq = variant(pipeline, multi_query={"enabled": True, "n": 2}, rewrite={"enabled": True, "max_subqueries": 2})
    q = "What is the capital of Zarnovia and how long does the XR-300 fly?"
    plan = mq.planner.plan(q)
    for name in ("multi_query", "rewrite"):
        parsed = json.loads(plan.generated[name])  # constrained decoding: always valid JSON
        assert isinstance(parsed["queries"], list) and parsed["queries"]
    origins = {s.origin for s in plan.searches}
    assert {"question"} < origins
    res = mq.search(q, k=5, plan=plan)
    assert len(res.queries) == len(plan.searches) >= 2


def test_llm_routing_picks_one_of_the_collections(pipeline):
    planner = QueryPlanner(QueryConfig(llm_routing=True), pipeline.generator,
                           {"geo": "countries, islands and their capital cities", "products": "drone manuals"})
    plan = planner.plan("What is the capital city of Zarnovia?")
    assert plan.collections in (["geo"], ["products"])


@pytest.mark.parametrize("question", ["plain question with nothing special"])
def test_no_transform_means_one_search_and_no_llm(pipeline, question):
    planner = variant(pipeline).planner
    assert not planner.needs_llm
    plan = planner.plan(question)
    assert [s.text for s in plan.searches] == [question] and not plan.generated


def test_multi_hop_stop_rules():
    """Catches a hop loop or a crash on odd engine output: the engine saying "answered", an empty
    query, a query that repeats the question or an earlier search, or unparsable text all stop the
    iteration; only a new query continues it."""
    from rag.query.multihop import decide

    q = "Which team did the director of Blue Harbor play for?"
    assert decide('{"status": "answered", "query": ""}', q, [q]).reason == "answered"
    assert decide('{"status": "search", "query": "  "}', q, [q]).reason == "empty"
    assert decide('{"status": "search", "query": "which team did the director of blue harbor play for"}',
                  q, [q]).reason == "repeat"
    assert decide('{"status": "search", "query": "Mara Quill team"}', q, [q, "mara quill team?"]).reason == "repeat"
    assert decide('{"status": "sea', q, [q]).reason == "unparsed"
    # a restatement adds no word the searches so far lacked
    assert decide('{"status": "search", "query": "director of Blue Harbor team"}', q, [q]).reason == "repeat"
    hop = decide('{"status": "search", "query": "Mara Quill football team"}', q, [q])
    assert (hop.query, hop.reason) == ("Mara Quill football team", "search")


def test_multi_hop_prompt_starts_with_a_shared_prefix(pipeline):
    """Catches the follow-up prompt putting per-question text before the instruction, which would
    make the engine recompute the fixed part for every question instead of reusing its cache."""
    from rag.query.config import MultiHopConfig
    from rag.query.multihop import MultiHop

    hopper = MultiHop(MultiHopConfig(enabled=True), pipeline.generator, pipeline.cfg.query.system)
    tok = pipeline.generator.tokenizer

    def text(q: str, passages: list[str]) -> str:
        return tok.apply_chat_template(hopper.prompt(q, passages), tokenize=False, add_generation_prompt=True)

    a = text("What is the capital of Zarnovia?", ["Zarnovia is an island."])
    b = text("How long does the XR-300 fly?", ["The XR-300 drone."])
    fixed = a[: a.index("Passages:")]
    assert b.startswith(fixed) and "Question" not in fixed and len(fixed) > 300
    n = len(tok.encode(fixed, add_special_tokens=False)) - 2
    assert tok.encode(a, add_special_tokens=False)[:n] == tok.encode(b, add_special_tokens=False)[:n]


def test_multi_hop_follow_up_is_searched_and_fused(pipeline):
    """Catches a follow-up query that is decided but never searched or never fused: with
    `query.multi_hop` on, the real engine's decision is recorded; when it names a query, that query
    is in `queries` and its own best result is among the fused candidates; `max_hops: 1` makes no
    engine call at all."""
    question = "What is the capital of the country with the glass bridges, and how many people live there?"
    one = variant(pipeline, multi_hop={"enabled": True, "max_hops": 1}).search(question, k=5)
    assert one.hops == [] and "multi_hop" not in one.timings_ms
    res = variant(pipeline, multi_hop={"enabled": True, "max_hops": 2}).search(question, k=5)
    assert len(res.hops) == 1 and res.hops[0]["reason"] in {"answered", "search", "repeat", "empty", "unparsed"}
    assert "multi_hop" in res.timings_ms
    query = res.hops[0]["query"]
    if query is not None:
        assert res.queries[-1] == query
        alone = pipeline.retriever.search(query, k=5)
        assert alone.candidates[0].chunk.chunk_id in {c.chunk.chunk_id for c in res.candidates}
    else:
        assert res.queries == [question]
    # `keep`: the first search's best candidates stay on top whatever the follow-up finds
    plain = variant(pipeline).search(question, k=5)
    kept = variant(pipeline, multi_hop={"enabled": True, "max_hops": 2, "keep": 2}).search(question, k=5)
    if kept.hops[0]["query"] is not None:
        assert [c.chunk.chunk_id for c in kept.candidates[:2]] == [c.chunk.chunk_id for c in plain.candidates[:2]]
