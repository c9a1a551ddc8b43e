"""The worker's side of the scheduling controls, over the in-process adapters: what its claims
carry, when a capped worker claims again, the freed-place wake-up, retention of bookkeeping,
the scheduler's registrations and catch-up, and wait_for misuse."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import pytest

from jobchain import Client, JobStatus, JobTypes, Retention
from jobchain.contracts import (
    ChainsPrune,
    ChainsPruned,
    JobNextAvailable,
    JobsAcquire,
    ScheduleRegistration,
    SchedulesList,
    SchedulesRegister,
    StateTx,
)
from jobchain.entities import PRIORITY_AGING, RateLimit, TypeLimits
from jobchain.errors import InvalidArgumentError
from jobchain.memory.notify import MemoryNotifyAdapter
from jobchain.memory.state import MemoryStateAdapter
from jobchain.worker import Attempt, Backoff, Completed, Processors, Worker
from jobchain.worker.claims import LIMITS_POLL, MIN_LIMITS_WAIT, Claims
from jobchain.worker.retention import LOCKS_KEPT, Pruner

T = TypeVar("T")
BOUND = 10.0
ZERO = Backoff(initial=timedelta(0), maximum=timedelta(0))
NOW = datetime(2026, 1, 1, 0, 0, 30, tzinfo=UTC)


@dataclass
class Num:
    n: int


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


class RecordingState(MemoryStateAdapter):
    """A memory adapter whose transactions record claims and may script ``chains_prune``."""

    def __init__(self) -> None:
        super().__init__()
        self.claims: list[JobsAcquire] = []
        self.prunes: list[ChainsPrune] = []
        self.prune_results: list[ChainsPruned] = []

    def transaction(self, *, read_only: bool = False, connection: object | None = None) -> Any:
        opened = super().transaction(read_only=read_only, connection=connection)
        owner = self

        class Wrapped:
            async def __aenter__(self) -> Any:
                tx = await opened.__aenter__()
                acquire = tx.jobs_acquire

                async def jobs_acquire(params: JobsAcquire) -> Any:
                    owner.claims.append(params)
                    return await acquire(params)

                async def chains_prune(params: ChainsPrune) -> ChainsPruned:
                    owner.prunes.append(params)
                    return owner.prune_results.pop(0)

                tx.jobs_acquire = jobs_acquire  # type: ignore[method-assign]
                tx.chains_prune = chains_prune  # type: ignore[method-assign]
                return tx

            async def __aexit__(self, *exc: Any) -> Any:
                return await opened.__aexit__(*exc)

        return Wrapped()


def _types() -> tuple[JobTypes, Any, Any, Any]:
    types = JobTypes()
    capped = types.define("capped", input=Num, output=None, entry=True, max_running=2)
    metered = types.define(
        "metered", input=Num, output=None, entry=True, rate_limit=RateLimit(5, timedelta(seconds=1))
    )
    plain = types.define("plain", input=Num, output=None, entry=True)
    return types, capped, metered, plain


def _complete_all(*job_types: Any) -> Processors:
    procs = Processors()
    for job_type in job_types:

        async def done(attempt: Attempt[Num, None]) -> Completed:
            return await attempt.complete(None)

        procs.register(job_type, done)
    return procs


class TestClaims:
    async def test_claims_carry_the_served_limits_and_the_aging(self) -> None:
        types, capped, metered, plain = _types()
        state = RecordingState()
        client = Client(state, None, types)
        async with client.transaction() as tx:
            chain = (await client.start_chain(tx, plain, Num(n=1))).chain
        worker = Worker(
            client,
            _complete_all(capped, metered, plain),
            poll_interval=0.05,
            priority_aging=timedelta(seconds=5),
        )
        async with worker:
            await client.await_chain(chain.id, timeout=BOUND, poll_interval=0.05)
        claim = state.claims[0]
        assert claim.type_limits == {
            "capped": TypeLimits(max_running=2),
            "metered": TypeLimits(rate_limit=RateLimit(5, timedelta(seconds=1))),
        }
        assert claim.priority_aging == timedelta(seconds=5)

    def test_priority_aging_defaults_and_is_validated(self) -> None:
        types, capped, _, _ = _types()
        client = Client(MemoryStateAdapter(), None, types)
        procs = _complete_all(capped)
        assert Worker(client, procs).priority_aging == PRIORITY_AGING
        assert Worker(client, procs, priority_aging=2.5).priority_aging == timedelta(seconds=2.5)
        for bad in (0, -1, timedelta(0), "1m"):
            with pytest.raises(InvalidArgumentError, match="priority_aging"):
                Worker(client, procs, priority_aging=bad)  # type: ignore[arg-type]

    async def test_a_capped_claim_waits_for_the_window_or_the_limits_poll_never_zero(self) -> None:
        asked: list[list[str]] = []

        class Tx:
            async def job_next_available(self, params: JobNextAvailable) -> timedelta:
                asked.append(list(params.type_names))
                return timedelta(0)  # a capped type's due job looks available now

        @asynccontextmanager
        async def operation(*, read_only: bool = False) -> AsyncIterator[StateTx]:
            yield Tx()  # type: ignore[misc]

        claims = Claims(
            type_names=["capped", "plain"],
            worker_id="w",
            lease_for=timedelta(seconds=30),
            type_leases={},
            type_limits={"capped": TypeLimits(max_running=1)},
            priority_aging=PRIORITY_AGING,
            open_operation=operation,
        )
        claims.held_back = ("capped",)
        claims.retry_at = None
        assert await claims.seconds_to_next(60.0) == 0.0  # "plain" is due now
        assert asked == [["plain"]]  # the held-back type is not asked about
        claims._type_names = ["capped"]
        assert await claims.seconds_to_next(60.0) == LIMITS_POLL
        claims.retry_at = datetime.now(UTC) + timedelta(milliseconds=300)
        wait = await claims.seconds_to_next(60.0)
        assert MIN_LIMITS_WAIT <= wait <= 0.3
        claims.retry_at = datetime.now(UTC) - timedelta(seconds=5)  # clocks disagree
        assert await claims.seconds_to_next(60.0) == MIN_LIMITS_WAIT
        assert len(asked) == 1

    async def test_finishing_a_capped_job_wakes_the_capped_workers(self) -> None:
        types, capped, _, plain = _types()
        notify = MemoryNotifyAdapter()
        client = Client(MemoryStateAdapter(), notify, types)
        heard: list[str] = []
        await notify.listen_job_scheduled(["capped", "plain"], heard.append)
        async with client.transaction() as tx:
            first = (await client.start_chain(tx, capped, Num(n=1))).chain
        async with Worker(client, _complete_all(capped, plain), poll_interval=0.05):
            await client.await_chain(first.id, timeout=BOUND, poll_interval=0.05)

            async def woken() -> bool:
                return heard.count("capped") >= 2  # the start, then the freed place

            await wait_until(woken, "the freed place of a capped type to be announced")
        await notify.close()


class TestRetention:
    async def test_retention_deletes_bookkeeping_while_batches_come_back_full(self) -> None:
        state = RecordingState()
        state.prune_results = [ChainsPruned(locks_deleted=2), ChainsPruned(locks_deleted=2), ChainsPruned()]
        client = Client(state, None, JobTypes(), clock=lambda: NOW)
        retention = Retention(completed=timedelta(days=1), batch_size=2, max_batches=5)
        pruner = Pruner(client, retention, "w", emit=lambda *a, **k: None, recovery=ZERO)
        assert await pruner.prune() == []
        assert len(state.prunes) == 3  # two full batches of lock rows, then a short one
        assert {p.locks_before for p in state.prunes} == {NOW - LOCKS_KEPT}
        assert timedelta(days=1) == LOCKS_KEPT


def _scheduled(types: JobTypes, report: Any, cron: str, **options: Any) -> Processors:
    procs = _complete_all(report)
    procs.periodic(cron, report, Num(n=0), name="nightly", **options)
    return procs


class TestScheduler:
    async def test_registration_forgets_stale_schedules_and_is_refreshed(self) -> None:
        types = JobTypes()
        report = types.define("report", input=Num, output=None, entry=True)
        state = MemoryStateAdapter()
        old = ScheduleRegistration(
            name="removed",
            cron="0 1 * * *",
            timezone="UTC",
            type_name="report",
            catch_up=True,
            worker_name="x",
        )
        async with state.transaction() as tx:
            await tx.schedules_register(SchedulesRegister(schedules=[old], now=NOW - timedelta(days=8)))
        client = Client(state, None, types, clock=lambda: NOW)
        worker = Worker(client, _scheduled(types, report, "0 0 1 1 *", catch_up=False), name="w1")
        assert worker.scheduler is not None
        assert await worker.scheduler.run_due(NOW) == []  # a yearly tick 30 s ago: no catch-up
        async with state.transaction(read_only=True) as tx:
            records = await tx.schedules_list(SchedulesList())
        assert [r.name for r in records] == ["nightly"]
        assert records[0].last_seen_at == NOW
        assert records[0].next_tick_at == datetime(2027, 1, 1, tzinfo=UTC)
        later = NOW + timedelta(hours=2)
        await worker.scheduler.run_due(later)
        async with state.transaction(read_only=True) as tx:
            [record] = await tx.schedules_list(SchedulesList())
        assert record.last_seen_at == later

    async def test_catch_up_skips_a_tick_another_worker_registered(self) -> None:
        types = JobTypes()
        report = types.define("report", input=Num, output=None, entry=True)
        state = MemoryStateAdapter()
        client = Client(state, None, types, clock=lambda: NOW)
        done = ScheduleRegistration(
            name="nightly",
            cron="* * * * *",
            timezone="UTC",
            type_name="report",
            catch_up=True,
            worker_name="elsewhere",
            last_tick_at=NOW.replace(second=0),
        )
        async with state.transaction() as tx:
            await tx.schedules_register(SchedulesRegister(schedules=[done], now=NOW))
        worker = Worker(client, _scheduled(types, report, "* * * * *"))
        assert worker.scheduler is not None
        assert await worker.scheduler.run_due(NOW) == []  # its chain may be pruned: no re-run
        [started] = await worker.scheduler.run_due(NOW + timedelta(seconds=40))
        assert started.tick == NOW.replace(minute=1, second=0)
        assert not started.deduplicated

    async def test_a_new_schedule_starts_from_now_not_from_its_last_tick(self) -> None:
        # "0 3 * * *" first deployed at 21:54: today's 03:00 tick was before the schedule existed,
        # so nothing starts now (catch_up=True, the default); tomorrow's 03:00 starts.
        types = JobTypes()
        report = types.define("report", input=Num, output=None, entry=True)
        deployed = datetime(2026, 1, 1, 21, 54, tzinfo=UTC)
        client = Client(MemoryStateAdapter(), None, types, clock=lambda: deployed)
        worker = Worker(client, _scheduled(types, report, "0 3 * * *"))
        assert worker.scheduler is not None
        assert await worker.scheduler.run_due(deployed) == []
        [started] = await worker.scheduler.run_due(datetime(2026, 1, 2, 3, 0, 5, tzinfo=UTC))
        assert started.tick == datetime(2026, 1, 2, 3, 0, tzinfo=UTC)

    async def test_catch_up_covers_ticks_missed_after_the_first_registration(self) -> None:
        # Registered at 21:54 by a worker that stopped before 03:00; the next worker starts at
        # 08:00: the 03:00 tick was missed while the schedule existed, so it starts (once).
        types = JobTypes()
        report = types.define("report", input=Num, output=None, entry=True)
        state = MemoryStateAdapter()
        deployed = datetime(2026, 1, 1, 21, 54, tzinfo=UTC)
        first = Worker(Client(state, None, types), _scheduled(types, report, "0 3 * * *"))
        assert first.scheduler is not None
        assert await first.scheduler.run_due(deployed) == []
        back = datetime(2026, 1, 2, 8, 0, tzinfo=UTC)
        later = Worker(Client(state, None, types), _scheduled(types, report, "0 3 * * *"))
        assert later.scheduler is not None
        [started] = await later.scheduler.run_due(back)
        assert started.tick == datetime(2026, 1, 2, 3, 0, tzinfo=UTC)
        without = Worker(Client(state, None, types), _scheduled(types, report, "0 3 * * *", catch_up=False))
        assert without.scheduler is not None
        assert await without.scheduler.run_due(back) == []  # catch_up=False: only ticks after now

    async def test_a_schedule_of_an_unregistered_type_is_refused(self) -> None:
        types = JobTypes()
        report = types.define("report", input=Num, output=None, entry=True)
        other = JobTypes()
        stray = other.define("stray", input=Num, output=None, entry=True)
        procs = _complete_all(report)
        procs.periodic("* * * * *", stray, Num(n=0))
        with pytest.raises(Exception, match="stray"):
            Worker(Client(MemoryStateAdapter(), None, types), procs)


class TestWaitFor:
    async def test_waiting_for_nothing_fails_the_attempt(self) -> None:
        types = JobTypes()
        waiter = types.define("waiter", input=Num, output=None, entry=True, max_attempts=1)
        procs = Processors()

        @procs.handler(waiter)
        async def wait(attempt: Attempt[Num, None]) -> Completed:
            return await attempt.wait_for()

        client = Client(MemoryStateAdapter(), None, types)
        async with client.transaction() as tx:
            chain = (await client.start_chain(tx, waiter, Num(n=0))).chain
        async with Worker(client, procs, poll_interval=0.05, retry=ZERO):

            async def failed() -> bool:
                job = await client.get_job(chain.id)
                return job is not None and job.status is JobStatus.FAILED

            await wait_until(failed, "the job to fail")
        job = await client.get_job(chain.id)
        assert job is not None
        assert "at least one chain" in (job.last_attempt_error or "")


async def test_a_capped_worker_claims_again_when_its_own_attempt_commits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Group commit hands a slot on when the handler returns, before the outcome commits: a
    claim then finds the type still at its ``max_running``. The commit must wake the loop
    again; neither the limits poll nor the poll interval may be what starts the next job."""
    import jobchain.worker.claims as claims

    monkeypatch.setattr(claims, "LIMITS_POLL", 3600.0)
    types = JobTypes()
    capped = types.define("capped", input=int, output=None, entry=True, max_running=1)
    client = Client(MemoryStateAdapter(), None, types)  # no notify: no freed-place wake-up
    processors = Processors()
    ran: list[int] = []
    all_ran = asyncio.Event()

    async def handle(attempt: Attempt[int, None]) -> Completed:
        ran.append(attempt.input)
        if len(ran) == 3:
            all_ran.set()
        return await attempt.complete(None)  # atomic: the outcome commits after the handler

    processors.register(capped, handle)
    async with client.transaction() as tx:
        for i in range(3):
            await client.start_chain(tx, capped, i)
    async with Worker(client, processors, concurrency=1, poll_interval=3600):
        await asyncio.wait_for(all_ran.wait(), BOUND)  # without the wake: stuck for an hour
    assert sorted(ran) == [0, 1, 2]
    await client.close()
