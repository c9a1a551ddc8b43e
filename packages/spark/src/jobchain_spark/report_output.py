"""Write a :class:`~jobchain_spark.report.Report`: report.html, PNG charts, Parquet and CSV tables.

The Parquet and CSV files under ``tables/`` keep the raw column names and values (seconds as
numbers, timestamps as timestamps); only ``report.html`` is formatted for people
(:mod:`jobchain_spark.report_format`), with the charts of :mod:`jobchain_spark.report_charts`.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Final

import pandas as pd

from jobchain_spark.report import Report
from jobchain_spark.report_charts import (
    activity_chart,
    attempts_chart,
    chain_durations_chart,
    dead_letters_chart,
    errors_chart,
    status_chart,
    times_chart,
)
from jobchain_spark.report_format import (
    Col,
    count,
    duration,
    format_number,
    format_percent,
    format_time,
    generated_label,
    html_table,
    percentiles,
    period_formatter,
    text,
)
from jobchain_spark.report_periods import parse_period

CHARTS: Final = {
    "activity": "activity.png",
    "times": "times.png",
    "attempts": "attempts.png",
    "errors": "errors.png",
    "dead_letters": "dead_letters.png",
    "chains_by_status": "chains_by_status.png",
    "chain_durations": "chain_durations.png",
}
FOLDED_ROWS: Final = 40
"""Tables longer than this are folded (``<details>``) on the page; the files have every row."""

STYLE: Final = (
    "body{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:1320px;padding:0 1em;color:#222}"
    "table{border-collapse:collapse;font-size:13px;margin:.5em 0 1em}"
    "td,th{border:1px solid #ddd;padding:3px 8px;vertical-align:top}"
    "th{background:#f4f4f4;text-align:left}th.group{text-align:center}"
    ".num{text-align:right;white-space:nowrap}"
    "td{overflow-wrap:anywhere;max-width:48em}"
    "img{max-width:100%;height:auto;display:block;margin:.5em 0}"
    ".wide{overflow-x:auto;max-width:100%}"
    ".note{color:#555;font-size:14px;max-width:60em}"
    "details summary{cursor:pointer;color:#036}"
)


def write_report(report: Report, out: str | Path) -> Path:
    """Write everything under ``out`` and return the path of report.html."""
    root = Path(out)
    charts, tables = root / "charts", root / "tables"
    charts.mkdir(parents=True, exist_ok=True)
    tables.mkdir(parents=True, exist_ok=True)
    t = report.tables
    activity_chart(t["throughput"], charts / CHARTS["activity"], report.period)
    times_chart(t["summary"], charts / CHARTS["times"])
    attempts_chart(t["attempts"], charts / CHARTS["attempts"])
    errors_chart(t["errors"], charts / CHARTS["errors"])
    dead_letters_chart(t["dead_letters"], charts / CHARTS["dead_letters"])
    status_chart(t["chains_by_status"], charts / CHARTS["chains_by_status"])
    chain_durations_chart(t["chain_durations"], charts / CHARTS["chain_durations"])
    for name, df in t.items():
        df.to_parquet(tables / f"{name}.parquet", index=False)
        df.to_csv(tables / f"{name}.csv", index=False)
    path = root / "report.html"
    path.write_text(render_html(report), encoding="utf-8")
    return path


def _columns(period: str) -> dict[str, list[Col]]:
    """The page columns of every table, in order, with their headings."""
    unit = parse_period(period).heading
    return {
        "throughput": [
            text("type_name", "Job type"),
            Col("period", unit, period_formatter(period), numeric=False),
            count("started", "Started"),
            count("completed", "Completed"),
            count("failed", "Failed"),
            count("cancelled", "Cancelled"),
            count("with_failure", "With a failure"),
            count("backlog", "Backlog at end"),
            Col("throughput_per_hour", "Completed per hour", format_number),
        ],
        "summary_jobs": [
            text("type_name", "Job type"),
            count("jobs", "Jobs"),
            count("completed", "Completed"),
            count("failed", "Failed"),
            count("failed_by_blocker", "Failed by a blocker"),
            Col("failure_rate", "Failure rate", format_percent),
            count("cancelled", "Cancelled"),
            count("attempted", "Claimed"),
            count("retried", "Retried"),
            Col("retry_rate", "Retry rate", format_percent),
            Col("oldest_pending_created_at", "Oldest pending since (UTC)", format_time),
            duration("oldest_pending_age_s", "Oldest pending age"),
        ],
        "summary_times": [
            text("type_name", "Job type"),
            *percentiles("latency", "Latency"),
            *percentiles("wait", "Wait"),
            *percentiles("run", "Run"),
            *percentiles("retry_delay", "Retry delay"),
        ],
        "timing": [
            text("type_name", "Job type"),
            Col("period", unit, period_formatter(period), numeric=False),
            count("waited", "Jobs", "Wait"),
            *[duration(f"wait_p{q}_s", f"p{q}", "Wait") for q in (50, 95, 99)],
            count("ran", "Jobs", "Run"),
            *[duration(f"run_p{q}_s", f"p{q}", "Run") for q in (50, 95, 99)],
        ],
        "attempts": [text("type_name", "Job type"), count("attempt", "Attempts made"), count("jobs", "Jobs")],
        "errors": [
            text("type_name", "Job type"),
            text("error_type", "Error type"),
            text("fingerprint", "Error (values masked)"),
            text("example", "Example message"),
            count("messages", "Distinct messages"),
            count("jobs", "Jobs"),
            count("attempts", "Failed attempts"),
            Col("last_seen_at", "Last seen (UTC)", format_time),
        ],
        "dead_letters": [
            text("type_name", "Job type"),
            text("error_type", "Error type"),
            count("jobs", "Failed jobs"),
            count("by_blocker", "By a blocker"),
            count("retried", "After retries"),
            Col("first_failed_at", "First failed (UTC)", format_time),
            Col("last_failed_at", "Last failed (UTC)", format_time),
            text("last_error", "Last error"),
        ],
        "cancellations": [
            text("type_name", "Job type"),
            Col("period", unit, period_formatter(period), numeric=False),
            count("cancelled", "Cancelled"),
            count("claimed", "Had been claimed"),
            count("with_reason", "With a reason"),
        ],
        "blocker_failures": [
            text("type_name", "Failed job type"),
            text("blocker_chain_type", "Blocker chain type"),
            text("blocker_status", "Blocker status now"),
            count("jobs", "Failed jobs"),
            count("blocker_chains", "Blocker chains"),
        ],
        "chains_by_status": [
            text("chain_type", "Chain type"),
            text("status", "Status"),
            count("chains", "Chains"),
        ],
        "chain_durations": [
            text("chain_type", "Chain type"),
            count("chains", "Chains"),
            count("completed", "Completed"),
            count("failed", "Failed"),
            count("cancelled", "Cancelled"),
            *percentiles("duration", "Duration (root created → last job completed)"),
        ],
        "chain_steps": [
            text("chain_type", "Chain type"),
            count("step", "Step"),
            text("type_name", "Job type"),
            count("jobs", "Jobs"),
            count("completed", "Completed"),
            duration("latency_p50_s", "Latency", "Median"),
            duration("wait_p50_s", "Wait", "Median"),
            duration("run_p50_s", "Run", "Median"),
        ],
    }


def _table(frame: pd.DataFrame, columns: list[Col], file: str) -> str:
    table = f"<div class='wide'>{html_table(frame, columns)}</div>"
    if len(frame) <= FOLDED_ROWS:
        return table
    summary = f"Show all {len(frame):,} rows (also in tables/{file}.csv)"
    return f"<details><summary>{summary}</summary>{table}</details>"


def _section(title: str, intro: str, chart: str | None, body: str) -> str:
    parts = [f"<h2>{html.escape(title)}</h2>", f"<p class='note'>{html.escape(intro)}</p>"]
    if chart is not None:
        parts.append(f"<img src='charts/{CHARTS[chart]}' alt='{html.escape(title)}'>")
    parts.append(body)
    return "\n".join(parts)


def render_html(report: Report) -> str:
    """The report page: notes, then one section per chart and table."""
    t, cols = report.tables, _columns(report.period)
    bucket = parse_period(report.period)
    per, noun = bucket.per, bucket.noun

    def table(name: str, key: str) -> str:
        return _table(t[name], cols[key], name)

    sections = [
        _section(
            f"Activity per {per}",
            f"Per job type and {noun}: jobs started (created), completed, failed (dead letters, by "
            "when they failed), cancelled, with a failed attempt (by when their last failure ended) "
            f"and the backlog (created, not yet completed, failed or cancelled) at the {noun}'s "
            f"end. The {len(t['throughput']):,} rows are in tables/throughput.",
            "activity",
            table("throughput", "throughput"),
        ),
        _section(
            "Jobs by type",
            "Failed: dead letters (attempts exhausted, failed on purpose, or failed because a blocker "
            "chain failed or was cancelled). Failure rate: failed ÷ (completed + failed); cancelled "
            "jobs are left out. Claimed: a worker took the job at least once. Retried: it needed "
            "more than one attempt. Jobs count in their present status (a redriven job is not failed).",
            None,
            table("summary", "summary_jobs"),
        ),
        _section(
            "Times by type",
            "Latency: created → completed. Wait: created → first attempt. Run: start of the last "
            "attempt → completed. Retry delay: last failed attempt → completed. Nearest-rank "
            "percentiles; — where no job qualifies.",
            "times",
            table("summary", "summary_times"),
        ),
        _section(
            f"Wait and run time per {per}",
            f"Wait by the {noun} a job was created in, run by the {noun} it completed in.",
            None,
            table("timing", "timing"),
        ),
        _section(
            "Attempts",
            "Jobs by the number of attempts they have made.",
            "attempts",
            table("attempts", "attempts"),
        ),
        _section(
            "Top errors",
            "Grouped by job type and the exception that was raised: its type and the first line "
            "of its message with ids, numbers, UUIDs, hex strings, times and quoted values masked "
            "(<id>, <n>, <uuid>, <hex>, <time>, '<v>'), so that errors differing only in such "
            "values are one group. Each group shows one real message (the latest) and how many "
            "distinct messages it holds. Counts the failed and abandoned attempts kept in each "
            "job's error history (its last 10), including attempts that later succeeded; jobs "
            "recorded before the history existed count by their last attempt's error, when not "
            "completed.",
            "errors",
            table("errors", "errors"),
        ),
        _section(
            "Dead letters",
            "Failed jobs per job type and the error type of their last recorded error: "
            "BlockerChainFailed or BlockerChainCancelled when a blocker chain's end failed them, "
            "AttemptAbandoned when their last attempts were abandoned. Redrive them with "
            "client.retry_job.",
            "dead_letters",
            table("dead_letters", "dead_letters"),
        ),
        _section(
            f"Cancellations per {per}",
            f"Cancelled jobs per job type and the {noun} they were cancelled in; had been "
            "claimed: a worker had taken the job at least once (it may have been running).",
            None,
            table("cancellations", "cancellations"),
        ),
        _section(
            "Failures caused by blockers",
            "Jobs failed because a chain they waited for failed or was cancelled, by the blocker "
            "chain's type and its status now ((deleted): no longer in the history).",
            None,
            table("blocker_failures", "blocker_failures"),
        ),
        _section(
            "Chain durations",
            "Per chain type: chains, completed, failed and cancelled chains, and how long completed "
            "chains took from the root job's creation to the completion of their last job.",
            "chain_durations",
            table("chain_durations", "chain_durations"),
        ),
        _section(
            "Chain steps",
            "Per chain type, each step (1 is the root job) and the job type that ran it, with "
            "median latency, wait and run.",
            None,
            table("chain_steps", "chain_steps"),
        ),
        _section(
            "Chains by status",
            "Chains per chain type and status (a chain's status is that of its last job).",
            "chains_by_status",
            table("chains_by_status", "chains_by_status"),
        ),
    ]
    head = (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>jobchain report</title><style>{STYLE}</style></head><body>"
    )
    intro = [
        "<h1>jobchain job history</h1>",
        f"<p>Generated {html.escape(generated_label(report.generated_at))}, per {html.escape(per)}, "
        f"from {html.escape(', '.join(report.sources))}. Times are UTC.</p>",
        *[f"<p class='note'><em>{html.escape(note)}</em></p>" for note in report.notes],
    ]
    return "\n".join([head, *intro, *sections, "</body></html>"])


__all__ = ["CHARTS", "FOLDED_ROWS", "render_html", "write_report"]
