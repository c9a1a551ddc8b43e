"""``jobchain health``: exit non-zero when a threshold you pass is crossed (a k8s or LB probe).

Exit codes: 0 every check passed; 1 at least one threshold is crossed (each failed check
is printed); 2 invalid options; 3 the state backend could not be read (unreachable,
not migrated, bad URL). With no threshold it only checks that the state backend answers.
``--check-notify`` also runs the notify backend's delivery self-check (a notify backend that
cannot be opened fails that check, exit 1).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any

import click

from jobchain.cli.common import (
    DURATION,
    json_option,
    notify_option,
    one_line,
    open_client,
    run,
    short_duration,
    state_option,
)
from jobchain.cli.listing import names
from jobchain.cli.render import emit_json
from jobchain.contracts.notify import NotifyDelivery
from jobchain.entities import WorkerInfo, WorkerState
from jobchain.errors import JobchainError
from jobchain.stats import QueueStats

EXIT_HEALTHY = 0
EXIT_UNHEALTHY = 1
EXIT_UNREADABLE = 3


@dataclass(frozen=True, slots=True, kw_only=True)
class Check:
    """One health check: its value, its threshold and whether it passed."""

    name: str
    ok: bool
    value: float | None
    threshold: float
    detail: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Thresholds:
    """What ``jobchain health`` was asked to check (None: not checked)."""

    max_oldest_due_age: timedelta | None = None
    max_failed: int | None = None
    max_expired_leases: int | None = None
    require_live_worker: bool = False


def evaluate(
    stats: QueueStats, workers: Sequence[WorkerInfo], limits: Thresholds, types: Sequence[str]
) -> list[Check]:
    """The checks asked for, computed from one stats read and the live workers."""
    checks: list[Check] = []
    if limits.max_oldest_due_age is not None:
        limit = limits.max_oldest_due_age
        # A paused type's jobs wait on purpose: they would otherwise trip the probe.
        aged = [
            (stats.now - t.oldest_due_at, t.type_name)
            for t in stats.types
            if t.oldest_due_at is not None and not t.paused
        ]
        age, worst = max(aged) if aged else (None, "")
        detail = (
            f"oldest due job waited {short_duration(max(age, timedelta(0)))} ({worst})"
            if age
            else "nothing due"
        )
        paused = [t.type_name for t in stats.types if t.paused]
        if paused:
            detail += f" (paused types left out: {', '.join(paused)})"
        checks.append(
            Check(
                name="oldest_due_age",
                ok=age is None or age <= limit,
                value=max(age, timedelta(0)).total_seconds() if age is not None else None,
                threshold=limit.total_seconds(),
                detail=f"{detail}; limit {short_duration(limit)}",
            )
        )
    if limits.max_failed is not None:
        failed = stats.total("failed")
        by_type = ", ".join(f"{t.type_name}: {t.failed}" for t in stats.types if t.failed) or "none"
        checks.append(
            Check(
                name="failed",
                ok=failed <= limits.max_failed,
                value=failed,
                threshold=limits.max_failed,
                detail=f"{failed} failed jobs ({by_type}); limit {limits.max_failed}",
            )
        )
    if limits.max_expired_leases is not None:
        expired = sum(t.expired_leases for t in stats.types)
        checks.append(
            Check(
                name="expired_leases",
                ok=expired <= limits.max_expired_leases,
                value=expired,
                threshold=limits.max_expired_leases,
                detail=f"{expired} running jobs past their lease; limit {limits.max_expired_leases}",
            )
        )
    if limits.require_live_worker:
        checks.append(live_worker_check(workers, types))
    return checks


def live_worker_check(workers: Sequence[WorkerInfo], types: Sequence[str]) -> Check:
    """At least one running worker (with ``--type``: one serving each of those types)."""
    live = [w for w in workers if w.state is WorkerState.RUNNING]
    if types:
        unserved = [t for t in types if not any(t in w.type_names for w in live)]
        detail = f"no live worker serves {', '.join(unserved)}" if unserved else f"{len(live)} live workers"
        return Check(name="live_worker", ok=not unserved, value=len(live), threshold=1, detail=detail)
    return Check(
        name="live_worker",
        ok=bool(live),
        value=len(live),
        threshold=1,
        detail=f"{len(live)} live workers" if live else "no live worker",
    )


def notify_check(delivery: NotifyDelivery) -> Check:
    """Notifications reach their listeners (the notify backend's self-check, when it has one).

    ``value`` is 1 when delivery is degraded (or the backend cannot be opened), 0 when the
    probe came back, None when the backend has no self-check: the check then passes, as
    nothing says delivery is broken.
    """
    if delivery.degraded:
        detail = f"degraded: {delivery.reason}; workers and await_chain fall back to polling"
    elif not delivery.checked:
        detail = f"not checked: {delivery.reason}"
    else:
        detail = "delivered: the probe notification came back"
    value = 1 if delivery.degraded else (0 if delivery.checked else None)
    return Check(name="notify_delivery", ok=not delivery.degraded, value=value, threshold=0, detail=detail)


async def notify_delivery(notify: str | None) -> NotifyDelivery:
    """Open the notify backend (``--notify``, else ``$JOBCHAIN_NOTIFY_URL``) and check its delivery."""
    from jobchain.client_queries import check_delivery_of
    from jobchain.connect_backends import open_notify, resolve_notify_url

    try:
        resolved = resolve_notify_url(notify)
        if resolved is None:
            raise click.UsageError(
                "--check-notify needs a notify backend: pass --notify URL or set JOBCHAIN_NOTIFY_URL"
            )
        adapter = await open_notify(resolved)
    except JobchainError as exc:
        reason = f"cannot open the notify backend ({one_line(exc)})"
        return NotifyDelivery(configured=True, checked=False, degraded=True, reason=reason)
    assert adapter is not None  # resolved to a backend above
    try:
        return await check_delivery_of(adapter)
    finally:
        await adapter.close()


@click.command("health")
@click.option(
    "--max-oldest-due-age",
    type=DURATION,
    default=None,
    help="Fail when a due job has waited longer (e.g. 5m).",
)
@click.option(
    "--max-failed", type=click.IntRange(min=0), default=None, help="Fail when more jobs than this are failed."
)
@click.option(
    "--max-expired-leases",
    type=click.IntRange(min=0),
    default=None,
    help="Fail when more running jobs are past their lease.",
)
@click.option(
    "--require-live-worker", is_flag=True, help="Fail when no worker is running (with --type: for each type)."
)
@click.option(
    "--check-notify",
    is_flag=True,
    help="Fail when notifications are not delivered (the notify backend's self-check: "
    "PostgreSQL LISTEN/NOTIFY publishes a probe and waits for it).",
)
@click.option("--type", "types", multiple=True, metavar="NAME", help="Only these job types (repeatable).")
@state_option
@notify_option
@json_option
def health_command(
    max_oldest_due_age: timedelta | None,
    max_failed: int | None,
    max_expired_leases: int | None,
    require_live_worker: bool,
    check_notify: bool,
    types: tuple[str, ...],
    state: str | None,
    notify: str | None,
    as_json: bool,
) -> None:
    """Check queue health against thresholds; exit 0 healthy, 1 unhealthy, 3 state unreadable."""
    limits = Thresholds(
        max_oldest_due_age=max_oldest_due_age,
        max_failed=max_failed,
        max_expired_leases=max_expired_leases,
        require_live_worker=require_live_worker,
    )
    wanted = names(types)

    async def main() -> tuple[QueueStats, list[WorkerInfo], NotifyDelivery | None]:
        async with open_client(state) as client:
            stats = await client.queue_stats(type_names=wanted)
            workers = await client.list_workers(states=["running"]) if require_live_worker else []
        delivery = await notify_delivery(notify) if check_notify else None
        return stats, workers, delivery

    stats, workers, delivery = run(main(), state=state, exit_code=EXIT_UNREADABLE)
    checks = evaluate(stats, workers, limits, wanted)
    if delivery is not None:
        checks.append(notify_check(delivery))
    healthy = all(check.ok for check in checks)
    if as_json:
        document: dict[str, Any] = {
            "healthy": healthy,
            "now": stats.now.isoformat(),
            "checks": [asdict(check) for check in checks],
        }
        emit_json(document)
    else:
        for check in checks:
            click.echo(f"{'ok  ' if check.ok else 'FAIL'} {check.name}: {check.detail}")
        failed = [check.name for check in checks if not check.ok]
        click.echo(f"unhealthy: {', '.join(failed)}" if failed else "healthy")
    click.get_current_context().exit(EXIT_HEALTHY if healthy else EXIT_UNHEALTHY)
