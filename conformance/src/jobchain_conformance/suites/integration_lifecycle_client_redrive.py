"""Redrive through the client: ``retry_job`` gives a fresh attempt budget and keeps the error
history, dependents follow their blocker, ``retry_chains`` selects by filters."""

from __future__ import annotations

import pytest

from jobchain import ChainFailedError, JobNotRetryableError, JobStatus, JobTypes
from jobchain.worker import Attempt, Completed, Processors
from jobchain_conformance.suites._integration_base import IntegrationEnv, Num, Total
from jobchain_conformance.suites.integration_lifecycle_client_support import (
    LATER,
    fail_now,
    fails_until_retried,
    is_status,
    statuses,
)


class ClientRedriveTests:
    """``retry_job``/``retry_jobs``/``retry_chains`` on failed and cancelled jobs."""

    async def test_retry_job_after_exhausted_attempts_gives_a_fresh_budget_and_completes(
        self, env: IntegrationEnv
    ) -> None:
        types = JobTypes()
        work = types.define("work", input=Num, output=Total, entry=True, max_attempts=2)
        procs = Processors()

        @procs.handler(work)
        async def handle(attempt: Attempt[Num, Total]) -> Completed:
            if attempt.job.attempt_base == 0:
                raise ValueError(f"attempt {attempt.job.attempt} failed")
            return await attempt.complete(Total(total=attempt.input.n))

        client = env.client(types)
        started = await env.start(client, work, Num(n=7))
        async with env.worker(client, procs):
            with pytest.raises(ChainFailedError) as failed:
                await env.await_chain(client, started.id)
        assert failed.value.error is not None
        assert "attempt 2 failed" in failed.value.error
        dead = await env.job(client, started.id)
        assert dead.status is JobStatus.FAILED
        assert (dead.attempt, dead.attempts_used) == (2, 2)
        assert [e.attempt for e in dead.attempt_errors] == [1, 2]
        assert {e.error_type for e in dead.attempt_errors} == {"ValueError"}

        async with client.transaction() as tx:
            retried = await client.retry_job(tx, started.id)
        assert retried.status is JobStatus.PENDING
        assert (retried.attempt, retried.attempt_base, retried.attempts_used) == (2, 2, 0)
        assert retried.failed_at is None
        assert retried.last_attempt_error == dead.last_attempt_error
        assert retried.attempt_errors == dead.attempt_errors

        async with env.worker(client, procs):
            chain = await env.await_chain(client, started.id)
        assert chain.output == {"total": 7}
        done = await env.job(client, started.id)
        assert (done.attempt, done.attempts_used) == (3, 1)
        assert [e.attempt for e in done.attempt_errors] == [1, 2]  # the history stays

    async def test_retry_job_redrives_the_dependents_that_failed_with_it(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        procs = fails_until_retried(types, "source")
        needs = types.define("needs", input=Num, output=Total, entry=True)

        @procs.handler(needs)
        async def handle(attempt: Attempt[Num, Total]) -> Completed:
            return await attempt.complete(Total(total=attempt.input.n + 1))

        client = env.client(types)
        blocker = await env.start(client, types.get("source"), Num(n=1))
        dependent = await env.start(client, needs, Num(n=10), blockers=[blocker])
        async with env.worker(client, procs):
            with pytest.raises(ChainFailedError):
                await env.await_chain(client, dependent.id)
        failed = await env.job(client, dependent.id)
        assert failed.status is JobStatus.FAILED
        assert failed.failed_by_chain_id == blocker.id

        async with client.transaction() as tx:
            with pytest.raises(JobNotRetryableError) as refused:
                await client.retry_job(tx, dependent.id)
        assert refused.value.blocked_by_chain_id == blocker.id
        assert await statuses(env, client, [blocker.id, dependent.id]) == [JobStatus.FAILED, JobStatus.FAILED]

        async with client.transaction() as tx:
            await client.retry_job(tx, blocker.id)
        reblocked = await env.job(client, dependent.id)
        assert reblocked.status is JobStatus.BLOCKED
        assert reblocked.failed_by_chain_id is None
        assert reblocked.failed_at is None
        async with env.worker(client, procs):
            chain = await env.await_chain(client, dependent.id)
        assert chain.output == {"total": 11}

    async def test_retry_jobs_at_a_schedule_leaves_them_pending_until_then(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        work = types.define("work", input=Num, output=Total, entry=True)
        client = env.client(types)
        chains = [await env.start(client, work, Num(n=i), schedule=LATER) for i in range(2)]
        for chain in chains:
            await fail_now(env, client, chain.id)
        async with client.transaction() as tx:
            retried = await client.retry_jobs(tx, [c.id for c in reversed(chains)], schedule=LATER)
        assert [j.id for j in retried] == [c.id for c in reversed(chains)]
        for job in retried:
            assert job.status is JobStatus.PENDING
            assert job.scheduled_at > job.created_at
        triggered = await env.trigger(client, chains[0].id)
        assert triggered.status is JobStatus.PENDING

    async def test_retry_chains_selects_by_type_status_and_error_type(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        alpha = types.define("alpha", input=Num, output=Total, entry=True)
        beta = types.define("beta", input=Num, output=Total, entry=True)
        client = env.client(types)
        a_value = [await env.start(client, alpha, Num(n=i), schedule=LATER) for i in range(3)]
        a_key = await env.start(client, alpha, Num(n=10), schedule=LATER)
        b_value = await env.start(client, beta, Num(n=20), schedule=LATER)
        a_cancelled = await env.start(client, alpha, Num(n=30), schedule=LATER)
        a_pending = await env.start(client, alpha, Num(n=40), schedule=LATER)
        for chain in [*a_value, b_value]:
            await fail_now(env, client, chain.id, error_type="ValueError")
        await fail_now(env, client, a_key.id, error_type="KeyError")
        async with client.transaction() as tx:
            await client.cancel_chain(tx, a_cancelled.id)

        async with client.transaction() as tx:
            first = await client.retry_chains(
                tx, type_names=[alpha], statuses=["failed"], error_types=["ValueError"], limit=2
            )
        assert first.has_more
        assert len(first.retried) == 2
        async with client.transaction() as tx:
            rest = await client.retry_chains(
                tx, type_names=[alpha], statuses=["failed"], error_types=["ValueError"], limit=2
            )
        assert not rest.has_more
        assert {j.id for j in first.retried + rest.retried} == {c.id for c in a_value}
        assert all(j.status is JobStatus.PENDING for j in first.retried + rest.retried)
        assert await statuses(env, client, [a_key.id, b_value.id, a_cancelled.id, a_pending.id]) == [
            JobStatus.FAILED,
            JobStatus.FAILED,
            JobStatus.CANCELLED,
            JobStatus.PENDING,
        ]

        async with client.transaction() as tx:
            cancelled = await client.retry_chains(tx, statuses=["cancelled"])
        assert [j.id for j in cancelled.retried] == [a_cancelled.id]
        async with client.transaction() as tx:
            remaining = await client.retry_chains(tx)
        assert {j.id for j in remaining.retried} == {a_key.id, b_value.id}
        async with client.transaction() as tx:
            none_left = await client.retry_chains(tx)
        assert none_left.retried == []
        assert not none_left.has_more

    async def test_retry_chains_redrives_propagated_failures_through_their_blocker(
        self, env: IntegrationEnv
    ) -> None:
        types = JobTypes()
        source = types.define("source", input=Num, output=Total, entry=True)
        needs = types.define("needs", input=Num, output=Total, entry=True)
        client = env.client(types)
        blocker = await env.start(client, source, Num(n=1), schedule=LATER)
        middle = await env.start(client, needs, Num(n=2), blockers=[blocker])
        last = await env.start(client, needs, Num(n=3), blockers=[middle])
        failed = await fail_now(env, client, blocker.id)
        assert {j.id for j in failed.failed_jobs} == {middle.id, last.id}

        async with client.transaction() as tx:
            result = await client.retry_chains(tx)
        assert [j.id for j in result.retried] == [blocker.id]
        assert {j.id for j in result.reblocked} == {middle.id, last.id}
        assert await statuses(env, client, [blocker.id, middle.id, last.id]) == [
            JobStatus.PENDING,
            JobStatus.BLOCKED,
            JobStatus.BLOCKED,
        ]
        job = await env.wait_job(client, last.id, is_status(JobStatus.BLOCKED), "the last dependent")
        assert job.failed_by_chain_id is None
        assert job.attempt_errors[-1].error_type == "BlockerChainFailed"  # the history stays
