"""The report's pure parts, without Spark: error signatures, human formatting, chart choices."""

from __future__ import annotations

import math
import traceback
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pytest

from jobchain_spark.report_charts import OTHER, activity_chart, dead_letters_chart, top_types, wants_log
from jobchain_spark.report_errors import entry_signature, error_signature
from jobchain_spark.report_format import (
    count,
    format_count,
    format_duration,
    format_number,
    format_percent,
    format_time,
    html_table,
    percentiles,
    text,
)


def stored(fail: Callable[[], None]) -> str:
    """The error as the worker stores it (jobchain.worker.runner.describe_error)."""
    try:
        fail()
    except BaseException as exc:
        return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).strip()
    raise AssertionError("fail() must raise")


def _value_error() -> None:
    raise ValueError("bad input")


def _multi_line() -> None:
    raise ValueError("first line\nsecond line\nthird")


def _chained() -> None:
    try:
        {}["k"]
    except KeyError as exc:
        raise RuntimeError("upstream rejected it") from exc


def _during_handling() -> None:
    try:
        _ = 1 / 0
    except ZeroDivisionError:
        raise LookupError  # noqa: B904 -- the implicit context is what is tested


def _group() -> None:
    error = ExceptionGroup("two failed", [ValueError("a"), TypeError("b")])
    error.add_note("a note")
    raise error


def _no_message() -> None:
    raise KeyboardInterrupt


def _syntax() -> None:
    compile("foo bar", "<job>", "exec")


class TestErrorSignature:
    def test_a_traceback_gives_its_exception_line(self) -> None:
        assert error_signature(stored(_value_error)) == ("ValueError", "ValueError: bad input")

    def test_a_multi_line_message_keeps_its_first_line(self) -> None:
        assert error_signature(stored(_multi_line)) == ("ValueError", "ValueError: first line")

    def test_chained_exceptions_give_the_one_raised_last(self) -> None:
        assert error_signature(stored(_chained)) == ("RuntimeError", "RuntimeError: upstream rejected it")
        assert error_signature(stored(_during_handling)) == ("LookupError", "LookupError")

    def test_an_exception_group_gives_the_group(self) -> None:
        assert error_signature(stored(_group)) == (
            "ExceptionGroup",
            "ExceptionGroup: two failed (2 sub-exceptions)",
        )

    def test_an_exception_without_message_and_a_syntax_error(self) -> None:
        assert error_signature(stored(_no_message)) == ("KeyboardInterrupt", "KeyboardInterrupt")
        assert error_signature(stored(_syntax)) == ("SyntaxError", "SyntaxError: invalid syntax")

    def test_a_plain_message_is_its_first_line_without_type(self) -> None:
        assert error_signature("timeout\nat line 3") == ("", "timeout")
        released = "released: the worker shut down before the attempt finished"
        assert error_signature(released) == ("", released)
        assert error_signature(None) == ("", "")
        assert error_signature("  \n") == ("", "")

    def test_a_traceback_truncated_before_its_exception_says_so(self) -> None:
        text = stored(_value_error)
        cut = text[: text.index("ValueError")] + "\n…(truncated)"
        assert error_signature(cut) == ("", "(traceback truncated before its exception line)")

    def test_a_truncated_chain_marks_what_it_found(self) -> None:
        text = stored(_chained)
        cut = text[: text.index("The above exception")] + "\n…(truncated)"  # only the cause is left
        assert error_signature(cut) == ("KeyError", "KeyError: 'k' (truncated traceback)")

    def test_long_messages_are_cut_and_whitespace_collapsed(self) -> None:
        kind, error = error_signature(
            "Traceback (most recent call last):\n  File 'x'\nValueError: " + "x  " * 300
        )
        assert kind == "ValueError"
        assert len(error) == 200
        assert error.endswith("…")
        assert "  " not in error


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (0.35, "350 ms"),
        (1.24, "1.2 s"),
        (5.0, "5 s"),
        (45.4, "45 s"),
        (184, "3 min 4 s"),
        (7200, "2 h"),
        (7500, "2 h 5 min"),
        (3 * 86400 + 4 * 3600, "3 d 4 h"),
        (-90, "-1 min 30 s"),
        (None, "—"),
        (math.nan, "—"),
        (pd.NaT, "—"),
    ],
)
def test_durations_are_human(seconds: object, shown: str) -> None:
    assert format_duration(seconds) == shown


