"""Human formatting of report tables for the HTML page: column names, units, rounding.

Only the page is formatted. The Parquet and CSV files keep the raw column names (snake_case,
seconds as ``*_s``) and raw values, so scripts reading them do not break when a label changes.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import pandas as pd

MISSING: Final = "—"


def _missing(value: Any) -> bool:
    if value is None or value is pd.NaT:
        return True
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):  # a list or other container: not a missing scalar
        return False


def format_duration(seconds: Any) -> str:
    """``0.35`` → ``350 ms``, ``1.24`` → ``1.2 s``, ``184`` → ``3 min 4 s``, ``7200`` → ``2 h``."""
    if _missing(seconds):
        return MISSING
    value = float(seconds)
    sign, value = ("-" if value < 0 else ""), abs(value)
    if value < 1:
        text = f"{value * 1000:.0f} ms"
    elif value < 10:
        text = f"{value:.1f}".rstrip("0").rstrip(".") + " s"
    elif value < 60:
        text = f"{value:.0f} s"
    else:
        whole = round(value)
        units = ((86400, "d"), (3600, "h"), (60, "min"), (1, "s"))
        parts: list[str] = []
        for size, unit in units:
            if whole >= size and len(parts) < 2:
                parts.append(f"{whole // size} {unit}")
                whole %= size
            elif parts:  # two adjacent units at most: "2 h 5 min", never "2 h 0 min 7 s"
                break
        text = " ".join(parts)
    return sign + text


def format_count(value: Any) -> str:
    """``20000`` → ``20,000``."""
    return MISSING if _missing(value) else f"{int(value):,}"


def format_number(value: Any) -> str:
    """At most one decimal, thousands separated: ``1234.5678`` → ``1,234.6``, ``5.0`` → ``5``."""
    if _missing(value):
        return MISSING
    text = f"{float(value):,.1f}"
    return text[:-2] if text.endswith(".0") else text


def format_percent(value: Any) -> str:
    """A share as a percentage with one decimal: ``1/6`` → ``16.7 %``."""
    return MISSING if _missing(value) else f"{float(value) * 100:.1f} %"


def format_time(value: Any) -> str:
    """A UTC timestamp to the second: ``2024-03-01 02:00:05``."""
    if _missing(value):
        return MISSING
    return str(pd.Timestamp(value).strftime("%Y-%m-%d %H:%M:%S"))


def period_formatter(period: str) -> Callable[[Any], str]:
    """A period start as a day (``2024-03-01``) or, for shorter periods, the day and the minute
    it starts (``2024-03-01 02:15``)."""
    from jobchain_spark.report_periods import parse_period

    pattern = parse_period(period).pattern
    return lambda value: MISSING if _missing(value) else str(pd.Timestamp(value).strftime(pattern))


def format_text(value: Any) -> str:
    return MISSING if _missing(value) or value == "" else str(value)


@dataclass(frozen=True)
class Col:
    """One column of a page table: the raw column, its heading, how to show a value."""

    raw: str
    label: str
    show: Callable[[Any], str]
    group: str = ""
    numeric: bool = True


def count(raw: str, label: str, group: str = "") -> Col:
    return Col(raw, label, format_count, group)


def duration(raw: str, label: str, group: str = "") -> Col:
    return Col(raw, label, format_duration, group)


def text(raw: str, label: str) -> Col:
    return Col(raw, label, format_text, numeric=False)


def percentiles(name: str, label: str) -> list[Col]:
    """The p50/p95/p99 columns of ``name`` under one heading ``label``."""
    return [duration(f"{name}_p{q}_s", f"p{q}", label) for q in (50, 95, 99)]


def _headings(columns: Sequence[Col]) -> str:
    if not any(c.group for c in columns):
        return "<tr>" + "".join(_th(c.label, c.numeric) for c in columns) + "</tr>"
    top, bottom = [], []
    i = 0
    while i < len(columns):
        group = columns[i].group
        if not group:
            top.append(f"<th rowspan='2'{_align(columns[i].numeric)}>{html.escape(columns[i].label)}</th>")
            i += 1
            continue
        span = 1
        while i + span < len(columns) and columns[i + span].group == group:
            span += 1
        top.append(f"<th colspan='{span}' class='group'>{html.escape(group)}</th>")
        bottom += [_th(c.label, c.numeric) for c in columns[i : i + span]]
        i += span
    return f"<tr>{''.join(top)}</tr><tr>{''.join(bottom)}</tr>"


def _align(numeric: bool) -> str:
    return " class='num'" if numeric else ""


def _th(label: str, numeric: bool) -> str:
    return f"<th{_align(numeric)}>{html.escape(label)}</th>"


def html_table(frame: pd.DataFrame, columns: Sequence[Col]) -> str:
    """``frame`` as an HTML table with ``columns`` (those ``frame`` has), formatted for people."""
    shown = [c for c in columns if c.raw in frame.columns]
    rows = []
    for record in frame.to_dict("records"):
        cells = "".join(f"<td{_align(c.numeric)}>{html.escape(c.show(record[c.raw]))}</td>" for c in shown)
        rows.append(f"<tr>{cells}</tr>")
    body = "".join(rows) or f"<tr><td colspan='{max(len(shown), 1)}'>none</td></tr>"
    return f"<table><thead>{_headings(shown)}</thead><tbody>{body}</tbody></table>"


def human_seconds_ticks(value: float, _position: int | None = None) -> str:
    """Axis ticks in seconds shown as durations (matplotlib ``FuncFormatter``)."""
    if not math.isfinite(value) or value <= 0:
        return "0"
    return format_duration(value)


def generated_label(when: datetime) -> str:
    return when.strftime("%Y-%m-%d %H:%M:%S %Z").strip()


__all__ = [
    "MISSING",
    "Col",
    "count",
    "duration",
    "format_count",
    "format_duration",
    "format_number",
    "format_percent",
    "format_text",
    "format_time",
    "generated_label",
    "html_table",
    "human_seconds_ticks",
    "percentiles",
    "period_formatter",
    "text",
]
