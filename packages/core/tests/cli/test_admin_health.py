"""``jobchain health``: each threshold crossed and not, the exit codes, the JSON shape."""

from __future__ import annotations

import json
import uuid

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


# ---------------------------------------------------------------- --check-notify (issue 36, deliver 7)


@pytest.fixture
def notify_url(postgres_server: str) -> str:
    """The PostgreSQL server as a notify backend, on channels of this test alone."""
    prefix = f"jc_{uuid.uuid4().hex[:12]}"
    return (
        f"{postgres_server}{'&' if '?' in postgres_server else '?'}channel_prefix={prefix}&probe_timeout=10"
    )


def test_check_notify_runs_the_postgres_delivery_self_check(empty_url: str, notify_url: str) -> None:
    result = cli(empty_url, "health", "--check-notify", "--notify", notify_url)
    assert result.exit_code == 0, result.output
    assert "ok   notify_delivery: delivered: the probe notification came back" in result.stdout
    assert result.stdout.splitlines()[-1] == "healthy"


def test_check_notify_in_json(empty_url: str, notify_url: str) -> None:
    result = cli(empty_url, "health", "--check-notify", "--notify", notify_url, "--max-failed", "0", "--json")
    assert result.exit_code == 0, result.output
    checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    assert list(checks) == ["failed", "notify_delivery"]
    assert (checks["notify_delivery"]["ok"], checks["notify_delivery"]["value"]) == (True, 0)


def test_an_unreachable_notify_backend_fails_the_check(empty_url: str) -> None:
    result = cli(empty_url, "health", "--check-notify", "--notify", "postgresql://postgres@127.0.0.1:1/test")
    assert result.exit_code == 1, result.output
    assert "FAIL notify_delivery: degraded: cannot open the notify backend (" in result.stdout
    assert result.stdout.splitlines()[-1] == "unhealthy: notify_delivery"


def test_a_notify_backend_without_a_self_check_is_not_checked(empty_url: str) -> None:
    result = cli(empty_url, "health", "--check-notify", "--notify", "memory://")
    assert result.exit_code == 0, result.output
    assert (
        "ok   notify_delivery: not checked: MemoryNotifyAdapter has no delivery self-check" in result.stdout
    )


def test_check_notify_without_a_notify_backend_is_a_usage_error(empty_url: str) -> None:
    result = cli(empty_url, "health", "--check-notify")  # JOBCHAIN_NOTIFY_URL=none
    assert result.exit_code == 2, result.output
    assert "--check-notify needs a notify backend" in result.output


def test_a_degraded_delivery_fails_the_check() -> None:
    from jobchain.cli.health import notify_check
    from jobchain.contracts import NotifyDelivery

    check = notify_check(
        NotifyDelivery(configured=True, checked=True, degraded=True, reason="no probe within 2 s")
    )
    assert (check.name, check.ok, check.value, check.threshold) == ("notify_delivery", False, 1, 0)
    assert check.detail == "degraded: no probe within 2 s; workers and await_chain fall back to polling"
