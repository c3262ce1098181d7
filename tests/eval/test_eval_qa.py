"""QA evaluation through a real (tiny) retrieve-then-answer system, and QA-set generation."""

import re

import pytest

from eval.ablation import run_qa_ablation
from eval.answers import Cited
from eval.cache import QueryCache
from eval.datasets import CorpusDoc, QAItem, load_beir, load_corpus, load_qa
from eval.grid import Grid
from eval.qa_eval import QAOutput, evaluate_qa, normalise_answer_output, score_item
from eval.qa_generate import QAGenConfig, build_prompt, generate_qa, parse_generation, write_qa_dataset
from eval.retrieval_eval import evaluate_retrieval
from rag.answer import Answer, Citation, Passage


def make_answerer(search, min_score=3.0):
    """Answers with the title of the best chunk's document; refuses when BM25 finds no real match."""

    def answer(question: str) -> Answer:
        top = search(question).candidates[0]
        passage = Passage(marker=1, chunk_id=top.chunk.chunk_id, doc_id=top.chunk.doc_id, text=top.chunk.text,
                          score=top.score)
        n_prompt = len(question.split()) + len(top.chunk.text.split())
        if top.score < min_score:
            return Answer(question=question, text="I don't know.", passages=[passage], refused=True,
                          tokens={"prompt": n_prompt, "completion": 3, "cached": 4})
        cite = Citation(marker=1, chunk_id=top.chunk.chunk_id, doc_id=top.chunk.doc_id, source="tiny")
        return Answer(question=question, text=f"{top.chunk.title} [1]", citations=[cite], passages=[passage],
                      tokens={"prompt": n_prompt, "completion": 2, "cached": 4}, timings_ms={"retrieve": 1.0})

    return answer


def test_qa_eval_end_to_end_with_rag_answers(tiny_dataset, bm25_search, tmp_path):
    items = load_qa(tiny_dataset, "dev")
    assert [i.is_impossible for i in items] == [False, False, False, True]
    cache = QueryCache(tmp_path / "qa.jsonl", "k")
    res = evaluate_qa(items, make_answerer(bm25_search), progress=False, cache=cache, dataset="tiny", split="dev")
    m = res.metrics
    assert m["em"] == 1.0 and m["has_ans_f1"] == 1.0  # "[1]" markers are not part of the answer
    assert m["refusal_acc"] == 1.0 and m["false_refusal"] == 0.0
    assert m["citation_precision"] == 1.0 and m["citation_recall"] == 1.0 and m["cited_rate"] == 1.0
    assert m["prefix_cache_hit_rate"] == pytest.approx(16 / sum(
        len(i.question.split()) + len(c.split()) for i, c in zip(items, [
            "The Eiffel Tower stands on the Champ de Mars in Paris",
            "The Colosseum is an ancient amphitheatre in Rome",
            "The pyramids of Giza are near Cairo",
            "Vatican City is an enclave inside Rome."], strict=True)))
    assert "retrieve" in res.latency_ms and res.n_queries == 4
    again = evaluate_qa(items, make_answerer(bm25_search), progress=False,
                        cache=QueryCache(tmp_path / "qa.jsonl", "k"))
    assert again.executed == 0 and again.metrics == m


def test_concurrent_answers_score_the_same(tiny_dataset, bm25_search):
    """Questions answered at once by worker threads, the way the engine batches them."""
    items = load_qa(tiny_dataset, "dev")
    base = make_answerer(bm25_search)
    serial = evaluate_qa(items, base, progress=False, warmup=False)
    par = evaluate_qa(items, base, progress=False, warmup=False, concurrency=3)
    assert par.metrics == serial.metrics and par.executed == 4
    assert par.per_query == serial.per_query


def test_qa_ablation_rows(tiny_dataset, bm25_search, tmp_path):
    items = load_qa(tiny_dataset, "dev")
    grid = Grid.model_validate({"variants": [{"name": "answer", "set": {"min_score": 3.0}},
                                             {"name": "always-refuse", "set": {"min_score": 1e9}}]})
    built = []

    def make(overrides):
        built.append(overrides)
        return make_answerer(bm25_search, overrides["min_score"])

    rows = run_qa_ablation(grid, items, make, tmp_path, progress=False, dataset="tiny", split="dev", warmup=False)
    assert [r.metrics["em"] for r in rows] == [1.0, 0.25] and rows[1].metrics["refusal_acc"] == 1.0
    again = run_qa_ablation(grid, items, make, tmp_path, progress=False, dataset="tiny", split="dev")
    assert len(built) == 2 and [r.executed for r in again] == [0, 0]


