"""Rescue: dead workers found by the registry, a reaper that runs under any load, per-type leases.

The worker-level guarantees of the worker registry (``worker_heartbeat``) and the timer
reaper, over any (state, notify) pair:

* a worker that stops heartbeating is presumed dead and its running jobs run again on a live
  worker long before their leases end; its late completion changes nothing (fencing);
* an expired lease is rescued while the queue is never empty (the reaper does not wait for
  an idle claim);
* a worker serving several types leases each job for its own type's lease;
* the registry lists workers with their state (``running``, then ``stopped``);
* a worker whose database comes back claims at once, not when its recovery backoff ends.

Leases that must not run out during a case last ten minutes, and the loop's poll interval
and recovery backoff an hour, so only the mechanism under test can make a case pass within
the suite's wait bound. Nothing runs out in wall-clock time: registry rows and leases follow
a clock of the case's own (:meth:`IntegrationEnv.clock`), which stands still until the case
moves it past a worker's ``alive_for`` or a job's lease. Heartbeats come every few hundredths
of a second of loop time, and a worker declares others dead only after its own heartbeats
have succeeded for its ``alive_for`` of loop time (a second here).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar

from jobchain import ChainStart, JobchainError, JobStatus, JobTypes, WorkerState
from jobchain.contracts import JobsAcquire, WorkerHeartbeat
from jobchain.testing import FrozenClock
from jobchain.worker import Attempt, Backoff, Completed, LeaseConfig, Processors
from jobchain_conformance.suites._integration_base import IntegrationEnv, Num, Tag
from jobchain_conformance.suites._integration_wrappers import StateProxy, as_state

TEN_MINUTES = LeaseConfig(duration=timedelta(minutes=10), renew_every=timedelta(minutes=5))
"""A lease no case outlives: only the registry can rescue a job held with it."""

HOUR = Backoff(initial=timedelta(hours=1), maximum=timedelta(hours=1))
"""A recovery backoff no case outlives."""

T = TypeVar("T")

BEAT = 0.05
"""Heartbeat interval of the workers in these cases (seconds)."""

MISSED = 20
"""Their missed heartbeats: alive_for is a second of loop time. A live worker releases dead
workers' jobs once its own heartbeats have gone through for that long with no gap as long: a
loaded machine's round trips and stalls fit in it. Death itself is on the case's clock."""

GHOST_ALIVE_FOR = timedelta(seconds=30)
"""How long the vanished worker's last heartbeat says it stays alive (on the case's clock)."""

PAST = timedelta(seconds=1)
"""How far past an ``alive_for`` or a lease the cases move the clock."""


class RescueTests:
    """Dead workers' jobs run again within seconds; the reaper runs under load; leases per type."""

    async def test_a_dead_workers_running_job_runs_again_before_its_lease_ends(
        self, env: IntegrationEnv
    ) -> None:
        types = JobTypes()
        work = types.define("work", input=Num, output=Num, entry=True)
        procs = Processors()

        @procs.handler(work)
        async def handle(attempt: Attempt[Num, Num]) -> Completed:
            return await attempt.complete(Num(n=attempt.input.n + 1))

        clock = env.clock()
        client = env.client(types, clock=clock)
        started = await env.start(client, work, Num(n=1))
        # A worker registers, claims the job for ten minutes, and is never heard of again.
        async with env.state.transaction() as tx:
            await tx.worker_heartbeat(_beat("ghost-1", alive_for=GHOST_ALIVE_FOR, clock=clock))
            claimed = await tx.jobs_acquire(
                JobsAcquire(
                    type_names=["work"], worker_id="ghost-1", lease_for=TEN_MINUTES.duration, now=clock()
                )
            )
        assert [job.id for job in claimed.jobs] == [started.id]
        clock.advance(GHOST_ALIVE_FOR + PAST)  # the ghost's row lapses; its lease has minutes left

        live = env.worker(client, procs, heartbeat_interval=BEAT, missed_heartbeats=MISSED)
        async with live:
            chain = await env.await_chain(client, started.id)

        job = await env.job(client, started.id)
        assert chain.output == {"n": 2}
        assert job.completed_by == live.worker_id
        assert job.attempt == 2
        assert job.rescue_reason == "worker_dead"
        assert job.rescued_from == "ghost-1"
        assert job.rescued_at is not None
        dead = [row.id for row in await client.list_workers(states=[WorkerState.DEAD])]
        assert dead == ["ghost-1"]

    async def test_a_worker_presumed_dead_cannot_complete_the_job_it_lost(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        work = types.define("work", input=None, output=Tag, entry=True)
        procs = Processors()
        running = asyncio.Event()
        release = asyncio.Event()
        late: list[object] = []

        @procs.handler(work)
        async def handle(attempt: Attempt[None, Tag]) -> Completed:
            if attempt.job.attempt > 1:
                return await attempt.complete(Tag(tag="rescuer"))
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

        proxy = StateProxy(env.state)
        clock = env.clock()
        client = env.client(types, clock=clock)
        options: dict[str, Any] = {
            "heartbeat_interval": BEAT,
            "missed_heartbeats": MISSED,
            "lease": TEN_MINUTES,
        }
        stalled = env.worker(env.client(types, state=as_state(proxy), clock=clock), procs, **options)
        rescuer = env.worker(client, procs, **options)
        async with stalled:
            started = await env.start(client, work, None)
            await env.wait_event(running, "the first worker to start the job")
            proxy.freeze()  # no heartbeat, no renewal, nothing: a hung process
            await env.wait_event(proxy.idle, "the stalled worker's last heartbeat to land")
            # Its row lapses on the clock; its lease has minutes left.
            clock.advance(timedelta(seconds=BEAT * MISSED) + PAST)
            try:
                async with rescuer:
                    chain = await env.await_chain(client, started.id)
                rescued = await env.job(client, started.id)
            finally:
                proxy.thaw()  # a frozen worker could not stop
                release.set()
            await env.wait_for(_async(lambda: late), "the stalled handler's late completion")

        assert chain.output == {"tag": "rescuer"}
        assert rescued.rescue_reason == "worker_dead"
        assert rescued.rescued_from == stalled.worker_id
        assert rescued.completed_by == rescuer.worker_id
        assert isinstance(late[0], JobchainError), f"the late completion was accepted: {late[0]!r}"
        after = await env.job(client, started.id)
        assert after.output == {"tag": "rescuer"}
        assert after.completed_at == rescued.completed_at

    async def test_an_expired_lease_is_rescued_while_the_queue_stays_full(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        work = types.define("work", input=Num, output=Num, entry=True)
        procs = Processors()
        clock = env.clock()
        client = env.client(types, clock=clock)
        victim = await env.start(client, work, Num(n=-1))
        # The oldest job, claimed by a worker that vanished (no registry row): only its lease
        # expiry can bring it back.
        async with env.state.transaction() as tx:
            claimed = await tx.jobs_acquire(
                JobsAcquire(
                    type_names=["work"],
                    worker_id="ghost-0",
                    lease_for=env.renewing_lease.duration,
                    now=clock(),
                )
            )
        assert [job.id for job in claimed.jobs] == [victim.id]
        backlog_at_rescue: list[int] = []
        busy = asyncio.Event()

        @procs.handler(work)
        async def handle(attempt: Attempt[Num, Num]) -> Completed:
            if attempt.input.n == -1:
                pending = await client.list_jobs(type_names=[work], statuses=[JobStatus.PENDING], limit=500)
                backlog_at_rescue.append(len(pending.items))
            else:
                # Every job done brings two younger ones: no claim ever comes back empty.
                await env.start_many(client, [ChainStart(job_type=work, input=Num(n=k)) for k in (1, 2)])
                busy.set()
            return await attempt.complete(attempt.input)

        await env.start_many(client, [ChainStart(job_type=work, input=Num(n=k)) for k in range(20)])
        # An hour between polls: only the reaper's own timer can reap during this case. Its
        # reaps are counted, so the lease runs out only after the one it makes at start.
        counted = StateProxy(env.state)
        worker = env.worker(
            env.client(types, state=as_state(counted), clock=clock),
            procs,
            concurrency=4,
            poll_interval=3600,
            heartbeat_interval=BEAT,
        )
        async with worker:

            async def reaped_once() -> bool:
                return counted.calls["jobs_reap_expired"] >= 1

            await env.wait_for(reaped_once, "the worker's reap at start")
            await env.wait_event(busy, "the worker to work through the backlog")
            clock.advance(env.renewing_lease.duration + PAST)  # the ghost's lease is over
            await env.wait_for(_async(lambda: backlog_at_rescue), "the expired job to run again")

        job = await env.job(client, victim.id)
        assert job.rescue_reason == "lease_expired"
        assert job.rescued_from == "ghost-0"
        assert job.attempt == 2
        assert backlog_at_rescue[0] > 0, "the backlog ran dry: the case did not keep the worker busy"

    async def test_a_mixed_worker_leases_each_job_for_its_own_type(self, env: IntegrationEnv) -> None:
        short_lease = LeaseConfig(duration=timedelta(seconds=12), renew_every=timedelta(seconds=6))
        types = JobTypes()
        short = types.define("short", input=None, output=None, entry=True, lease=short_lease)
        plain = types.define("plain", input=None, output=None, entry=True)
        procs = Processors()
        held: dict[str, timedelta] = {}

        async def record(attempt: Attempt[None, None]) -> Completed:
            job = attempt.job
            assert job.leased_until is not None
            assert job.attempt_started_at is not None
            held[job.type_name] = job.leased_until - job.attempt_started_at
            return await attempt.complete(None)

        procs.register(short, record)
        procs.register(plain, record)
        client = env.client(types)
        chains = [await env.start(client, job_type, None) for job_type in (short, plain)]
        async with env.worker(client, procs, concurrency=2, lease=TEN_MINUTES):
            await env.await_chains(client, [c.id for c in chains])

        tolerance = env.state.time_precision
        assert abs(held["short"] - timedelta(seconds=12)) <= tolerance
        assert abs(held["plain"] - TEN_MINUTES.duration) <= tolerance

    async def test_a_short_type_in_a_mixed_worker_is_rescued_on_its_own_lease(
        self, env: IntegrationEnv
    ) -> None:
        types = JobTypes()
        # The brief type's lease (30 s) runs out when the clock passes it, the workers' (ten
        # minutes) not.
        brief = types.define("brief", input=None, output=Tag, entry=True, lease=env.renewing_lease)
        other = types.define("other", input=None, output=Tag, entry=True)
        procs = Processors()
        running = asyncio.Event()
        release = asyncio.Event()

        async def handle(attempt: Attempt[None, Tag]) -> Completed:
            if attempt.job.attempt == 1 and attempt.job.type_name == "brief":
                await attempt.prepare("staged")
                running.set()
                await env.wait_event(release, "the case to release the stalled handler")
            return await attempt.complete(Tag(tag=attempt.worker_id))

        procs.register(brief, handle)
        procs.register(other, handle)
        proxy = StateProxy(env.state)
        clock = env.clock()
        client = env.client(types, clock=clock)
        # The workers' own lease is ten minutes; the heartbeat is slow enough (alive_for of an
        # hour and a half) that only the brief type's own lease can rescue the job.
        options: dict[str, Any] = {"lease": TEN_MINUTES, "heartbeat_interval": 1800}
        stalled = env.worker(env.client(types, state=as_state(proxy), clock=clock), procs, **options)
        async with stalled:
            started = await env.start(client, brief, None)
            await env.wait_event(running, "the job to start")
            proxy.freeze()
            await env.wait_event(proxy.idle, "the stalled worker's last renewal to land")
            clock.advance(env.renewing_lease.duration + PAST)
            try:
                async with env.worker(client, procs, heartbeat_interval=BEAT, lease=TEN_MINUTES):
                    chain = await env.await_chain(client, started.id)
            finally:
                proxy.thaw()  # a frozen worker could not stop
                release.set()

        job = await env.job(client, started.id)
        assert chain.output is not None
        assert chain.output["tag"] != stalled.worker_id
        assert job.rescue_reason == "lease_expired"
        assert job.rescued_from == stalled.worker_id

    async def test_the_registry_lists_a_running_worker_then_a_stopped_one(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        work = types.define("work", input=None, output=None, entry=True)
        procs = Processors()

        @procs.handler(work)
        async def handle(attempt: Attempt[None, None]) -> Completed:
            return await attempt.complete(None)

        # The default heartbeat (every 2 s, alive for 6 s): the first one is sent at start. The
        # clock stands still, so the row cannot lapse however long the next heartbeat takes.
        client = env.client(types, clock=env.clock())
        worker = env.worker(client, procs, name="listed", concurrency=3)
        async with worker:

            async def listed() -> bool:
                rows = await client.list_workers(states=[WorkerState.RUNNING])
                return any(row.id == worker.worker_id for row in rows)

            await env.wait_for(listed, "the worker's registry row")
            (row,) = [r for r in await client.list_workers() if r.id == worker.worker_id]
        (final,) = [r for r in await client.list_workers() if r.id == worker.worker_id]

        assert row.name == "listed"
        assert row.type_names == ("work",)
        assert row.concurrency == 3
        assert row.state is WorkerState.RUNNING
        assert row.last_seen_at < row.alive_until
        assert final.state is WorkerState.STOPPED
        assert [r.id for r in await client.list_workers(states=[WorkerState.STOPPED])] == [worker.worker_id]

    async def test_a_worker_claims_as_soon_as_its_database_answers_again(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        work = types.define("work", input=Num, output=Num, entry=True)
        procs = Processors()

        @procs.handler(work)
        async def handle(attempt: Attempt[Num, Num]) -> Completed:
            return await attempt.complete(attempt.input)

        client = env.client(types)
        started = await env.start(client, work, Num(n=4))
        proxy = StateProxy(env.state)
        proxy.fail_next(20)  # an outage: the claim, the heartbeats and the reap all fail
        env.expect_worker_errors("claim_loop", "worker_heartbeat", "jobs_reap_expired")
        # After its failed claim the loop backs off for an hour and polls once an hour, and it
        # hears no notification: only the heartbeat that gets through can make it claim.
        worker = env.worker(
            env.client(types, state=as_state(proxy), notify=None),
            procs,
            heartbeat_interval=BEAT,
            poll_interval=3600,
            recovery=HOUR,
        )
        async with worker:
            chain = await env.await_chain(client, started.id)

        assert chain.output == {"n": 4}
        assert proxy.failures_injected == 20


def _beat(worker_id: str, *, alive_for: timedelta, clock: FrozenClock) -> WorkerHeartbeat:
    return WorkerHeartbeat(
        worker_id=worker_id,
        name=worker_id.rsplit("-", 1)[0],
        host="elsewhere",
        pid=1,
        version="0",
        type_names=["work"],
        concurrency=1,
        inflight=1,
        state=WorkerState.RUNNING,
        alive_for=alive_for,
        now=clock(),
    )


def _async(check: Callable[[], T]) -> Callable[[], Awaitable[T]]:
    """``check`` as the async probe :meth:`IntegrationEnv.wait_for` takes."""

    async def probe() -> T:
        return check()

    return probe
