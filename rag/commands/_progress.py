"""A tqdm bar fed by the indexes' `on_progress(done, total)` callback.

Why: embedding a large collection runs for minutes; without a bar the command looked hung
(issue #16 item 4). The bar writes to stderr, so `--json` output stays clean, and it only appears
once there is work (a sync with nothing to do prints nothing).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from tqdm import tqdm


@contextmanager
def index_progress(desc: str, enabled: bool = True) -> Iterator[Callable[[int, int], None]]:
    bar: Any = None

    def update(done: int, total: int) -> None:
        nonlocal bar
        if not enabled:
            return
        if bar is None:
            bar = tqdm(desc=desc, unit="chunk", total=total, file=sys.stderr, mininterval=0.5, dynamic_ncols=True)
        bar.total, bar.n = total, done
        bar.refresh()

    try:
        yield update
    finally:
        if bar is not None:
            bar.close()


def silence_library_bars() -> None:
    """Switch off the bars transformers and huggingface_hub draw themselves (transformers' "Loading
    weights" when an embedder or reranker loads), so `--no-progress` leaves stderr without bars.
    Process-wide: a command runs once per process."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:
        return
    hf_logging.disable_progress_bar()
