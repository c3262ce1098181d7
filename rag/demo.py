"""`make demo`: index the bundled docs (this project's own user guide) and answer a question.

Runs on the embedded defaults with nothing beside the clone: no ../shared, no network.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .app import build_ingestor
from .commands._progress import silence_library_bars
from .commands.ask import print_sources
from .config import load_config
from .pipeline import Pipeline

CORPUS = Path(__file__).resolve().parents[1] / "docs" / "guide"
# Questions whose answer is a phrase of the guide: "How does the engine reuse the shared system prompt
# across requests?" was refused by the 0.5B on every machine tried (by the short-answer span gate up to
# session 26; since session 27 an explanatory question's sentences are judged instead, and the 0.5B's
# sentence gate refuses it too).
QUESTIONS = (
    "How many tokens does a KV cache block hold?",
    "Which file formats can be indexed?",
)


# The demo pins the packaged Qwen2.5-0.5B instead of the default `model: auto`, so it answers at once
# (auto measures each installed model on a new machine first) and the same way on every machine; it
# answers both questions with model-written [n] markers (SmolLM2 gets both wrong). `make install`
# joins its parts.
DEMO_MODEL = "qwen2.5-0.5b"


def ensure_model(name: str) -> str:
    """Install a catalogue model from its pip-installed parts; fall back to smollm2, saying why."""
    from inference.catalog import find_entry
    from inference.model_install import ModelInstallError, install

    if find_entry(name) is None:
        return name  # a path or another resolvable name: the engine reports what is wrong
    try:
        install(name, allow_pip=False)
    except ModelInstallError as exc:
        print(f"demo: {exc}\ndemo: falling back to smollm2 (answers will be weak); "
              f"`rag models install {name}` fixes this", file=sys.stderr)
        return "smollm2"
    return name


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    p = argparse.ArgumentParser(prog="rag-demo")
    p.add_argument("--question", action="append", help="ask this instead of the built-in questions")
    p.add_argument("--storage", default=".rag/demo")
    p.add_argument("--model", default=DEMO_MODEL,
                   help="generator (a `rag models list` name or a GGUF path); default %(default)s")
    args = p.parse_args(argv)
    silence_library_bars()  # transformers' "Loading weights" bar is noise between the demo's own lines
    model = ensure_model(args.model)
    cfg = load_config(None, [f"storage.path={args.storage}", f"generator.engine.model={model}"])
    pipe = Pipeline.from_config(cfg)
    try:
        report = build_ingestor(cfg, pipe.store).ingest([str(CORPUS)], progress=False)
        print(report.summary())
        print(f"indexes: {pipe.retriever.sync('default')}")
        for q in args.question or QUESTIONS:
            print(f"\nQ: {q}\nA: ", end="", flush=True)
            answer = None
            for item in pipe.stream(q):
                if isinstance(item, str):
                    print(item, end="", flush=True)
                else:
                    answer = item
            print()
            print_sources(answer)
    finally:
        pipe.close()
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
