"""Rule-based entity extraction: the cheap, deterministic half of the keyword filter."""

from __future__ import annotations

import re

_YEAR = re.compile(r"\b(1[89]\d{2}|20\d{2})\b")
_DATE = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
_CODE = re.compile(r"\b(?=[A-Za-z0-9-]*\d)(?=[A-Za-z0-9-]*[A-Za-z])[A-Za-z0-9]+(?:-[A-Za-z0-9]+)+\b|\b[A-Z]{2,}\d+[A-Z0-9]*\b")
_QUOTED = re.compile(r"[\"“「『](.+?)[\"”」』]")
_NAME = re.compile(r"\b([A-Z][a-z]+(?:\s+[A-Z][a-z]+)+)\b")


def extract_entities(text: str) -> dict[str, list[str]]:
    """Dates, years, product codes, quoted phrases and multi-word capitalised names."""
    dates = ["-".join(m) for m in _DATE.findall(text)]
    years = [y for y in _YEAR.findall(text) if not any(d.startswith(y) for d in dates)]
    out = {
        "date": dates,
        "year": years,
        "code": _CODE.findall(text),
        "phrase": _QUOTED.findall(text),
        "name": [n for n in _NAME.findall(text) if not text.startswith(n) or " " in n],
    }
    return {k: list(dict.fromkeys(v)) for k, v in out.items() if v}


def entity_filters(entities: dict[str, list[str]], mapping: dict[str, str]) -> dict:
    """Turn extracted entities into retrieval filters for the configured metadata fields."""
    filters: dict = {}
    for kind, field in mapping.items():
        values = entities.get(kind) or []
        if not values:
            continue
        if kind == "year":
            y = values[0]
            filters[field] = {"gte": f"{y}-01-01", "lte": f"{y}-12-31T23:59:59"}
        elif kind == "date":
            filters[field] = {"prefix": values[0]}
        else:
            filters[field] = {"in": values}
    return filters


def load_synonyms(path: str) -> dict[str, list[str]]:
    """`term: a, b` or `term,a,b` per line; every term of a line maps to the others."""
    table: dict[str, list[str]] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            head, _, tail = line.partition(":")
            terms = [t.strip() for t in re.split(r"[,，]", head + ("," + tail if tail else "")) if t.strip()]
            for t in terms:
                table.setdefault(t.lower(), [])
                table[t.lower()] += [o for o in terms if o != t and o not in table[t.lower()]]
    return table


def synonyms_for(text: str, table: dict[str, list[str]]) -> list[str]:
    low = text.lower()
    out: list[str] = []
    for term, syns in table.items():
        if re.search(rf"(?<!\w){re.escape(term)}(?!\w)", low) or (not term.isascii() and term in low):
            out += [s for s in syns if s.lower() not in low and s not in out]
    return out
