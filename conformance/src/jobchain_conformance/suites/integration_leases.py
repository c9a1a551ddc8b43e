"""Leases: renewal keeps a long job, the reaper reclaims a stalled one, never its own.

No lease here runs out, or holds, because of how fast the machine is. Leases last 30 s
(``renewing_lease``: renewed every 50 ms, so a case sees a renewal soon), and each case
drives a clock of its own (:meth:`IntegrationEnv.clock`) shared by every client and worker it
builds: a lease runs out exactly when the case moves that clock past it, and the next reap
(a worker reaps at least every poll interval) takes the job. Workers in cases that move the
clock heartbeat with :data:`QUIET_HEARTBEAT`, so only a lapsed lease, never a lapsed registry
row, can hand a job to another worker.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

from jobchain import Client, JobchainError, JobStatus, JobTypes
from jobchain.contracts import Capability, JobsAcquire, StateTx
from jobchain.errors import TransientStateError
from jobchain.worker import AbortReason, Attempt, Completed, LeaseConfig, Processors
from jobchain_conformance.suites._integration_base import IntegrationEnv, Tag
from jobchain_conformance.suites._integration_wrappers import StateProxy, as_state

QUIET_HEARTBEAT = 600.0
"""Heartbeat interval (s) of the workers in cases that move the clock: their rows stay alive
for half an hour of the clock (three missed heartbeats), longer than any case moves it, and a
worker may declare others dead only after as long of its own loop time. So no worker is ever
presumed dead here, and a job changes hands only through its lease."""

PAST_A_LEASE = timedelta(seconds=1)
"""How far past a lease's end the cases move the clock."""

GIVE_UP_LEASE = LeaseConfig(duration=timedelta(seconds=2), renew_every=timedelta(milliseconds=50))
"""The lease of the worker that cannot renew. It gives up when its own reckoning of the lease
(loop time since its last good renewal) runs out, which no case clock can move: after two
seconds of loop time, later on a starved machine, never sooner. The stored lease follows the
case's clock, which stands still until the case moves it, so no reaper takes the job first."""


def _renewed_at(
    env: IntegrationEnv, client: Client, job_id: str, moment: datetime, lease: timedelta
) -> Callable[[], Awaitable[bool]]:
    """A probe: the job's lease was renewed at ``moment`` of the case's clock, or later."""

    async def probe() -> bool:
        job = await env.job(client, job_id)
        return job.leased_until is not None and job.leased_until >= moment + lease - env.state.time_precision

    return probe


