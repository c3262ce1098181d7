"""The own-corpus QA set (eval/data/own_corpus): loads with the `rag eval qa` loaders and is well formed.

Why: its score is only meaningful if every gold answer is literally in its document (so a right
answer can be copied) and the unanswerable share is what the README says. The Markdown files are
the source; corpus.jsonl (what `rag eval qa` ingests) must be their faithful copy.
Regenerate corpus.jsonl after editing a document: `python tests/eval/test_own_corpus.py`.
"""

from __future__ import annotations

import json
from pathlib import Path

OWN = Path(__file__).resolve().parents[2] / "eval" / "data" / "own_corpus"


def corpus_rows(root: Path = OWN) -> list[dict]:
    """One BEIR row per Markdown document: id = file stem, title = the `# ` heading, text = the rest."""
    rows = []
    for p in sorted((root / "docs").glob("*.md")):
        head, _, body = p.read_text(encoding="utf-8").partition("\n")
        assert head.startswith("# "), f"{p.name} must start with a '# ' title"
        rows.append({"_id": p.stem, "title": head[2:].strip(), "text": body.strip()})
    return rows


def test_corpus_jsonl_is_the_markdown_documents():
    from eval.datasets import load_corpus

    corpus = load_corpus(OWN / "corpus.jsonl")
    rows = corpus_rows()
    assert len(rows) >= 5
    assert {d: (c.title, c.text) for d, c in corpus.items()} == {r["_id"]: (r["title"], r["text"]) for r in rows}


def test_questions_load_and_are_well_formed():
    from eval.answers import contains_answer
    from eval.datasets import load_corpus, load_qa

    items = load_qa(OWN, "dev")
    corpus = load_corpus(OWN / "corpus.jsonl")
    assert len(items) >= 30 and len({i.id for i in items}) == len(items)
    unanswerable = [i for i in items if i.is_impossible]
    assert len(unanswerable) * 3 >= len(items)
    assert all(not i.answers and not i.gold_doc_id for i in unanswerable)
    for it in items:
        if it.is_impossible:
            continue
        doc = corpus[it.gold_doc_id]
        for gold in it.answers:
            assert gold in doc.text, (it.id, gold)  # literally, so a copied span can be right
            assert contains_answer(doc.text, [gold]), (it.id, gold)  # and the scorer sees it there
    assert {i.gold_doc_id for i in items if not i.is_impossible} == set(corpus)  # every document is asked about


def test_explanatory_questions_load_and_are_well_formed():
    """Catches the explanatory split (`qa/explain.jsonl`) drifting from what it measures: questions the
    rule reads as explanations (`question_form.explanatory`), a gold phrase not in its document, too
    few unanswerable ones to count cited inventions on."""
    from eval.answers import contains_answer
    from eval.datasets import load_corpus, load_qa
    from rag.answering.question_form import explanatory

    items = load_qa(OWN, "explain")
    corpus = load_corpus(OWN / "corpus.jsonl")
    assert len(items) >= 20 and len({i.id for i in items}) == len(items)
    assert sum(i.is_impossible for i in items) * 3 >= len(items)
    assert sum(explanatory(i.question, "en") for i in items) >= 0.8 * len(items)
    for it in items:
        if not it.is_impossible:
            assert all(g in corpus[it.gold_doc_id].text and contains_answer(corpus[it.gold_doc_id].text, [g])
                       for g in it.answers), it.id


if __name__ == "__main__":
    with (OWN / "corpus.jsonl").open("w", encoding="utf-8") as fh:
        for row in corpus_rows():
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"wrote {OWN / 'corpus.jsonl'}")
