"""A tqdm bar fed by the indexes' `on_progress(done, total)` callback.

Why: embedding a large collection runs for minutes; without a bar the command looked hung
(issue #16 item 4). The bar writes to stderr, so `--json` output stays clean.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from tqdm import tqdm


@contextmanager
def index_progress(desc: str, enabled: bool = True) -> Iterator[Callable[[int, int], None]]:
    bar = tqdm(desc=desc, unit="chunk", disable=not enabled, file=sys.stderr, mininterval=0.5, dynamic_ncols=True)

    def update(done: int, total: int) -> None:
        if bar.total != total:
            bar.total = total
        bar.n = done
        bar.refresh()

    try:
        yield update
    finally:
        bar.close()
