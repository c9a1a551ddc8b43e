"""``jobchain retry``, ``cancel``, ``delete`` and ``trigger``: by id, in bulk, confirmations, refusals."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime

import jobchain

from .helpers import cli, ok_json, one_line_error, status_of
from .shop import PLACE_ORDER, SEND_EMAIL, TYPES, Shop

UNKNOWN = "01938c7e-0000-7000-8000-999999999999"


class TestTrigger:
    def test_a_scheduled_job_becomes_due(self, shop: Shop) -> None:
        result = cli(shop.url, "trigger", shop.scheduled)
        assert result.exit_code == 0, result.output
        assert f"triggered {shop.scheduled} (send_email)" in result.stdout
        job = ok_json(shop.url, "jobs", "show", shop.scheduled)["job"]
        assert datetime.fromisoformat(job["scheduled_at"]) <= datetime.now(UTC)

    def test_json(self, shop: Shop) -> None:
        assert ok_json(shop.url, "trigger", shop.scheduled) == {"triggered": [shop.scheduled]}

    def test_refusals_exit_1(self, shop: Shop) -> None:
        assert "not found" in one_line_error(cli(shop.url, "trigger", UNKNOWN))
        assert shop.completed in one_line_error(cli(shop.url, "trigger", shop.completed))
        assert cli(shop.url, "trigger").exit_code == 2  # no id


class TestRetry:
    def test_by_job_and_chain_id(self, shop: Shop) -> None:
        result = cli(shop.url, "retry", shop.failed[0], "--chain", shop.cancelled)
        assert result.exit_code == 0, result.output
        assert f"retried {shop.failed[0]}" in result.stdout
        assert "retried 2 jobs" in result.stdout
        assert status_of(shop.url, shop.failed[0]) == "pending"
        assert status_of(shop.url, shop.cancelled) == "pending"

    def test_refusals_exit_1_and_change_nothing(self, shop: Shop) -> None:
        assert "not found" in one_line_error(cli(shop.url, "retry", shop.failed[0], UNKNOWN))
        assert "only failed or cancelled" in one_line_error(
            cli(shop.url, "retry", shop.failed[0], shop.completed)
        )
        assert "chain" in one_line_error(cli(shop.url, "retry", "--chain", UNKNOWN))
        assert status_of(shop.url, shop.failed[0]) == "failed"

    def test_bulk_asks_first(self, shop: Shop) -> None:
        declined = cli(shop.url, "retry", "--status", "failed", input="n\n")
        assert declined.exit_code == 1
        assert "Retry 2 jobs (failed)?" in declined.stderr
        assert {status_of(shop.url, i) for i in shop.failed} == {"failed"}
        accepted = cli(shop.url, "retry", "--status", "failed", "--error-type", "SMTPError", input="y\n")
        assert accepted.exit_code == 0, accepted.output
        assert "retrying" in accepted.stderr
        assert "2/2" in accepted.stderr
        assert "retried 2 jobs" in accepted.stdout
        assert {status_of(shop.url, i) for i in shop.failed} == {"pending"}
        assert status_of(shop.url, shop.cancelled) == "cancelled"

    def test_bulk_json_with_yes(self, shop: Shop) -> None:
        document = ok_json(shop.url, "retry", "--type", "send_email", "--yes")
        assert set(document) == {"retried", "reblocked"}
        assert sorted(document["retried"]) == sorted([*shop.failed, shop.cancelled])
        assert document["reblocked"] == []

    def test_bulk_with_nothing_to_retry(self, shop: Shop) -> None:
        assert ok_json(shop.url, "retry", "--error-type", "NoSuchError") == {"retried": [], "reblocked": []}

    def test_selection_usage_errors(self, shop: Shop) -> None:
        for args in (
            (),
            (shop.failed[0], "--status", "failed"),
            ("--status", "running"),
            ("--older-than", "x"),
        ):
            result = cli(shop.url, "retry", *args)
            assert result.exit_code == 2, (args, result.output)
            assert "Traceback" not in result.output


class TestCancel:
    def test_by_id_asks_then_cancels_with_reason(self, shop: Shop) -> None:
        result = cli(shop.url, "cancel", shop.due, "--reason", "duplicate order", input="y\n")
        assert result.exit_code == 0, result.output
        assert f"Cancel 1 chain: {shop.due} (charge)?" in result.stderr
        job = ok_json(shop.url, "jobs", "show", shop.due)["job"]
        assert (job["status"], job["cancel_reason"]) == ("cancelled", "duplicate order")
        # the blocked order failed with its cancelled blocker
        assert status_of(shop.url, shop.blocked) == "failed"

    def test_declined_changes_nothing(self, shop: Shop) -> None:
        result = cli(shop.url, "cancel", shop.due, input="n\n")
        assert result.exit_code == 1
        assert status_of(shop.url, shop.due) == "pending"

    def test_refusals_exit_1_without_asking(self, shop: Shop) -> None:
        missing = cli(shop.url, "cancel", shop.due, UNKNOWN)
        assert "not found" in one_line_error(missing)
        assert "Cancel" not in missing.stderr
        assert "is completed" in one_line_error(cli(shop.url, "cancel", shop.completed, "--yes"))
        assert status_of(shop.url, shop.due) == "pending"

    def test_bulk_by_type(self, shop: Shop) -> None:
        document = ok_json(shop.url, "cancel", "--type", "charge", "--yes")
        assert sorted(document["cancelled"]) == sorted([shop.expired, shop.running, shop.due])
        assert document["skipped"] == []
        assert status_of(shop.url, shop.completed) == "completed"

    def test_bulk_status_filter_and_usage_errors(self, shop: Shop) -> None:
        result = cli(shop.url, "cancel", "--status", "running", "--yes")
        assert result.exit_code == 0, result.output
        assert "cancelled 2 chains" in result.stdout
        assert cli(shop.url, "cancel", "--status", "failed").exit_code == 2
        assert cli(shop.url, "cancel").exit_code == 2

    def test_progress_over_many_batches(self, shop: Shop) -> None:
        async def start_many() -> None:
            client = await jobchain.connect(shop.url, notify="none", job_types=TYPES, migrate=False)
            async with client, client.transaction() as tx:
                for n in range(120):
                    await client.start_chain(tx, SEND_EMAIL, f"bulk {n}")

        asyncio.run(start_many())
        result = cli(
            shop.url,
            "cancel",
            "--type",
            "send_email",
            "--status",
            "pending",
            "--batch-size",
            "50",
            input="y\n",
        )
        assert result.exit_code == 0, result.output
        assert "Cancel 121 chains?" in result.stderr
        assert "cancelling" in result.stderr
        assert "121/121" in result.stderr
        assert "cancelled 121 chains" in result.stdout
        left = ok_json(shop.url, "chains", "list", "--type", "send_email", "--status", "pending")
        assert left["items"] == []


class TestCancelCascade:
    def test_cascade_asks_naming_what_it_takes_then_cancels_the_blockers(self, shop: Shop) -> None:
        result = cli(shop.url, "cancel", shop.blocked, "--cascade", "--reason", "dropped", input="y\n")
        assert result.exit_code == 0, result.output
        assert f"Cancel 1 chain: {shop.blocked} (place_order) and 1 chain they wait for?" in result.stderr
        assert f"cancelled {shop.blocked}\n" in result.stdout
        assert f"cancelled {shop.due} (charge, waited for)" in result.stdout
        assert "cancelled 2 chains" in result.stdout
        job = ok_json(shop.url, "jobs", "show", shop.due)["job"]
        assert (job["status"], job["cancel_reason"]) == ("cancelled", "dropped")

    def test_a_dry_run_prints_and_changes_nothing(self, shop: Shop) -> None:
        result = cli(shop.url, "cancel", shop.blocked, "--cascade", "--dry-run")
        assert result.exit_code == 0, result.output
        assert "Cancel" not in result.stderr  # nothing to confirm
        assert f"would cancel {shop.due} (charge, waited for)" in result.stdout
        assert "would cancel 2 chains" in result.stdout
        assert (status_of(shop.url, shop.blocked), status_of(shop.url, shop.due)) == ("blocked", "pending")
        document = ok_json(shop.url, "cancel", shop.blocked, "--cascade", "--dry-run")
        assert document == {
            "cancelled": [shop.blocked],
            "skipped": [],
            "cascaded": [shop.due],
            "shared": [],
            "dry_run": True,
        }
        assert ok_json(shop.url, "cancel", shop.due, "--dry-run")["cancelled"] == [shop.due]
        assert status_of(shop.url, shop.due) == "pending"

    def test_a_shared_blocker_is_left_out_and_named_unless_include_shared(self, shop: Shop) -> None:
        async def another_order() -> str:
            client = await jobchain.connect(shop.url, notify="none", job_types=TYPES, migrate=False)
            async with client, client.transaction() as tx:
                blocker = await client.get_chain(shop.due, tx=tx)
                assert blocker is not None
                return (await client.start_chain(tx, PLACE_ORDER, {"order": 8}, blockers=[blocker])).id

        other = asyncio.run(another_order())
        result = cli(shop.url, "cancel", shop.blocked, "--cascade", "--yes")
        assert result.exit_code == 0, result.output
        assert f"left out {shop.due} (other chains wait for it too" in result.stdout
        assert "cancelled 1 chain" in result.stdout
        assert (status_of(shop.url, shop.due), status_of(shop.url, other)) == ("pending", "blocked")
        document = ok_json(shop.url, "cancel", other, "--cascade", "--include-shared", "--yes")
        assert (document["cascaded"], document["shared"]) == ([shop.due], [])
        assert status_of(shop.url, shop.due) == "cancelled"

    def test_usage_errors(self, shop: Shop) -> None:
        assert cli(shop.url, "cancel", "--type", "charge", "--cascade", "--yes").exit_code == 2
        assert cli(shop.url, "cancel", "--type", "charge", "--dry-run").exit_code == 2
        assert cli(shop.url, "cancel", shop.blocked, "--include-shared", "--yes").exit_code == 2
        assert status_of(shop.url, shop.blocked) == "blocked"


class TestDelete:
    def test_by_id(self, shop: Shop) -> None:
        result = cli(shop.url, "delete", shop.completed, input="y\n")
        assert result.exit_code == 0, result.output
        assert "with all their jobs" in result.stderr
        assert f"deleted {shop.completed}" in result.stdout
        assert "not found" in one_line_error(cli(shop.url, "jobs", "show", shop.completed))

    def test_a_chain_that_blocks_another_is_refused(self, shop: Shop) -> None:
        line = one_line_error(cli(shop.url, "delete", shop.due, "--yes"))
        assert "nothing deleted" in line
        assert shop.blocked in line
        assert status_of(shop.url, shop.due) == "pending"
        both = ok_json(shop.url, "delete", shop.due, shop.blocked, "--yes")
        assert sorted(both["deleted"]) == sorted([shop.due, shop.blocked])

    def test_cascade_deletes_the_blockers(self, shop: Shop) -> None:
        document = ok_json(shop.url, "delete", shop.blocked, "--cascade", "--yes")
        assert sorted(document["deleted"]) == sorted([shop.blocked, shop.due])

    def test_unknown_and_declined(self, shop: Shop) -> None:
        assert "not found" in one_line_error(cli(shop.url, "delete", UNKNOWN, "--yes"))
        assert cli(shop.url, "delete", shop.completed, input="n\n").exit_code == 1
        assert status_of(shop.url, shop.completed) == "completed"

    def test_bulk(self, shop: Shop) -> None:
        result = cli(shop.url, "delete", "--status", "failed", input="y\n")
        assert result.exit_code == 0, result.output
        assert "Delete 2 chains with all their jobs?" in result.stderr
        assert "2/2" in result.stderr
        assert ok_json(shop.url, "jobs", "list", "--status", "failed")["items"] == []

    def test_bulk_leaves_chains_that_block_others(self, shop: Shop) -> None:
        document = ok_json(shop.url, "delete", "--type", "charge", "--yes")
        assert document["skipped"] == [shop.due]
        assert sorted(document["deleted"]) == sorted([shop.completed, shop.expired, shop.running])
        selected_both = ok_json(shop.url, "delete", "--older-than", "1m", "--yes")
        assert shop.due in selected_both["deleted"]
        assert selected_both["skipped"] == []
        json.dumps(selected_both)


def test_bulk_delete_takes_a_blocker_after_its_dependent_in_a_later_batch(shop: Shop) -> None:
    # Oldest first, one per batch: the due charge comes before the order it blocks, is refused,
    # and goes in the second pass once the order is gone.
    document = ok_json(
        shop.url, "delete", "--type", "charge", "--type", "place_order", "--batch-size", "1", "--yes"
    )
    assert document["skipped"] == []
    assert sorted(document["deleted"]) == sorted(
        [shop.completed, shop.expired, shop.running, shop.due, shop.blocked]
    )
