"""Write a :class:`~jobchain_spark.report.Report`: report.html, PNG charts, Parquet and CSV tables."""

from __future__ import annotations

import html
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never open a window (servers and CI have no display)

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from jobchain_spark.report import Report


def _save(fig: Figure, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=100)
    plt.close(fig)


def _empty(ax: Axes, what: str) -> None:
    ax.text(0.5, 0.5, f"no {what}", ha="center", va="center")
    ax.set_axis_off()


def _throughput_chart(df: pd.DataFrame, path: Path, period: str) -> None:
    fig, ax = plt.subplots(figsize=(9, 4))
    if df.empty:
        _empty(ax, "jobs")
    else:
        for type_name, part in df.groupby("type_name"):
            ax.plot(part["period"], part["completed"], marker="o", label=f"{type_name} completed")
            ax.plot(part["period"], part["started"], linestyle="--", label=f"{type_name} started")
        ax.set_ylabel(f"jobs per {period}")
        ax.legend(fontsize="small")
        fig.autofmt_xdate()
    ax.set_title("Started and completed jobs")
    _save(fig, path)


def _latency_chart(df: pd.DataFrame, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(9, 4))
    columns = ["latency_p50_s", "latency_p95_s", "latency_p99_s"]
    data = df.set_index("type_name")[columns].dropna(how="all") if not df.empty else df
    if data.empty:
        _empty(ax, "completed jobs")
    else:
        data.plot.bar(ax=ax)
        ax.set_ylabel("seconds (created → completed)")
    ax.set_title("Latency percentiles by job type")
    _save(fig, path)


def _wait_run_chart(df: pd.DataFrame, path: Path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    panels = [("wait", "created → first attempt"), ("run", "last attempt start → completed")]
    for ax, (name, meaning) in zip(axes, panels, strict=True):
        columns = [f"{name}_p50_s", f"{name}_p95_s", f"{name}_p99_s"]
        data = df.set_index("type_name")[columns].dropna(how="all") if not df.empty else df
        if data.empty:
            _empty(ax, f"{name} times")
        else:
            data.plot.bar(ax=ax)
            ax.set_ylabel(f"seconds ({meaning})")
        ax.set_title(f"{name.capitalize()} time percentiles by job type")
    _save(fig, path)


def _attempts_chart(df: pd.DataFrame, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(9, 4))
    if df.empty:
        _empty(ax, "attempts")
    else:
        df.pivot_table(index="attempt", columns="type_name", values="jobs", fill_value=0).plot.bar(ax=ax)
        ax.set_ylabel("jobs")
    ax.set_title("Attempts per job")
    _save(fig, path)


def _status_chart(df: pd.DataFrame, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(9, 4))
    if df.empty:
        _empty(ax, "chains")
    else:
        df.pivot_table(index="chain_type", columns="status", values="chains", fill_value=0).plot.bar(
            ax=ax, stacked=True
        )
        ax.set_ylabel("chains")
    ax.set_title("Chains by status")
    _save(fig, path)


def _errors_chart(df: pd.DataFrame, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(9, 4))
    if df.empty:
        _empty(ax, "errors")
    else:
        labels = [f"{t}: {e[:40]}" for t, e in zip(df["type_name"], df["error"], strict=True)]
        ax.barh(labels[::-1], list(df["jobs"])[::-1])
        ax.set_xlabel("jobs whose last attempt failed with it")
    ax.set_title("Top errors")
    _save(fig, path)


CHARTS = {
    "throughput": "throughput.png",
    "latency": "latency.png",
    "wait_run": "wait_run.png",
    "attempts": "attempts.png",
    "chains_by_status": "chains_by_status.png",
    "errors": "errors.png",
}


def write_report(report: Report, out: str | Path) -> Path:
    """Write everything under ``out`` and return the path of report.html."""
    root = Path(out)
    (root / "charts").mkdir(parents=True, exist_ok=True)
    (root / "tables").mkdir(parents=True, exist_ok=True)
    t = report.tables
    _throughput_chart(t["throughput"], root / "charts" / CHARTS["throughput"], report.period)
    _latency_chart(t["summary"], root / "charts" / CHARTS["latency"])
    _wait_run_chart(t["summary"], root / "charts" / CHARTS["wait_run"])
    _attempts_chart(t["attempts"], root / "charts" / CHARTS["attempts"])
    _status_chart(t["chains_by_status"], root / "charts" / CHARTS["chains_by_status"])
    _errors_chart(t["errors"], root / "charts" / CHARTS["errors"])
    for name, df in t.items():
        df.to_parquet(root / "tables" / f"{name}.parquet", index=False)
        df.to_csv(root / "tables" / f"{name}.csv", index=False)
    path = root / "report.html"
    path.write_text(_html(report), encoding="utf-8")
    return path


def _html(report: Report) -> str:
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>jobchain report</title>",
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;font-size:13px}"
        "td,th{border:1px solid #ccc;padding:3px 6px}img{max-width:100%}</style></head><body>",
        "<h1>jobchain job history</h1>",
        f"<p>Generated {html.escape(report.generated_at.isoformat())} per {html.escape(report.period)} from "
        f"{html.escape(', '.join(report.sources))}.</p>",
    ]
    parts += [f"<p><em>{html.escape(note)}</em></p>" for note in report.notes]
    sections = [
        ("Throughput", "throughput", "throughput"),
        ("Summary by job type", "summary", "latency"),
        (f"Wait and run time per {report.period}", "timing", "wait_run"),
        ("Attempts", "attempts", "attempts"),
        ("Top errors", "errors", "errors"),
        ("Chains by status", "chains_by_status", "chains_by_status"),
    ]
    for title, table, chart in sections:
        parts.append(f"<h2>{title}</h2><img src='charts/{CHARTS[chart]}' alt='{title}'>")
        parts.append(report.tables[table].to_html(index=False, na_rep="", border=0))
    parts.append("</body></html>")
    return "\n".join(parts)


__all__ = ["CHARTS", "write_report"]
