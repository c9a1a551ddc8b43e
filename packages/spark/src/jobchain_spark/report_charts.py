"""PNG charts of a report: one panel per measure, top types plus "other", legends outside.

Rules every chart follows, so that 24 job types next to one of 200,000 jobs stay readable:

- at most :data:`TOP_TYPES` job (or chain) types are drawn, the largest by jobs; the rest
  are summed into one ``other`` series (counts) or left out (percentiles, with the panel
  saying so);
- each series has its own colour (``tab10``: nine distinct colours for nine types, grey for other);
- the legend sits to the right of the plot area, never on the data;
- a panel whose largest series is :data:`LOG_RATIO` times its smallest uses a log scale (a
  ``symlog`` scale for counts, so zero stays drawable), and the panel title says which;
- activity over :data:`FEW_PERIODS` periods or fewer is drawn as bars, each period labelled,
  never as a line between a few points.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import matplotlib

matplotlib.use("Agg")  # files only; never open a window (servers and CI have no display)

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.axis import XAxis, YAxis
from matplotlib.dates import AutoDateLocator, ConciseDateFormatter
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator

from jobchain_spark.report_format import format_count, human_seconds_ticks

TOP_TYPES: Final = 9
FEW_PERIODS: Final = 12
"""Activity over this many periods or fewer is drawn as bars, one group per period."""
LOG_RATIO: Final = 10.0
OTHER: Final = "other"
# tab10 without its grey, which is kept for "other": nine distinct colours for nine types.
COLOURS: Final = tuple(tuple(matplotlib.colormaps["tab10"](i)[:3]) for i in range(10) if i != 7)
STATUS_COLOURS: Final[dict[str, str | tuple[float, ...]]] = {
    "completed": "#55a868",
    "running": "#4c72b0",
    "pending": "#dd8452",
    "blocked": "#8c8c8c",
    "failed": "#c44e52",
    "cancelled": "#937860",
}
"""One meaning, one colour: a status keeps its colour whichever statuses a report has."""
WIDTH: Final = 13.0  # inches at 100 dpi: 1,300 px, inside a 1,400 px page with its margins


def _save(fig: Figure, path: Path) -> None:
    fig.savefig(path, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)


def _empty(ax: Axes, what: str) -> None:
    ax.text(0.5, 0.5, f"no {what}", ha="center", va="center")
    ax.set_axis_off()


def top_types(totals: pd.Series, limit: int = TOP_TYPES) -> list[str]:
    """The ``limit`` largest names of ``totals``, or all of them if that is one more at most."""
    ordered = totals.sort_values(ascending=False, kind="stable")
    keep = len(ordered) if len(ordered) <= limit + 1 else limit  # "other" of one type helps nobody
    return [str(name) for name in ordered.index[:keep]]


def _grouped(frame: pd.DataFrame, key: str, keep: Sequence[str]) -> pd.DataFrame:
    """``frame`` with every ``key`` value outside ``keep`` renamed to ``other``."""
    out = frame.copy()
    out[key] = out[key].where(out[key].isin(list(keep)), OTHER)
    return out


def _colour(names: Sequence[str]) -> dict[str, tuple[float, ...]]:
    colours = {
        name: tuple(COLOURS[i % len(COLOURS)]) for i, name in enumerate(n for n in names if n != OTHER)
    }
    colours[OTHER] = (0.55, 0.55, 0.55)
    return colours


def wants_log(values: Sequence[float]) -> bool:
    """True when the largest positive value is LOG_RATIO times the smallest or more."""
    positive = [float(v) for v in values if float(v) > 0]
    return len(positive) > 1 and max(positive) >= LOG_RATIO * min(positive)


def _count_axis(axis: XAxis | YAxis, log: bool) -> None:
    """Whole numbers with thousands separators; never the fractional ticks of a small count."""
    if not log:
        # Counts start at 0 and the axis reaches 1 at least, so a flat series is not drawn
        # on a tiny range with every tick rounding to the same whole number.
        top = max(axis.get_view_interval()[1], 1.0)
        if isinstance(axis, XAxis):
            axis.axes.set_xlim(0, top)
        else:
            axis.axes.set_ylim(-0.03 * top, top * 1.05)  # a series at 0 stays visible
        axis.set_major_locator(MaxNLocator(integer=True))
    axis.set_major_formatter(FuncFormatter(lambda v, _p: format_count(v) if v >= 0 else ""))


def _legend(fig: Figure, ax: Axes) -> None:
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)


def activity_chart(throughput: pd.DataFrame, path: Path, period: str) -> list[str]:
    """Four panels over time: started, completed, jobs with a failure, backlog; returns the series drawn.

    Over :data:`FEW_PERIODS` periods or fewer each panel draws bars, one group per period with
    each period labelled (two points joined by a line would suggest a trend between them that
    nobody measured); over more, lines with a point per period.
    """
    fig, names = activity_figure(throughput, period)
    _save(fig, path)
    return names


def activity_figure(throughput: pd.DataFrame, period: str) -> tuple[Figure, list[str]]:
    """The figure of :func:`activity_chart`, not saved, and the series drawn."""
    from jobchain_spark.report_periods import parse_period

    bucket = parse_period(period)
    panels = (
        ("started", f"Started (created) per {bucket.per}"),
        ("completed", f"Completed per {bucket.per}"),
        ("with_failure", f"Jobs whose last failure ended in the {bucket.noun}"),
        ("backlog", f"Backlog: not finished at the {bucket.noun}'s end"),
    )
    fig, axes = plt.subplots(2, 2, figsize=(WIDTH - 2.5, 7), sharex=True)
    if throughput.empty:
        for ax, (_, title) in zip(axes.flat, panels, strict=True):
            _empty(ax, "jobs")
            ax.set_title(title)
        return fig, []
    keep = top_types(throughput.groupby("type_name")["started"].sum())
    frame = _grouped(throughput, "type_name", keep)
    names = [*keep, OTHER] if OTHER in set(frame["type_name"]) else keep
    colours = _colour(names)
    # Every period from the first to the last, so a quiet period shows as 0, not as a straight line.
    periods = pd.date_range(frame["period"].min(), frame["period"].max(), freq=bucket.step, name="period")
    bars = len(periods) <= FEW_PERIODS
    for ax, (measure, title) in zip(axes.flat, panels, strict=True):
        wide = frame.pivot_table(index="period", columns="type_name", values=measure, aggfunc="sum")
        wide = wide.reindex(periods).reindex(columns=names)
        # Counts are zero in a period without rows; the backlog carries over from the last one.
        wide = wide.ffill().fillna(0) if measure == "backlog" else wide.fillna(0)
        if bars:
            width = 0.8 / len(names)
            for i, name in enumerate(names):
                offsets = np.arange(len(periods)) + (i - (len(names) - 1) / 2) * width
                ax.bar(offsets, wide[name], width=width, color=colours[name], label=name)
        else:
            for name in names:
                ax.plot(wide.index, wide[name], marker="o", markersize=3, color=colours[name], label=name)
        log = wants_log([wide[name].max() for name in names])
        if log:
            ax.set_yscale("symlog", linthresh=1)
        _count_axis(ax.yaxis, log)
        ax.set_title(f"{title} ({'log' if log else 'linear'} scale)", fontsize="medium")
        ax.set_ylabel("jobs")
        ax.grid(True, axis="y" if bars else "both", alpha=0.3)
    for ax in axes.flat:
        if bars:
            ax.set_xticks(list(range(len(periods))), period_labels(list(periods), bucket.seconds))
            ax.set_xlim(-0.5, len(periods) - 0.5)
            continue
        locator = AutoDateLocator(maxticks=8)  # type: ignore[no-untyped-call]  # matplotlib leaves __init__ untyped
        ax.xaxis.set_major_locator(locator)
        ax.xaxis.set_major_formatter(ConciseDateFormatter(locator))  # type: ignore[no-untyped-call]  # as above
    _legend(fig, axes.flat[0])
    fig.tight_layout()
    return fig, names


def period_labels(starts: Sequence[pd.Timestamp], seconds: int) -> list[str]:
    """Tick labels of bar groups: the time (``08:15``), or the day (``03-01``) for daily
    periods, with the date (the year) under the first and wherever it changes."""
    daily = seconds >= 86400
    labels: list[str] = []
    previous = ""
    for start in starts:
        short, long = (f"{start:%m-%d}", f"{start:%Y}") if daily else (f"{start:%H:%M}", f"{start:%Y-%m-%d}")
        labels.append(f"{short}\n{long}" if long != previous else short)
        previous = long
    return labels


def _percentile_bars(ax: Axes, frame: pd.DataFrame, name: str, label: str) -> None:
    """Horizontal p50/p95/p99 bars of ``name`` per row label, log scale when spread."""
    columns = [f"{name}_p{q}_s" for q in (50, 95, 99)]
    data = frame[columns].dropna(how="all") if not frame.empty else frame
    if data.empty:
        _empty(ax, label)
        ax.set_title(label)
        return
    data = data.iloc[::-1]  # largest type on top
    height = 0.27
    positions = range(len(data))
    for i, (column, colour) in enumerate(zip(columns, ("#4c72b0", "#dd8452", "#c44e52"), strict=True)):
        values = data[column].fillna(0).clip(lower=0)
        ax.barh(
            [p + (i - 1) * height for p in positions],
            values,
            height=height,
            color=colour,
            label=column[-5:-2],
        )
    ax.set_yticks(list(positions), [str(i) for i in data.index])
    values = [float(v) for v in data[columns].stack()]
    log = wants_log(values)
    _duration_axis(ax, values, log)
    ax.set_title(f"{label} ({'log' if log else 'linear'} scale)", fontsize="medium")
    ax.grid(True, axis="x", alpha=0.3)


_H, _D = 3600, 86400
COARSE_TICKS: Final = (0.01, 0.1, 1, 10, 60, 600, _H, 6 * _H, _D, 7 * _D, 30 * _D)
FINE_TICKS: Final = (
    0.01,
    0.1,
    0.5,
    1,
    2,
    5,
    10,
    30,
    60,
    120,
    300,
    600,
    1800,
    _H,
    2 * _H,
    6 * _H,
    12 * _H,
    _D,
    2 * _D,
)
UNITS: Final = ((86400, "d"), (3600, "h"), (60, "min"), (1, "s"))


def _duration_axis(ax: Axes, values: Sequence[float], log: bool) -> None:
    """An x axis of seconds with readable ticks: round durations on a log scale, one unit on a linear one."""
    positive = [v for v in values if v > 0]
    if log:
        ax.set_xscale("log")
        low, high = min(positive) / 2, max(positive) * 1.5
        ax.set_xlim(left=low)  # bars start at 0, which a log axis cannot show
        fine = [t for t in FINE_TICKS if low <= t <= high]
        ax.set_xticks(fine if len(fine) <= 6 else [t for t in COARSE_TICKS if low <= t <= high])
        ax.xaxis.set_major_formatter(FuncFormatter(human_seconds_ticks))
        ax.xaxis.set_minor_formatter(FuncFormatter(lambda _v, _p: ""))
        return
    top = max(positive, default=1.0)
    size, unit = next(((size, unit) for size, unit in UNITS if top >= 2 * size), (1, "s"))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v / size:,.4g} {unit}" if v else "0"))
    # The locator works in seconds; rescale it so that ticks fall on round numbers of the unit.
    ax.xaxis.set_major_locator(_UnitLocator(size))


class _UnitLocator(MaxNLocator):
    """MaxNLocator on the axis in ``size`` units (ticks at round minutes, hours or days)."""

    def __init__(self, size: float) -> None:
        super().__init__(nbins=5, steps=[1, 2, 2.5, 5, 10])
        self._size = size

    def tick_values(self, vmin: float, vmax: float) -> Any:
        return np.asarray(super().tick_values(vmin / self._size, vmax / self._size)) * self._size


def times_chart(summary: pd.DataFrame, path: Path) -> None:
    """Three panels per job type: latency, wait and run p50/p95/p99."""
    keep = top_types(summary.set_index("type_name")["jobs"]) if not summary.empty else []
    frame = summary.set_index("type_name").loc[keep] if keep else summary
    fig, axes = plt.subplots(1, 3, figsize=(WIDTH - 1.5, 1.5 + 0.45 * max(len(keep), 2)), sharey=True)
    panels = (
        ("latency", "Latency: created → completed"),
        ("wait", "Wait: created → first attempt"),
        ("run", "Run: last attempt → completed"),
    )
    for ax, (name, label) in zip(axes, panels, strict=True):
        _percentile_bars(ax, frame, name, label)
    _legend(fig, axes[0])
    if len(summary) > len(keep):
        fig.suptitle(f"the {len(keep)} job types with most jobs; all {len(summary)} are in the table below")
    fig.tight_layout()
    _save(fig, path)


def chain_durations_chart(durations: pd.DataFrame, path: Path) -> None:
    """One panel: chain duration p50/p95/p99 per chain type."""
    keep = top_types(durations.set_index("chain_type")["chains"]) if not durations.empty else []
    frame = durations.set_index("chain_type").loc[keep] if keep else durations
    fig, ax = plt.subplots(figsize=(WIDTH - 4, 1.5 + 0.45 * max(len(keep), 2)))
    _percentile_bars(ax, frame, "duration", "Chain duration: root created → last job completed")
    _legend(fig, ax)
    fig.tight_layout()
    _save(fig, path)


def attempts_chart(attempts: pd.DataFrame, path: Path) -> None:
    """Jobs per attempt count, per job type (top types plus other)."""
    fig, ax = plt.subplots(figsize=(WIDTH - 4, 4))
    if attempts.empty:
        _empty(ax, "attempts")
    else:
        keep = top_types(attempts.groupby("type_name")["jobs"].sum())
        frame = _grouped(attempts, "type_name", keep)
        names = [*keep, OTHER] if OTHER in set(frame["type_name"]) else keep
        wide = frame.pivot_table(index="attempt", columns="type_name", values="jobs", aggfunc="sum")
        wide = wide.reindex(columns=names).fillna(0)
        colours = _colour(names)
        wide.plot.bar(ax=ax, color=[colours[n] for n in names], legend=False, rot=0)
        log = wants_log(list(wide.to_numpy().ravel()))
        if log:
            ax.set_yscale("symlog", linthresh=1)
        _count_axis(ax.yaxis, log)
        ax.set_xlabel("attempts made")
        ax.set_ylabel("jobs")
        ax.set_title(f"Jobs by attempts made ({'log' if log else 'linear'} scale)", fontsize="medium")
        _legend(fig, ax)
    fig.tight_layout()
    _save(fig, path)


def status_chart(by_status: pd.DataFrame, path: Path) -> None:
    """Chains per chain type, stacked by status (top chain types plus other)."""
    rows = by_status["chain_type"].nunique() if not by_status.empty else 0
    fig, ax = plt.subplots(figsize=(WIDTH - 4, 1.5 + 0.4 * min(max(rows, 2), TOP_TYPES + 1)))
    if by_status.empty:
        _empty(ax, "chains")
    else:
        keep = top_types(by_status.groupby("chain_type")["chains"].sum())
        frame = _grouped(by_status, "chain_type", keep)
        wide = frame.pivot_table(index="chain_type", columns="status", values="chains", aggfunc="sum").fillna(
            0
        )
        wide = wide.reindex([*keep, OTHER] if OTHER in wide.index else keep).iloc[::-1]
        order = [c for c in STATUS_COLOURS if c in wide.columns] + sorted(
            set(wide.columns) - set(STATUS_COLOURS)
        )
        wide = wide[order]
        colours = [STATUS_COLOURS.get(c, COLOURS[i % len(COLOURS)]) for i, c in enumerate(order)]
        wide.plot.barh(ax=ax, stacked=True, legend=False, color=colours)
        _count_axis(ax.xaxis, False)
        ax.set_xlabel("chains")
        ax.set_ylabel("")
        ax.set_title("Chains by type and status (linear scale: shares within a type)", fontsize="medium")
        _legend(fig, ax)
    fig.tight_layout()
    _save(fig, path)


def errors_chart(errors: pd.DataFrame, path: Path) -> None:
    """Jobs per top error group (job type: fingerprint), largest on top."""
    fig, ax = plt.subplots(figsize=(WIDTH - 4, 1.5 + 0.4 * max(len(errors), 2)))
    if errors.empty:
        _empty(ax, "errors")
    else:
        labels = [
            _short(f"{t}: {e}") + (f" ({m:,} messages)" if m > 1 else "")
            for t, e, m in zip(errors["type_name"], errors["fingerprint"], errors["messages"], strict=True)
        ]
        ax.barh(labels[::-1], list(errors["jobs"])[::-1], color="#c44e52")
        _count_axis(ax.xaxis, False)
        ax.set_xlabel("jobs with a failed attempt of it")
    ax.set_title(
        "Top errors, values masked (failed attempts kept in the jobs' error histories)", fontsize="medium"
    )
    fig.tight_layout()
    _save(fig, path)


def dead_letters_chart(letters: pd.DataFrame, path: Path) -> tuple[list[str], list[str]]:
    """Failed jobs per job type, stacked by error type (top types and error types plus other);
    returns the job types and error types drawn."""
    rows = letters["type_name"].nunique() if not letters.empty else 0
    fig, ax = plt.subplots(figsize=(WIDTH - 4, 1.5 + 0.4 * min(max(rows, 2), TOP_TYPES + 1)))
    types: list[str] = []
    order: list[str] = []
    if letters.empty:
        _empty(ax, "failed jobs")
    else:
        frame = letters.assign(error_type=letters["error_type"].replace("", "(no type)"))
        keep = top_types(frame.groupby("type_name")["jobs"].sum())
        kinds = top_types(frame.groupby("error_type")["jobs"].sum())
        frame = _grouped(_grouped(frame, "type_name", keep), "error_type", kinds)
        wide = frame.pivot_table(index="type_name", columns="error_type", values="jobs", aggfunc="sum")
        types = [*keep, OTHER] if OTHER in wide.index else keep
        wide = wide.fillna(0).reindex(types).iloc[::-1]
        order = [k for k in kinds if k in wide.columns] + ([OTHER] if OTHER in wide.columns else [])
        colours = _colour(order)
        wide[order].plot.barh(ax=ax, stacked=True, legend=False, color=[colours[k] for k in order])
        _count_axis(ax.xaxis, False)
        ax.set_xlabel("failed jobs")
        ax.set_ylabel("")
        _legend(fig, ax)
    ax.set_title("Dead letters by job type and error type (linear scale)", fontsize="medium")
    fig.tight_layout()
    _save(fig, path)
    return types, order


def _short(label: str, limit: int = 70) -> str:
    return label if len(label) <= limit else label[: limit - 1] + "…"


__all__ = [
    "FEW_PERIODS",
    "LOG_RATIO",
    "OTHER",
    "TOP_TYPES",
    "activity_chart",
    "activity_figure",
    "attempts_chart",
    "chain_durations_chart",
    "dead_letters_chart",
    "errors_chart",
    "period_labels",
    "status_chart",
    "times_chart",
    "top_types",
    "wants_log",
]
