"""A worker serving several types leases each job for its own type's lease (finding 8)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import pytest

from jobchain import Client, JobTypes
from jobchain.contracts import JobRenewLease, JobsAcquire
from jobchain.entities import Job
from jobchain.memory.notify import MemoryNotifyAdapter
from jobchain.memory.state import MemoryStateAdapter
from jobchain.worker import Attempt, Completed, LeaseConfig, Processors, Worker
from jobchain.worker.backoff import DEFAULT_LEASE, DEFAULT_RECOVERY_BACKOFF
from jobchain.worker.settings import WorkerSettings

T = TypeVar("T")
BOUND = 10.0

TWELVE = LeaseConfig(duration=timedelta(seconds=12), renew_every=timedelta(seconds=6))
NINETY = LeaseConfig(duration=timedelta(seconds=90), renew_every=timedelta(seconds=45))

types = JobTypes()
short = types.define("lease.short", input=int, output=int, entry=True, lease=TWELVE)
plain = types.define("lease.plain", input=int, output=int, entry=True)
long = types.define("lease.long", input=int, output=int, entry=True)


async def wait_until(probe: Callable[[], Awaitable[T | None]], what: str) -> T:
    try:
        async with asyncio.timeout(BOUND):
            while True:
                value = await probe()
                if value:
                    return value
                await asyncio.sleep(0.01)
    except TimeoutError:
        pytest.fail(f"timed out waiting for {what}")


class ClaimRecordingState(MemoryStateAdapter):
    """Records every claim's params and every lease renewal's job id."""

    def __init__(self, clock: Callable[[], datetime] | None = None) -> None:
        super().__init__(clock)
        self.claims: list[JobsAcquire] = []
        self.renewed: list[str] = []

    def transaction(self, *, read_only: bool = False, connection: object | None = None) -> Any:
        return self._recorded(super().transaction(read_only=read_only, connection=connection))

    def autocommit(self, *, read_only: bool = False) -> Any:
        return self._recorded(super().transaction(read_only=read_only))

    @asynccontextmanager
    async def _recorded(self, opened: Any) -> AsyncIterator[Any]:
        async with opened as tx:
            acquire, renew = tx.jobs_acquire, tx.job_renew_lease

            async def recorded_acquire(params: JobsAcquire) -> Any:
                self.claims.append(params)
                return await acquire(params)

            async def recorded_renew(params: JobRenewLease) -> Any:
                self.renewed.append(params.job_id)
                return await renew(params)

            tx.jobs_acquire = recorded_acquire
            tx.job_renew_lease = recorded_renew
            yield tx


def mixed_processors(handler: Callable[[Attempt[int, int]], Awaitable[Completed]]) -> Processors:
    procs = Processors()
    procs.register(short, handler)  # the type's own 12 s lease
    procs.register(plain, handler)  # the worker's lease
    procs.register(long, handler, lease=NINETY)  # the processor's lease
    return procs


async def test_a_mixed_worker_leases_each_job_for_its_own_types_lease() -> None:
    state = ClaimRecordingState()
    client = Client(state, MemoryNotifyAdapter(), types)
    held: dict[str, timedelta] = {}

    async def record(attempt: Attempt[int, int]) -> Completed:
        job = attempt.job
        assert job.leased_until is not None
        assert job.attempt_started_at is not None
        held[job.type_name] = job.leased_until - job.attempt_started_at
        return await attempt.complete(attempt.input)

    async with client.transaction() as tx:
        started = [await client.start_chain(tx, job_type, 1) for job_type in (short, plain, long)]
    async with Worker(client, mixed_processors(record), concurrency=3):
        await asyncio.gather(*(client.await_chain(s.id, timeout=BOUND, poll_interval=0.05) for s in started))

    assert held == {
        "lease.short": timedelta(seconds=12),
        "lease.plain": DEFAULT_LEASE.duration,
        "lease.long": timedelta(seconds=90),
    }
    # One claim statement for every type: the worker's lease, and the types leased otherwise.
    claim = state.claims[0]
    assert claim.lease_for == DEFAULT_LEASE.duration
    assert dict(claim.type_leases) == {
        "lease.long": timedelta(seconds=90),
        "lease.short": timedelta(seconds=12),
    }
    assert sorted(claim.type_names) == ["lease.long", "lease.plain", "lease.short"]


def test_settings_list_only_the_types_whose_lease_differs_from_the_claims() -> None:
    procs = mixed_processors(_never)
    merged = {p.job_type.name: p for p in procs.processors()}
    worker_lease = LeaseConfig(duration=timedelta(seconds=12), renew_every=timedelta(seconds=1))
    settings = WorkerSettings(merged, retry=None, lease=worker_lease, recovery=DEFAULT_RECOVERY_BACKOFF)

    assert settings.claim_lease == timedelta(seconds=12)
    # lease.short's own 12 s equals the worker's: nothing to list for it.
    assert settings.type_leases() == {"lease.long": timedelta(seconds=90)}
    assert settings.lease_of("lease.plain") == timedelta(seconds=12)
    assert settings.shortest_lease() == timedelta(seconds=12)


async def _never(attempt: Attempt[int, int]) -> Completed:
    raise AssertionError("not run")


async def test_a_buffered_job_is_renewed_after_half_its_own_types_lease() -> None:
    """The staleness check uses the job's type: a short-lease job renews, a long-lease one does not."""
    # The worker measures how long a job waited in the buffer on its event loop's clock; the
    # state's lease expiry runs on the state's clock, which stands still here (moved by hand
    # only to order the jobs). So "half the brief lease has passed" is a wait for at least
    # that much loop time, and a busy machine cannot make the lease run out before the job
    # starts: nothing here depends on being fast enough.
    quick = LeaseConfig(duration=timedelta(seconds=1), renew_every=timedelta(milliseconds=500))
    local = JobTypes()
    first = local.define("buf.first", input=int, output=int, entry=True)
    brief = local.define("buf.brief", input=int, output=int, entry=True, lease=quick)
    slow = local.define("buf.slow", input=int, output=int, entry=True)
    moments = [datetime.now(UTC)]
    state = ClaimRecordingState(clock=lambda: moments[-1])
    client = Client(state, MemoryNotifyAdapter(), local)
    release = asyncio.Event()
    ran: list[Job] = []
    renewed_before_start: dict[str, bool] = {}

    async def handler(attempt: Attempt[int, int]) -> Completed:
        ran.append(attempt.job)
        # A renewal before the handler runs is the buffer's (renew_first), never the timer's.
        renewed_before_start[attempt.job.type_name] = attempt.job.id in state.renewed
        if attempt.job.type_name == "buf.first":
            await release.wait()
        return await attempt.complete(attempt.input)

    procs = Processors()
    for job_type in (first, brief, slow):
        procs.register(job_type, handler)
    async with client.transaction() as tx:
        blocker = await client.start_chain(tx, first, 0)
    moments.append(moments[-1] + timedelta(milliseconds=1))  # created after the blocker: claimed after it
    async with client.transaction() as tx:
        waiting = [await client.start_chain(tx, job_type, 1) for job_type in (brief, slow)]
    loop = asyncio.get_running_loop()
    async with Worker(client, procs, concurrency=1, prefetch=2):
        try:
            await wait_until(_async(lambda: ran), "the first job to occupy the only slot")

            async def all_claimed() -> bool:
                running = {job.id for job in await _running(client)}
                return {blocker.id, *(s.id for s in waiting)} <= running

            # Both other jobs sit in the buffer, claimed (running) before this moment.
            await wait_until(all_claimed, "the worker to claim the two others into its buffer")
            assert [job.type_name for job in ran] == ["buf.first"]
            seen_claimed = loop.time()
            half = quick.duration.total_seconds() / 2
            await wait_until(_async(lambda: loop.time() > seen_claimed + half + 0.05), "half the brief lease")
        finally:
            release.set()
        await asyncio.gather(
            *(client.await_chain(s.id, timeout=BOUND, poll_interval=0.05) for s in [blocker, *waiting])
        )

    assert renewed_before_start["buf.brief"], "the brief job started on a lease that was half gone"
    assert not renewed_before_start["buf.slow"], "the slow job (60 s lease) was renewed needlessly"
    assert waiting[1].id not in state.renewed, "the slow job (60 s lease) was renewed needlessly"


async def _running(client: Client) -> list[Job]:
    page = await client.list_jobs(statuses=["running"], limit=10)
    return page.items


def _async(check: Callable[[], object]) -> Callable[[], Awaitable[object]]:
    async def probe() -> object:
        return check()

    return probe
