"""JSON / JSON Lines records: one document per record, fields chosen in config.

Defaults match BEIR's corpus.jsonl (`_id`, `title`, `text`, `metadata`), so it ingests as is.
A bad record is reported with its line number and the rest of the file still loads; a record
whose text field is empty is not an error (real exports have them) but a skipped document.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..config import LoaderConfig
from ..types import Document
from .base import LoaderError, LoadResult, decode_failure, path_doc_id, read_text, to_iso


def record_document(rec: Any, where: str, source: str, fallback_id: str, cfg: LoaderConfig
                    ) -> Document | LoaderError:
    if not isinstance(rec, dict):
        return LoaderError(where, f"record is a {type(rec).__name__}, expected an object", source)
    if not any(f in rec for f in cfg.text_fields):
        return LoaderError(where, f"record has none of the text fields {cfg.text_fields}", source)
    # A text field that is there but empty is data, not a broken file: the document goes on with
    # empty text and the cleaner skips it as "empty" (counted, remembered, ingest exits 0).
    texts = [rec[f] for f in cfg.text_fields if rec.get(f) not in (None, "")]
    text = "\n\n".join(t if isinstance(t, str) else json.dumps(t, ensure_ascii=False) for t in texts)
    doc_id = next((rec[k] for k in (cfg.id_field, *cfg.id_fallbacks) if rec.get(k) not in (None, "")),
                  fallback_id)
    used = {*cfg.text_fields, cfg.title_field, cfg.id_field, *cfg.id_fallbacks, cfg.date_field,
            cfg.metadata_field}
    meta: dict[str, Any] = dict(cfg.metadata)
    if cfg.metadata_fields is None:
        meta.update({k: v for k, v in rec.items() if k not in used})
    else:
        meta.update({k: rec[k] for k in cfg.metadata_fields if k in rec})
    nested = rec.get(cfg.metadata_field)
    if isinstance(nested, dict):
        meta.update(nested)
    return Document(
        doc_id=str(doc_id),
        text=text,
        source=source,
        title=str(rec.get(cfg.title_field) or ""),
        date=to_iso(rec.get(cfg.date_field)),
        metadata=meta,
    )


def load_jsonl(path: Path, cfg: LoaderConfig) -> LoadResult:
    source, base = str(path.resolve()), path_doc_id(path)
    try:
        enc = "utf-8-sig" if cfg.encoding.lower() in ("utf-8", "utf8") else cfg.encoding
        fh = open(path, encoding=enc, errors="strict")  # noqa: SIM115 - closed below
    except OSError as e:
        raise LoaderError(path, f"unreadable: {e.strerror or e}") from e
    with fh:
        lineno = 0
        try:
            for lineno, line in enumerate(fh, 1):  # noqa: B007 - used in the except clause
                if not line.strip():
                    continue
                where = f"{path}:{lineno}"
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as e:
                    yield LoaderError(where, f"invalid JSON: {e.msg}", source)
                    continue
                yield record_document(rec, where, source, f"{base}:{lineno}", cfg)
        except UnicodeDecodeError as e:
            raise LoaderError(f"{path}:{lineno + 1}", decode_failure(cfg.encoding, e), source) from e


def _records(data: Any) -> Iterator[Any]:
    if isinstance(data, list):
        yield from data
    elif isinstance(data, dict) and isinstance(data.get("documents"), list):
        yield from data["documents"]
    else:
        yield data


def load_json(path: Path, cfg: LoaderConfig) -> LoadResult:
    try:
        data = json.loads(read_text(path, cfg))
    except json.JSONDecodeError as e:
        raise LoaderError(path, f"invalid JSON: {e.msg} at line {e.lineno}") from e
    source, base = str(path.resolve()), path_doc_id(path)
    for i, rec in enumerate(_records(data)):
        yield record_document(rec, f"{path}[{i}]", source, f"{base}:{i}", cfg)
