"""Loaders by file extension, and the walk that turns CLI paths into documents.

`iter_documents` never raises for a bad input: it yields a `LoaderError` in its place so the
ingest can report it and index everything else.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Iterator
from pathlib import Path

from ..config import LoaderConfig
from ..types import Document
from .base import Loader, LoaderError, path_doc_id
from .html import load_html
from .markdown import load_markdown
from .pdf import load_pdf
from .records import load_json, load_jsonl
from .text import load_txt

LOADERS: dict[str, Loader] = {
    ".txt": load_txt,
    ".text": load_txt,
    ".md": load_markdown,
    ".markdown": load_markdown,
    ".html": load_html,
    ".htm": load_html,
    ".pdf": load_pdf,
    ".json": load_json,
    ".jsonl": load_jsonl,
}

__all__ = ["LOADERS", "LoaderError", "iter_documents", "load_file", "path_doc_id", "register_loader",
           "walk"]


def register_loader(ext: str, loader: Loader) -> None:
    """Plug in a format (e.g. ".docx") without touching this package."""
    LOADERS[ext.lower() if ext.startswith(".") else f".{ext.lower()}"] = loader


def _matches(rel: str, patterns: list[str]) -> bool:
    name = rel.rsplit("/", 1)[-1]
    for p in patterns:
        if "/" in p:
            if fnmatch.fnmatch(rel, p) or (p.startswith("**/") and fnmatch.fnmatch(rel, p[3:])):
                return True
        elif fnmatch.fnmatch(name, p):
            return True
    return False


def walk(root: Path, cfg: LoaderConfig) -> Iterator[Path]:
    """Files under `root`, sorted, kept by include globs and dropped by exclude globs.

    A glob without "/" matches the file name; with "/" it matches the path relative to root
    ("**/" also matches at the top level). Excluded directories are not descended into.
    """
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        parts = rel.split("/")
        if any(_matches("/".join(parts[: i + 1]), cfg.exclude) for i in range(len(parts) - 1)):
            continue  # inside an excluded directory
        if path.is_file() and _matches(rel, cfg.include) and not _matches(rel, cfg.exclude):
            yield path


def load_file(path: Path, cfg: LoaderConfig) -> Iterator[Document | LoaderError]:
    loader = LOADERS.get(path.suffix.lower())
    if loader is None:
        yield LoaderError(path, f"unsupported file type {path.suffix or '(none)'!r}; "
                                f"supported: {', '.join(sorted(LOADERS))}")
        return
    try:
        yield from loader(path, cfg)
    except LoaderError as e:
        yield e
    except (OSError, UnicodeError, ValueError, RecursionError) as e:
        yield LoaderError(path, f"{type(e).__name__}: {e}")


def iter_documents(paths: Iterable[str | Path], cfg: LoaderConfig | None = None
                   ) -> Iterator[Document | LoaderError]:
    """Documents from files and directories (recursively), in a stable order."""
    cfg = cfg or LoaderConfig()
    for p in paths:
        path = Path(p).expanduser()
        if path.is_dir():
            for f in walk(path, cfg):
                yield from load_file(f, cfg)
        elif path.is_file():
            yield from load_file(path, cfg)
        elif path.exists():
            yield LoaderError(path, "not a regular file")
        else:
            yield LoaderError(path, "no such file or directory")
