"""A small Prometheus registry: counters and histograms with labels, text exposition format.

Engine gauges are read from the engine at scrape time instead of being pushed.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable

_LAT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


def _labels(names: tuple[str, ...], values: tuple[str, ...]) -> str:
    if not names:
        return ""
    esc = [v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") for v in values]
    return "{" + ",".join(f'{n}="{v}"' for n, v in zip(names, esc)) + "}"


class Counter:
    def __init__(self, name: str, help: str, labels: tuple[str, ...] = ()):
        self.name, self.help, self.labels = name, help, labels
        self.values: dict[tuple[str, ...], float] = {}
        self._lock = threading.Lock()

    def inc(self, *labels: str, amount: float = 1.0) -> None:
        with self._lock:
            self.values[labels] = self.values.get(labels, 0.0) + amount

    def render(self) -> list[str]:
        out = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} counter"]
        out += [f"{self.name}{_labels(self.labels, k)} {v}" for k, v in sorted(self.values.items())]
        return out


class Histogram:
    def __init__(self, name: str, help: str, labels: tuple[str, ...] = (), buckets=_LAT_BUCKETS):
        self.name, self.help, self.labels, self.buckets = name, help, labels, tuple(buckets)
        self.data: dict[tuple[str, ...], list] = {}
        self._lock = threading.Lock()

    def observe(self, value: float, *labels: str) -> None:
        with self._lock:
            counts, _ = self.data.setdefault(labels, [[0] * (len(self.buckets) + 1), 0.0])
            counts[bisect.bisect_left(self.buckets, value)] += 1
            self.data[labels][1] += value

    def render(self) -> list[str]:
        out = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} histogram"]
        for key, (counts, total) in sorted(self.data.items()):
            cum = 0
            for b, c in zip(self.buckets, counts):
                cum += c
                out.append(f"{self.name}_bucket{_labels(self.labels + ('le',), key + (repr(b),))} {cum}")
            cum += counts[-1]
            out.append(f"{self.name}_bucket{_labels(self.labels + ('le',), key + ('+Inf',))} {cum}")
            out.append(f"{self.name}_sum{_labels(self.labels, key)} {total}")
            out.append(f"{self.name}_count{_labels(self.labels, key)} {cum}")
        return out


class Registry:
    def __init__(self) -> None:
        self.requests = Counter("rag_http_requests_total", "HTTP requests by endpoint and status",
                                ("endpoint", "status"))
        self.latency = Histogram("rag_http_request_duration_seconds", "HTTP request latency by endpoint",
                                 ("endpoint",))
        self.stages = Histogram("rag_stage_duration_seconds", "pipeline stage latency", ("stage",))
        self.rejected = Counter("rag_rejected_total", "requests rejected by backpressure", ("reason",))
        self.gauges: list[tuple[str, str, Callable[[], dict[str, float]]]] = []

    def gauge_source(self, prefix: str, help: str, fn: Callable[[], dict[str, float]]) -> None:
        self.gauges.append((prefix, help, fn))

    def render(self) -> str:
        lines: list[str] = []
        for m in (self.requests, self.latency, self.stages, self.rejected):
            lines += m.render()
        for prefix, help, fn in self.gauges:
            try:
                values = fn()
            except Exception:  # a gauge source must never break the scrape
                continue
            for k, v in sorted(values.items()):
                if isinstance(v, bool) or not isinstance(v, int | float):
                    continue
                name = f"{prefix}_{k}"
                lines += [f"# HELP {name} {help}: {k}", f"# TYPE {name} gauge", f"{name} {float(v)}"]
        return "\n".join(lines) + "\n"
