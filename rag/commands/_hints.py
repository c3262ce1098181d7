"""Hints for the commands that read one collection: new users index into a collection they name
and then search the default one, and an empty answer alone does not tell them why."""

from __future__ import annotations

from typing import Any


def collection_hint(store: Any, searched: str | None, default: str) -> str | None:
    """A hint line when the searched collection holds nothing but others hold documents."""
    name = searched or default
    if store.count_documents(name):
        return None
    others = [(c, store.count_documents(c)) for c in store.collections() if c != name]
    others = [(c, n) for c, n in others if n]
    if not others:
        return f"hint: collection {name!r} is empty; index documents with `rag index PATH`"
    listing = ", ".join(f"{c} ({n} docs)" for c, n in others)
    return (f"hint: collection {name!r} has no documents; documents are in: {listing}; "
            f"add --collection {others[0][0]}")
