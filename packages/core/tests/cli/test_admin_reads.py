"""``jobchain jobs``, ``chains``, ``workers`` and ``stats`` on seeded SQLite and PostgreSQL databases."""

from __future__ import annotations

import dataclasses
from datetime import datetime

import pytest

from jobchain.entities import Job, WorkerInfo

from .helpers import cli, ok_json, one_line_error
from .shop import DEAD_WORKER, LIVE_WORKER, Shop

JOB_FIELDS = {f.name for f in dataclasses.fields(Job)}
WORKER_FIELDS = {f.name for f in dataclasses.fields(WorkerInfo)}
CHAIN_FIELDS = {"id", "type_name", "status", "created_at", "finished_at", "root", "last"}


def ids(items: list[dict[str, object]]) -> set[object]:
    return {item["id"] for item in items}


class TestJobsList:
    def test_json_lists_every_job_with_the_entity_fields(self, shop: Shop) -> None:
        document = ok_json(shop.url, "jobs", "list", "--all")
        assert set(document) == {"items", "next_cursor"}
        assert document["next_cursor"] is None
        assert len(document["items"]) == 9
        for item in document["items"]:
            assert set(item) == JOB_FIELDS
            assert datetime.fromisoformat(item["created_at"]).tzinfo is not None
        failed = next(i for i in document["items"] if i["id"] == shop.failed[0])
        assert failed["status"] == "failed"
        assert failed["attempt_errors"][0]["error_type"] == "SMTPError"
        assert datetime.fromisoformat(failed["failed_at"]).tzinfo is not None

    def test_filters(self, shop: Shop) -> None:
        assert ids(ok_json(shop.url, "jobs", "list", "--status", "failed")["items"]) == set(shop.failed)
        charges = ok_json(shop.url, "jobs", "list", "--type", "charge")["items"]
        assert ids(charges) == {shop.completed, shop.expired, shop.running, shop.due}
        by_error = ok_json(shop.url, "jobs", "list", "--error-type", "SMTPError", "--status", "failed")
        assert ids(by_error["items"]) == set(shop.failed)
        held = ok_json(shop.url, "jobs", "list", "--leased-by", LIVE_WORKER)["items"]
        assert ids(held) == {shop.running}
        newer = ok_json(shop.url, "jobs", "list", "--newer-than", "5m")["items"]
        assert ids(newer) == {shop.running, shop.scheduled}
        older = ok_json(shop.url, "jobs", "list", "--older-than", "5m", "--type", "send_email")["items"]
        assert ids(older) == {*shop.failed, shop.cancelled}

    def test_pages_follow_the_cursor(self, shop: Shop) -> None:
        first = ok_json(shop.url, "jobs", "list", "--limit", "4", "--order", "asc")
        assert len(first["items"]) == 4
        assert first["next_cursor"]
        second = ok_json(
            shop.url, "jobs", "list", "--limit", "4", "--order", "asc", "--cursor", first["next_cursor"]
        )
        assert len(second["items"]) == 4
        assert not ids(first["items"]) & ids(second["items"])

    def test_table_for_people(self, shop: Shop) -> None:
        result = cli(shop.url, "jobs", "list", "--limit", "3")
        assert result.exit_code == 0, result.output
        assert "STATUS" in result.stdout
        assert shop.scheduled in result.stdout
        assert "--cursor" in result.stderr  # how to read the next page

    @pytest.mark.parametrize(
        ("args", "says"),
        [
            (("--status", "bogus"), "--status"),
            (("--newer-than", "5x"), "positive duration"),
            (("--older-than", "-3m"), "positive duration"),
            (("--chain", "not-an-id"), "not a chain id"),
            (("--limit", "0"), "--limit"),
        ],
    )
    def test_an_invalid_filter_is_a_usage_error(self, shop: Shop, args: tuple[str, ...], says: str) -> None:
        result = cli(shop.url, "jobs", "list", *args)
        assert result.exit_code == 2, result.output
        assert says in result.stderr
        assert "Traceback" not in result.output


