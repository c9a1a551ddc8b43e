"""Dead letters (failed jobs) listed by type and error type with cursor pagination, and the
client's refusals of bad lifecycle input, each of which writes nothing."""

from __future__ import annotations

from typing import Any

import pytest

from jobchain import (
    ChainNotCancellableError,
    ChainNotFoundError,
    Completion,
    InvalidArgumentError,
    InvalidJobIdError,
    JobNotFoundError,
    JobNotRetryableError,
    JobStatus,
    JobTypes,
)
from jobchain.entities import new_id
from jobchain_conformance.suites._integration_base import IntegrationEnv, Num, Total
from jobchain_conformance.suites.integration_lifecycle_client_support import LATER, fail_now, statuses


class DeadLetterListingTests:
    """``list_dead_letters`` and the lifecycle filters of ``list_jobs``/``list_chains``."""

    async def test_dead_letters_page_through_failed_jobs_by_type_and_error_type(
        self, env: IntegrationEnv
    ) -> None:
        types = JobTypes()
        alpha = types.define("alpha", input=Num, output=Total, entry=True)
        beta = types.define("beta", input=Num, output=Total, entry=True)
        client = env.client(types)
        values = [await env.start(client, alpha, Num(n=i), schedule=LATER) for i in range(3)]
        keys = [await env.start(client, alpha, Num(n=10 + i), schedule=LATER) for i in range(2)]
        other = await env.start(client, beta, Num(n=20), schedule=LATER)
        cancelled = await env.start(client, alpha, Num(n=30), schedule=LATER)
        await env.start(client, alpha, Num(n=40), schedule=LATER)
        for chain in [*values, other]:
            await fail_now(env, client, chain.id, error_type="ValueError", message="bad value")
        for chain in keys:
            await fail_now(env, client, chain.id, error_type="KeyError", message="no key")
        async with client.transaction() as tx:
            await client.cancel_chain(tx, cancelled.id)

        seen: list[str] = []
        cursor = None
        pages = 0
        while True:
            page = await client.list_dead_letters(type_names=[alpha], cursor=cursor, limit=2)
            pages += 1
            assert len(page.items) <= 2
            seen += [job.id for job in page.items]
            assert all(job.status is JobStatus.FAILED for job in page.items)
            cursor = page.next_cursor
            if cursor is None:
                break
        assert pages >= 3
        assert len(seen) == len(set(seen))
        assert set(seen) == {c.id for c in [*values, *keys]}

        by_error = await client.list_dead_letters(error_types=["KeyError"], order="asc", limit=10)
        assert {j.id for j in by_error.items} == {c.id for c in keys}
        entry = by_error.items[0].attempt_errors[-1]
        assert (entry.error_type, entry.message) == ("KeyError", "no key")
        everything = await client.list_dead_letters(limit=10)
        assert {j.id for j in everything.items} == {c.id for c in [*values, *keys, other]}
        failed_values = await client.list_jobs(statuses=["failed"], error_types=["ValueError"], limit=10)
        assert {j.id for j in failed_values.items} == {c.id for c in [*values, other]}
        failed_chains = await client.list_chains(type_names=[beta], statuses=[JobStatus.FAILED], limit=10)
        assert [c.id for c in failed_chains.items] == [other.id]
        assert failed_chains.items[0].finished_at is not None
        job = await client.get_job(other.id)
        assert job is not None
        assert job.failed_at is not None
        assert [e.error_type for e in job.attempt_errors] == ["ValueError"]