def test_qa_scoring_rules():
    item = QAItem(id="x", question="?", answers=["10th and 11th centuries"], gold_doc_id="d1")
    s = score_item(item, QAOutput("in the 10th century", [Cited("d2", "nothing here")]), "auto", None)
    assert s["em"] == 0.0 and s["f1"] == pytest.approx(2 / 7) and s["citation_precision"] == 0.0
    # A refusal on an answerable question scores zero even when the text overlaps the answer.
    s = score_item(item, QAOutput("I don't know about the 10th and 11th centuries"), "auto", None)
    assert s["f1"] == 0.0 and s["refused"] == 1.0
    zh = QAItem(id="z", question="?", answers=["歐洲"])
    assert score_item(zh, QAOutput("歐洲的學術界"), "auto", None)["f1"] == pytest.approx(0.5)  # p=2/6, r=1
    out = normalise_answer_output({"answer": "Paris", "citations": [{"doc_id": "d", "text": "t"}], "tokens_in": 5})
    assert out.text == "Paris" and out.citations == [Cited("d", "t")] and out.tokens_in == 5
    # A pipeline Answer reports compression in its own dict; the eval turns it into the ratio.
    comp = Answer(question="q", text="Paris", compression={"tokens_in": 300, "tokens_out": 100, "ratio": 3.0})
    out = normalise_answer_output(comp)
    assert (out.context_tokens_before, out.context_tokens_after) == (300, 100)
    res = evaluate_qa([QAItem(id="1", question="q", answers=["Paris"])], lambda q: comp, progress=False,
                      warmup=False)
    assert res.metrics["compression_ratio"] == pytest.approx(3.0)


def fake_llm_reply(prompt: str) -> str:
    """A rule-based question writer standing in for the engine: reads the passage in the prompt."""
    passage = prompt.split("Passage:\n", 1)[1].split("\n\nReply", 1)[0]
    m = re.search(r"(\w+) is the capital of (\w+)", passage)
    city, country = m.group(1), m.group(2)
    if city == "Tokyo":
        return "Sure! Here is a question about Tokyo."  # malformed
    if city == "Cairo":
        return "Question: What is the capital of Egypt?\nAnswer: Alexandria"  # not in the passage
    if city == "Canberra":
        return "Question: What is the capital of France?\nAnswer: Canberra"  # duplicate of Paris's
    return f"Question: What is the capital of {country}?\nAnswer: {city}"


def test_generate_qa_from_corpus_and_evaluate_it(tiny_dataset, make_bm25, tmp_path):
    corpus = load_corpus(tiny_dataset / "corpus.jsonl")
    calls = []

    def generate(prompts):
        calls.append(len(prompts))
        return [fake_llm_reply(p) for p in prompts]

    cfg = QAGenConfig(n_questions=50, batch_size=3, min_chars=10, seed=1)
    res = generate_qa(corpus, generate, cfg)
    assert res.n_prompts == 8 and calls == [3, 3, 2]
    # Whichever of Paris / Canberra comes first keeps "capital of France"; the other is a duplicate.
    assert res.dropped == {"unparsed": 1, "ungrounded": 1, "duplicate": 1} and len(res.items) == 5
    kept = {i.gold_doc_id for i in res.items}
    assert "tokyo" not in kept and "cairo" not in kept
    assert all(i.answers[0] in corpus[i.gold_doc_id].text for i in res.items)
    # Same seed, same set; n_questions stops early.
    assert [i.question for i in generate_qa(corpus, generate, cfg).items] == [i.question for i in res.items]
    assert len(generate_qa(corpus, generate, cfg.model_copy(update={"n_questions": 2})).items) == 2

    out = write_qa_dataset(tmp_path / "gen", corpus, res.items)
    ds = load_beir(out, "generated")
    assert set(ds.queries) == {i.id for i in res.items} and len(ds.corpus) == 8
    assert [i.to_dict() for i in load_qa(out, "generated")] == [i.to_dict() for i in res.items]
    r = evaluate_retrieval(ds.queries, ds.qrels, make_bm25(), ks=(1,), progress=False)
    assert r.n_queries == len(res.items) and r.metrics["recall@1"] > 0.5


