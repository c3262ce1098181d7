"""Where converted and assembled models live: one shared cache per user, not per checkout.

Kept in its own module (no torch import) so `rag models list` answers without loading torch.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    env = os.environ.get("RAG_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "ragstack" / "models"
