"""``jobchain health``: each threshold crossed and not, the exit codes, the JSON shape."""

from __future__ import annotations

import json

import pytest

from .helpers import cli
from .shop import Shop

# The shop: a charge due for 10 minutes, 2 failed jobs, 1 expired lease, one live worker (charge).
CASES = [
    (("--max-oldest-due-age", "5m"), 1, "oldest_due_age"),
    (("--max-oldest-due-age", "1h"), 0, "oldest_due_age"),
    (("--max-failed", "1"), 1, "failed"),
    (("--max-failed", "2"), 0, "failed"),
    (("--max-expired-leases", "0"), 1, "expired_leases"),
    (("--max-expired-leases", "1"), 0, "expired_leases"),
    (("--require-live-worker",), 0, "live_worker"),
    (("--require-live-worker", "--type", "send_email"), 1, "live_worker"),
    (("--require-live-worker", "--type", "charge"), 0, "live_worker"),
]


@pytest.mark.parametrize(("args", "exit_code", "check"), CASES)
def test_each_threshold(shop: Shop, args: tuple[str, ...], exit_code: int, check: str) -> None:
    result = cli(shop.url, "health", *args)
    assert result.exit_code == exit_code, result.output
    mark = "FAIL" if exit_code else "ok"
    assert any(line.startswith(mark) and f" {check}:" in line for line in result.stdout.splitlines())
    assert result.stdout.splitlines()[-1] == ("healthy" if exit_code == 0 else f"unhealthy: {check}")


def test_json_names_every_check(shop: Shop) -> None:
    result = cli(
        shop.url, "health", "--max-oldest-due-age", "5m", "--max-failed", "5", "--max-expired-leases", "0",
        "--require-live-worker", "--json",
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    document = json.loads(result.stdout)
    assert set(document) == {"healthy", "now", "checks"}
    assert document["healthy"] is False
    checks = {c["name"]: c for c in document["checks"]}
    assert list(checks) == ["oldest_due_age", "failed", "expired_leases", "live_worker"]
    assert set(checks["failed"]) == {"name", "ok", "value", "threshold", "detail"}
    assert checks["oldest_due_age"]["ok"] is False
    assert checks["oldest_due_age"]["threshold"] == 300.0
    assert checks["oldest_due_age"]["value"] >= 600.0
    assert (checks["failed"]["ok"], checks["failed"]["value"]) == (True, 2)
    assert (checks["expired_leases"]["ok"], checks["expired_leases"]["value"]) == (False, 1)
    assert (checks["live_worker"]["ok"], checks["live_worker"]["value"]) == (True, 1)


def test_no_threshold_only_checks_the_state_answers(empty_url: str) -> None:
    result = cli(empty_url, "health")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "healthy"


def test_an_empty_queue_has_no_live_worker(empty_url: str) -> None:
    result = cli(empty_url, "health", "--require-live-worker", "--max-oldest-due-age", "1s")
    assert result.exit_code == 1, result.output
    assert "FAIL live_worker: no live worker" in result.stdout
    assert "ok   oldest_due_age: nothing due" in result.stdout


def test_unreadable_state_exits_3(tmp_path: object) -> None:
    result = cli(f"sqlite:///{tmp_path}/never-migrated.db", "health")
    assert result.exit_code == 3, result.output
    assert "jobchain migrate --state" in result.stderr
    assert "Traceback" not in result.output


def test_bad_thresholds_are_usage_errors(shop: Shop) -> None:
    assert cli(shop.url, "health", "--max-oldest-due-age", "soon").exit_code == 2
    assert cli(shop.url, "health", "--max-failed", "-1").exit_code == 2