def test_numbers_counts_percentages_and_times() -> None:
    assert format_count(20000) == "20,000"
    assert format_count(math.nan) == "—"
    assert format_number(1234.5678) == "1,234.6"
    assert format_number(5.0) == "5"
    assert format_percent(1 / 6) == "16.7 %"
    assert format_time(pd.Timestamp("2024-03-01 02:00:05.123456")) == "2024-03-01 02:00:05"
    assert format_time(pd.NaT) == "—"


def test_the_html_table_has_human_headings_and_no_raw_missing_values() -> None:
    frame = pd.DataFrame(
        {
            "type_name": ["a", "b"],
            "jobs": [20000, 3],
            **{f"run_p{q}_s": [1.234567, math.nan] for q in (50, 95, 99)},
        }
    )
    table = html_table(
        frame, [text("type_name", "Job type"), count("jobs", "Jobs"), *percentiles("run", "Run")]
    )
    assert "<th colspan='3' class='group'>Run</th>" in table
    assert "<th rowspan='2'>Job type</th>" in table
    assert "20,000" in table
    assert "1.2 s" in table
    assert "1.234567" not in table
    assert "nan" not in table
    assert "_" not in table


def test_top_types_keep_the_largest_and_never_an_other_of_one() -> None:
    totals = pd.Series({f"t{i}": i for i in range(1, 13)})
    assert top_types(totals, limit=3) == ["t12", "t11", "t10"]
    assert top_types(totals.iloc[:4], limit=3) == ["t4", "t3", "t2", "t1"]


def test_log_scale_only_when_series_differ_widely() -> None:
    assert wants_log([20000, 3, 0])
    assert not wants_log([100, 40, 0])
    assert not wants_log([0, 0])


def test_the_activity_chart_groups_small_types_into_other(tmp_path: Path) -> None:
    period = pd.Timestamp(datetime(2024, 3, 1, tzinfo=UTC))
    rows = [
        {"type_name": f"type_{i}", "period": period, "started": 10 * (i + 1), "completed": i,
         "with_failure": 0, "backlog": 10, "throughput_per_hour": float(i)}
        for i in range(24)
    ]  # fmt: skip
    frame = pd.DataFrame(rows)
    assert OTHER not in set(frame["type_name"])
    drawn = activity_chart(frame, tmp_path / "activity.png", "hour")
    assert drawn == [f"type_{i}" for i in range(23, 14, -1)] + [OTHER]  # nine largest by started
    png = (tmp_path / "activity.png").read_bytes()
    assert png.startswith(b"\x89PNG")
    assert len(png) > 10_000


def test_a_history_entry_is_grouped_by_its_type_and_first_line() -> None:
    assert entry_signature("ValueError", "bad input\nline 2") == ("ValueError", "ValueError: bad input")
    assert entry_signature("AttemptAbandoned", "") == ("AttemptAbandoned", "AttemptAbandoned")
    assert entry_signature(None, "  \nplain") == ("", "plain")
    assert entry_signature("", None) == ("", "(empty error)")
    assert entry_signature("E", "x" * 500)[1].endswith("…")


def test_the_dead_letters_chart_keeps_the_largest_types_and_error_types(tmp_path: Path) -> None:
    rows = [
        {"type_name": f"type_{i}", "error_type": f"Error{j}" if j else "", "jobs": (i + 1) * (j + 1)}
        for i in range(12)
        for j in range(12)
    ]
    types, kinds = dead_letters_chart(pd.DataFrame(rows), tmp_path / "dead.png")
    assert types == [f"type_{i}" for i in range(11, 2, -1)] + [OTHER]
    assert kinds == [f"Error{j}" for j in range(11, 2, -1)] + [OTHER]  # "" (no type) is the smallest
    assert (tmp_path / "dead.png").read_bytes().startswith(b"\x89PNG")
    assert dead_letters_chart(pd.DataFrame(rows[:2]), tmp_path / "two.png") == (
        ["type_0"],
        ["Error1", "(no type)"],
    )
    empty = pd.DataFrame(columns=["type_name", "error_type", "jobs"])
    assert dead_letters_chart(empty, tmp_path / "none.png") == ([], [])
