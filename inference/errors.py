"""Typed request errors of the engine, so callers (the server) map them to statuses by type.

Both subclass ValueError so existing `except ValueError` callers keep working.
"""

from __future__ import annotations


class EmptyPrompt(ValueError):
    """The prompt tokenises to nothing."""


class ContextOverflow(ValueError):
    """The request can never run: its prompt (plus one token) exceeds max_model_len, or it needs
    more KV blocks than the whole pool holds."""
