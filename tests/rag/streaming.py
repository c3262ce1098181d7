"""A streamed answer taken apart the one way the tests read it: `Pipeline.stream` / `astream` yield
the text deltas in order, then the final `Answer`."""

from __future__ import annotations

from collections.abc import AsyncIterable, Iterable

from rag.answer import Answer


def collect(items: Iterable[str | Answer]) -> tuple[list[str], Answer]:
    """The deltas and the final Answer of a stream; fails when the stream ends without an Answer."""
    deltas, final = [], None
    for item in items:
        if isinstance(item, Answer):
            final = item
        else:
            deltas.append(item)
    assert final is not None, "the stream ended without an Answer"
    return deltas, final


async def acollect(items: AsyncIterable[str | Answer]) -> tuple[list[str], Answer]:
    """`collect` for `Pipeline.astream`."""
    return collect([item async for item in items])
