"""Report periods down to minutes, and activity charts that read well with few periods
(issue 36, deliver 5). No Spark session: parsing, labels and the drawn figure."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import pytest

from jobchain_spark import SparkOptionError
from jobchain_spark.report_charts import FEW_PERIODS, activity_chart, activity_figure, period_labels
from jobchain_spark.report_format import period_formatter
from jobchain_spark.report_periods import parse_period


@pytest.mark.parametrize(
    ("text", "canonical", "seconds", "per", "heading"),
    [
        ("minute", "minute", 60, "minute", "Minute"),
        ("1m", "minute", 60, "minute", "Minute"),
        ("5m", "5m", 300, "5 minutes", "Period (5 min)"),
        (" 15M ", "15m", 900, "15 minutes", "Period (15 min)"),
        ("30m", "30m", 1800, "30 minutes", "Period (30 min)"),
        ("60m", "hour", 3600, "hour", "Hour"),
        ("Hour", "hour", 3600, "hour", "Hour"),
        ("2h", "2h", 7200, "2 hours", "Period (2 h)"),
        ("24h", "day", 86400, "day", "Day"),
        ("day", "day", 86400, "day", "Day"),
    ],
)
def test_periods_parse_to_one_canonical_form(
    text: str, canonical: str, seconds: int, per: str, heading: str
) -> None:
    period = parse_period(text)
    assert (period.text, period.seconds, period.per, period.heading) == (canonical, seconds, per, heading)


@pytest.mark.parametrize("text", ["fortnight", "7m", "90s", "30s", "0m", "25h", "2d", "1w", "", "5"])
def test_a_period_that_does_not_divide_a_day_into_whole_minutes_is_refused(text: str) -> None:
    with pytest.raises(
        SparkOptionError, match="option 'period': must be minute, hour, day, or whole minutes"
    ):
        parse_period(text)


def test_periods_shorter_than_a_day_are_shown_to_the_minute() -> None:
    start = pd.Timestamp("2024-03-01 08:15:00")
    assert period_formatter("5m")(start) == "2024-03-01 08:15"
    assert period_formatter("day")(start) == "2024-03-01"
    labels = period_labels(list(pd.date_range("2024-03-01 23:45", periods=3, freq="15min")), 900)
    assert labels == ["23:45\n2024-03-01", "00:00\n2024-03-02", "00:15"]  # the date where it changes


def _throughput(periods: int, freq: str) -> pd.DataFrame:
    starts = pd.date_range(datetime(2024, 3, 1, tzinfo=UTC), periods=periods, freq=freq)
    rows = [
        {"type_name": name, "period": start, "started": 3 + i % 4, "completed": 2, "with_failure": 1,
         "backlog": i, "throughput_per_hour": 2.0}
        for i, start in enumerate(starts) for name in ("charge", "ship")
    ]  # fmt: skip
    return pd.DataFrame(rows)


def test_few_periods_are_drawn_as_labelled_bars_not_a_line(tmp_path: Path) -> None:
    fig, names = activity_figure(_throughput(2, "5min"), "5m")  # 10 minutes of history per 5 min
    try:
        assert names == ["charge", "ship"]
        for ax in fig.axes[:4]:
            assert len(ax.patches) == 2 * 2  # a bar per type and period
            assert not ax.lines  # no line joining two points
        for ax in fig.axes[2:4]:  # the bottom row labels the shared axis
            assert [t.get_text() for t in ax.get_xticklabels()] == ["00:00\n2024-03-01", "00:05"]
    finally:
        plt.close(fig)
    activity_chart(_throughput(2, "5min"), tmp_path / "activity.png", "5m")
    assert (tmp_path / "activity.png").read_bytes().startswith(b"\x89PNG")


def test_many_periods_are_drawn_as_lines() -> None:
    fig, _ = activity_figure(_throughput(FEW_PERIODS + 1, "1min"), "minute")
    try:
        for ax in fig.axes[:4]:
            assert not ax.patches
            assert [len(line.get_xdata()) for line in ax.lines] == [FEW_PERIODS + 1] * 2
    finally:
        plt.close(fig)


def test_a_quiet_period_between_few_is_a_bar_of_zero() -> None:
    frame = _throughput(3, "15min")
    frame = frame[frame["period"] != frame["period"].iloc[2]]  # nothing in the middle period
    fig, _ = activity_figure(frame, "15m")
    try:
        started = fig.axes[0]
        labels = [t.get_text() for t in fig.axes[2].get_xticklabels()]
        assert labels == ["00:00\n2024-03-01", "00:15", "00:30"]
        heights = sorted(round(p.get_height()) for p in started.patches)
        assert heights.count(0) == 2  # both types' bars of the quiet period
    finally:
        plt.close(fig)


def test_the_command_refuses_a_bad_period_in_one_line_before_starting_spark(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from jobchain_spark.cli import main

    out = tmp_path / "report"
    url = f"sqlite:///{tmp_path / 'jobchain.db'}"
    result = CliRunner().invoke(main, ["report", "--url", url, "--out", str(out), "--period", "7m"])
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [
        "error: option 'period': must be minute, hour, day, or whole minutes that divide a day such as "
        "5m, 15m or 2h, got '7m' (run with --debug for the full trace)"
    ]
    assert not out.exists()
