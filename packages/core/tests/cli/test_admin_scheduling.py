"""``jobchain pause``, ``resume``, ``schedules`` and the paused marker of ``stats`` on seeded SQLite
and PostgreSQL databases (the rendering alone, over records, below)."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import re
from datetime import UTC, datetime, timedelta

from rich.console import Console

import jobchain
from jobchain.cli.schedules import STALE_AFTER, schedules_table
from jobchain.cli.stats import stats_view
from jobchain.connect_backends import open_state
from jobchain.contracts.scheduling import ScheduleRegistration, SchedulesRegister
from jobchain.entities import ScheduleRecord
from jobchain.stats import QueueStats, TypeStats

from .helpers import cli, ok_json
from .shop import CHARGE, TYPES, Shop

SCHEDULE_FIELDS = {f.name for f in dataclasses.fields(ScheduleRecord)} | {"stale"}


def paused_flags(url: str, *types: str) -> dict[str, bool]:
    args = [arg for name in types for arg in ("--type", name)]
    return {row["type_name"]: row["paused"] for row in ok_json(url, "stats", *args)["types"]}


def register(url: str, *registrations: tuple[ScheduleRegistration, datetime]) -> None:
    async def main() -> None:
        adapter = await open_state(url)
        try:
            for registration, seen in registrations:
                async with adapter.transaction() as stx:
                    await stx.schedules_register(SchedulesRegister(schedules=[registration], now=seen))
        finally:
            await adapter.close()

    asyncio.run(main())


def nightly(**changes: object) -> ScheduleRegistration:
    values: dict[str, object] = {
        "name": "nightly-report",
        "cron": "0 3 * * *",
        "timezone": "Europe/Paris",
        "type_name": "send_email",
        "catch_up": True,
        "worker_name": "w-live-name",
    }
    return ScheduleRegistration(**{**values, **changes})  # type: ignore[arg-type]  # test values


class TestPauseResume:
    def test_pause_asks_and_a_no_changes_nothing(self, shop: Shop) -> None:
        declined = cli(shop.url, "pause", "charge", "send_email", input="n\n")
        assert declined.exit_code == 1
        assert "Pause 2 job types (charge, send_email)?" in declined.stderr
        assert paused_flags(shop.url) == {"charge": False, "place_order": False, "send_email": False}

    def test_pause_then_stats_marks_it_then_resume(self, shop: Shop) -> None:
        result = cli(shop.url, "pause", "charge", input="y\n")
        assert result.exit_code == 0, result.output
        assert result.stdout.startswith("paused charge (since ")
        assert paused_flags(shop.url)["charge"] is True
        table = cli(shop.url, "stats")
        assert table.exit_code == 0, table.output
        assert "charge paused" in table.stdout
        assert "send_email paused" not in table.stdout
        assert "jobchain resume TYPE" in table.stdout
        again = cli(shop.url, "resume", "charge", "send_email", "--yes")
        assert again.exit_code == 0, again.output
        assert again.stdout.splitlines() == ["resumed charge", "send_email was not paused"]
        assert paused_flags(shop.url)["charge"] is False
        assert "paused" not in cli(shop.url, "stats").stdout

    def test_json_and_a_type_without_jobs(self, shop: Shop) -> None:
        document = ok_json(shop.url, "pause", "reports", "charge", "charge", "--yes")
        assert [item["type_name"] for item in document["paused"]] == ["charge", "reports"]
        for item in document["paused"]:
            assert abs(datetime.fromisoformat(item["paused_at"]) - datetime.now(UTC)) < timedelta(minutes=5)
        flags = paused_flags(shop.url)
        assert flags == {"charge": True, "place_order": False, "reports": True, "send_email": False}
        assert ok_json(shop.url, "resume", "reports", "place_order", "--yes") == {
            "resumed": ["reports"],
            "not_paused": ["place_order"],
        }

    def test_a_name_nothing_uses_gets_a_note(self, shop: Shop) -> None:
        result = cli(shop.url, "pause", "chrage", "charge", "--yes")
        assert result.exit_code == 0, result.output
        assert "note: no job of type chrage exists and no live worker serves it" in result.stderr
        assert "charge exists" not in result.stderr
        assert paused_flags(shop.url, "chrage")["chrage"] is True  # paused all the same

    def test_resume_asks_too(self, shop: Shop) -> None:
        assert cli(shop.url, "pause", "charge", "--yes").exit_code == 0
        declined = cli(shop.url, "resume", "charge", input="n\n")
        assert declined.exit_code == 1
        assert "Resume 1 job type (charge)?" in declined.stderr
        assert paused_flags(shop.url)["charge"] is True

    def test_usage_errors(self, shop: Shop) -> None:
        for args in (("pause",), ("resume",), ("pause", "bad name!", "--yes"), ("resume", "", "--yes")):
            result = cli(shop.url, *args)
            assert result.exit_code == 2, (args, result.output)
            assert "Traceback" not in result.output
        assert paused_flags(shop.url) == {"charge": False, "place_order": False, "send_email": False}


def start_ordered(url: str) -> tuple[str, str]:
    """Two charges with one ordering key, the first at priority 7; their ids."""

    async def main() -> tuple[str, str]:
        client = await jobchain.connect(url, notify="none", job_types=TYPES, migrate=False)
        async with client, client.transaction() as tx:
            first = await client.start_chain(tx, CHARGE, 1, priority=7, ordering_key="customer-42")
            second = await client.start_chain(tx, CHARGE, 2, ordering_key="customer-42")
        assert second.ordered_after == first.id
        return first.id, second.id

    return asyncio.run(main())


class TestJobsShow:
    def test_priority_and_ordering_key(self, shop: Shop) -> None:
        first, second = start_ordered(shop.url)
        shown = cli(shop.url, "jobs", "show", first)
        assert shown.exit_code == 0, shown.output
        assert re.search(r"priority\s+7", shown.stdout)
        assert re.search(r"ordering key\s+customer-42", shown.stdout)
        later = ok_json(shop.url, "jobs", "show", second)
        assert (later["job"]["priority"], later["job"]["ordering_key"]) == (0, "customer-42")
        assert later["job"]["status"] == "blocked"
        assert [chain["id"] for chain in later["blockers"]] == [first]
        assert "priority" not in cli(shop.url, "jobs", "show", shop.due).stdout  # 0: not shown


class TestHealth:
    def test_a_paused_types_waiting_jobs_do_not_trip_the_due_age_probe(self, shop: Shop) -> None:
        # The shop's due charge has waited 10 minutes.
        assert cli(shop.url, "health", "--max-oldest-due-age", "1m").exit_code == 1
        assert cli(shop.url, "pause", "charge", "--yes").exit_code == 0
        result = cli(shop.url, "health", "--max-oldest-due-age", "1m")
        assert result.exit_code == 0, result.output
        assert "paused types left out: charge" in result.stdout


class TestSchedules:
    def test_none_registered(self, shop: Shop) -> None:
        assert ok_json(shop.url, "schedules") == {"items": []}
        result = cli(shop.url, "schedules")
        assert result.exit_code == 0, result.output
        assert "no schedules registered" in result.stdout

    def test_lists_what_workers_registered(self, shop: Shop) -> None:
        now = datetime.now(UTC).replace(microsecond=0)
        tick = now - timedelta(hours=3)
        register(
            shop.url,
            (
                nightly(
                    next_tick_at=now + timedelta(hours=5), last_tick_at=tick, last_chain_id=shop.completed
                ),
                now,
            ),
            (
                nightly(
                    name="old-cleanup", cron="*/5 * * * *", timezone="UTC", type_name="charge", catch_up=False
                ),
                now - STALE_AFTER - timedelta(hours=1),
            ),
        )
        document = ok_json(shop.url, "schedules")
        assert [item["name"] for item in document["items"]] == ["nightly-report", "old-cleanup"]
        report, cleanup = document["items"]
        assert set(report) == SCHEDULE_FIELDS
        assert (report["cron"], report["timezone"], report["type_name"]) == (
            "0 3 * * *",
            "Europe/Paris",
            "send_email",
        )
        assert datetime.fromisoformat(report["last_tick_at"]) == tick
        assert report["last_chain_id"] == shop.completed
        assert (report["stale"], cleanup["stale"]) == (False, True)
        assert cleanup["catch_up"] is False
        table = cli(shop.url, "schedules")
        assert table.exit_code == 0, table.output
        lines = table.stdout.splitlines()
        [report_line] = [line for line in lines if "nightly-report" in line]
        [cleanup_line] = [line for line in lines if "old-cleanup" in line]
        assert "Europe/Paris" in report_line
        assert shop.completed in report_line
        assert "stale" not in report_line
        assert "stale" in cleanup_line
        assert "*/5 * * * *" in cleanup_line


# ---------------------------------------------------------------- rendering alone

NOW = datetime(2030, 6, 1, 12, 0, tzinfo=UTC)


def record(name: str, seen: datetime, **changes: object) -> ScheduleRecord:
    values: dict[str, object] = {
        "name": name,
        "cron": "0 * * * *",
        "timezone": "UTC",
        "type_name": "report",
        "catch_up": True,
        "worker_name": "w1",
        "registered_at": NOW - timedelta(days=3),
        "last_seen_at": seen,
    }
    return ScheduleRecord(**{**values, **changes})  # type: ignore[arg-type]  # test values


def rendered(renderable: object) -> str:
    out = io.StringIO()
    Console(width=200, file=out).print(renderable)
    return out.getvalue()


class TestRendering:
    def test_stale_only_after_a_day_unseen(self) -> None:
        text = rendered(
            schedules_table(
                [
                    record("fresh", NOW - STALE_AFTER, next_tick_at=NOW + timedelta(minutes=30)),
                    record("gone", NOW - STALE_AFTER - timedelta(seconds=1)),
                ],
                NOW,
            )
        )
        fresh = next(line for line in text.splitlines() if "fresh" in line)
        gone = next(line for line in text.splitlines() if "gone" in line)
        assert "stale" not in fresh
        assert "06-01 12:30:00" in fresh or "2030-06-01 12:30" in fresh
        assert gone.rstrip().endswith("stale")

    def test_stats_marks_paused_types_even_without_jobs(self) -> None:
        stats = QueueStats(
            now=NOW, types=(TypeStats(type_name="idle", paused=True), TypeStats(type_name="busy"))
        )
        text = rendered(stats_view(stats))
        assert "idle paused" in text
        assert "busy paused" not in text
        assert "jobchain resume TYPE" in text
