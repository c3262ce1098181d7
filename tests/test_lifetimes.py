"""The suite's own memory rule (tests/lifetimes.py): a heavy shared fixture is built once and
dropped after its last user, never before it."""

from __future__ import annotations

pytest_plugins = ["pytester"]


def test_a_shared_fixture_is_built_once_and_dropped_after_its_last_user(pytester):
    """Catches the reference model rebuilt for each test (counted per test, not per run), released
    while a later module still uses it (rebuilt there: 2.5 GB and ~9 s again), or kept to the end."""
    pytester.makeconftest('''
import gc, weakref
import pytest
from tests.lifetimes import count_users, release_after, released_after_last_use

BUILT, ALIVE = [], []

class Model:
    pass

@released_after_last_use
def heavy():
    m = Model()
    BUILT.append(1)
    ALIVE.append(weakref.ref(m))
    return m

def pytest_collection_finish(session):
    count_users(session.items)

@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    release_after(item)
    gc.collect()
''')
    pytester.makepyfile(
        test_a='''
from conftest import BUILT, ALIVE
def test_1(heavy): assert len(BUILT) == 1
def test_2(): assert ALIVE[0]() is not None  # a later module still needs it
''',
        test_b='''
from conftest import BUILT, ALIVE
def test_3(heavy): assert len(BUILT) == 1 and ALIVE[0]() is heavy
def test_4(): assert ALIVE[0]() is None  # its last user is done
''')
    import sys
    from pathlib import Path

    pytester.syspathinsert(str(Path(__file__).resolve().parents[1]))
    sys.modules.pop("conftest", None)
    pytester.runpytest("-p", "no:cacheprovider", "-q").assert_outcomes(passed=4)
