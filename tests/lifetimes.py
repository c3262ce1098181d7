"""Heavy test resources shared like session fixtures but dropped after the last test that uses them.

A session fixture lives until the whole run ends: the float32 Qwen reference (2.5 GB) loaded for
three inference modules stayed resident through every rag, rerank and retrieval test after them,
and the suite's peak memory is what a CI box must have. `@released_after_last_use` makes a fixture
that is built once, handed to every test that asks for it, and released (then garbage-collected)
in the teardown of the last collected test whose fixture closure names it. Only for fixtures whose
own dependencies are session-wide: the first test's values of its arguments are the ones kept.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

import pytest

_NAMES: set[str] = set()
_users: Counter[str] = Counter()  # tests left in this run that use each fixture
_held: dict[str, Any] = {}


def released_after_last_use(fn: Callable[..., Any]) -> Any:
    """A fixture made once per run and released after its last user (collection order)."""
    name = fn.__name__
    _NAMES.add(name)

    @functools.wraps(fn)
    def fixture(*args: Any, **kwargs: Any) -> Any:
        if name not in _held:
            _held[name] = fn(*args, **kwargs)
        return _held[name]

    return pytest.fixture(fixture)


def count_users(items: Iterable[pytest.Item]) -> None:
    """After collection (deselection included): how many tests will ask for each such fixture."""
    _users.clear()
    for item in items:
        for name in _NAMES.intersection(getattr(item, "fixturenames", ())):
            _users[name] += 1


def release_after(item: pytest.Item) -> bool:
    """Count `item` as done; drop what no later test uses. True when something was released."""
    released = False
    for name in _NAMES.intersection(getattr(item, "fixturenames", ())):
        _users[name] -= 1
        if _users[name] <= 0 and _held.pop(name, None) is not None:
            released = True
    return released
