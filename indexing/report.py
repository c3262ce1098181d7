"""What an ingest did, in numbers a CLI can print and a test can assert on."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Failure:
    path: str
    reason: str


@dataclass
class IngestReport:
    collection: str = "default"
    new: int = 0
    changed: int = 0
    unchanged: int = 0
    pruned: int = 0
    failed: list[Failure] = field(default_factory=list)
    dropped: Counter[str] = field(default_factory=Counter)
    edits: Counter[str] = field(default_factory=Counter)
    duplicate_of: dict[str, str] = field(default_factory=dict)
    dropped_docs: list[tuple[str, str, str, str | None]] = field(default_factory=list)
    chunks: Counter[str] = field(default_factory=Counter)
    timings: dict[str, float] = field(default_factory=lambda: {"load": 0.0, "clean": 0.0, "chunk": 0.0,
                                                               "store": 0.0, "total": 0.0})
    bytes_chunked: int = 0

    @property
    def documents(self) -> int:
        return self.new + self.changed + self.unchanged

    @property
    def warnings(self) -> list[str]:
        """Things that did not fail the ingest but that the user should know about."""
        out = []
        if self.dropped.get("empty"):
            first = next((f"{s}#{d}" for d, s, r, _ in self.dropped_docs if r == "empty"), "")
            out.append(f"{self.dropped['empty']} record(s) with empty text skipped"
                       + (f" (first: {first})" if first else "") + "; see `rag docs dropped`")
        return out

    @property
    def ok(self) -> bool:
        """False when any input could not be loaded (the CLI exits non-zero then)."""
        return not self.failed

    def to_dict(self) -> dict[str, Any]:
        return {
            "collection": self.collection, "new": self.new, "changed": self.changed,
            "unchanged": self.unchanged, "pruned": self.pruned, "failed": [f.__dict__ for f in self.failed],
            "dropped": dict(self.dropped), "edits": dict(self.edits), "chunks": dict(self.chunks),
            "warnings": self.warnings,
            "timings": {k: round(v, 3) for k, v in self.timings.items()},
        }

    def summary(self) -> str:
        """Human-readable multi-line summary for the CLI."""
        lines = [
            f"collection {self.collection}: {self.new} new, {self.changed} changed, "
            f"{self.unchanged} unchanged, {len(self.failed)} failed, {sum(self.dropped.values())} dropped"
            + (f", {self.pruned} pruned" if self.pruned else ""),
        ]
        if self.chunks:
            lines.append("chunks written: " + ", ".join(f"{g}={n}" for g, n in sorted(self.chunks.items())))
        if self.dropped:
            lines.append("dropped by cleaning: " + ", ".join(f"{r}={n}" for r, n in sorted(self.dropped.items())))
        if self.edits:
            lines.append("cleaning edits: " + ", ".join(f"{r}={n}" for r, n in sorted(self.edits.items())))
        t = self.timings
        lines.append(f"time {t['total']:.1f}s (load {t['load']:.1f}, clean {t['clean']:.1f}, "
                     f"chunk {t['chunk']:.1f}, store {t['store']:.1f})")
        lines.extend(f"WARNING: {w}" for w in self.warnings)
        for f in self.failed[:50]:
            lines.append(f"FAILED {f.path}: {f.reason}")
        if len(self.failed) > 50:
            lines.append(f"... and {len(self.failed) - 50} more failures")
        return "\n".join(lines)
