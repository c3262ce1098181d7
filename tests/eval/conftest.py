"""A tiny BEIR-layout dataset written to disk, and a real BM25 chunk retriever over it."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from rank_bm25 import BM25Okapi

from indexing.types import Chunk
from retrieval.types import Candidate, SearchResult

DOCS = {
    "paris": ("Paris", "Paris is the capital of France. The Eiffel Tower stands on the Champ de Mars in Paris. "
              "The Louvre museum holds the Mona Lisa."),
    "rome": ("Rome", "Rome is the capital of Italy. The Colosseum is an ancient amphitheatre in Rome. "
             "Vatican City is an enclave inside Rome."),
    "berlin": ("Berlin", "Berlin is the capital of Germany. The Brandenburg Gate is a monument in Berlin. "
               "The Berlin Wall fell in 1989."),
    "madrid": ("Madrid", "Madrid is the capital of Spain. The Prado museum in Madrid holds paintings by Velazquez. "
               "Real Madrid plays at the Bernabeu stadium."),
    "tokyo": ("Tokyo", "Tokyo is the capital of Japan. Shibuya crossing is a busy intersection in Tokyo. "
              "Mount Fuji can be seen from Tokyo on clear days."),
    "cairo": ("Cairo", "Cairo is the capital of Egypt. The pyramids of Giza are near Cairo. "
              "The Nile river flows through Cairo."),
    "ottawa": ("Ottawa", "Ottawa is the capital of Canada. Parliament Hill overlooks the Ottawa river. "
               "The Rideau Canal freezes into a skating rink in winter."),
    "canberra": ("Canberra", "Canberra is the capital of Australia. Lake Burley Griffin lies in Canberra. "
                 "The Australian War Memorial is in Canberra."),
}
QUERIES = {
    "q1": ("Where is the Eiffel Tower?", {"paris": 1}),
    "q2": ("ancient amphitheatre Colosseum", {"rome": 2}),
    "q3": ("Which wall fell in 1989?", {"berlin": 1}),
    "q4": ("museum with paintings by Velazquez", {"madrid": 1}),
    "q5": ("busy intersection Shibuya crossing", {"tokyo": 1}),
    "q6": ("pyramids of Giza and the Nile", {"cairo": 2, "paris": 0}),
    "q7": ("skating rink canal in winter", {"ottawa": 1}),
    "q8": ("lake and war memorial", {"canberra": 1}),
    "q9": ("capital city museum", {"paris": 1, "madrid": 1}),
    "q10": ("a query without judgements", {}),
}
QA = [
    {"id": "a1", "question": "Which city has the Eiffel Tower?", "answers": ["Paris"], "gold_doc_id": "paris"},
    {"id": "a2", "question": "Which city has the Colosseum?", "answers": ["Rome", "the city of Rome"],
     "gold_doc_id": "rome"},
    {"id": "a3", "question": "In which city are the pyramids of Giza?", "answers": ["Cairo"], "gold_doc_id": "cairo"},
    {"id": "a4", "question": "Which city hosted the 1987 chess olympiad?", "answers": [], "is_impossible": True,
     "gold_doc_id": ""},
]


def tokenize(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


class BM25Search:
    """A real BM25 retriever (rank_bm25, an independent implementation) over sentence chunks,
    returning the real `retrieval.types` results the pipeline returns."""

    def __init__(self, docs: dict[str, tuple[str, str]], k: int = 20, reverse: bool = False):
        self.chunks: list[Chunk] = []
        for doc_id, (title, text) in docs.items():
            start = 0
            for i, sent in enumerate(s for s in text.split(". ") if s):
                self.chunks.append(Chunk(chunk_id=f"{doc_id}#{i}", doc_id=doc_id, text=sent,
                                         start=start, end=start + len(sent), title=title))
                start += len(sent) + 2
        self.bm25 = BM25Okapi([tokenize(c.title + " " + c.text) for c in self.chunks])
        self.k, self.reverse = k, reverse

    def __call__(self, query: str) -> SearchResult:
        t0 = time.perf_counter()
        toks = tokenize(query)
        t1 = time.perf_counter()
        scores = self.bm25.get_scores(toks)
        order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))[: self.k]
        if self.reverse:
            order = order[::-1]
        t2 = time.perf_counter()
        return SearchResult([Candidate(self.chunks[i], float(scores[i])) for i in order],
                            {"tokenize": (t1 - t0) * 1000, "bm25": (t2 - t1) * 1000})


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


@pytest.fixture
def tiny_dataset(tmp_path: Path) -> Path:
    root = tmp_path / "tiny"
    (root / "qrels").mkdir(parents=True)
    (root / "qa").mkdir()
    _write_jsonl(root / "corpus.jsonl", [{"_id": d, "title": t, "text": x} for d, (t, x) in DOCS.items()])
    _write_jsonl(root / "queries.jsonl", [{"_id": q, "text": t, "metadata": {}} for q, (t, _) in QUERIES.items()])
    lines = ["query-id\tcorpus-id\tscore"]
    lines += [f"{q}\t{d}\t{r}" for q, (_, rels) in QUERIES.items() for d, r in rels.items()]
    (root / "qrels" / "test.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    _write_jsonl(root / "qa" / "dev.jsonl", [{"is_impossible": False, "title": "", **r} for r in QA])
    return root


@pytest.fixture(scope="session")
def bm25_search() -> BM25Search:
    return BM25Search(DOCS)


@pytest.fixture(scope="session")
def make_bm25():
    """Builds a BM25Search over the tiny corpus with keyword options (for ablation factories)."""
    return lambda **kw: BM25Search(DOCS, **kw)
