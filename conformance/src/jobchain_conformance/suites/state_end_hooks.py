"""Failure and cancel hooks: the jobs a failure or a cancellation starts (``contracts.end_hooks``).

Whatever sets a job's ``failed_at`` or ``cancelled_at`` — ``job_fail``, ``chains_cancel``,
propagation, a new job against a blocker chain that already ended badly — starts, in the same
transaction, one pending root job per hook registered for the job's type (scope ``job``) and
for its chain's type (scope ``chain``), with :class:`jobchain.JobEnded` as its input.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import msgspec

from jobchain.contracts import ChainsCancel, EndHooksRegister, JobsList, StateAdapter, TypeEndHooks
from jobchain.end_hooks import JobEnded
from jobchain.entities import Job, JobStatus
from jobchain_conformance.helpers import (
    TYPE,
    WORKER,
    acquire_job,
    assert_time,
    cancel,
    complete,
    continue_chain,
    fail,
    get_job,
    retry,
    start,
)

SECOND = timedelta(seconds=1)
AT_TEXT = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+00:00"
"""How JobEnded.at is stored on every backend: UTC, microseconds, the offset spelled out."""
FAILED_HOOK = "order.failed"
CANCELLED_HOOK = "order.cancelled"
CHAIN_HOOK = "order.chain_ended"


async def register(adapter: StateAdapter, *rows: TypeEndHooks, now: datetime) -> None:
    """Register hook rows in one committed transaction."""
    async with adapter.transaction() as tx:
        await tx.end_hooks_register(EndHooksRegister(types=rows, now=now))


async def hook_jobs(adapter: StateAdapter, *hook_types: str) -> list[Job]:
    """Every job of the hook types (committed state), oldest first."""
    names = hook_types or (FAILED_HOOK, CANCELLED_HOOK, CHAIN_HOOK)
    async with adapter.transaction(read_only=True) as tx:
        page = await tx.jobs_list(JobsList(type_names=names, order="asc", limit=100))
    return list(page.items)


def ended(job: Job) -> JobEnded:
    """A hook job's input, decoded as its handler receives it."""
    return msgspec.convert(job.input, JobEnded)


