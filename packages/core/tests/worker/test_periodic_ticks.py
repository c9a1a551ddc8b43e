"""Periodic schedules: cron parsing, ticks around DST, the due tick, and declaration errors."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from jobchain import JobTypes
from jobchain.errors import InvalidScheduleError, JobTypeValidationError
from jobchain.periodic import CronTicks, due_tick, validate_schedule_name
from jobchain.worker import Processors
from jobchain.worker.processors import merge_schedules


@dataclass
class Report:
    day: str


def at(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


class TestTicks:
    def test_next_tick_is_strictly_after_and_last_tick_is_at_or_before(self) -> None:
        every_minute = CronTicks.parse("* * * * *")
        assert every_minute.next_after(at(2026, 1, 1, 0, 0, 0)) == at(2026, 1, 1, 0, 1)
        assert every_minute.last_at_or_before(at(2026, 1, 1, 0, 0, 0)) == at(2026, 1, 1, 0, 0)
        half = at(2026, 1, 1, 0, 0, 59) + timedelta(microseconds=500_000)
        assert every_minute.last_at_or_before(half) == at(2026, 1, 1, 0, 0)
        assert every_minute.next_after(half) == at(2026, 1, 1, 0, 1)

    def test_a_local_time_in_a_timezone_follows_daylight_saving(self) -> None:
        paris = CronTicks.parse("0 3 * * *", "Europe/Paris")
        # 03:00 in Paris is 02:00 UTC in winter and 01:00 UTC in summer.
        assert paris.next_after(at(2026, 3, 28, 12)) == at(2026, 3, 29, 1)
        assert paris.next_after(at(2026, 3, 27, 12)) == at(2026, 3, 28, 2)
        assert paris.last_at_or_before(at(2026, 10, 26, 12)) == at(2026, 10, 26, 2)

    def test_a_tick_in_the_skipped_hour_runs_once_after_it(self) -> None:
        skipped = CronTicks.parse("30 2 * * *", "Europe/Paris")  # 02:30 does not exist on 29 March
        first = skipped.next_after(at(2026, 3, 28, 12))
        assert first == at(2026, 3, 29, 1)  # 03:00 CEST, the first valid minute after it
        assert skipped.next_after(first) == at(2026, 3, 30, 0, 30)

    def test_a_tick_in_the_repeated_hour_runs_once(self) -> None:
        repeated = CronTicks.parse("30 2 * * *", "Europe/Paris")  # 02:30 happens twice on 25 October
        first = repeated.next_after(at(2026, 10, 24, 12))
        assert first == at(2026, 10, 25, 0, 30)
        assert repeated.next_after(first) == at(2026, 10, 26, 1, 30)

    def test_ticks_only_move_forward_across_daylight_saving(self) -> None:
        for timezone in ("Europe/Paris", "America/New_York", "Australia/Lord_Howe"):
            hourly = CronTicks.parse("*/30 * * * *", timezone)
            moment = at(2026, 3, 1)
            for _ in range(24 * 2 * 60):  # two months of half hours
                following = hourly.next_after(moment)
                assert following > moment
                assert hourly.last_at_or_before(following) is not None
                moment = following

    def test_due_tick_is_the_latest_only(self) -> None:
        hourly = CronTicks.parse("0 * * * *")
        now = at(2026, 1, 1, 5, 10)
        assert due_tick(hourly, now, None) == at(2026, 1, 1, 5)
        # Five ticks missed: only the last one is due, never a storm.
        assert due_tick(hourly, now, at(2026, 1, 1, 0)) == at(2026, 1, 1, 5)
        assert due_tick(hourly, now, at(2026, 1, 1, 5)) is None


class TestInvalid:
    @pytest.mark.parametrize("cron", ["61 * * * *", "* * *", "every day", "0 0 31 2 *", "", "0 25 * * *"])
    def test_an_invalid_cron_expression_names_it(self, cron: str) -> None:
        with pytest.raises(InvalidScheduleError) as caught:
            CronTicks.parse(cron)
        assert repr(cron) in str(caught.value)
        assert caught.value.cron == cron

    @pytest.mark.parametrize("timezone", ["Mars/Olympus", "../etc/passwd", "", "Europe/Pariss"])
    def test_an_unknown_timezone_names_it_and_the_expression(self, timezone: str) -> None:
        with pytest.raises(InvalidScheduleError) as caught:
            CronTicks.parse("0 3 * * *", timezone)
        assert "'0 3 * * *'" in str(caught.value)
        assert caught.value.timezone == timezone

    @pytest.mark.parametrize("name", ["", " padded", "tab\tinside", "x" * 201, 42])
    def test_a_bad_name_is_refused(self, name: object) -> None:
        with pytest.raises(InvalidScheduleError):
            validate_schedule_name(name)


class TestDeclaration:
    def _types(self) -> tuple[JobTypes, Any, Any]:
        types = JobTypes()
        report = types.define("report", input=Report, output=None, entry=True)
        step = types.define("step", input=Report, output=None)
        return types, report, step

    def test_periodic_declares_with_the_type_name_by_default(self) -> None:
        _, report, _ = self._types()
        procs = Processors()
        schedule = procs.periodic("0 3 * * *", report, Report(day="today"), timezone="Europe/Paris")
        assert schedule.name == "report"
        assert schedule.timezone == "Europe/Paris"
        assert schedule.catch_up is True
        key = schedule.deduplication_key(at(2026, 1, 1, 2))
        assert key == "periodic:report:2026-01-01T02:00:00+00:00"
        dedup = schedule.deduplication(at(2026, 1, 1, 2))
        assert dedup.scope == "any"
        assert dedup.window == timedelta(days=1, hours=1)

    def test_errors_at_declaration(self) -> None:
        _, report, step = self._types()
        procs = Processors()
        with pytest.raises(InvalidScheduleError, match="'0 3 \\* \\*'"):
            procs.periodic("0 3 * *", report, Report(day="x"))
        with pytest.raises(InvalidScheduleError, match="Nowhere/City"):
            procs.periodic("0 3 * * *", report, Report(day="x"), timezone="Nowhere/City")
        with pytest.raises(InvalidScheduleError, match="entry=True"):
            procs.periodic("0 3 * * *", step, Report(day="x"))
        with pytest.raises(JobTypeValidationError):
            procs.periodic("0 3 * * *", report, {"nope": 1})
        procs.periodic("0 3 * * *", report, Report(day="x"))
        with pytest.raises(InvalidScheduleError, match="'report'"):
            procs.periodic("0 4 * * *", report, Report(day="y"))
        procs.periodic("0 4 * * *", report, Report(day="y"), name="report-late")
        other = Processors()
        other.periodic("0 5 * * *", report, Report(day="z"), name="report-late")
        with pytest.raises(InvalidScheduleError, match="report-late"):
            merge_schedules([procs, other])
        assert [s.name for s in procs.schedules()] == ["report", "report-late"]
