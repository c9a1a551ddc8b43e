"""Graceful shutdown: stop claiming, let in-flight attempts finish, release what cannot."""

from __future__ import annotations

import asyncio
from typing import Literal

import pytest

from jobchain import JobStatus, JobTypes
from jobchain.worker import Attempt, Completed, LeaseConfig, Processors
from jobchain_conformance.suites._integration_base import IntegrationEnv, Tag, recorded_error


class ShutdownTests:
    """Stopping stops claiming, lets in-flight attempts finish, and releases what cannot."""

    async def test_stop_lets_the_in_flight_job_finish_and_claims_nothing_new(
        self, env: IntegrationEnv
    ) -> None:
        types = JobTypes()
        work = types.define("work", input=None, output=Tag, entry=True)
        procs = Processors()
        running = asyncio.Event()
        release = asyncio.Event()

        @procs.handler(work)
        async def handle(attempt: Attempt[None, Tag]) -> Completed:
            await attempt.prepare("staged")
            running.set()
            await env.wait_event(release, "the case to let the job finish")
            return await attempt.complete(Tag(tag="finished"))

        client = env.client(types)
        worker = env.worker(client, procs, concurrency=2)
        await worker.start()
        first = await env.start(client, work, None)
        await env.wait_event(running, "the job to start")
        stopping = asyncio.ensure_future(worker.stop())
        await asyncio.sleep(0)
        second = await env.start(client, work, None)
        release.set()
        async with asyncio.timeout(env.wait_timeout):
            await stopping

        done = await env.job(client, first.id)
        assert done.status is JobStatus.COMPLETED
        assert done.output == {"tag": "finished"}
        assert done.completed_by == worker.worker_id
        waiting = await env.job(client, second.id)
        assert waiting.status is JobStatus.PENDING
        assert waiting.attempt == 0
        await worker.stop()  # idempotent

    @pytest.mark.parametrize("mode", ["atomic", "staged"])
    async def test_a_job_that_cannot_finish_in_time_is_released_at_once(
        self, env: IntegrationEnv, mode: Literal["atomic", "staged"]
    ) -> None:
        types = JobTypes()
        work = types.define("work", input=None, output=Tag, entry=True)
        procs = Processors()
        running = asyncio.Event()
        never = asyncio.Event()

        @procs.handler(work)
        async def handle(attempt: Attempt[None, Tag]) -> Completed:
            if attempt.job.attempt > 1:
                return await attempt.complete(Tag(tag="second worker"))
            await attempt.prepare(mode)
            running.set()
            await never.wait()
            return await attempt.complete(Tag(tag="never"))

        client = env.client(types)
        # A lease far longer than the case: only the release can free the job in time.
        stuck = env.worker(client, procs, shutdown_timeout=0.2, lease=LeaseConfig())
        await stuck.start()
        started = await env.start(client, work, None)
        await env.wait_event(running, "the job to start")
        async with asyncio.timeout(env.wait_timeout):
            await stuck.stop()

        released = await env.job(client, started.id)
        assert released.status is JobStatus.PENDING
        assert released.leased_by is None
        assert released.attempt == 1
        assert released.output is None
        assert "shut down" in recorded_error(released)

        async with env.worker(client, procs):
            chain = await env.await_chain(client, started.id)
        assert chain.output == {"tag": "second worker"}

    async def test_stopping_a_worker_that_never_started_is_harmless(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        work = types.define("work", input=None, output=Tag, entry=True)
        procs = Processors()

        @procs.handler(work)
        async def handle(attempt: Attempt[None, Tag]) -> Completed:
            return await attempt.complete(Tag(tag="x"))

        worker = env.worker(env.client(types), procs)
        await worker.stop()
        await worker.stop()
