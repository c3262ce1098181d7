"""Per-query result cache: one JSONL file, one line per finished query.

Why JSONL appended and flushed per query: an evaluation killed at any point (Ctrl-C, OOM, a
crash in one query) keeps every query that finished, and the next run skips them. The first
line records a key (dataset fingerprint + config + anything else that changes results); a file
written under another key is moved aside instead of being silently mixed into new results.
A torn last line (killed mid-write) is ignored.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from tqdm import tqdm

T = TypeVar("T")


class QueryCache:
    def __init__(self, path: str | Path, key: str):
        self.path = Path(path)
        self.key = key
        self._records: dict[str, dict[str, Any]] = {}
        self._load()

    def _load(self) -> None:
        if not self.path.exists():
            return
        lines = self.path.read_text(encoding="utf-8").splitlines()
        header = _parse(lines[0]) if lines else None
        if not header or header.get("_cache_key") != self.key:
            stale = self.path.with_name(self.path.name + ".stale")
            os.replace(self.path, stale)
            return
        for line in lines[1:]:
            rec = _parse(line)
            if rec is not None and "qid" in rec:
                self._records[str(rec["qid"])] = rec
        # Rewrite when a torn line was found, so later appends start on a clean line.
        if lines and not self.path.read_text(encoding="utf-8").endswith("\n"):
            self._rewrite()

    def _rewrite(self) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        with tmp.open("w", encoding="utf-8") as f:
            f.write(json.dumps({"_cache_key": self.key}) + "\n")
            for rec in self._records.values():
                f.write(json.dumps(rec, ensure_ascii=False) + "\n")
        os.replace(tmp, self.path)

    def __contains__(self, qid: str) -> bool:
        return qid in self._records

    def __len__(self) -> int:
        return len(self._records)

    def __iter__(self) -> Iterator[str]:
        return iter(self._records)

    def get(self, qid: str) -> dict[str, Any] | None:
        return self._records.get(qid)

    def put(self, qid: str, record: dict[str, Any]) -> None:
        """Store a finished query and flush it to disk before returning."""
        rec = {"qid": qid, **record}
        new_file = not self.path.exists()
        if new_file:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as f:
            if new_file:
                f.write(json.dumps({"_cache_key": self.key}) + "\n")
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
            f.flush()
        self._records[qid] = rec


def _parse(line: str) -> dict[str, Any] | None:
    try:
        v = json.loads(line)
    except json.JSONDecodeError:
        return None
    return v if isinstance(v, dict) else None


def run_resumable(ids: Sequence[str], run: Callable[[str], T], cache: QueryCache | None, *,
                  to_record: Callable[[T], dict[str, Any]], from_record: Callable[[dict[str, Any]], T],
                  desc: str, progress: bool = True, warmup: Callable[[str], object] | None = None,
                  threads: int = 0) -> tuple[dict[str, T], int]:
    """Each id's result, and how many were run: the cached ones read back (`from_record`), the rest
    run in id order and each stored as it finishes (`to_record`), so a killed evaluation resumes
    where it stopped. `warmup` runs once on the first id to run, untimed (lazy model loading out of
    the latencies); `threads` > 0 runs that many at once in a pool (results still in order), 0 runs
    them in this thread. Shared by the retrieval and QA evaluations."""
    results: dict[str, T] = {}
    todo = []
    for i in ids:
        rec = cache.get(i) if cache is not None else None
        if rec is None:
            todo.append(i)
        else:
            results[i] = from_record(rec)
    bar = tqdm(total=len(ids), initial=len(ids) - len(todo), disable=not progress, desc=desc, unit="q")
    try:
        if warmup is not None and todo:
            warmup(todo[0])
        pool = ThreadPoolExecutor(threads) if threads > 0 else None
        try:
            for i, out in zip(todo, pool.map(run, todo) if pool is not None else map(run, todo), strict=True):
                results[i] = out
                if cache is not None:
                    cache.put(i, to_record(out))
                bar.update(1)
        finally:
            if pool is not None:
                pool.shutdown()
    finally:
        bar.close()
    return results, len(todo)
