"""Awaiting chains: completion, already complete, failed, cancelled, timeout, missing, deleted,
type mismatch."""

from __future__ import annotations

import asyncio

import pytest

from jobchain import (
    ChainCancelledError,
    ChainFailedError,
    ChainNotFoundError,
    FailJob,
    JobStatus,
    JobTypeMismatchError,
    JobTypes,
    Schedule,
    WaitChainTimeoutError,
)
from jobchain.entities import new_id
from jobchain.worker import Attempt, Completed, Processors
from jobchain_conformance.suites._integration_base import IntegrationEnv, Num, Total
from jobchain_conformance.suites.integration_lifecycle_client_support import awaiting, fail_now

LATER = Schedule.in_seconds(3600)


def _two_steps(types: JobTypes) -> Processors:
    head = types.define("head", input=Num, output=None, entry=True, continues_with=["tail"])
    tail = types.define("tail", input=Num, output=Total)
    procs = Processors()

    @procs.handler(head)
    async def do_head(attempt: Attempt[Num, None]) -> Completed:
        return await attempt.continue_with(tail, Num(n=attempt.input.n + 1))

    @procs.handler(tail)
    async def do_tail(attempt: Attempt[Num, Total]) -> Completed:
        return await attempt.complete(Total(total=attempt.input.n))

    return procs


class AwaitChainTests:
    """``await_chain`` returns the completed chain or fails with a typed error, always bounded:
    a failed or cancelled chain raises as soon as it finishes, not at the timeout."""

    async def test_waiters_started_before_the_worker_get_the_last_jobs_output(
        self, env: IntegrationEnv
    ) -> None:
        types = JobTypes()
        procs = _two_steps(types)
        client = env.client(types)
        started = await env.start(client, types.get("head"), Num(n=1))
        waiters = await awaiting(env, types, started.id, waiters=3)
        assert not any(w.done() for w in waiters)  # no worker yet: nothing can end them

        async with env.worker(client, procs):
            chains = await asyncio.gather(*waiters)

        for chain in chains:
            assert chain.status is JobStatus.COMPLETED
            assert chain.output == {"total": 2}
            assert chain.last.type_name == "tail"

    async def test_an_already_completed_chain_returns_at_once(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        procs = _two_steps(types)
        client = env.client(types)
        started = await env.start(client, types.get("head"), Num(n=5))
        await env.run_until_idle(client, procs)
        # The worker is gone: only the first check can succeed.
        chain = await client.await_chain(started.id, timeout=env.wait_timeout, poll_interval=3600)
        assert chain.output == {"total": 6}

    async def test_times_out_with_a_typed_error(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        _two_steps(types)
        client = env.client(types)
        started = await env.start(client, types.get("head"), Num(n=1), schedule=LATER)
        with pytest.raises(WaitChainTimeoutError) as timed_out:
            await client.await_chain(started.id, timeout=0.2, poll_interval=env.poll_interval)
        assert timed_out.value.chain_id == started.id
        assert timed_out.value.timeout == pytest.approx(0.2)

    async def test_a_missing_chain_fails_at_once(self, env: IntegrationEnv) -> None:
        client = env.client(JobTypes())
        with pytest.raises(ChainNotFoundError):
            await client.await_chain(new_id(), timeout=env.wait_timeout, poll_interval=env.poll_interval)

    async def test_a_chain_deleted_while_awaited_fails_with_not_found(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        _two_steps(types)
        client = env.client(types)
        started = await env.start(client, types.get("head"), Num(n=1), schedule=LATER)
        [waiter] = await awaiting(env, types, started.id)
        async with client.transaction() as tx:
            await client.delete_chain(tx, started.id)
        with pytest.raises(ChainNotFoundError):
            await waiter

    async def test_a_wrong_type_fails_with_type_mismatch(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        _two_steps(types)
        other = types.define("other", input=Num, output=Total, entry=True)
        client = env.client(types)
        started = await env.start(client, types.get("head"), Num(n=1))
        with pytest.raises(JobTypeMismatchError):
            await client.await_chain(
                started.id, job_type=other, timeout=env.wait_timeout, poll_interval=env.poll_interval
            )

    async def test_a_chain_failing_while_awaited_raises_chain_failed_error_with_its_error(
        self, env: IntegrationEnv
    ) -> None:
        types = JobTypes()
        doomed = types.define("doomed", input=Num, output=Total, entry=True)
        procs = Processors()

        @procs.handler(doomed)
        async def handle(attempt: Attempt[Num, Total]) -> Completed:
            raise FailJob(f"order {attempt.input.n} does not exist")

        client = env.client(types)
        started = await env.start(client, doomed, Num(n=9))
        # With a notify backend only the chain-finished notice can end this wait in time.
        poll = 3600 if env.notify is not None else env.poll_interval
        [waiter] = await awaiting(env, types, started.id, poll_interval=poll)
        async with env.worker(client, procs):
            with pytest.raises(ChainFailedError) as failed:
                await waiter
        assert failed.value.chain_id == started.id
        assert failed.value.job.id == started.id
        assert failed.value.job.status is JobStatus.FAILED
        assert failed.value.error is not None
        assert "order 9 does not exist" in failed.value.error
        assert "order 9 does not exist" in str(failed.value)

    async def test_a_chain_cancelled_while_awaited_raises_chain_cancelled_error_with_the_reason(
        self, env: IntegrationEnv
    ) -> None:
        types = JobTypes()
        _two_steps(types)
        client = env.client(types)
        started = await env.start(client, types.get("head"), Num(n=1), schedule=LATER)
        poll = 3600 if env.notify is not None else env.poll_interval
        [waiter] = await awaiting(env, types, started.id, poll_interval=poll)
        async with client.transaction() as tx:
            await client.cancel_chain(tx, started.id, reason="no longer wanted")
        with pytest.raises(ChainCancelledError) as cancelled:
            await waiter
        assert cancelled.value.chain_id == started.id
        assert cancelled.value.reason == "no longer wanted"
        assert cancelled.value.job.status is JobStatus.CANCELLED

    async def test_an_already_failed_or_cancelled_chain_raises_at_once(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        _two_steps(types)
        client = env.client(types)
        first = await env.start(client, types.get("head"), Num(n=1), schedule=LATER)
        second = await env.start(client, types.get("head"), Num(n=2), schedule=LATER)
        third = await env.start(client, types.get("head"), Num(n=3), schedule=LATER)
        async with client.transaction() as tx:
            await client.cancel_chain(tx, first.id)
            await client.cancel_chain(tx, second.id, reason="gone")
        await fail_now(env, client, third.id, error_type="KeyError", message="no such order")
        # No notification will come and the poll interval is an hour: only the first check can end it.
        with pytest.raises(ChainCancelledError) as cancelled:
            await client.await_chain(first.id, timeout=env.wait_timeout, poll_interval=3600)
        assert cancelled.value.reason is None
        with pytest.raises(ChainCancelledError):
            await client.await_chain(second.id, timeout=env.wait_timeout, poll_interval=3600)
        with pytest.raises(ChainFailedError) as failed:
            await client.await_chain(third.id, timeout=env.wait_timeout, poll_interval=3600)
        assert failed.value.error == "KeyError: no such order"