def test_prompt_language_and_parsing():
    zh = build_prompt(CorpusDoc("d", "北京是中國的首都，也是政治中心。"), QAGenConfig())
    assert "段落" in zh and "北京" in zh
    assert "Passage:" in build_prompt(CorpusDoc("d", "Paris is in France."), QAGenConfig())
    assert parse_generation("问题：中國的首都是哪裡？\n答案：北京") == ("中國的首都是哪裡？", "北京")
    assert parse_generation("Question: Who?\nAnswer: \"Bob\"") == ("Who?", "Bob")
    assert parse_generation("Question: Who?") is None


def test_cited_inventions_and_answer_recall():
    """Catches: an unanswerable question answered with a citation not counted as a cited invention
    (or a refusal, or an uncited guess, counted as one), and long answers that contain the gold
    answer scored only by their diluted F1 (answer_recall)."""
    imp = [QAItem(id=f"u{i}", question="?", answers=[], is_impossible=True) for i in range(4)]
    ans = [QAItem(id="a1", question="?", answers=["Velmora"]), QAItem(id="a2", question="?", answers=["42 minutes"])]
    outs = {
        "u0": QAOutput("The ferry leaves at noon [1].", [Cited("d1", "a harbour")]),  # cited invention
        "u1": QAOutput("The ferry leaves at noon."),  # an invention, but not a cited one
        "u2": QAOutput("I don't know.", [Cited("d1", "a harbour")], refused=True),  # refusal with a source
        "u3": QAOutput("I don't know."),
        "a1": QAOutput("The capital of Zarnovia is Velmora, a harbour town of 80,000 people [1]."),
        "a2": QAOutput("It flies for about an hour."),
    }
    pq = {it.id: score_item(it, outs[it.id], "auto", None) for it in imp + ans}
    assert [pq[f"u{i}"]["cited_invention"] for i in range(4)] == [1.0, 0.0, 0.0, 0.0]
    assert pq["a1"]["answer_contained"] == 1.0 and pq["a2"]["answer_contained"] == 0.0
    assert pq["a1"]["f1"] < 0.3  # what answer_recall is for: F1 says this right long answer is poor
    by_q = {it.question + it.id: outs[it.id] for it in imp + ans}
    res = evaluate_qa([QAItem(id=it.id, question=it.question + it.id, answers=it.answers,
                              is_impossible=it.is_impossible) for it in imp + ans],
                      lambda q: by_q[q], progress=False, warmup=False)
    assert res.metrics["cited_invention_rate"] == 0.25 and res.metrics["answer_recall"] == 0.5
    assert res.metrics["refusal_acc"] == 0.5


def test_sentence_support_rule():
    """Catches: an invented number, date or name passing because most words match, a sentence judged
    against a passage it does not cite, and paraphrase-level plurals/tenses or question words failing."""
    from eval.answers import sentence_support, split_sentences, supported_sentences

    shown = {"1": "Port Elvra\nThe harbour has 72 moorings. A boat over 10 metres pays 29 euros per night.",
             "2": "Brenholt library\nThe librarian, Tomas Greve, has run the library since 2012."}
    q = "How much does a night cost for a 14 metre boat?"
    assert split_sentences("It has 72 moorings [1]. Tomas Greve runs it. [2] Done") == [
        "It has 72 moorings [1].", "Tomas Greve runs it. [2]", "Done"]
    assert sentence_support("Port Elvra harbour has 72 moorings [1].", shown)
    assert sentence_support("A 14 metre boat pays 29 euros per night [1].", shown, q)  # 14 is the question's
    assert not sentence_support("The harbour has 80 moorings [1].", shown)  # invented number
    assert not sentence_support("The ferry leaves at 11:57 PM on Sunday [1].", shown)  # invented time
    assert not sentence_support("Tomas Greve has run the library since 2012 [1].", shown)  # cites the wrong one
    assert sentence_support("Tomas Greve has run the library since 2012 [1, 2].", shown)
    assert not sentence_support("Tomas Greve has run the library since 2012.", shown)  # cites nothing
    assert not sentence_support("Tomas Greve has run the library since 2012 [3].", shown)  # never shown
    assert sentence_support("[1]", shown) is None  # no content: not counted
    assert supported_sentences("The harbour has 72 moorings [1]. It was founded in 1850 [1].", shown) == (1, 2)