class ClientLifecycleBadInputTests:
    """Unknown ids, wrong statuses and invalid arguments: a typed error and nothing written."""

    async def test_cancel_refusals_are_typed_and_write_nothing(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        work = types.define("work", input=Num, output=Total, entry=True)
        client = env.client(types)
        pending = await env.start(client, work, Num(n=1), schedule=LATER)
        completed = await env.start(client, work, Num(n=2), schedule=LATER)
        failed = await env.start(client, work, Num(n=3), schedule=LATER)

        async def done(completion: Completion[Any, Any]) -> None:
            await completion.complete(Total(total=2))

        async with client.transaction() as tx:
            await client.complete_chain(tx, work, completed.id, done)
        await fail_now(env, client, failed.id)
        unknown = new_id()

        async with client.transaction() as tx:
            with pytest.raises(ChainNotFoundError) as missing:
                await client.cancel_chains(tx, [pending.id, unknown])
        assert missing.value.chain_id == unknown
        async with client.transaction() as tx:
            with pytest.raises(ChainNotCancellableError) as finished:
                await client.cancel_chains(tx, [pending.id, completed.id], reason="x")
        assert (finished.value.chain_id, finished.value.status) == (completed.id, "completed")
        assert "completed" in str(finished.value)
        async with client.transaction() as tx:
            with pytest.raises(ChainNotCancellableError) as already:
                await client.cancel_chain(tx, failed.id)
        assert already.value.status == "failed"
        async with client.transaction() as tx:
            with pytest.raises(InvalidArgumentError):
                await client.cancel_chain(tx, pending.id, reason=5)  # type: ignore[arg-type]
            with pytest.raises(InvalidJobIdError):
                await client.cancel_chains(tx, [pending.id, "not-an-id"])
            with pytest.raises(InvalidArgumentError):
                await client.cancel_chains(tx, pending.id)

        job = await env.job(client, pending.id)
        assert job.status is JobStatus.PENDING
        assert job.cancelled_at is None
        assert job.cancel_reason is None
        assert await statuses(env, client, [completed.id, failed.id]) == [
            JobStatus.COMPLETED,
            JobStatus.FAILED,
        ]

    async def test_retry_refusals_are_typed_and_write_nothing(self, env: IntegrationEnv) -> None:
        types = JobTypes()
        work = types.define("work", input=Num, output=Total, entry=True)
        client = env.client(types)
        pending = await env.start(client, work, Num(n=1), schedule=LATER)
        failed = await env.start(client, work, Num(n=2), schedule=LATER)
        completed = await env.start(client, work, Num(n=3), schedule=LATER)

        async def done(completion: Completion[Any, Any]) -> None:
            await completion.complete(Total(total=3))

        async with client.transaction() as tx:
            await client.complete_chain(tx, work, completed.id, done)
        await fail_now(env, client, failed.id)
        before = await env.job(client, failed.id)
        unknown = new_id()

        async with client.transaction() as tx:
            with pytest.raises(JobNotFoundError) as missing:
                await client.retry_jobs(tx, [failed.id, unknown])
        assert missing.value.job_id == unknown
        async with client.transaction() as tx:
            with pytest.raises(JobNotRetryableError) as not_failed:
                await client.retry_jobs(tx, [failed.id, pending.id])
        assert (not_failed.value.job_id, not_failed.value.status) == (pending.id, "pending")
        assert "pending" in str(not_failed.value)
        async with client.transaction() as tx:
            with pytest.raises(JobNotRetryableError) as finished:
                await client.retry_job(tx, completed.id)
        assert finished.value.status == "completed"
        async with client.transaction() as tx:
            with pytest.raises(InvalidArgumentError):
                await client.retry_job(tx, failed.id, schedule="soon")  # type: ignore[arg-type]
            with pytest.raises(InvalidArgumentError):
                await client.retry_chains(tx, statuses=["completed"])
            with pytest.raises(InvalidArgumentError):
                await client.retry_chains(tx, limit=0)

        after = await env.job(client, failed.id)
        assert after.status is JobStatus.FAILED
        assert after.failed_at == before.failed_at
        assert after.attempt_base == before.attempt_base
        assert after.attempt_errors == before.attempt_errors
        assert await statuses(env, client, [pending.id, completed.id]) == [
            JobStatus.PENDING,
            JobStatus.COMPLETED,
        ]
