"""Metadata filters evaluated against chunk fields and metadata, used as pre-filters.

A filter set is a list of conditions ANDed together. Each one names a field (a Chunk attribute
such as `source`, `date`, `page`, `doc_id`, or a key of `chunk.metadata`, optionally written
`metadata.key`) and an operator: `eq`, `ne`, `in`, `range` (gte/gt/lte/lt, on numbers and on ISO
dates, where "2020" as an upper bound means "through 2020"), `prefix`.

The retriever turns a filter set into the set of allowed int ids once per query (cached per store
version), then both retrievers search only inside it (FAISS id selector, BM25 row mask), so k
matching results come back even when the filter keeps 0.1% of the corpus.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from indexing.types import Chunk

_ATTRS = ("chunk_id", "doc_id", "source", "title", "date", "section", "page", "granularity", "parent_id",
          "language")


class Condition(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    field: str
    op: Literal["eq", "ne", "in", "range", "prefix"]
    value: Any = None
    values: tuple[Any, ...] = ()
    gte: Any = None
    gt: Any = None
    lte: Any = None
    lt: Any = None

    def test(self, v: Any) -> bool:
        if self.op == "eq":
            return _eq(v, self.value)
        if self.op == "ne":
            return not _eq(v, self.value)
        if self.op == "in":
            return any(_eq(v, x) for x in self.values)
        if self.op == "prefix":
            return isinstance(v, str) and v.startswith(str(self.value))
        if v is None:
            return False
        for bound, cmp in ((self.gte, "ge"), (self.gt, "gt"), (self.lte, "le"), (self.lt, "lt")):
            if bound is not None and not _cmp(v, bound, cmp):
                return False
        return True


def _num(x: Any) -> float | None:
    if isinstance(x, bool):
        return None
    if isinstance(x, (int, float)):
        return float(x)
    if isinstance(x, str):
        try:
            return float(x)
        except ValueError:
            return None
    return None


def _eq(v: Any, target: Any) -> bool:
    if isinstance(v, list):
        return any(_eq(x, target) for x in v)  # list-valued metadata (tags) match any element
    if v == target:
        return True
    a, b = _num(v), _num(target)
    if a is not None and b is not None:
        return a == b
    return v is not None and str(v) == str(target)


def _cmp(v: Any, bound: Any, how: str) -> bool:
    a, b = _num(v), _num(bound)
    if a is None or b is None:
        a, b = str(v), str(bound)
        if how in ("le", "lt"):
            a = a[: len(b)]  # "2020-05-01" <= "2020" means "within 2020 or before"
    return {"ge": a >= b, "gt": a > b, "le": a <= b, "lt": a < b}[how]


def field_value(chunk: Chunk, name: str) -> Any:
    if name.startswith("metadata."):
        return chunk.metadata.get(name[len("metadata."):])
    if name in _ATTRS:
        return getattr(chunk, name)
    return chunk.metadata.get(name)


class Filters(BaseModel):
    """An AND of conditions. Build with `Filters.parse(...)` from CLI strings or a dict."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    conditions: tuple[Condition, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.conditions)

    def matches(self, chunk: Chunk) -> bool:
        return all(c.test(field_value(chunk, c.field)) for c in self.conditions)

    def key(self) -> str:
        return self.model_dump_json()

    @classmethod
    def parse(cls, spec: Filters | str | Sequence[str] | Mapping[str, Any] | None) -> Filters:
        if spec is None:
            return cls()
        if isinstance(spec, Filters):
            return spec
        if isinstance(spec, str):
            spec = [spec]
        if isinstance(spec, Mapping):
            return cls(conditions=tuple(_from_mapping(k, v) for k, v in spec.items()))
        return cls(conditions=tuple(parse_condition(s) for s in spec))


_OP_RE = re.compile(r"^\s*([\w.\-]+)\s*(\^=|!=|>=|<=|>|<|=)\s*(.*?)\s*$")


def parse_condition(s: str) -> Condition:
    """CLI syntax: `key=value`, `key=a|b` (in), `key!=v`, `key>=v` / `<=` / `>` / `<`,
    `key=lo..hi` (inclusive range), `key^=prefix`."""
    m = _OP_RE.match(s)
    if not m:
        raise ValueError(f"cannot parse filter {s!r}; use key=value, key>=value, key=a..b, key^=prefix")
    key, op, val = m.groups()
    if op == "^=":
        return Condition(field=key, op="prefix", value=val)
    if op == "!=":
        return Condition(field=key, op="ne", value=val)
    if op in (">=", "<=", ">", "<"):
        name = {">=": "gte", "<=": "lte", ">": "gt", "<": "lt"}[op]
        return Condition(field=key, op="range", **{name: val})
    if ".." in val:
        lo, hi = val.split("..", 1)
        return Condition(field=key, op="range", gte=lo or None, lte=hi or None)
    if "|" in val:
        return Condition(field=key, op="in", values=tuple(val.split("|")))
    return Condition(field=key, op="eq", value=val)


def _from_mapping(key: str, v: Any) -> Condition:
    if isinstance(v, Mapping):
        v = dict(v)
        if "prefix" in v:
            return Condition(field=key, op="prefix", value=v["prefix"])
        if "in" in v:
            return Condition(field=key, op="in", values=tuple(v["in"]))
        if "ne" in v:
            return Condition(field=key, op="ne", value=v["ne"])
        if "eq" in v:
            return Condition(field=key, op="eq", value=v["eq"])
        bounds = {b: v[b] for b in ("gte", "gt", "lte", "lt") if b in v}
        if bounds and len(bounds) == len(v):
            return Condition(field=key, op="range", **bounds)
        raise ValueError(f"filter on {key!r}: unknown operator in {sorted(v)}")
    if isinstance(v, (list, tuple)):
        return Condition(field=key, op="in", values=tuple(v))
    return Condition(field=key, op="eq", value=v)


def allowed_ids(chunks: Iterable[Chunk], filters: Filters) -> np.ndarray:
    """Int ids of the chunks that pass (sorted int64, ready for a FAISS IDSelectorBatch)."""
    ids = [c.int_id for c in chunks if filters.matches(c)]
    return np.unique(np.asarray(ids, dtype=np.int64))