def test_supported_sentence_rate_and_accuracy_through_evaluate_qa():
    """The metric reads the passages the answer's markers name (an `Answer`'s own), counts only
    answered questions' sentences, and is reported only for long answers; `accuracy` is gold
    contained or a refusal where nothing answers."""
    p1 = Passage(marker=1, chunk_id="c1", doc_id="d1", text="The XR-200 drone has a flight time of 42 minutes.",
                 score=1.0, title="XR-200 manual")
    cite = Citation(marker=1, chunk_id="c1", doc_id="d1", source="s")
    answers = {
        "How long does the XR-200 fly?": Answer(question="", text="The XR-200 flies for 42 minutes [1]. It charges "
                                                "in 30 minutes [1].", citations=[cite], passages=[p1]),
        "Who built the XR-200?": Answer(question="", text="I don't know.", refused=True, passages=[p1]),
        "What does the XR-200 cost?": Answer(question="", text="The XR-200 drone costs 900 euros [1].",
                                             citations=[cite], passages=[p1]),
    }
    items = [QAItem(id="a", question="How long does the XR-200 fly?", answers=["42 minutes"]),
             QAItem(id="u1", question="Who built the XR-200?", answers=[], is_impossible=True),
             QAItem(id="u2", question="What does the XR-200 cost?", answers=[], is_impossible=True)]
    res = evaluate_qa(items, lambda q: answers[q], progress=False, warmup=False, sentences=True)
    assert res.metrics["supported_sentence_rate"] == pytest.approx(1 / 3)  # 42 minutes yes; 30 min, 900 euros no
    assert res.per_query["a"]["sentences"] == 2.0 and "sentences" not in res.per_query["u1"]
    assert res.metrics["accuracy"] == pytest.approx(2 / 3) and res.metrics["cited_invention_rate"] == 0.5
    short = evaluate_qa(items, lambda q: answers[q], progress=False, warmup=False)
    assert "supported_sentence_rate" not in short.metrics


def test_gated_long_answers_are_counted(tmp_path):
    """Catches the short-answer gate's refusals lost from `long_grounding` (they have no sentences, so
    the path counts alone cannot show them) or its span fallback not counted as a shown path."""
    import asyncio

    from rag.answering.gate import Gate
    from rag.answering.long import LongGrounding
    from rag.answering.policy import Decision
    from rag.config import RagConfig

    p1 = Passage(marker=1, chunk_id="c1", doc_id="d1", text="The XR-200 drone has a flight time of 42 minutes.",
                 score=1.0)

    def gated(question: str, written: str, decision: Decision) -> Answer:
        a = Answer(question=question, text="", passages=[p1])
        g = LongGrounding(None, RagConfig(), a, None, Gate(decision, None if decision.refused else 1))

        async def run() -> str:
            return "" if decision.refused else await g.feed(written) + await g.finish()

        a.text, a.grounding, a.refused = asyncio.run(run()) or "I don't know.", g.metadata(), decision.refused
        return a

    answers = {"How long does the XR-200 fly?": gated("How long does the XR-200 fly?",
                                                      "The XR-200 is a drone [1].",
                                                      Decision("42 minutes", 0, False, {})),
               "What does the XR-200 cost?": gated("What does the XR-200 cost?", "", Decision("", None, True, {}))}
    items = [QAItem(id="a", question="How long does the XR-200 fly?", answers=["42 minutes"]),
             QAItem(id="u", question="What does the XR-200 cost?", answers=[], is_impossible=True)]
    res = evaluate_qa(items, lambda q: answers[q], progress=False, warmup=False, sentences=True)
    assert answers["How long does the XR-200 fly?"].text == "42 minutes [1]"
    assert {k: v for k, v in res.long_grounding.items() if v} == {
        "dropped_off_question": 1, "short_answer": 1, "dropped": 1, "answers": 2, "gated": 2, "gate_refused": 1}