class EndHooksTests:
    """end_hooks_register and the hook jobs started by failures and cancellations."""

    async def test_a_failed_job_starts_its_types_on_failed_hook(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await register(
            state_adapter,
            TypeEndHooks(type_name=TYPE, on_failed=FAILED_HOOK),
            TypeEndHooks(type_name=FAILED_HOOK, priority=7),
            now=now,
        )
        job = await acquire_job(state_adapter, await start(state_adapter, now=now), now=now)
        await fail(
            state_adapter,
            job.id,
            now=now + SECOND,
            error="card declined",
            worker_id=WORKER,
            lease_generation=job.lease_generation,
        )
        [hook] = await hook_jobs(state_adapter)
        assert (hook.type_name, hook.chain_type_name, hook.chain_id, hook.chain_index) == (
            FAILED_HOOK,
            FAILED_HOOK,
            hook.id,
            0,
        )
        assert (hook.status, hook.priority, hook.attempt) == (JobStatus.PENDING, 7, 0)
        assert_time(state_adapter, hook.created_at, now + SECOND)
        assert_time(state_adapter, hook.scheduled_at, now + SECOND)
        value = ended(hook)
        assert (value.event, value.scope, value.job_id, value.type_name) == ("failed", "job", job.id, TYPE)
        assert (value.chain_id, value.chain_type_name) == (job.chain_id, job.chain_type_name)
        assert (value.error, value.reason, value.failed_by_chain_id) == ("card declined", None, None)
        assert_time(state_adapter, value.at, now + SECOND)
        # The stored text too, the same on every backend (listings and exports show it).
        assert isinstance(hook.input, dict)
        assert re.fullmatch(AT_TEXT, hook.input["at"]), hook.input["at"]

    async def test_the_hook_job_is_a_pending_root_a_worker_takes_as_any_other(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await register(state_adapter, TypeEndHooks(type_name=TYPE, on_failed=FAILED_HOOK), now=now)
        root = await start(state_adapter, now=now)
        await fail(state_adapter, root.id, now=now)
        [hook] = await hook_jobs(state_adapter)
        claimed = await acquire_job(state_adapter, hook, now=now + SECOND)
        assert (claimed.id, claimed.status, claimed.priority) == (hook.id, JobStatus.RUNNING, 0)

    async def test_a_cancelled_chain_starts_on_cancelled_with_the_reason(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await register(
            state_adapter,
            TypeEndHooks(type_name=TYPE, on_failed=FAILED_HOOK, on_cancelled=CANCELLED_HOOK),
            now=now,
        )
        root = await start(state_adapter, now=now)
        await cancel(state_adapter, [root.id], now=now + SECOND, reason="customer asked")
        [hook] = await hook_jobs(state_adapter)
        assert hook.type_name == CANCELLED_HOOK
        value = ended(hook)
        assert (value.event, value.scope, value.job_id) == ("cancelled", "job", root.id)
        assert (value.reason, value.error, value.error_type) == ("customer asked", None, None)
        assert_time(state_adapter, value.at, now + SECOND)

    async def test_a_chain_hook_fires_for_the_chains_last_job_whatever_its_type(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await register(
            state_adapter,
            TypeEndHooks(type_name=TYPE, on_chain_failed=CHAIN_HOOK, on_failed=FAILED_HOOK),
            TypeEndHooks(type_name="ship"),
            now=now,
        )
        root = await start(state_adapter, now=now)
        nxt = await continue_chain(state_adapter, root, now=now + SECOND, type_name="ship")
        await fail(state_adapter, nxt.id, now=now + 2 * SECOND, error="no courier")
        # Only the chain's hook applies to the failed "ship" job (the root did not fail).
        [hook] = await hook_jobs(state_adapter)
        assert hook.type_name == CHAIN_HOOK
        value = ended(hook)
        assert (value.scope, value.job_id, value.type_name, value.chain_id, value.chain_type_name) == (
            "chain",
            nxt.id,
            "ship",
            root.id,
            TYPE,
        )
        assert value.error == "no courier"

    async def test_a_job_and_its_chain_hook_both_fire_once(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await register(
            state_adapter,
            TypeEndHooks(type_name=TYPE, on_failed=FAILED_HOOK, on_chain_failed=CHAIN_HOOK),
            now=now,
        )
        root = await start(state_adapter, now=now)
        await fail(state_adapter, root.id, now=now + SECOND)
        hooks = await hook_jobs(state_adapter)
        assert sorted((h.type_name, ended(h).scope) for h in hooks) == [
            (CHAIN_HOOK, "chain"),
            (FAILED_HOOK, "job"),
        ]
        assert len({h.id for h in hooks}) == 2

    async def test_propagation_starts_the_dependents_hooks(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await register(
            state_adapter,
            TypeEndHooks(type_name="invoice"),
            TypeEndHooks(type_name=TYPE, on_failed=FAILED_HOOK),
            now=now,
        )
        invoice = await start(state_adapter, now=now, type_name="invoice")
        order = await start(state_adapter, now=now + SECOND, blocker_chain_ids=[invoice.id])
        await fail(state_adapter, invoice.id, now=now + 2 * SECOND, error="bad address")
        [hook] = await hook_jobs(state_adapter)
        value = ended(hook)
        assert (value.job_id, value.error_type, value.failed_by_chain_id) == (
            order.id,
            "BlockerChainFailed",
            invoice.id,
        )
        assert value.error is not None
        assert invoice.id in value.error
        assert_time(state_adapter, value.at, now + 2 * SECOND)

    async def test_a_job_created_against_a_failed_blocker_starts_its_hook(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await register(state_adapter, TypeEndHooks(type_name=TYPE, on_failed=FAILED_HOOK), now=now)
        invoice = await start(state_adapter, now=now, type_name="invoice")
        await cancel(state_adapter, [invoice.id], now=now + SECOND)
        order = await start(state_adapter, now=now + 2 * SECOND, blocker_chain_ids=[invoice.id])
        assert order.status is JobStatus.FAILED
        [hook] = await hook_jobs(state_adapter)
        value = ended(hook)
        assert (value.job_id, value.error_type, value.failed_by_chain_id) == (
            order.id,
            "BlockerChainCancelled",
            invoice.id,
        )

    async def test_a_cascading_cancel_starts_the_hooks_of_every_chain_it_cancels(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await register(
            state_adapter,
            TypeEndHooks(type_name="email", on_cancelled=CANCELLED_HOOK),
            TypeEndHooks(type_name=TYPE, on_chain_cancelled=CHAIN_HOOK),
            now=now,
        )
        email = await start(state_adapter, now=now, type_name="email")
        order = await start(state_adapter, now=now + SECOND, blocker_chain_ids=[email.id])
        await cancel(state_adapter, [order.id], now=now + 2 * SECOND, reason="stop", cascade=True)
        hooks = await hook_jobs(state_adapter)
        assert sorted((h.type_name, ended(h).job_id, ended(h).reason) for h in hooks) == sorted(
            [(CANCELLED_HOOK, email.id, "stop"), (CHAIN_HOOK, order.id, "stop")]
        )

    async def test_a_rolled_back_failure_starts_nothing(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await register(state_adapter, TypeEndHooks(type_name=TYPE, on_cancelled=CANCELLED_HOOK), now=now)
        root = await start(state_adapter, now=now)

        class RollbackError(Exception):
            pass

        try:
            async with state_adapter.transaction() as tx:
                await tx.chains_cancel(ChainsCancel(chain_ids=[root.id], now=now))
                raise RollbackError
        except RollbackError:
            pass
        assert await hook_jobs(state_adapter) == []
        assert (await get_job(state_adapter, root.id)).status is JobStatus.PENDING

    async def test_a_retried_job_that_fails_again_starts_its_hook_again(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await register(state_adapter, TypeEndHooks(type_name=TYPE, on_failed=FAILED_HOOK), now=now)
        root = await start(state_adapter, now=now)
        await fail(state_adapter, root.id, now=now + SECOND)
        await retry(state_adapter, [root.id], now=now + 2 * SECOND)
        assert len(await hook_jobs(state_adapter)) == 1, "a retry starts no hook"
        await fail(state_adapter, root.id, now=now + 3 * SECOND)
        hooks = await hook_jobs(state_adapter)
        assert [ended(h).job_id for h in hooks] == [root.id, root.id]
        assert_time(state_adapter, ended(hooks[1]).at, now + 3 * SECOND)

    async def test_completion_and_unregistered_types_start_nothing(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await register(state_adapter, TypeEndHooks(type_name=TYPE, on_failed=FAILED_HOOK), now=now)
        done = await start(state_adapter, now=now)
        await complete(state_adapter, done.id, now=now)
        other = await start(state_adapter, now=now, type_name="other")
        await fail(state_adapter, other.id, now=now + SECOND)
        await cancel(state_adapter, [(await start(state_adapter, now=now, type_name="other")).id], now=now)
        assert await hook_jobs(state_adapter) == []

    async def test_registering_again_replaces_a_types_hooks(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await register(state_adapter, TypeEndHooks(type_name=TYPE, on_failed=FAILED_HOOK), now=now)
        await register(state_adapter, TypeEndHooks(type_name=TYPE, on_cancelled=CANCELLED_HOOK), now=now)
        first = await start(state_adapter, now=now)
        await fail(state_adapter, first.id, now=now + SECOND)
        assert await hook_jobs(state_adapter) == [], "the removed on_failed hook still fired"
        second = await start(state_adapter, now=now)
        await cancel(state_adapter, [second.id], now=now + SECOND)
        assert [h.type_name for h in await hook_jobs(state_adapter)] == [CANCELLED_HOOK]
        await register(state_adapter, TypeEndHooks(type_name=TYPE), now=now)
        third = await start(state_adapter, now=now)
        await cancel(state_adapter, [third.id], now=now + 2 * SECOND)
        assert len(await hook_jobs(state_adapter)) == 1, "a row without hooks still started one"
