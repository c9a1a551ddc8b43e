"""Leases: renewal keeps a long job, the reaper reclaims a stalled one, never its own.

Leases here last a fraction of a second (``short_lease``), so a lease runs out in the time
a case takes anyway; nothing sleeps to make it happen.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC, datetime

from jobchain import JobchainError, JobStatus, JobTypes
from jobchain.contracts import JobsAcquire, StateTx
from jobchain.errors import TransientStateError
from jobchain.worker import AbortReason, Attempt, Completed, Processors
from jobchain_conformance.suites._integration_base import IntegrationEnv, Tag
from jobchain_conformance.suites._integration_wrappers import StateProxy, as_state


class LeaseTests:
    """A staged attempt keeps its lease alive; a lost lease means a refused, harmless completion."""

    async def test_renewal_keeps_a_job_running_past_its_first_lease(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        long = types.define("long", input=None, output=Tag, entry=True)
        procs = Processors()
        client = env.client(types)
        calls: Counter[str] = Counter()

        @procs.handler(long)
        async def handle(attempt: Attempt[None, Tag]) -> Completed:
            calls[attempt.job.id] += 1
            await attempt.prepare("staged")
            claimed_until = attempt.job.leased_until
            assert claimed_until is not None

            async def renewed_past_first_lease() -> bool:
                job = await env.job(client, attempt.job.id)
                now = datetime.now(UTC)
                return job.leased_until is not None and job.leased_until > now > claimed_until

            await env.wait_for(renewed_past_first_lease, "the lease to be renewed past its first expiry")
            return await attempt.complete(Tag(tag=attempt.worker_id))

        # A second worker on the pair would reap the job if the lease ever lapsed.
        first = env.worker(client, procs, lease=env.short_lease)
        second = env.worker(client, procs, lease=env.short_lease)
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
        reader = env.client(types)
        calls: Counter[str] = Counter()

        @procs.handler(long)
        async def handle(attempt: Attempt[None, Tag]) -> Completed:
            calls[attempt.job.id] += 1
            await attempt.prepare("atomic")
            claimed_until = attempt.job.leased_until
            assert claimed_until is not None

            async def past_first_lease() -> bool:
                return datetime.now(UTC) > claimed_until + env.short_lease.duration

            await env.wait_for(past_first_lease, "the attempt to outlive its first lease")
            return await attempt.complete(Tag(tag=attempt.worker_id))

        client = env.client(types)
        first = env.worker(client, procs, lease=env.short_lease)
        second = env.worker(env.client(types), procs, lease=env.short_lease)
        async with first, second:
            started = await env.start(client, long, None)
            chain = await env.await_chain(reader, started.id)

        job = await env.job(reader, started.id)
        assert calls[started.id] == 1, "another worker reaped and re-ran a running atomic attempt"
        assert job.attempt == 1
        assert job.completed_by == chain.output["tag"]

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

        stalled_state = StateProxy(env.state)
        stalled_client = env.client(types, state=as_state(stalled_state))
        client = env.client(types)
        stalled = env.worker(stalled_client, procs, lease=env.short_lease)
        healthy = env.worker(client, procs, lease=env.short_lease)

        async with stalled:
            started = await env.start(client, work, None)
            await env.wait_event(running, "the first worker to start the job")
            # The whole first worker stops reaching the database: no renewal, no claim.
            stalled_state.freeze()
            async with healthy:
                chain = await env.await_chain(client, started.id)
            taken = await env.job(client, started.id)
            stalled_state.thaw()
            release.set()
            await env.wait_event(finished, "the stalled handler's late completion")

        assert chain.output == {"tag": "attempt 2"}
        assert taken.completed_by == healthy.worker_id
        assert taken.attempt == 2
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

        proxy = StateProxy(env.state)
        client = env.client(types)
        first = env.worker(env.client(types, state=as_state(proxy)), procs, lease=env.short_lease)
        second = env.worker(client, procs, lease=env.short_lease)
        async with first:
            started = await env.start(client, work, None)
            await env.wait_event(first_running, "the first worker to start the job")
            proxy.freeze()
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

    async def test_a_worker_that_cannot_renew_aborts_with_error_and_the_job_is_retried(
        self, env: IntegrationEnv
    ) -> None:
        types = JobTypes()
        work = types.define("work", input=None, output=Tag, entry=True)
        procs = Processors()
        proxy = StateProxy(env.state)
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
            return await attempt.complete(Tag(tag="too late"))

        client = env.client(types)
        async with env.worker(env.client(types, state=as_state(proxy)), procs, lease=env.short_lease):
            started = await env.start(client, work, None)
            chain = await env.await_chain(client, started.id)

        assert reasons == [AbortReason.ERROR]
        assert chain.output == {"tag": "attempt 2"}
        assert proxy.calls["job_renew_lease"] > 0

    async def test_the_reaper_never_reaps_its_own_in_flight_job(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        work = types.define("work", input=None, output=Tag, entry=True)
        procs = Processors()
        proxy = StateProxy(env.state)
        proxy.drop_lease_renewals()
        client = env.client(types, state=as_state(proxy))
        reader = env.client(types)
        calls: Counter[str] = Counter()

        @procs.handler(work)
        async def handle(attempt: Attempt[None, Tag]) -> Completed:
            calls[attempt.job.id] += 1
            await attempt.prepare("staged")

            async def expired() -> bool:
                job = await env.job(reader, attempt.job.id)
                return job.leased_until is not None and job.leased_until < datetime.now(UTC)

            await env.wait_for(expired, "the lease to run out")
            reaps = proxy.calls["jobs_reap_expired"]

            async def reaper_ran() -> bool:
                return proxy.calls["jobs_reap_expired"] >= reaps + 3

            await env.wait_for(reaper_ran, "the worker's reaper to run with the lease expired")
            job = await env.job(reader, attempt.job.id)
            assert job.status is JobStatus.RUNNING
            assert job.leased_by == attempt.worker_id
            return await attempt.complete(Tag(tag="kept"))

        worker = env.worker(client, procs, concurrency=2, lease=env.short_lease)
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

        client = env.client(types)
        started = await env.start(client, work, None)
        # A worker claims the job and disappears without a trace (a crashed process).
        async with env.state.transaction() as tx:
            claimed = await tx.jobs_acquire(
                JobsAcquire(type_names=["work"], worker_id="ghost-0", lease_for=env.short_lease.duration)
            )
        assert [j.id for j in claimed.jobs] == [started.id]

        async with env.worker(client, procs, lease=env.short_lease):
            chain = await env.await_chain(client, started.id)

        assert chain.output == {"tag": "reclaimed"}
        assert [attempt for attempt, _ in seen] == [2]
        job = await env.job(client, started.id)
        assert job.attempt == 2
        assert job.completed_by != "ghost-0"