def test_long_grounding_paths_are_counted_in_the_result_json(tmp_path):
    """Catches grounding paths lost between the pipeline's `Answer.grounding` and the eval JSON
    (`long_grounding`), counted twice, or reported for runs that grounded nothing. The answers are
    grounded by the real `rag.answering.long` (deterministic checks: no engine check without a threshold)."""
    import asyncio
    import json

    from rag.answering.long import LongGrounding
    from rag.config import RagConfig

    p1 = Passage(marker=1, chunk_id="c1", doc_id="d1", text="The XR-200 drone has a flight time of 42 minutes.",
                 score=1.0, title="XR-200 manual")
    p2 = Passage(marker=2, chunk_id="c2", doc_id="d2", text="The XR-300 drone has a foldable frame.", score=0.5)

    def grounded(question: str, written: str) -> Answer:
        a = Answer(question=question, text="", passages=[p1, p2])
        g = LongGrounding(None, RagConfig(), a, None)

        async def run() -> str:
            return await g.feed(written) + await g.finish()

        a.text, a.grounding, a.refused = asyncio.run(run()), g.metadata(), g.refused
        a.citations = [] if g.refused else [Citation(marker=1, chunk_id="c1", doc_id="d1", source="s")]
        return a

    answers = {
        "How long does the XR-200 fly?": grounded("How long does the XR-200 fly?",
                                                  "The XR-200 flies for 42 minutes [1]. It charges in 30 minutes [1]. "
                                                  "The XR-200 has a flight time of 42 minutes."),
        "What does the XR-200 cost?": grounded("What does the XR-200 cost?", "The XR-200 drone costs 900 euros [2]."),
    }
    items = [QAItem(id="a", question="How long does the XR-200 fly?", answers=["42 minutes"]),
             QAItem(id="u", question="What does the XR-200 cost?", answers=[], is_impossible=True)]
    assert answers["What does the XR-200 cost?"].refused  # nothing supported: the refusal
    res = evaluate_qa(items, lambda q: answers[q], progress=False, warmup=False, sentences=True,
                      answers_path=tmp_path / "answers.jsonl", cache=QueryCache(tmp_path / "cache.jsonl", "k"))
    want = {"kept": 1, "recited": 1, "dropped_keyfact": 2, "dropped": 2, "answers": 2}
    assert {k: v for k, v in res.long_grounding.items() if v} == want
    assert json.loads(json.dumps(res.to_dict()))["long_grounding"] == res.long_grounding
    assert res.metrics["cited_invention_rate"] == 0.0 and res.metrics["answer_recall"] == 1.0
    rows = [json.loads(line) for line in (tmp_path / "answers.jsonl").read_text().splitlines()]
    assert [s["path"] for s in rows[0]["grounding"]["sentences"]] == ["kept", "dropped_keyfact", "recited"]
    again = evaluate_qa(items, lambda q: pytest.fail("answered again"), progress=False, warmup=False,
                        sentences=True, cache=QueryCache(tmp_path / "cache.jsonl", "k"))
    assert again.long_grounding == res.long_grounding  # the cache keeps the paths
    plain = evaluate_qa(items, lambda q: Answer(question=q, text="42 minutes [1]", passages=[p1]), progress=False,
                        warmup=False)
    assert plain.long_grounding == {} and "long_grounding" not in plain.to_dict()
    from eval.retrieval_eval import format_table

    assert "kept 1, recited 1" in format_table(res) and "long_grounding" not in format_table(plain)


def test_comparisons_are_counted_and_written(tmp_path):
    """Catches a comparison answer's parts lost on the way to the report: `comparisons` must count
    the questions that were comparisons and those their options' answers decided, the answers file
    must keep each one's `comparison` record (and a two-step try's `two_hop`), and a run with none
    must report nothing."""
    import json

    decided = Answer(question="Which flies longer, the XR-200 or the XR-300?", text="the XR-300 [1][2]",
                     comparison={"options": ["the XR-200", "the XR-300"], "used": True, "chosen": 1})
    undecided = Answer(question="Which flies longer, the XR-200 or the XR-900?", text="I don't know.",
                       refused=True, comparison={"options": ["the XR-200", "the XR-900"], "used": False,
                                                 "reason": "refused: the XR-900"})
    plain = Answer(question="How long does the XR-200 fly?", text="42 minutes",
                   two_hop={"questions": ["Who makes the XR-200?"], "used": False})
    answers = {a.question: a for a in (decided, undecided, plain)}
    items = [QAItem(id=str(i), question=q, answers=["x"]) for i, q in enumerate(answers)]
    path = tmp_path / "answers.jsonl"
    res = evaluate_qa(items, lambda q: answers[q], progress=False, warmup=False, answers_path=path)
    assert res.comparisons == {"asked": 2, "used": 1} and res.two_hop == {"asked": 1, "used": 0}
    assert res.to_dict()["comparisons"] == {"asked": 2, "used": 1}
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r.get("comparison", {}).get("used") for r in rows] == [True, False, None]
    assert [r.get("two_hop", {}).get("used") for r in rows] == [None, None, False]
    none = evaluate_qa(items[2:], lambda q: answers[q], progress=False, warmup=False)
    assert none.comparisons == {} and "comparisons" not in none.to_dict()


