"""Multi-turn chat: condensed follow-ups, prompts that extend the previous turn's cached prefix,
the OpenAI route over real HTTP and `rag ask --chat` on piped stdin.

The corpus makes the follow-up "And who kept it after her?" need the previous turn: three other
passages say "kept ... after her", so the bare follow-up retrieves them, and only a query that
names Harrow Point and Mary Hale finds who kept that light next.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest

from rag.chat import ChatMemory, ChatTurn, split_turns
from rag.query.condense import Condenser, condense_messages, fallback_query, rejection

LIGHTHOUSES = {
    "harrow_first.md": "# Harrow Point lighthouse\n\nHarrow Point lighthouse was first lit in 1874. Its first keeper "
    "was Mary Hale, who tended the lamp alone for seventeen years.\n",
    "harrow_next.md": "# Harrow Point keepers\n\nAfter Mary Hale retired in 1891, Tobias Brand kept the Harrow Point "
    "lighthouse until 1920.\n",
    "gullhaven.md": "# Gullhaven\n\nAda Pike kept the Gullhaven lamp after her husband drowned in 1902, and she "
    "kept it for thirty years.\n",
    "dunmore.md": "# Dunmore beacon\n\nNora Quill kept the Dunmore beacon after her father died, and she kept it "
    "lit through the storm of 1911.\n",
    "saltmarsh.md": "# Saltmarsh\n\nAfter her marriage, Elsie Varn kept the Saltmarsh light for a decade.\n",
    "bakery.md": "# Bakery\n\nThe harbour bakery sells rye bread and opens at six.\n",
}
Q1 = "Who was the first keeper of the Harrow Point lighthouse?"
Q2 = "And who kept it after her?"


def _sources(passages) -> list[str]:
    return [Path(p.source).name for p in passages]


@pytest.fixture(scope="module")
def chat_pipe(pipeline, tmp_path_factory):
    """A pipeline over its own lighthouse store that shares the session's engine and embedder
    (no model is loaded for it); the session pipeline itself is never changed."""
    from rag.app import build_ingestor, open_store
    from rag.pipeline import Pipeline
    from retrieval.retriever import Retriever

    root = tmp_path_factory.mktemp("lighthouses")
    for name, text in LIGHTHOUSES.items():
        (root / "docs").mkdir(exist_ok=True)
        (root / "docs" / name).write_text(text, encoding="utf-8")
    cfg = pipeline.cfg.model_copy(deep=True)
    cfg.storage.path = str(root / "storage")
    cfg.answer.context_k = 2
    cfg.generator.engine.max_model_len = 1024
    store = open_store(cfg)
    retriever = Retriever.from_config(cfg.retrieval, store, cfg.storage_path / "indexes",
                                      embedder=pipeline.retriever.embedder())
    report = build_ingestor(cfg, store).ingest([str(root / "docs")], progress=False)
    assert report.new == len(LIGHTHOUSES), report.summary()
    retriever.sync("default")
    pipe = Pipeline(cfg, store=store, generator=pipeline.generator, retriever=retriever)
    yield pipe
    store.close()  # not pipe.close(): the engine is the session's


class _Scripted:
    """A generator stand-in that answers every request with `text` (a model's bad output)."""

    supports_logits_processors = False

    def __init__(self, tokenizer, text: str):
        self.tokenizer, self.text, self.prompts = tokenizer, text, []

    def generate(self, prompts, params):
        self.prompts += prompts
        return [SimpleNamespace(text=self.text) for _ in prompts]


def test_condense_prompt_keeps_a_stable_cached_head(pipeline):
    """Bug caught: the conversation placed before the fixed instruction, so no two condensing
    calls share more than the system message and the prefix cache serves almost nothing."""
    tok = pipeline.generator.tokenizer
    cfg = pipeline.cfg.query
    a = [ChatTurn(Q1, "Mary Hale [1].")]
    b = [ChatTurn("What does the XR-200 cost?", "It costs 900 euros [1].")]
    pa = tok.encode(tok.apply_chat_template(condense_messages(cfg, a, Q2), tokenize=False,
                                            add_generation_prompt=True), add_special_tokens=False)
    pb = tok.encode(tok.apply_chat_template(condense_messages(cfg, b, "How long does it fly?"), tokenize=False,
                                            add_generation_prompt=True), add_special_tokens=False)
    shared = next(i for i, (x, y) in enumerate(zip(pa, pb)) if x != y)
    head = tok.encode(tok.apply_chat_template(condense_messages(cfg, [], "")[:3], tokenize=False),
                      add_special_tokens=False)
    assert shared >= len(head) >= 100  # system, instruction and the worked example: one cached head
    text = condense_messages(cfg, a, Q2)[-1]["content"]
    assert "[1]" not in text and text.endswith(f"Last question: {Q2}")  # markers mean nothing here


@pytest.mark.parametrize("output, reason", [
    ("", "empty"),
    ('{"query": ""}', "empty"),
    ('{"query": "How tall is the Eiffel Tower?"}', "unrelated to the conversation"),  # the example echoed
    ('{"query": "Who kept it after her?"}', "follow-up copied with its references unresolved"),
    ('{"query": "' + "lighthouse " * 40 + '"}', "too long"),
    ('{"query": "Who was the first keeper of Harrow Point?"}', "the follow-up's own words are missing"),
])
def test_unusable_condensation_falls_back_to_both_questions(pipeline, output, reason):
    """Bug caught: an empty, echoed or unresolved model output searched as the query (the
    follow-up then retrieves the wrong keeper); the fallback is the previous question + the
    follow-up, and the metadata says why."""
    llm = _Scripted(pipeline.generator.tokenizer, output)
    got = Condenser(pipeline.cfg.query, llm).condense([ChatTurn(Q1, "Mary Hale was the first keeper [1].")], Q2)
    assert (got.method, got.reason) == ("fallback", reason)
    assert got.query == f"{Q1} {Q2}" == fallback_query([ChatTurn(Q1, "")], Q2)
    assert got.metadata()["condense"] == "fallback" and got.metadata()["condense_reason"] == reason


def test_usable_condensation_is_searched_and_first_turn_is_not_condensed(pipeline):
    """Bug caught: a good query rejected by the checks (fallback on every turn), or a first turn
    that pays for a condensing call it does not need."""
    good = '{"query": "Who kept the Harrow Point lighthouse after Mary Hale?"}'
    llm = _Scripted(pipeline.generator.tokenizer, good)
    cond = Condenser(pipeline.cfg.query, llm)
    got = cond.condense([ChatTurn(Q1, "Mary Hale [1].")], Q2)
    assert (got.method, got.query) == ("model", "Who kept the Harrow Point lighthouse after Mary Hale?")
    assert rejection("How many people live in Velmora?", [ChatTurn("Capital of Zarnovia?", "Velmora")],
                     "How many people live there?") is None
    assert cond.condense([], Q1).method == "none" and len(llm.prompts) == 1


def test_followup_retrieves_the_right_passage_through_the_condensed_query(chat_pipe):
    """Bug caught: the follow-up searched as typed. Alone it retrieves the other keepers; as a chat
    turn its standalone query (the engine's, or the fallback when the engine's is unusable)
    retrieves who kept Harrow Point after Mary Hale."""
    bare = chat_pipe.search(Q2, k=2)
    assert "harrow_next.md" not in [Path(c.chunk.source).name for c in bare.candidates]  # the turn is needed
    a1 = chat_pipe.ask(Q1, max_tokens=24)
    assert "harrow_first.md" in _sources(a1.passages) and a1.chat == {}
    a2 = chat_pipe.ask(Q2, history=[ChatTurn.from_answer(a1)], max_tokens=24)
    assert a2.chat["condense"] in ("model", "fallback") and a2.chat["standalone_query"] != Q2
    assert a2.queries[0] == a2.chat["standalone_query"]
    assert "harrow_next.md" in _sources(a2.passages), (a2.chat, _sources(a2.passages))
    assert a2.chat["history_turns"] == 1 and "condense" in a2.timings_ms


def test_turn_two_prompt_extends_turn_one_and_the_engine_serves_it_from_cache(chat_pipe):
    """Bug caught: a layout that puts the new passages before the history, or re-renders earlier
    turns without their passages: turn 2 then shares only the system prompt with turn 1 and
    prefills the whole conversation again."""
    _, built1, _ = chat_pipe.prepare(Q1)
    a1 = chat_pipe.ask(Q1, max_tokens=24)
    assert a1.tokens["prompt"] == len(built1.token_ids)
    history = [ChatTurn.from_answer(a1)]
    _, built2, _ = chat_pipe.prepare(Q2, history=history)
    assert built2.token_ids[: len(built1.token_ids)] == built1.token_ids
    before = chat_pipe.generator.stats()["prefix_cache_hits"]
    a2 = chat_pipe.ask(Q2, history=history, max_tokens=24)
    block = 16  # the engine's block size: only whole blocks are cached
    shared = len(built1.token_ids) // block * block
    assert a2.tokens["prompt"] == len(built2.token_ids) and a2.tokens["cached"] >= shared, a2.tokens
    assert chat_pipe.generator.stats()["prefix_cache_hits"] - before >= shared


def test_history_too_long_drops_the_oldest_turns_first(chat_pipe):
    """Bug caught: a long conversation raising PromptTooLong (or dropping the new turn's
    passages) instead of dropping the oldest turns; and a window that slides one turn at a time,
    which breaks the cached prefix on every turn."""
    from rag import prompt as prompt_mod

    a1 = chat_pipe.ask(Q1, max_tokens=24)
    history = [ChatTurn.from_answer(a1)] * 12
    cfg, tok = chat_pipe.cfg.prompt, chat_pipe.generator.tokenizer
    built = prompt_mod.build(cfg, tok, Q2, a1.passages, 700, "long", history)
    assert len(built.token_ids) <= 700 and 0 < built.history_turns < cfg.history_turns
    assert len(built.passages) == len(a1.passages)  # the new turn's passages are kept
    starts = [len(history[: n]) - len(prompt_mod.kept_history(history[:n], 6)) for n in range(7, 13)]
    assert starts == [3, 3, 3, 6, 6, 6]  # the window moves by half its size, not by one turn


def test_each_passage_prompt_of_a_follow_up_keeps_the_conversation(chat_pipe):
    """`prompt.build_each` (what a per-passage short answer decodes each passage from): each prompt
    holds the whole conversation the shared prompt holds, the question and its one passage numbered
    [1]. Bugs caught: a follow-up's span decoded without its earlier turn ("When did he retire?"
    then names nobody), another passage of the turn leaking in, or a marker other than [1]."""
    from rag import prompt as prompt_mod

    a1 = chat_pipe.ask(Q1, max_tokens=24)
    cfg, tok = chat_pipe.cfg.prompt, chat_pipe.generator.tokenizer
    history = [ChatTurn.from_answer(a1)]
    new = [dataclasses.replace(a1.passages[0], chunk_id="n1", text="Tobias Brand retired in 1998.", marker=1),
           dataclasses.replace(a1.passages[0], chunk_id="n2", text="The pier was rebuilt in 2004.", marker=2)]
    built = prompt_mod.build(cfg, tok, "When did he retire?", new, 1000, "short", history)
    each = prompt_mod.build_each(cfg, tok, "When did he retire?", built, 1000, "short")
    assert len(each) == 2 and built.history_turns == 1
    head = built.text[: built.text.index(prompt_mod.passage_body(cfg, new[0]))]
    for one, p, other in zip(each, new, reversed(new)):
        assert one.history_turns == 1 and one.text.startswith(head[: head.rindex("[1]")]), one.text
        assert p.text in one.text and other.text not in one.text and one.text.endswith(built.text[-40:])
        assert [q.marker for q in one.passages] == [1] and len(one.token_ids) < len(built.token_ids)


def test_a_passage_shown_in_an_earlier_turn_is_named_not_repeated(chat_pipe):
    """Bug caught: a follow-up that retrieves a passage turn 1 already showed repeats its text, so
    every such turn prefills it again; and the reference must render the same when the turn is
    history (else turn 3 no longer extends turn 2's cached prompt)."""
    from rag import prompt as prompt_mod

    a1 = chat_pipe.ask(Q1, max_tokens=24)
    cfg, tok = chat_pipe.cfg.prompt, chat_pipe.generator.tokenizer
    again = [dataclasses.replace(a1.passages[0], marker=2),
             dataclasses.replace(a1.passages[1], chunk_id="new-chunk", text="A new passage about beacons.",
                                 marker=1)]
    history = [ChatTurn.from_answer(a1)]
    built2 = prompt_mod.build(cfg, tok, Q2, again, 1000, "long", history)
    body = prompt_mod.passage_body(cfg, a1.passages[0])
    assert built2.text.count(body) == 1 and prompt_mod.SHOWN_BEFORE in built2.text
    turn2 = ChatTurn(Q2, "Tobias Brand [2].", built2.passages)
    built3 = prompt_mod.build(cfg, tok, "When did he retire?", [], 1000, "long", [*history, turn2])
    prefix = built2.text + "Tobias Brand [2]."
    assert built3.text.startswith(prefix) and built3.text.count(body) == 1


def test_chat_memory_restores_passages_only_for_the_same_conversation(chat_pipe):
    """Bug caught: memory keyed by the question alone (another conversation's passages shown),
    or a conversation the server does not know refused instead of answered."""
    a1 = chat_pipe.ask(Q1, max_tokens=24)
    mem = ChatMemory(8)
    mem.remember([("user", Q1)], a1)
    hist, q = mem.history([("user", Q1), ("assistant", a1.text), ("user", Q2)])
    assert q == Q2 and hist[0].passages == a1.passages and mem.hits == 1
    hist, _ = mem.history([("user", Q1), ("assistant", "edited by the client"), ("user", Q2)])
    assert hist[0].passages == [] and hist[0].answer == "edited by the client" and mem.misses == 1
    with pytest.raises(ValueError, match="last message"):
        split_turns([("user", Q1), ("assistant", "x")])


def test_two_turn_conversation_over_http(chat_pipe):
    """Bug caught: /v1/chat/completions answering only the last user message (the follow-up
    searched as typed, no history in the prompt, nothing reused): over real HTTP, turn 2 reports
    its standalone query, retrieves the right passage and is served from turn 1's cached prefix."""
    from rag.server.app import create_app
    from tests.rag.conftest import serve_in_thread

    app = create_app(chat_pipe.cfg, pipeline=chat_pipe, load_in_background=False)
    base, srv, th = serve_in_thread(app)
    try:
        body = {"rag": True, "max_tokens": 24, "temperature": 0}
        r1 = httpx.post(base + "/v1/chat/completions", timeout=300,
                        json={**body, "messages": [{"role": "user", "content": Q1}]})
        assert r1.status_code == 200, r1.text
        j1 = r1.json()
        assert j1["rag"]["standalone_query"] == Q1 and j1["rag"]["condense"] == "none"
        turn1 = [{"role": "user", "content": Q1}, j1["choices"][0]["message"]]
        r2 = httpx.post(base + "/v1/chat/completions", timeout=300,
                        json={**body, "messages": [*turn1, {"role": "user", "content": Q2}]})
        assert r2.status_code == 200, r2.text
        j2 = r2.json()
        assert j2["rag"]["condense"] in ("model", "fallback") and j2["rag"]["standalone_query"] != Q2
        assert "harrow_next.md" in [Path(p["source"]).name for p in j2["rag"]["passages"]]
        shared = j1["usage"]["prompt_tokens"] // 16 * 16
        assert j2["usage"]["prompt_tokens_details"]["cached_tokens"] >= shared, j2["usage"]
        assert app.state.rag.chat.hits == 1
        with httpx.stream("POST", base + "/v1/chat/completions", timeout=300,
                          json={**body, "stream": True, "messages": [*turn1, {"role": "user", "content": Q2}]}) as r3:
            events = [json.loads(ln[6:]) for ln in r3.iter_lines() if ln.startswith("data: {")]
        final = events[-1]["rag"]  # the streamed turn carries the same metadata on its last chunk
        assert final["standalone_query"] == j2["rag"]["standalone_query"] and app.state.rag.chat.hits == 2
        bad = httpx.post(base + "/v1/chat/completions", timeout=60,
                         json={**body, "messages": [*turn1]})  # ends with the assistant: nothing to answer
        assert bad.status_code in (400, 422) and "last message" in bad.text
    finally:
        srv.should_exit = True
        th.join(timeout=20)


def test_rag_ask_chat_reads_questions_from_piped_stdin(tmp_path):
    """Bug caught: `rag ask --chat` reading only from a terminal, answering only the first line,
    or forgetting the history (the second line then searched as typed). An empty line ends the
    conversation: what follows it is not answered."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, text in LIGHTHOUSES.items():
        (docs / name).write_text(text, encoding="utf-8")
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    # the default model on its own GGUF blocks (what a user gets; float32 weights took ~10 s more)
    common = ["--set", f"storage.path={tmp_path / 'store'}", "--set", "retrieval.mode=bm25",
              "--set", "generator.engine.max_model_len=1024", "--set", "generator.engine.kv_cache_memory=0.3",
              "--set", "answer.context_k=2"]
    r = subprocess.run([sys.executable, "-m", "rag", "index", str(docs), "--no-progress", *common],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([sys.executable, "-m", "rag", "ask", "--chat", "--max-tokens", "24", *common],
                       input=f"{Q1}\n{Q2}\n\nWhat does the bakery sell?\n", capture_output=True, text=True,
                       env=env, timeout=600)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.count("tokens ") == 2, out  # two turns answered, the line after the empty one not
    assert "searched: " in out and "Sources:" in out
    searched = out.split("searched: ", 1)[1].splitlines()[0]
    assert "Harrow" in searched or "Mary Hale" in searched, out
