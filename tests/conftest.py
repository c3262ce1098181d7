"""Root fixtures: offline environment and the shared datasets location."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# `generator.engine.model: auto` (the default) would pick by this machine's measured speed; the suite
# answers with SmolLM2 everywhere instead, so results never depend on timing or on what is installed
# (tests/rag/test_auto_model.py unsets it to test the choice itself).
os.environ.setdefault("RAG_AUTO_MODEL", "smollm2")

REPO = Path(__file__).resolve().parents[1]
SHARED_DATASETS = REPO.parent / "shared" / "datasets"


@pytest.fixture(scope="session", autouse=True)
def _reap_services():
    """Services signalled to stop by `tests.readiness.stop_later` are waited for here, at the end."""
    from tests.readiness import reap_all

    yield
    reap_all()


@pytest.fixture(scope="session")
def shared_datasets() -> Path:
    if not SHARED_DATASETS.is_dir():
        pytest.skip("../shared/datasets is absent (only CI and dev machines have it)")
    return SHARED_DATASETS


def _start_postgres(settings: dict[str, str] | None = None):
    from indexing.pg_local import LocalPostgres, PostgresUnavailable

    try:
        return LocalPostgres(settings=settings).start()
    except (PostgresUnavailable, ImportError) as e:
        pytest.skip(f"no PostgreSQL with pgvector can be started here: {e}")


@pytest.fixture(scope="session")
def postgres_server():
    """A real PostgreSQL + pgvector for the session (temp dir, 127.0.0.1, stopped by PID at the end)."""
    pg = _start_postgres()
    yield pg
    pg.cleanup()


@pytest.fixture
def own_postgres():
    """A server of the test's own, for tests that kill, restart or reconfigure it. Commits are
    synchronous here: with the fast settings' `synchronous_commit: off` a SIGKILL loses the last
    ~200 ms of commits (the WAL writer's delay), which once dropped the index's schema created just
    before a test killed the server; a real server's commit survives a killed postmaster."""
    pg = _start_postgres({"synchronous_commit": "on"})
    yield pg
    pg.cleanup()


@pytest.fixture
def pg_dsn(postgres_server, request) -> str:
    """A fresh, empty database on the session server, dropped after the test."""
    import re
    import uuid

    import psycopg

    name = "t_" + re.sub(r"\W", "_", request.node.name.lower())[:40] + "_" + uuid.uuid4().hex[:6]
    with psycopg.connect(postgres_server.dsn, autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{name}"')
    yield postgres_server.dsn.rsplit("/", 1)[0] + "/" + name
    with psycopg.connect(postgres_server.dsn, autocommit=True) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class _PeakMemory:
    """Where the suite's resident memory goes, printed at the end of the run.

    The suite shares loaded models through session fixtures and runs the CLI in subprocesses; a CI
    box with less memory than the dev machine fails in whichever test crosses its limit, far from the
    ones that loaded or kept too much. So: the peak (ru_maxrss: pytest, and its largest reaped
    subprocess) and the tests after which pytest's current resident set grew the most (what a
    session fixture or a leak keeps)."""

    def __init__(self) -> None:
        import psutil  # how bench/ reads resident memory too

        self.process = psutil.Process()
        self.peaks: dict[str, tuple[int, str]] = {"pytest": (0, ""), "subprocesses": (0, "")}
        self.growth: list[tuple[int, str]] = []
        self.by_folder: dict[str, int] = {}  # resident set after each test folder's last test
        self.last = self._current_kb()

    def _current_kb(self) -> int:
        return self.process.memory_info().rss // 1024

    def record(self, nodeid: str) -> None:
        import resource

        for name, who in (("pytest", resource.RUSAGE_SELF), ("subprocesses", resource.RUSAGE_CHILDREN)):
            kb = resource.getrusage(who).ru_maxrss
            if kb > self.peaks[name][0]:
                self.peaks[name] = (kb, nodeid)
        now = self._current_kb()
        self.growth.append((now - self.last, nodeid))
        self.by_folder[nodeid.split("::")[0].rsplit("/", 1)[0]] = now
        self.last = now

    def report(self, write) -> None:
        for name, (kb, nodeid) in self.peaks.items():
            write(f"peak {name}: {kb / 2**20:.1f} GiB, reached in {nodeid or '(collection)'}")
        write("pytest's resident set after each folder: " + ", ".join(
            f"{folder} {kb / 2**20:.1f} GiB" for folder, kb in self.by_folder.items()))
        write(f"pytest's resident set at the end: {self.last / 2**20:.1f} GiB; grew most in:")
        for kb, nodeid in sorted(self.growth, reverse=True)[:10]:
            write(f"  +{kb / 2**20:.2f} GiB  {nodeid}")


_PEAK = _PeakMemory()


def pytest_collection_finish(session):
    from tests.lifetimes import count_users

    count_users(session.items)


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    """After the last user of a `released_after_last_use` fixture, and at the end of each module
    (its fixtures' models are garbage then): collect them and hand the heap's free pages back
    (`release_free_heap`), since the engine raises glibc's trim threshold for the whole process and
    the suite loads a dozen models one after another.

    What survives a collection is frozen (`gc.freeze`): later collections, ours, the tests' own and
    the interpreter's, scan only what was made since. A full collection over the suite's heap
    (tokenizer tables, session models) cost ~0.7 s and ran ~150 times. Frozen objects that die in a
    cycle later are found by the full collection (unfrozen first) at each released fixture and at
    each new test folder."""
    from tests.lifetimes import release_after

    released = release_after(item)
    if released or nextitem is None or nextitem.module is not item.module:
        import gc

        from inference.cpu_alloc import release_free_heap

        if released or nextitem is None or nextitem.path.parent != item.path.parent:
            gc.unfreeze()
        gc.collect()
        if nextitem is not None:  # the last test: nothing frozen at exit (extensions count it as leaked)
            gc.freeze()
        release_free_heap()


@pytest.hookimpl(trylast=True)
def pytest_runtest_logfinish(nodeid, location):
    _PEAK.record(nodeid)


def pytest_terminal_summary(terminalreporter):
    terminalreporter.section("resident memory")
    _PEAK.report(terminalreporter.write_line)
