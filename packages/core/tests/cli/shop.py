"""A small shop's queue in every state an operator meets, seeded through the contract with
explicit times (no sleeping): what the CLI tests read and change.

``charge``: one completed (2 s attempt), one running held by the live worker, one running
whose lease expired 9 minutes ago (its worker is dead), one due for 10 minutes.
``place_order``: one blocked by the due charge. ``send_email``: two failed (SMTPError), one
cancelled, one scheduled an hour ahead. Workers: ``w-live`` running (serves charge), ``w-gone`` dead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import jobchain
from jobchain import JobTypes, Schedule
from jobchain.contracts.state import JobComplete, JobFail, JobsAcquire, WorkerHeartbeat
from jobchain.entities import AttemptError, Job, WorkerState

TYPES = JobTypes()
CHARGE = TYPES.define("charge", input=int, output=int, entry=True)
SEND_EMAIL = TYPES.define("send_email", input=str, output=str, entry=True)
PLACE_ORDER = TYPES.define("place_order", input=dict, output=dict, entry=True, blockers=["charge"])

LIVE_WORKER = "w-live"
DEAD_WORKER = "w-gone"


def fixed_id(n: int) -> str:
    return f"01938c7e-0000-7000-8000-{n:012d}"


@dataclass
class Shop:
    """The seeded database's URL and the ids of its chains (each chain is one job)."""

    url: str
    completed: str = fixed_id(1)
    expired: str = fixed_id(2)
    running: str = fixed_id(3)
    failed: list[str] = field(default_factory=lambda: [fixed_id(4), fixed_id(5)])
    cancelled: str = fixed_id(6)
    due: str = fixed_id(7)
    blocked: str = fixed_id(8)
    scheduled: str = fixed_id(9)
    now: datetime = field(default_factory=lambda: datetime.now(UTC))


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


async def seed_shop(url: str) -> Shop:
    """Fill the (migrated, empty) database at ``url``; returns the ids."""
    shop = Shop(url=url)
    real = shop.now
    past = real - timedelta(minutes=10)
    clock = Clock(past)
    client = await jobchain.connect(url, notify="none", job_types=TYPES, clock=clock, migrate=False)
    async with client:
        state = client.state

        async def start(job_type: object, value: object, chain_id: str, **options: object) -> None:
            async with client.transaction() as tx:
                await client.start_chain(tx, job_type, value, id=chain_id, **options)  # type: ignore[arg-type]  # test seed

        async def claim(
            type_name: str, worker: str, now: datetime, lease: timedelta, limit: int = 1
        ) -> list[Job]:
            async with state.transaction() as stx:
                acquired = await stx.jobs_acquire(
                    JobsAcquire(
                        type_names=[type_name], worker_id=worker, lease_for=lease, limit=limit, now=now
                    )
                )
            return acquired.jobs

        # Claimed jobs first: a claim takes the oldest pending job of its type.
        for chain_id in shop.failed:
            await start(SEND_EMAIL, "hello", chain_id)
        for job in await claim("send_email", DEAD_WORKER, past, timedelta(minutes=1), limit=2):
            error = AttemptError(
                attempt=1,
                worker_id=DEAD_WORKER,
                error_type="SMTPError",
                message="connection refused by mail.example.com",
                traceback='Traceback (most recent call last):\n  File "app.py", line 3\nSMTPError: refused\n',
                at=past,
            )
            async with state.transaction() as stx:
                await stx.job_fail(
                    JobFail(
                        job_id=job.id,
                        error="SMTPError: connection refused",
                        worker_id=DEAD_WORKER,
                        lease_generation=job.lease_generation,
                        attempt_error=error,
                        now=past,
                    )
                )
        await start(CHARGE, 1, shop.completed)
        [done] = await claim("charge", LIVE_WORKER, past, timedelta(minutes=5))
        async with state.transaction() as stx:
            await stx.job_complete(
                JobComplete(
                    job_id=done.id,
                    output=1,
                    worker_id=LIVE_WORKER,
                    lease_generation=done.lease_generation,
                    now=past + timedelta(seconds=2),
                )
            )
        await start(CHARGE, 2, shop.expired)
        await claim("charge", DEAD_WORKER, past, timedelta(minutes=1))
        clock.now = real
        await start(CHARGE, 3, shop.running)
        await claim("charge", LIVE_WORKER, real, timedelta(minutes=30))
        clock.now = past
        await start(SEND_EMAIL, "bye", shop.cancelled)
        async with client.transaction() as tx:
            await client.cancel_chains(tx, [shop.cancelled], reason="customer left")
        await start(CHARGE, 4, shop.due)
        async with client.transaction() as tx:
            blocker = await client.get_chain(shop.due, tx=tx)
            assert blocker is not None
            await client.start_chain(tx, PLACE_ORDER, {"order": 7}, id=shop.blocked, blockers=[blocker])
        clock.now = real
        await start(SEND_EMAIL, "later", shop.scheduled, schedule=Schedule(after=timedelta(hours=1)))
        async with state.transaction() as stx:
            for worker, types, when, alive in (
                (DEAD_WORKER, ["send_email", "charge"], past, timedelta(minutes=1)),
                (LIVE_WORKER, ["charge"], real, timedelta(hours=1)),
            ):
                await stx.worker_heartbeat(
                    WorkerHeartbeat(
                        worker_id=worker,
                        name=f"{worker}-name",
                        host="host-1",
                        pid=4242,
                        version="0.1.0",
                        type_names=types,
                        concurrency=4,
                        inflight=3,
                        buffered=2,
                        committing=1,
                        capacity=6,
                        state=WorkerState.RUNNING,
                        alive_for=alive,
                        now=when,
                    )
                )
    return shop
