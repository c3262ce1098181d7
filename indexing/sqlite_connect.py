"""The one way this project opens a SQLite file: WAL, a busy timeout, safe when processes race.

Why: two processes opening a fresh file at once (`rag serve --replicas 2` on a new storage path,
or an indexer beside a server) both switch it to WAL, and SQLite answers the loser's
`PRAGMA journal_mode=WAL` with "database is locked" at once, without waiting on its busy handler:
14 of 30 concurrent opens of a fresh embedding cache failed that way (Zen 4, 2 cores), and a replica
whose load failed so stayed unready for good. Here the busy timeout is set before anything else and
the switch is retried until the timeout.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

BUSY_TIMEOUT_S = 30.0


def connect_wal(path: str | Path, timeout_s: float = BUSY_TIMEOUT_S) -> sqlite3.Connection:
    """An autocommit connection to `path` in WAL mode, usable from any thread (callers lock).
    `timeout` is SQLite's busy timeout, set by the connect itself, before any statement."""
    db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None, timeout=timeout_s)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            break
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                db.close()
                raise
            time.sleep(0.05)
    return db