class TestJobsShow:
    def test_json_has_the_job_and_its_blockers(self, shop: Shop) -> None:
        document = ok_json(shop.url, "jobs", "show", shop.blocked)
        assert set(document) == {"job", "blockers"}
        assert document["job"]["status"] == "blocked"
        [blocker] = document["blockers"]
        assert set(blocker) == CHAIN_FIELDS
        assert (blocker["id"], blocker["status"]) == (shop.due, "pending")

    def test_panel_shows_errors_with_traceback(self, shop: Shop) -> None:
        result = cli(shop.url, "jobs", "show", shop.failed[0])
        assert result.exit_code == 0, result.output
        assert "SMTPError: connection refused by mail.example.com" in result.stdout
        assert 'File "app.py", line 3' in result.stdout

    def test_unknown_id_exits_1_with_one_line(self, shop: Shop) -> None:
        line = one_line_error(cli(shop.url, "jobs", "show", "01938c7e-0000-7000-8000-999999999999"))
        assert "job 01938c7e-0000-7000-8000-999999999999 not found" in line

    def test_malformed_id_is_a_usage_error(self, shop: Shop) -> None:
        result = cli(shop.url, "jobs", "show", "42")
        assert result.exit_code == 2
        assert "not a job id" in result.stderr


class TestChains:
    def test_list_json(self, shop: Shop) -> None:
        document = ok_json(shop.url, "chains", "list", "--all")
        assert len(document["items"]) == 9
        assert all(set(item) == CHAIN_FIELDS for item in document["items"])
        failed = ok_json(shop.url, "chains", "list", "--status", "failed", "--type", "send_email")
        assert ids(failed["items"]) == set(shop.failed)

    def test_show_draws_jobs_blockers_and_errors(self, shop: Shop) -> None:
        result = cli(shop.url, "chains", "show", shop.blocked)
        assert result.exit_code == 0, result.output
        out = result.stdout
        assert f"chain {shop.blocked}" in out
        assert "#0 place_order" in out
        assert "blocked by" in out
        assert f"chain {shop.due}" in out
        assert "pending" in out
        failed = cli(shop.url, "chains", "show", shop.failed[0]).stdout
        assert "attempt 1: SMTPError: connection refused" in failed
        blocker = cli(shop.url, "chains", "show", shop.due).stdout
        assert "blocking" in blocker
        assert shop.blocked in blocker

    def test_show_json(self, shop: Shop) -> None:
        document = ok_json(shop.url, "chains", "show", shop.due)
        assert set(document) == {"chain", "jobs", "blockers", "blocking"}
        assert document["chain"]["id"] == shop.due
        assert [j["id"] for j in document["jobs"]] == [shop.due]
        assert [j["id"] for j in document["blocking"]] == [shop.blocked]
        dependent = ok_json(shop.url, "chains", "show", shop.blocked)
        assert [c["id"] for c in dependent["blockers"][shop.blocked]] == [shop.due]

    def test_show_unknown_chain_exits_1(self, shop: Shop) -> None:
        line = one_line_error(cli(shop.url, "chains", "show", "01938c7e-0000-7000-8000-999999999999"))
        assert "chain 01938c7e-0000-7000-8000-999999999999 not found" in line


