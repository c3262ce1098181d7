"""PDF via pypdf: one Page span per page so every chunk knows its page number."""

from __future__ import annotations

import logging
from pathlib import Path

from ..config import LoaderConfig
from ..types import Page
from .base import LoaderError, LoadResult, file_document

logging.getLogger("pypdf").setLevel(logging.ERROR)


def pdf_date(raw: object) -> str | None:
    """PDF dates look like "D:20240131120000+01'00'"; keep the calendar part as ISO 8601."""
    s = str(raw or "").strip()
    if s.startswith("D:"):
        s = s[2:]
    digits = s[:14]
    if len(digits) < 8 or not digits[:8].isdigit():
        return None
    y, mo, d = digits[:4], digits[4:6], digits[6:8]
    if len(digits) >= 14 and digits.isdigit():
        return f"{y}-{mo}-{d}T{digits[8:10]}:{digits[10:12]}:{digits[12:14]}"
    return f"{y}-{mo}-{d}"


def load_pdf(path: Path, cfg: LoaderConfig) -> LoadResult:
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(str(path))
        if reader.is_encrypted:
            try:
                reader.decrypt("")
            except Exception as e:
                raise LoaderError(path, "encrypted PDF") from e
        texts = [(pg.extract_text() or "") for pg in reader.pages]
        info = reader.metadata or {}
    except LoaderError:
        raise
    except (PdfReadError, OSError, ValueError, KeyError, TypeError) as e:
        raise LoaderError(path, f"corrupt or unreadable PDF: {e}") from e
    except Exception as e:  # pypdf raises assorted errors on damaged files
        raise LoaderError(path, f"corrupt PDF: {type(e).__name__}: {e}") from e
    if not any(t.strip() for t in texts):
        raise LoaderError(path, "PDF has no extractable text (scanned images need OCR)")
    pages, parts, pos = [], [], 0
    for i, t in enumerate(texts):
        t = t.rstrip() + "\n\n"
        pages.append(Page(pos, pos + len(t), i + 1))
        parts.append(t)
        pos += len(t)
    title = str(info.get("/Title") or "").strip()
    date = pdf_date(info.get("/CreationDate") or info.get("/ModDate"))
    yield file_document(path, "".join(parts), cfg, title=title, date=date, pages=pages,
                        metadata={"n_pages": len(texts)})
