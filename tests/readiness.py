"""Waiting for services the tests start (uvicorn, `rag serve`, Ray, PostgreSQL) without racing them.

Every wait is a deadline, not a sleep: a fast machine moves on as soon as the service answers, a
slow one gets the whole deadline. `RAG_TEST_TIMEOUT_SCALE` multiplies every deadline (a loaded CI
box can set 3). A wait that gives up says what it waited for, the last thing the probe saw, and the
end of the service's log, so a failure on a slow machine is diagnosable from the test output alone.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def scaled(seconds: float) -> float:
    return seconds * float(os.environ.get("RAG_TEST_TIMEOUT_SCALE", "1") or 1)


def log_tail(path: Path | str | None, n: int = 2000) -> str:
    if path is None:
        return ""
    try:
        return Path(path).read_text(errors="replace")[-n:]
    except OSError as e:
        return f"(no log: {e})"


def wait_for(probe: Callable[[], T | None], what: str, timeout: float, alive: Callable[[], str | None] | None = None,
             log: Path | str | None = None, interval: float = 0.1) -> T:
    """Call `probe` until it returns something truthy (returned) or raises nothing worse than an
    expected start-up error. `alive` returns a reason when the service has died (fail at once)."""
    deadline = time.monotonic() + scaled(timeout)
    last = "no answer yet"
    while True:
        if alive is not None:
            dead = alive()
            if dead:
                raise AssertionError(f"{what}: {dead}\n{log_tail(log)}")
        try:
            got = probe()
            if got:
                return got
            last = f"probe returned {got!r}"
        except Exception as e:  # noqa: BLE001 - any start-up error means "not yet"
            last = f"{type(e).__name__}: {e}"
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {scaled(timeout):.0f} s (last: {last})\n{log_tail(log)}")
        time.sleep(interval)


def wait_http(url: str, what: str, timeout: float, alive: Callable[[], str | None] | None = None,
              log: Path | str | None = None, any_status: bool = False) -> None:
    """Wait until GET `url` answers 200 (or anything, with `any_status`)."""
    import httpx

    # a fresh connection every poll (`httpx.get`): a kept-alive one stays with one worker of a
    # multi-worker server, and a wait for "any worker ready" would only ever ask that one
    def probe() -> bool:
        r = httpx.get(url, timeout=5)
        return any_status or r.status_code == 200

    wait_for(probe, what, timeout, alive, log, interval=0.2)


def process_alive(proc) -> Callable[[], str | None]:
    """An `alive` check for a subprocess.Popen."""
    return lambda: None if proc.poll() is None else f"exited with {proc.returncode}"


_REAP: list = []


def stop_later(proc, sig: int, grace: float = 60.0) -> None:
    """Signal `proc` now and reap it when the session ends (`reap_all`, run by tests/conftest.py).
    For services whose graceful stop takes tens of seconds of waiting (Ray's `--block` head): the
    next tests run meanwhile instead of idling. Still stopped by its own PID, never by name."""
    if proc.poll() is None:
        proc.send_signal(sig)
    _REAP.append((proc, grace))


def stop(proc, sig: int, grace: float = 60.0) -> None:
    """Signal `proc` and give it `grace` seconds to stop by itself; then kill it. By its PID."""
    if proc.poll() is None:
        proc.send_signal(sig)
    _wait_or_kill(proc, grace)


def _wait_or_kill(proc, grace: float) -> None:
    import subprocess

    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=30)


def reap_all() -> None:
    while _REAP:
        _wait_or_kill(*_REAP.pop())