class TestWorkers:
    def test_json_lists_workers_and_what_each_holds(self, shop: Shop) -> None:
        document = ok_json(shop.url, "workers")
        by_id = {item["id"]: item for item in document["items"]}
        assert set(by_id) == {LIVE_WORKER, DEAD_WORKER}
        live, dead = by_id[LIVE_WORKER], by_id[DEAD_WORKER]
        assert set(live) == WORKER_FIELDS | {"running_jobs"}
        assert (live["state"], live["host"], live["pid"], live["type_names"]) == (
            "running",
            "host-1",
            4242,
            ["charge"],
        )
        assert [job["id"] for job in live["running_jobs"]] == [shop.running]
        # The load as reported: 3 jobs run or buffered of the 6 it may (4 slots + prefetch 2),
        # 2 of them buffered, and 1 more whose commit is being written.
        load = ("concurrency", "inflight", "buffered", "committing", "capacity")
        assert tuple(live[field] for field in load) == (4, 3, 2, 1, 6)
        assert dead["state"] == "dead"
        assert [job["id"] for job in dead["running_jobs"]] == [shop.expired]
        assert datetime.fromisoformat(live["last_seen_at"]).tzinfo is not None

    def test_filter_and_table(self, shop: Shop) -> None:
        running = ok_json(shop.url, "workers", "--worker-state", "running")
        assert [w["id"] for w in running["items"]] == [LIVE_WORKER]
        result = cli(shop.url, "workers")
        assert result.exit_code == 0, result.output
        header = next(line for line in result.stdout.splitlines() if "IN FLIGHT" in line)
        assert header.split() == [
            *("WORKER", "NAME", "STATE", "STARTED", "LAST", "SEEN", "HOST/PID", "TYPES"),
            *("SLOTS", "IN", "FLIGHT", "BUFFERED", "COMMITTING", "HOLDS"),
        ]
        live = next(line for line in result.stdout.splitlines() if line.split()[:1] == [LIVE_WORKER])
        dead = next(line for line in result.stdout.splitlines() if line.split()[:1] == [DEAD_WORKER])
        # In flight of capacity (never more), buffered, committing; a dead worker holds nothing
        # of its own.
        assert live.split()[-5:] == ["4", "3/6", "2", "1", "1"]
        assert dead.split()[-5:] == ["4", "-", "-", "-", "1"]
        assert "host-1/4242" in result.stdout
        assert "held by w-live-name" in result.stdout
        assert shop.running in result.stdout

    def test_bad_state_filter_is_a_usage_error(self, shop: Shop) -> None:
        assert cli(shop.url, "workers", "--worker-state", "sleeping").exit_code == 2


class TestStats:
    def test_json_per_type(self, shop: Shop) -> None:
        document = ok_json(shop.url, "stats")
        assert set(document) == {
            *("now", "types", "throughput", "error_groups", "errors_read"),
            *("notify_degraded", "notify_reason"),
        }
        types = {t["type_name"]: t for t in document["types"]}
        assert list(types) == ["charge", "place_order", "send_email"]
        charge, email = types["charge"], types["send_email"]
        assert (charge["due"], charge["running"], charge["expired_leases"], charge["completed"]) == (
            1,
            2,
            1,
            1,
        )
        assert datetime.fromisoformat(charge["oldest_due_at"]) < datetime.fromisoformat(document["now"])
        assert charge["durations"]["count"] == 1
        assert charge["durations"]["p50"] == pytest.approx(2.0)
        assert (email["failed"], email["cancelled"], email["scheduled"]) == (2, 1, 1)
        assert email["failed_by_error_type"] == {"SMTPError": 2}
        assert types["place_order"]["blocked"] == 1
        assert [w["window"] for w in charge["recent"]] == [60.0, 300.0, 900.0]

    def test_json_has_throughput_and_error_groups(self, shop: Shop) -> None:
        document = ok_json(shop.url, "stats")
        # The dashboard's hour by minutes: the completed charge and the two failed e-mails,
        # finished 10 minutes ago, are in it (it was always [] before).
        buckets = document["throughput"]
        assert len(buckets) == 60
        assert (sum(b["completed"] for b in buckets), sum(b["failed"] for b in buckets)) == (1, 2)
        [group] = document["error_groups"]
        assert (group["error_type"], group["jobs"], group["messages"]) == ("SMTPError", 2, 1)
        assert group["example"] == "SMTPError: connection refused by mail.example.com"
        assert group["type_names"] == ["send_email"]
        assert document["errors_read"] == 2
        assert (document["notify_degraded"], document["notify_reason"]) == (False, None)
        narrow = ok_json(shop.url, "stats", "--throughput-window", "10m", "--throughput-step", "5m")
        assert len(narrow["throughput"]) == 2

    def test_table_and_type_filter(self, shop: Shop) -> None:
        result = cli(shop.url, "stats")
        assert result.exit_code == 0, result.output
        assert "charge" in result.stdout
        assert "SMTPError" in result.stdout
        assert "failed jobs by error" in result.stdout
        assert "connection refused by mail.example.com" in result.stdout
        only = ok_json(shop.url, "stats", "--type", "charge", "--type", "refund")
        assert [t["type_name"] for t in only["types"]] == ["charge", "refund"]