class LeaseTests:
    """A staged attempt keeps its lease alive; a lost lease means a refused, harmless completion."""

    async def test_renewal_keeps_a_job_running_past_its_first_lease(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        long = types.define("long", input=None, output=Tag, entry=True)
        procs = Processors()
        clock = env.clock()
        client = env.client(types, clock=clock)
        lease = env.renewing_lease.duration
        step = lease * 2 / 3  # less than a lease: the job is lost unless renewed in between
        calls: Counter[str] = Counter()

        @procs.handler(long)
        async def handle(attempt: Attempt[None, Tag]) -> Completed:
            calls[attempt.job.id] += 1
            await attempt.prepare("staged")
            first_expiry = attempt.job.leased_until
            assert first_expiry is not None
            moved = clock.advance(step)
            await env.wait_for(
                _renewed_at(env, client, attempt.job.id, moved, lease), "a renewal after the clock moved"
            )
            moved = clock.advance(step)
            assert moved > first_expiry, "the case must take the job past its first lease"
            await env.wait_for(
                _renewed_at(env, client, attempt.job.id, moved, lease),
                "a renewal past the first lease's end",
            )
            return await attempt.complete(Tag(tag=attempt.worker_id))

        # A second worker on the same clock would reap the job if its lease ever lapsed.
        options = {"lease": env.renewing_lease, "heartbeat_interval": QUIET_HEARTBEAT}
        first = env.worker(client, procs, **options)
        second = env.worker(client, procs, **options)
        async with first, second:
            started = await env.start(client, long, None)
            chain = await env.await_chain(client, started.id)

        job = await env.job(client, started.id)
        assert calls[started.id] == 1
        assert job.attempt == 1
        assert job.completed_by == chain.output["tag"]
        assert job.completed_by in (first.worker_id, second.worker_id)

    async def test_an_atomic_attempt_that_outlives_its_lease_is_not_run_twice(
        self, env: IntegrationEnv
    ) -> None:
        types = JobTypes()
        long = types.define("long", input=None, output=Tag, entry=True)
        procs = Processors()
        clock = env.clock()
        client = env.client(types, clock=clock)
        # The other worker's operations are counted: its reaps are what the case waits for.
        other_state = StateProxy(env.state)
        calls: Counter[str] = Counter()
        claimed_until: list[datetime | None] = []
        running = asyncio.Event()
        release = asyncio.Event()

        @procs.handler(long)
        async def handle(attempt: Attempt[None, Tag]) -> Completed:
            calls[attempt.job.id] += 1
            await attempt.prepare("atomic")
            claimed_until.append(attempt.job.leased_until)
            running.set()
            await env.wait_event(release, "the case to let the atomic attempt finish")
            return await attempt.complete(Tag(tag=attempt.worker_id))

        first = env.worker(client, procs, heartbeat_interval=QUIET_HEARTBEAT)
        second = env.worker(
            env.client(types, state=as_state(other_state), clock=clock),
            procs,
            heartbeat_interval=QUIET_HEARTBEAT,
        )
        async with first:
            started = await env.start(client, long, None)
            await env.wait_event(running, "the atomic attempt to hold the job")
            # The attempt outlives its lease while it holds the job's row in its transaction.
            moved = clock.advance(env.lease.duration + PAST_A_LEASE)
            assert claimed_until[0] is not None
            assert moved > claimed_until[0]
            async with second:
                if Capability.CONCURRENT_TRANSACTIONS in env.state.capabilities:

                    async def reaped_a_few_times() -> bool:
                        return other_state.calls["jobs_reap_expired"] >= 3

                    await env.wait_for(reaped_a_few_times, "the other worker to reap past the lease")
                # Else one write transaction runs at a time: the other worker's reaps wait for
                # the attempt's transaction and run after it, on the moved clock.
                release.set()
                chain = await env.await_chain(client, started.id)

        job = await env.job(client, started.id)
        assert calls[started.id] == 1, "another worker reaped and re-ran a running atomic attempt"
        assert job.attempt == 1
        assert job.completed_by == chain.output["tag"]
        assert job.completed_by == first.worker_id

    async def test_a_stalled_worker_loses_the_job_and_its_late_completion_changes_nothing(
        self, env: IntegrationEnv
    ) -> None:
        types = JobTypes()
        work = types.define("work", input=None, output=Tag, entry=True)
        procs = Processors()
        running = asyncio.Event()
        release = asyncio.Event()
        finished = asyncio.Event()
        late: list[object] = []

        @procs.handler(work)
        async def handle(attempt: Attempt[None, Tag]) -> Completed:
            if attempt.job.attempt > 1:
                return await attempt.complete(Tag(tag=f"attempt {attempt.job.attempt}"))
            await attempt.prepare("staged")
            running.set()
            await env.wait_event(release, "the case to release the stalled handler")
            try:
                done = await attempt.complete(Tag(tag="late"))
                late.append(done)
                return done
            except BaseException as error:
                late.append(error)
                raise
            finally:
                finished.set()

        clock = env.clock()
        stalled_state = StateProxy(env.state)
        stalled_client = env.client(types, state=as_state(stalled_state), clock=clock)
        client = env.client(types, clock=clock)
        stalled = env.worker(stalled_client, procs, heartbeat_interval=QUIET_HEARTBEAT)
        healthy = env.worker(client, procs, heartbeat_interval=QUIET_HEARTBEAT)

        async with stalled:
            started = await env.start(client, work, None)
            await env.wait_event(running, "the first worker to start the job")
            # The whole first worker stops reaching the database: no renewal, no claim. Its
            # lease then runs out on the clock, and the healthy worker's reaper takes the job.
            stalled_state.freeze()
            await env.wait_event(stalled_state.idle, "the stalled worker's last transaction to end")
            clock.advance(env.lease.duration + PAST_A_LEASE)
            async with healthy:
                chain = await env.await_chain(client, started.id)
            taken = await env.job(client, started.id)
            stalled_state.thaw()
            release.set()
            await env.wait_event(finished, "the stalled handler's late completion")

        assert chain.output == {"tag": "attempt 2"}
        assert taken.completed_by == healthy.worker_id
        assert taken.attempt == 2
        assert taken.rescue_reason == "lease_expired"
        assert taken.rescued_from == stalled.worker_id
        assert len(late) == 1
        assert isinstance(late[0], JobchainError), f"the late completion was accepted: {late[0]!r}"
        after = await env.job(client, started.id)
        assert after.status is JobStatus.COMPLETED
        assert after.output == {"tag": "attempt 2"}
        assert after.completed_by == healthy.worker_id
        assert after.completed_at == taken.completed_at
        assert after.attempt == 2
        assert len(await env.chain_jobs(client, started.id)) == 1

    async def test_a_worker_whose_job_was_taken_sees_taken_by_another_worker(
        self, env: IntegrationEnv
    ) -> None:
        types = JobTypes()
        work = types.define("work", input=None, output=Tag, entry=True)
        procs = Processors()
        first_running = asyncio.Event()
        second_running = asyncio.Event()
        first_done = asyncio.Event()
        reasons: list[AbortReason | None] = []
        late: list[object] = []

        @procs.handler(work)
        async def handle(attempt: Attempt[None, Tag]) -> Completed:
            await attempt.prepare("staged")
            if attempt.job.attempt > 1:
                second_running.set()
                await env.wait_event(first_done, "the first worker to notice")
                return await attempt.complete(Tag(tag="second"))
            first_running.set()
            try:
                async with asyncio.timeout(env.wait_timeout):
                    await attempt.signal.wait()
            except TimeoutError:
                pass
            reasons.append(attempt.signal.reason)
            try:
                done = await attempt.complete(Tag(tag="first"))
                late.append(done)
                return done
            except BaseException as error:
                late.append(error)
                raise
            finally:
                first_done.set()

        clock = env.clock()
        proxy = StateProxy(env.state)
        client = env.client(types, clock=clock)
        # The first worker renews often: once back, it learns of the loss within a renewal,
        # notifications or not.
        first = env.worker(
            env.client(types, state=as_state(proxy), clock=clock),
            procs,
            lease=env.renewing_lease,
            heartbeat_interval=QUIET_HEARTBEAT,
        )
        second = env.worker(client, procs, heartbeat_interval=QUIET_HEARTBEAT)
        async with first:
            started = await env.start(client, work, None)
            await env.wait_event(first_running, "the first worker to start the job")
            proxy.freeze()
            await env.wait_event(proxy.idle, "the first worker's last transaction to end")
            clock.advance(env.renewing_lease.duration + PAST_A_LEASE)
            async with second:
                await env.wait_event(second_running, "the second worker to take the job over")
                # The first worker comes back while the second one holds the job.
                proxy.thaw()
                chain = await env.await_chain(client, started.id)

        assert reasons == [AbortReason.TAKEN_BY_ANOTHER_WORKER]
        assert len(late) == 1
        assert isinstance(late[0], JobchainError)
        assert chain.output == {"tag": "second"}
        assert chain.last.completed_by == second.worker_id
        assert chain.last.rescue_reason == "lease_expired"

    async def test_a_worker_that_cannot_renew_aborts_with_lease_expired_and_the_job_is_retried(
        self, env: IntegrationEnv
    ) -> None:
        types = JobTypes()
        work = types.define("work", input=None, output=Tag, entry=True)
        procs = Processors()
        proxy = StateProxy(env.state)
        clock = env.clock()
        reasons: list[AbortReason | None] = []

        async def renewal_fails(tx: StateTx, params: object) -> None:
            raise TransientStateError("injected: renewal cannot reach the database")

        proxy.overrides["job_renew_lease"] = renewal_fails

        @procs.handler(work)
        async def handle(attempt: Attempt[None, Tag]) -> Completed:
            if attempt.job.attempt > 1:
                return await attempt.complete(Tag(tag=f"attempt {attempt.job.attempt}"))
            await attempt.prepare("staged")
            try:
                async with asyncio.timeout(env.wait_timeout):
                    await attempt.signal.wait()
            except TimeoutError:
                pass
            reasons.append(attempt.signal.reason)
            # The worker gave up when the lease ran out by its own reckoning; on the store's
            # clock it runs out now, and the job is the reaper's once this attempt is over.
            clock.advance(GIVE_UP_LEASE.duration + PAST_A_LEASE)
            return await attempt.complete(Tag(tag="too late"))

        client = env.client(types, clock=clock)
        worker_client = env.client(types, state=as_state(proxy), clock=clock)
        async with env.worker(worker_client, procs, lease=GIVE_UP_LEASE):
            started = await env.start(client, work, None)
            chain = await env.await_chain(client, started.id)

        assert reasons == [AbortReason.LEASE_EXPIRED]
        assert chain.output == {"tag": "attempt 2"}
        assert proxy.calls["job_renew_lease"] > 0
        job = await env.job(client, started.id)
        assert job.rescue_reason == "lease_expired"

    async def test_the_reaper_never_reaps_its_own_in_flight_job(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        work = types.define("work", input=None, output=Tag, entry=True)
        procs = Processors()
        proxy = StateProxy(env.state)
        proxy.drop_lease_renewals()
        clock = env.clock()
        client = env.client(types, state=as_state(proxy), clock=clock)
        reader = env.client(types, clock=clock)
        calls: Counter[str] = Counter()

        @procs.handler(work)
        async def handle(attempt: Attempt[None, Tag]) -> Completed:
            calls[attempt.job.id] += 1
            await attempt.prepare("staged")
            # Renewals write nothing: moving the clock past the lease expires it for good.
            moved = clock.advance(env.lease.duration + PAST_A_LEASE)
            expired = await env.job(reader, attempt.job.id)
            assert expired.leased_until is not None
            assert expired.leased_until < moved
            reaps = proxy.calls["jobs_reap_expired"]

            async def reaper_ran() -> bool:
                return proxy.calls["jobs_reap_expired"] >= reaps + 3

            await env.wait_for(reaper_ran, "the worker's reaper to run with the lease expired")
            job = await env.job(reader, attempt.job.id)
            assert job.status is JobStatus.RUNNING
            assert job.leased_by == attempt.worker_id
            return await attempt.complete(Tag(tag="kept"))

        worker = env.worker(client, procs, concurrency=2)
        async with worker:
            started = await env.start(reader, work, None)
            chain = await env.await_chain(reader, started.id)

        job = await env.job(reader, started.id)
        assert chain.output == {"tag": "kept"}
        assert calls[started.id] == 1
        assert job.attempt == 1
        assert job.completed_by == worker.worker_id

    async def test_a_job_left_running_by_a_vanished_worker_is_reclaimed(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        work = types.define("work", input=None, output=Tag, entry=True)
        procs = Processors()
        seen: list[tuple[int, str | None]] = []

        @procs.handler(work)
        async def handle(attempt: Attempt[None, Tag]) -> Completed:
            seen.append((attempt.job.attempt, attempt.job.last_attempt_error))
            return await attempt.complete(Tag(tag="reclaimed"))

        clock = env.clock()
        client = env.client(types, clock=clock)
        started = await env.start(client, work, None)
        # A worker claims the job and disappears without a trace (a crashed process).
        async with env.state.transaction() as tx:
            claimed = await tx.jobs_acquire(
                JobsAcquire(
                    type_names=["work"],
                    worker_id="ghost-0",
                    lease_for=env.renewing_lease.duration,
                    now=clock(),
                )
            )
        assert [j.id for j in claimed.jobs] == [started.id]
        clock.advance(env.renewing_lease.duration + PAST_A_LEASE)  # the ghost's lease is over

        async with env.worker(client, procs):
            chain = await env.await_chain(client, started.id)

        assert chain.output == {"tag": "reclaimed"}
        assert [attempt for attempt, _ in seen] == [2]
        job = await env.job(client, started.id)
        assert job.attempt == 2
        assert job.completed_by != "ghost-0"
