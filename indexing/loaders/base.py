"""Shared pieces of the loaders: the error type, stable ids, dates and text decoding."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator
from datetime import date, datetime, timezone
from pathlib import Path

from ..config import LoaderConfig
from ..types import Document


class LoaderError(Exception):
    """A file (or record) that could not be loaded; the ingest reports it and goes on."""

    def __init__(self, path: str | Path, reason: str, source: str | None = None):
        super().__init__(f"{path}: {reason}")
        self.path = str(path)
        self.reason = reason
        # The file the error belongs to (path may name a record inside it, e.g. "corpus.jsonl:12").
        self.source = source or str(Path(path).resolve())


# A loader yields documents; per-record problems are yielded as LoaderError values so the
# rest of the file still loads, whole-file problems are raised.
LoadResult = Iterator[Document | LoaderError]
Loader = Callable[[Path, LoaderConfig], LoadResult]


def path_doc_id(path: Path) -> str:
    """Short id that stays the same for the same file across runs (hash of the absolute path)."""
    return hashlib.blake2b(str(path.resolve()).encode("utf-8"), digest_size=8).hexdigest()


def mtime_iso(path: Path) -> str:
    return datetime.fromtimestamp(path.stat().st_mtime, tz=timezone.utc).isoformat(timespec="seconds")


def to_iso(value: object) -> str | None:
    """Dates from front matter / records as ISO 8601 strings (None when absent or unparseable)."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return value.isoformat(timespec="seconds")
    if isinstance(value, date):
        return value.isoformat()
    s = str(value).strip()
    try:
        return datetime.fromisoformat(s.replace("Z", "+00:00")).isoformat(timespec="seconds")
    except ValueError:
        return s or None


def read_text(path: Path, cfg: LoaderConfig) -> str:
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise LoaderError(path, f"unreadable: {e.strerror or e}") from e
    if b"\x00" in raw[:4096] and cfg.encoding.lower().replace("-", "") in ("utf8", "utf8sig"):
        raise LoaderError(path, "binary content in a text file")
    try:
        return raw.decode("utf-8-sig" if cfg.encoding.lower() in ("utf-8", "utf8") else cfg.encoding)
    except (UnicodeDecodeError, LookupError) as e:
        raise LoaderError(path, decode_failure(cfg.encoding, e)) from e


def decode_failure(encoding: str, e: Exception) -> str:
    """The reason for a file that does not decode, with the setting that fixes it: a bare codec
    error left users guessing that the encoding is configurable."""
    if isinstance(e, LookupError):
        return f"unknown encoding {encoding!r} (indexing.loader.encoding); use e.g. utf-8, latin-1, cp1252"
    return (f"cannot decode as {encoding} (byte {getattr(e, 'start', '?')}): the file uses another encoding; "
            "set indexing.loader.encoding, e.g. --set indexing.loader.encoding=cp1252 (or latin-1)")


def file_document(path: Path, text: str, cfg: LoaderConfig, **kw: object) -> Document:
    """A Document for a whole file, with the file-level defaults (id, source, mtime date)."""
    meta = dict(cfg.metadata)
    meta.update(kw.pop("metadata", {}) or {})  # type: ignore[arg-type]
    return Document(
        doc_id=path_doc_id(path),
        text=text,
        source=str(path.resolve()),
        title=str(kw.pop("title", "") or path.stem),
        date=kw.pop("date", None) or mtime_iso(path),  # type: ignore[arg-type]
        metadata=meta,
        **kw,  # type: ignore[arg-type]
    )


def is_readable(path: Path) -> bool:
    return os.access(path, os.R_OK)
