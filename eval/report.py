"""Reports of evaluation runs: Markdown table, JSON rows and PNG plots.

Why three plots: bars answer "which variant is best", the quality-vs-latency scatter answers
"what does the gain cost", and the stacked per-stage latency answers "where does the time go".
matplotlib runs on the Agg backend so reports render on headless machines and in tests.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

from eval.cost import TOTAL  # noqa: E402
from eval.grid import slug  # noqa: E402
from eval.retrieval_eval import EvalResult, save_per_query  # noqa: E402
from eval.significance import paired_test  # noqa: E402

PREFERRED = ["ndcg@10", "recall@10", "recall@100", "mrr@10", "map@10", "hit@10",
             "em", "f1", "refusal_acc", "citation_precision", "citation_recall", "rgb_acc"]


def report_columns(results: Sequence[EvalResult], limit: int = 8) -> list[str]:
    """The metric columns worth showing: the usual headline ones that are present, else the first."""
    present = [k for k in results[0].metrics] if results else []
    cols = [c for c in PREFERRED if c in present]
    return (cols or present)[:limit]


def _ms(v: float) -> str:
    return f"{v:.2f}" if v < 10 else f"{v:.1f}"


def _label(r: EvalResult) -> str:
    return r.name or r.dataset or "run"


def _stages(results: Sequence[EvalResult]) -> list[str]:
    stages: list[str] = []
    for r in results:
        stages += [s for s in r.latency_ms if s != TOTAL and s not in stages]
    return stages


def plot_metric_bars(results: Sequence[EvalResult], metrics: Sequence[str], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(results) * max(1, len(metrics)) / 2), 4))
    width = 0.8 / max(1, len(metrics))
    xs = range(len(results))
    for i, m in enumerate(metrics):
        ax.bar([x + i * width for x in xs], [r.metrics.get(m, 0.0) for r in results], width, label=m)
    ax.set_xticks([x + width * (len(metrics) - 1) / 2 for x in xs], [_label(r) for r in results],
                  rotation=30, ha="right")
    ax.set_ylabel("score")
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize=8)
    ax.set_title("Metrics per variant")
    return _save(fig, path)


def plot_quality_latency(results: Sequence[EvalResult], metric: str, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6, 4))
    for r in results:
        x = r.latency_ms.get(TOTAL, {}).get("p50", 0.0)
        y = r.metrics.get(metric, 0.0)
        ax.scatter([x], [y])
        ax.annotate(_label(r), (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.set_xlabel("latency p50 (ms per query)")
    ax.set_ylabel(metric)
    ax.set_title(f"{metric} vs latency")
    ax.grid(alpha=0.3)
    return _save(fig, path)


def plot_latency_breakdown(results: Sequence[EvalResult], path: Path) -> Path:
    """Stacked mean latency per stage; runs that report no stages show their total alone."""
    stages = _stages(results) or [TOTAL]
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(results) + 2), 4))
    labels = [_label(r) for r in results]
    bottom = [0.0] * len(results)
    for s in stages:
        vals = [r.latency_ms.get(s, {}).get("mean", 0.0) for r in results]
        ax.bar(labels, vals, bottom=bottom, label=s)
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    ax.set_ylabel("mean ms per query")
    ax.set_title("Latency by stage")
    ax.legend(fontsize=8)
    plt.setp(ax.get_xticklabels(), rotation=30, ha="right")
    return _save(fig, path)


def _save(fig: plt.Figure, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def significance(results: Sequence[EvalResult], metric: str) -> dict[str, dict[str, float]]:
    """Each later variant against the first (the baseline): paired randomization test on `metric`."""
    out: dict[str, dict[str, float]] = {}
    base = results[0] if results else None
    if base is None or not base.per_query:
        return out
    for r in results[1:]:
        try:
            out[_label(r)] = paired_test(base.per_query, r.per_query, metric)
        except ValueError:  # no shared query carries the metric
            continue
    return out


def markdown_report(
    results: Sequence[EvalResult], title: str, images: dict[str, Path] | None = None, primary: str | None = None
) -> str:
    cols = report_columns(results)
    lines = [f"# {title}", ""]
    if results:
        r0 = results[0]
        lines += [f"Dataset `{r0.dataset}` split `{r0.split}`, {r0.n_queries} queries.", ""]
    lines += ["| variant | n | " + " | ".join(cols) + " | p50 ms | p95 ms |",
              "|---|---:|" + "---:|" * len(cols) + "---:|---:|"]
    for r in results:
        lat = r.latency_ms.get(TOTAL, {})
        cells = [f"{r.metrics.get(c, float('nan')):.4f}" for c in cols]
        lines.append(f"| {_label(r)} | {r.n_queries} | " + " | ".join(cells)
                     + f" | {_ms(lat.get('p50', 0.0))} | {_ms(lat.get('p95', 0.0))} |")
    stages = _stages(results)
    if stages:
        lines += ["", "## Latency by stage (p50 / p95 ms)", "",
                  "| variant | " + " | ".join(stages) + " |", "|---|" + "---:|" * len(stages)]
        for r in results:
            cells = [f"{_ms(r.latency_ms[s]['p50'])} / {_ms(r.latency_ms[s]['p95'])}" if s in r.latency_ms else "-"
                     for s in stages]
            lines.append(f"| {_label(r)} | " + " | ".join(cells) + " |")
    if results and cols:
        best = max(results, key=lambda r: r.metrics.get(cols[0], 0.0))
        lines += ["", f"Best on {cols[0]}: **{_label(best)}** ({best.metrics.get(cols[0], 0.0):.4f})."]
        metric = primary or cols[0]
        sig = significance(results, metric)
        if sig:
            lines += ["", f"## {metric} against {_label(results[0])} (paired randomization test)", "",
                      "| variant | delta | 95% CI | p |", "|---|---:|---:|---:|"]
            for name, t in sig.items():
                lines.append(f"| {name} | {t['delta']:+.4f} | [{t['ci_low']:+.4f}, {t['ci_high']:+.4f}] "
                             f"| {t['p_value']:.4f} |")
    for caption, p in (images or {}).items():
        lines += ["", f"![{caption}]({p.name})"]
    return "\n".join(lines) + "\n"


def write_report(
    results: EvalResult | Sequence[EvalResult],
    out_dir: str | Path,
    title: str = "Evaluation",
    primary: str | None = None,
    bar_metrics: Sequence[str] | None = None,
) -> dict[str, Path]:
    """Write report.md, report.json, three PNG plots and per_query/<variant>.jsonl into `out_dir`;
    returns the paths of the first five."""
    rows = [results] if isinstance(results, EvalResult) else list(results)
    if not rows:
        raise ValueError("no results to report")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cols = report_columns(rows)
    primary = primary or (cols[0] if cols else "")
    bars = list(bar_metrics or cols[:3])
    images = {
        "metrics per variant": plot_metric_bars(rows, bars, out / "metrics.png"),
        f"{primary} vs latency": plot_quality_latency(rows, primary, out / "quality_latency.png"),
        "latency by stage": plot_latency_breakdown(rows, out / "latency_breakdown.png"),
    }
    md = out / "report.md"
    md.write_text(markdown_report(rows, title, images, primary), encoding="utf-8")
    js = out / "report.json"
    sig = significance(rows, primary) if primary else {}
    data = [{"name": r.name, **r.to_dict(), **({"vs_baseline": {primary: sig[_label(r)]}} if _label(r) in sig else {})}
            for r in rows]
    js.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    for r in rows:
        if r.per_query:
            save_per_query(r, out / "per_query" / f"{slug(_label(r))}.jsonl")
    return {"markdown": md, "json": js, **{k: v for k, v in zip(("bars", "scatter", "breakdown"),
                                                                images.values(), strict=True)}}
