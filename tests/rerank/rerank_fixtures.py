"""Test data for tests/rerank: a tiny BEIR dataset (English + Chinese) and candidate builders."""

from __future__ import annotations

import json
from pathlib import Path

# (doc id, title, text, training query, held-out query)
DOCS = [
    ("eiffel", "Eiffel Tower", "The Eiffel Tower is a wrought-iron lattice tower in Paris, France, built in 1889.",
     "iron tower in Paris", "when was the Paris landmark tower built"),
    ("photo", "Photosynthesis", "Photosynthesis lets plants turn sunlight, water and carbon dioxide into sugar and oxygen.",
     "how do plants make sugar from light", "plants produce oxygen from sunlight"),
    ("volcano", "Volcanoes", "A volcano erupts when molten rock called magma rises through the crust to the surface.",
     "what makes a volcano erupt", "magma reaching the surface of the earth"),
    ("insulin", "Insulin", "Insulin is a hormone made by the pancreas that lowers the level of glucose in the blood.",
     "hormone that lowers blood sugar", "which organ produces insulin"),
    ("jupiter", "Jupiter", "Jupiter is the largest planet in the solar system, a gas giant with a great red storm.",
     "biggest planet of the solar system", "gas giant with a red spot"),
    ("python", "Python language", "Python is a programming language known for readable code and a large standard library.",
     "readable programming language", "language with a big standard library for coding"),
    ("bee", "Honey bees", "Honey bees collect nectar from flowers and turn it into honey inside the hive.",
     "how is honey made", "insects that gather nectar"),
    ("coffee", "Coffee", "Coffee is brewed from roasted beans and contains caffeine, a stimulant that keeps people awake.",
     "drink with caffeine from roasted beans", "stimulant that keeps you awake"),
    ("wall", "长城", "长城是中国古代修建的军事防御工程，东西绵延上万里。", "中国古代的防御工程", "绵延上万里的城墙"),
    ("panda", "大熊猫", "大熊猫生活在四川的山林里，主要以竹子为食。", "熊猫吃什么", "以竹子为食的动物"),
    ("tea", "茶", "茶叶经过采摘、萎凋和炒制，冲泡后成为人们喜爱的饮品。", "茶叶是怎么制作的", "冲泡茶叶的饮品"),
    ("rain", "降雨", "水蒸气在高空遇冷凝结成水滴，水滴变大后落下形成降雨。", "雨是怎么形成的", "水蒸气凝结成水滴"),
]


def write_beir(root: Path, split: str = "train", held_out: bool = False) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "qrels").mkdir(exist_ok=True)
    with (root / "corpus.jsonl").open("w", encoding="utf-8") as f:
        for did, title, text, _, _ in DOCS:
            f.write(json.dumps({"_id": did, "title": title, "text": text}, ensure_ascii=False) + "\n")
    with (root / "queries.jsonl").open("w", encoding="utf-8") as f, \
            (root / "qrels" / f"{split}.tsv").open("w", encoding="utf-8") as q:
        q.write("query-id\tcorpus-id\tscore\n")
        for did, _, _, train_q, test_q in DOCS:
            f.write(json.dumps({"_id": f"q-{did}", "text": test_q if held_out else train_q}, ensure_ascii=False) + "\n")
            q.write(f"q-{did}\t{did}\t1\n")
    return root


def candidates(texts: list[str], titles: list[str] | None = None):
    """Candidates in the given (retrieval) order with descending retrieval scores."""
    from indexing.types import Chunk
    from retrieval.types import Candidate

    out = []
    for i, t in enumerate(texts):
        title = titles[i] if titles else ""
        out.append(Candidate(Chunk(f"c{i}", f"d{i}", t, 0, len(t), title=title), score=1.0 - i * 0.01,
                             scores={"bm25": 1.0 - i * 0.01}, ranks={"bm25": i + 1}))
    return out
