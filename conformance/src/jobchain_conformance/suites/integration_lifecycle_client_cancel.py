"""Cancelling chains through the client: blocked, pending and running chains, the history that
stays, what happens to dependents, and awaiting a cancelled chain."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from jobchain import (
    ChainCancelledError,
    ChainFailedError,
    Completion,
    JobStatus,
    JobTypes,
)
from jobchain.worker import AbortReason, Attempt, Completed, Processors
from jobchain_conformance.suites._integration_base import IntegrationEnv, Num, Tag, Total
from jobchain_conformance.suites.integration_lifecycle_client_support import LATER, awaiting, is_status


class ClientCancelTests:
    """``cancel_chain``/``cancel_chains``: history kept, reason and time recorded, fencing."""

    async def test_cancel_chains_marks_pending_chains_cancelled_and_keeps_their_history(
        self, env: IntegrationEnv
    ) -> None:
        types = JobTypes()
        step = types.define("step", input=Num, output=Total)
        head = types.define("head", input=Num, output=None, entry=True, continues_with=[step])
        client = env.client(types)
        alone = await env.start(client, head, Num(n=1), schedule=LATER)
        continued = await env.start(client, head, Num(n=2), schedule=LATER)

        async def hand_over(completion: Completion[Any, Any]) -> None:
            await completion.continue_with(step, Num(n=3), schedule=LATER)

        async with client.transaction() as tx:
            await client.complete_chain(tx, head, continued.id, hand_over)
        async with client.transaction() as tx:
            chains = await client.cancel_chains(tx, [continued.id, alone.id], reason="customer left")

        assert [c.id for c in chains] == [continued.id, alone.id]
        for chain in chains:
            assert chain.status is JobStatus.CANCELLED
            assert chain.last.cancel_reason == "customer left"
            assert chain.last.cancelled_at is not None
            assert chain.last.leased_by is None
        jobs = await env.chain_jobs(client, continued.id)
        assert [j.status for j in jobs] == [JobStatus.COMPLETED, JobStatus.CANCELLED]
        assert [j.type_name for j in jobs] == ["head", "step"]
        reread = await env.chain(client, continued.id)
        assert reread.status is JobStatus.CANCELLED
        assert reread.finished_at == reread.last.cancelled_at
        listed = await client.list_chains(statuses=[JobStatus.CANCELLED], limit=10)
        assert {c.id for c in listed.items} == {alone.id, continued.id}
        assert (await client.list_jobs(statuses=["cancelled"], limit=10)).items[0].cancel_reason == (
            "customer left"
        )

    async def test_cancel_chain_on_a_blocked_chain_leaves_its_blocker_alone(
        self, env: IntegrationEnv
    ) -> None:
        types = JobTypes()
        source = types.define("source", input=Num, output=Total, entry=True)
        needs = types.define("needs", input=Num, output=Total, entry=True)
        client = env.client(types)
        blocker = await env.start(client, source, Num(n=1), schedule=LATER)
        dependent = await env.start(client, needs, Num(n=2), blockers=[blocker])
        assert dependent.status is JobStatus.BLOCKED

        async with client.transaction() as tx:
            chain = await client.cancel_chain(tx, dependent.id)
        assert chain.status is JobStatus.CANCELLED
        assert chain.last.cancel_reason is None

        async def done(completion: Completion[Any, Any]) -> None:
            await completion.complete(Total(total=1))

        async with client.transaction() as tx:
            await client.complete_chain(tx, source, blocker.id, done)
        # The blocker completing does not bring the cancelled job back.
        assert (await env.chain(client, dependent.id)).status is JobStatus.CANCELLED
        assert (await env.chain(client, blocker.id)).status is JobStatus.COMPLETED

    async def test_cancelling_a_blocker_fails_its_dependents_and_runs_the_opted_in_ones(
        self, env: IntegrationEnv
    ) -> None:
        types = JobTypes()
        source = types.define("source", input=Num, output=Total, entry=True)
        needs = types.define("needs", input=Num, output=Total, entry=True)
        anyway = types.define("anyway", input=Num, output=Tag, entry=True, runs_after_failed_blockers=True)
        procs = Processors()

        @procs.handler(anyway)
        async def report(attempt: Attempt[Num, Tag]) -> Completed:
            seen = [chain.status.value for chain in await attempt.blockers()]
            return await attempt.complete(Tag(tag=",".join(seen)))

        client = env.client(types)
        blocker = await env.start(client, source, Num(n=1), schedule=LATER)
        strict = await env.start(client, needs, Num(n=2), blockers=[blocker])
        tolerant = await env.start(client, anyway, Num(n=3), blockers=[blocker])
        [waiter] = await awaiting(env, types, strict.id)

        async with client.transaction() as tx:
            await client.cancel_chain(tx, blocker.id, reason="obsolete")

        with pytest.raises(ChainFailedError) as failed:
            await waiter
        assert failed.value.job.failed_by_chain_id == blocker.id
        assert failed.value.error is not None
        assert blocker.id in failed.value.error
        job = await env.job(client, strict.id)
        assert job.status is JobStatus.FAILED
        assert job.failed_at is not None
        assert job.attempt_errors[-1].error_type == "BlockerChainCancelled"
        async with env.worker(client, procs):
            chain = await env.await_chain(client, tolerant.id)
        assert chain.output == {"tag": "cancelled"}

    async def test_cancelling_a_running_chain_fences_its_attempt_and_wakes_waiters(
        self, env: IntegrationEnv
    ) -> None:
        types = JobTypes()
        slow = types.define("slow", input=None, output=Tag, entry=True)
        procs = Processors()
        running = asyncio.Event()
        finished = asyncio.Event()
        reasons: list[AbortReason | None] = []
        late: list[object] = []

        @procs.handler(slow)
        async def handle(attempt: Attempt[None, Tag]) -> Completed:
            await attempt.prepare("staged")
            running.set()
            try:
                async with asyncio.timeout(env.wait_timeout):
                    await attempt.signal.wait()
            except TimeoutError:
                pass
            reasons.append(attempt.signal.reason)
            try:
                done = await attempt.complete(Tag(tag="late"))
                late.append(done)
                return done
            except BaseException as error:
                late.append(error)
                raise
            finally:
                finished.set()

        client = env.client(types)
        # Without a notify adapter the worker learns of the cancel at its next renewal: renew
        # often so that comes soon (the lease is still long; nothing here lets it lapse).
        async with env.worker(client, procs, lease=env.renewing_lease):
            started = await env.start(client, slow, None)
            await env.wait_event(running, "the handler to start")
            [waiter] = await awaiting(env, types, started.id)
            async with client.transaction() as tx:
                chain = await client.cancel_chain(tx, started.id, reason="stop it")
            assert chain.status is JobStatus.CANCELLED
            with pytest.raises(ChainCancelledError) as cancelled:
                await waiter
            assert cancelled.value.reason == "stop it"
            await env.wait_event(finished, "the cancelled attempt to end")

        assert reasons == [AbortReason.CANCELLED]
        assert len(late) == 1
        assert isinstance(late[0], BaseException)  # its late completion was refused
        job = await env.wait_job(
            client, started.id, is_status(JobStatus.CANCELLED), "the job to stay cancelled"
        )
        assert job.output is None
        assert job.leased_by is None
        assert job.cancel_reason == "stop it"
        assert job.attempt == 1

    async def test_a_cancelled_chain_can_be_retried_and_runs_to_completion(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        work = types.define("work", input=Num, output=Total, entry=True)
        procs = Processors()

        @procs.handler(work)
        async def handle(attempt: Attempt[Num, Total]) -> Completed:
            return await attempt.complete(Total(total=attempt.input.n * 2))

        client = env.client(types)
        started = await env.start(client, work, Num(n=21), schedule=LATER)
        async with client.transaction() as tx:
            await client.cancel_chain(tx, started.id, reason="oops")
        async with client.transaction() as tx:
            job = await client.retry_job(tx, started.id)
        assert job.status is JobStatus.PENDING
        assert job.cancelled_at is None
        assert job.cancel_reason is None
        async with env.worker(client, procs):
            chain = await env.await_chain(client, started.id)
        assert chain.output == {"total": 42}
