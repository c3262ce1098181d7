"""Metadata filters (`retrieval.filters.Filters`) as a SQL WHERE fragment over the `chunks` table.

Same semantics as `Condition.test` in Python (a test compares the two on every operator): list-valued
metadata matches when any element does; numbers compare as numbers whenever both sides parse as
numbers ("2020" equals 2020); otherwise strings compare by code point (COLLATE "C"), and an ISO date
upper bound means "through": date <= "2020" keeps 2020-05-01. A missing field fails every operator
except `ne`. The helper functions are created once per database by `SQL_FUNCTIONS`.

Column names come from a fixed list and metadata keys are bound parameters, so a filter can never
inject SQL.
"""

from __future__ import annotations

from typing import Any

from .filters import _ATTRS, Condition, Filters

SQL_FUNCTIONS = r"""
CREATE OR REPLACE FUNCTION rag_num(t text) RETURNS double precision LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE WHEN t ~ '^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$' THEN t::double precision END $$;
CREATE OR REPLACE FUNCTION rag_eq(v text, target text) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
  SELECT v IS NOT NULL AND (v = target OR coalesce(rag_num(v) = rag_num(target), false)) $$;
CREATE OR REPLACE FUNCTION rag_cmp(v text, b text, how text) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE
    WHEN v IS NULL THEN false
    WHEN rag_num(v) IS NOT NULL AND rag_num(b) IS NOT NULL THEN CASE how
      WHEN 'ge' THEN rag_num(v) >= rag_num(b) WHEN 'gt' THEN rag_num(v) > rag_num(b)
      WHEN 'le' THEN rag_num(v) <= rag_num(b) ELSE rag_num(v) < rag_num(b) END
    ELSE CASE how
      WHEN 'ge' THEN v COLLATE "C" >= b WHEN 'gt' THEN v COLLATE "C" > b
      WHEN 'le' THEN left(v, length(b)) COLLATE "C" <= b ELSE left(v, length(b)) COLLATE "C" < b END
  END $$;
CREATE OR REPLACE FUNCTION rag_jvals(j jsonb) RETURNS text[] LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE WHEN j IS NULL OR jsonb_typeof(j) = 'null' THEN ARRAY[]::text[]
              WHEN jsonb_typeof(j) = 'array' THEN ARRAY(SELECT jsonb_array_elements_text(j))
              ELSE ARRAY[j #>> '{}'] END $$;
"""


def _key(field: str) -> tuple[str | None, str | None]:
    """(column, metadata key): exactly one is set."""
    if field.startswith("metadata."):
        return None, field[len("metadata."):]
    if field in _ATTRS:
        return field, None
    return None, field


def _text(v: Any) -> str:
    return str(v)


def condition_sql(cond: Condition, alias: str = "c") -> tuple[str, list[Any]]:
    col, key = _key(cond.field)
    if col is not None:
        scalar, vals, sargs, vargs = f"{alias}.{col}::text", f"ARRAY[{alias}.{col}::text]", [], []
        is_str = f"{alias}.{col} IS NOT NULL" if col != "page" else "false"
        str_val, str_args = f"{alias}.{col}::text", []
    else:
        scalar, sargs = f"({alias}.metadata ->> %s)", [key]
        vals, vargs = f"rag_jvals({alias}.metadata -> %s)", [key]
        is_str = f"jsonb_typeof({alias}.metadata -> %s) = 'string'"
        str_val, str_args = f"({alias}.metadata ->> %s)", [key]
    op = cond.op
    if op in ("eq", "ne"):
        sql = f"EXISTS (SELECT 1 FROM unnest({vals}) x WHERE rag_eq(x, %s))"
        args = [*vargs, _text(cond.value)]
        return (f"NOT {sql}", args) if op == "ne" else (sql, args)
    if op == "in":
        return (f"EXISTS (SELECT 1 FROM unnest({vals}) x, unnest(%s::text[]) y WHERE rag_eq(x, y))",
                [*vargs, [_text(v) for v in cond.values]])
    if op == "prefix":
        sql = f"({is_str} AND starts_with({str_val}, %s))"
        return sql, ([] if col is not None else [key]) + str_args + [_text(cond.value)]
    parts, args = [], []
    if col is None:  # Python compares the value itself: a list never matches a range
        parts.append(f"jsonb_typeof({alias}.metadata -> %s) NOT IN ('array', 'object', 'null')")
        args.append(key)
    for bound, how in ((cond.gte, "ge"), (cond.gt, "gt"), (cond.lte, "le"), (cond.lt, "lt")):
        if bound is not None:
            parts.append(f"rag_cmp({scalar}, %s, '{how}')")
            args += [*sargs, _text(bound)]
    if not parts or (col is None and len(parts) == 1):
        parts.append(f"{scalar} IS NOT NULL")
        args += sargs
    return "(" + " AND ".join(parts) + ")", args


def filters_sql(filters: Filters | None, alias: str = "c") -> tuple[str, list[Any]]:
    """`AND ...` fragment (empty when there are no filters) and its parameters."""
    if not filters:
        return "", []
    sql, args = [], []
    for cond in filters.conditions:
        s, a = condition_sql(cond, alias)
        sql.append(s)
        args += a
    return " AND " + " AND ".join(sql), args
