"""Connections to PostgreSQL with the failure modes a service meets: timeouts and keepalives on
every connection, errors as `StoreUnavailable` naming the DSN with its password masked (the server
maps it to 503), and a bounded wait for a server that is starting up or in recovery."""

from __future__ import annotations

import re
import time
from collections.abc import Callable


class StoreUnavailable(RuntimeError):
    """The database cannot be reached or the connection dropped (maps to HTTP 503)."""


def mask_dsn(dsn: str) -> str:
    """The DSN with its password replaced by `***` (URL and key=value forms)."""
    dsn = re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", dsn)
    return re.sub(r"(password\s*=\s*)('[^']*'|\S+)", r"\1***", dsn)


# What a server that is up but not serving yet answers (SQLSTATE 57P03 cannot_connect_now): a
# primary starting or in crash recovery, a standby before it is consistent. Worth waiting for;
# "connection refused" or bad credentials are not.
_STARTING = ("the database system is starting up", "not yet accepting connections", "in recovery mode")


def server_starting(e: BaseException) -> bool:
    """The error says the server is starting up or in recovery (retrying will likely succeed)."""
    return any(s in str(e) for s in _STARTING)


def connect(dsn: str, *, statement_timeout_ms: int = 30000, connect_timeout: int = 5, wait_s: float = 0.0,
            on_wait: Callable[[str], None] | None = None):
    """One autocommit connection with timeouts and keepalives; raises StoreUnavailable.

    `wait_s` > 0 retries, for at most that long, a server that answers it is starting up or in
    recovery (`on_wait` hears why each time), so a service started beside its database does not
    fail on the database's start-up race."""
    import psycopg

    t0 = time.monotonic()
    while True:
        try:
            return psycopg.connect(dsn, autocommit=True, connect_timeout=connect_timeout, keepalives=1,
                                   keepalives_idle=10, keepalives_interval=5, keepalives_count=3,
                                   options=f"-c statement_timeout={int(statement_timeout_ms)}")
        except psycopg.OperationalError as e:
            waited = time.monotonic() - t0
            if server_starting(e) and waited < wait_s:
                if on_wait is not None:
                    on_wait(f"waiting for PostgreSQL at {mask_dsn(dsn)}: {first_line(e)} "
                            f"({waited:.0f} s of {wait_s:.0f} s)")
                time.sleep(min(0.5, max(wait_s - waited, 0.01)))
                continue
            still = f" (still starting up or in recovery after {waited:.0f} s)" if server_starting(e) and wait_s else ""
            raise StoreUnavailable(f"cannot connect to PostgreSQL at {mask_dsn(dsn)}: {first_line(e)}{still}") from None


def wait_for_server(dsn: str, wait_s: float, on_wait: Callable[[str], None] | None = None) -> None:
    """Return once the server at `dsn` accepts a connection and a query, waiting up to `wait_s` for
    one that is starting up or in recovery; raises StoreUnavailable otherwise (for service start-up)."""
    with connect(dsn, wait_s=wait_s, on_wait=on_wait) as db:
        db.execute("SELECT 1")


def first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]
