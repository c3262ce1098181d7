"""Plain text files: the whole file is one document titled by its file name."""

from __future__ import annotations

from pathlib import Path

from ..config import LoaderConfig
from .base import LoadResult, file_document, read_text


def load_txt(path: Path, cfg: LoaderConfig) -> LoadResult:
    yield file_document(path, read_text(path, cfg), cfg)