def test_every_supporting_document_is_a_right_citation():
    """Catches a multi-hop question (hotpotqa_pooled: two supporting documents) scored against its
    first document alone: an answer citing both options' passages must score citation precision
    1.0, and recall counts both documents."""
    item = QAItem(id="h1", question="Are A and B both magazines?", answers=["yes"], gold_doc_id="A_mag",
                  gold_doc_ids=["A_mag", "B_mag"])
    assert item.gold_docs == ["A_mag", "B_mag"]
    both = score_item(item, QAOutput("Yes [1][2]", [Cited("A_mag", "A is a magazine."),
                                                   Cited("B_mag", "B is a magazine.")]), "auto", None)
    assert both["citation_precision"] == 1.0 and both["citation_recall"] == 1.0
    one = score_item(item, QAOutput("No [1]", [Cited("B_mag", "B is a newspaper.")]), "auto", None)
    assert one["citation_precision"] == 1.0 and one["citation_recall"] == 0.5
    other = score_item(item, QAOutput("Yes [1]", [Cited("C_mag", "C is a magazine.")]), "auto", None)
    assert other["citation_precision"] == 0.0
    single = QAItem(id="s1", question="?", answers=["Velmora"], gold_doc_id="d1")
    assert single.gold_docs == ["d1"]


def test_questions_about_two_things_are_counted_per_kind():
    """Catches the report hiding which path answered: the comparisons' counts must also be split by
    the kind each record names (a "both" question decided, a number comparison not) and printed
    under the table, with the `asked`/`used` totals unchanged."""
    from eval.retrieval_eval import format_table

    both = Answer(question="Are A and B both magazines?", text="Yes [1][2]",
                  comparison={"options": ["A", "B"], "kind": "both", "used": True, "verdict": "yes"})
    which = Answer(question="Which is a magazine, A or B?", text="I don't know.", refused=True,
                   comparison={"options": ["A", "B"], "kind": "which", "used": False, "reason": "unsure"})
    number = Answer(question="Which is longer, A or B?", text="I don't know.", refused=True,
                    comparison={"options": ["A", "B"], "kind": "number", "best": "max", "used": False})
    answers = {a.question: a for a in (both, which, number)}
    items = [QAItem(id=str(i), question=q, answers=["x"]) for i, q in enumerate(answers)]
    res = evaluate_qa(items, lambda q: answers[q], progress=False, warmup=False)
    assert res.comparisons == {"asked": 3, "used": 1, "both_asked": 1, "both_used": 1, "number_asked": 1,
                               "number_used": 0, "which_asked": 1, "which_used": 0}
    assert "asked 3, decided 1 (both 1/1, number 0/1, which 0/1)" in format_table(res)



def test_eval_qa_mode_is_the_configs_answer_mode():
    """Catches `rag eval qa --mode short` keeping the config's long mode while `model: auto` times
    the config's answer step: the short-mode run then picked its model from a long-mode measurement
    (session 43, an AMX Xeon: the 1.5B timed 13.5 s per long answer). The mode is part of what a
    measurement is keyed on (`pipeline_key`), so the two modes are two measurements."""
    from eval.cli import qa_config
    from rag.cli import build_parser
    from rag.generation.machine import pipeline_key

    cfgs = {}
    for mode in ("short", "long"):
        args = build_parser().parse_args(["eval", "qa", "--dataset", "x", "--mode", mode])
        cfgs[mode] = qa_config(args)
        assert cfgs[mode].answer.mode == mode
    assert pipeline_key(cfgs["short"]) != pipeline_key(cfgs["long"])
