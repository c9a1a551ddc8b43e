"""chains_cancel with ``cascade``: the chains a cancelled chain waits for are cancelled too.

The set grows, recursively, by every non-terminal chain blocking a job of the set (declared or
added by a handler's wait), except a *shared* one, which blocks a job of a non-terminal chain
outside the set: it is left out (and reported) with whatever only it reaches, unless
``include_shared``. Terminal blockers are skipped. A dry run returns the same result and changes
nothing.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from jobchain.contracts import StateAdapter
from jobchain.entities import Job, JobStatus
from jobchain_conformance.helpers import (
    WORKER,
    acquire_job,
    cancel,
    complete,
    get_job,
    start,
    wait_for,
)
from jobchain_conformance.suites.state_lifecycle_fail import running_job

SECOND = timedelta(seconds=1)


def _ids(jobs: list[Job]) -> list[str]:
    return [job.id for job in jobs]


class ChainsCancelCascadeTests:
    """chains_cancel(cascade=True): blockers recursively, shared ones left out unless asked."""

    async def test_a_cascade_cancels_the_blockers_recursively(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        pdf = await start(state_adapter, now=now, type_name="pdf")
        invoice = await start(
            state_adapter, now=now + SECOND, type_name="invoice", blocker_chain_ids=[pdf.id]
        )
        email = await start(state_adapter, now=now + 2 * SECOND, type_name="email")
        order = await start(state_adapter, now=now + 3 * SECOND, blocker_chain_ids=[email.id, invoice.id])
        result = await cancel(state_adapter, [order.id], now=now + 4 * SECOND, reason="stop", cascade=True)
        assert _ids(result.cancelled) == [order.id]
        assert [(job.id, job.status, job.cancel_reason) for job in result.cascaded] == [
            (chain.id, JobStatus.CANCELLED, "stop") for chain in (pdf, invoice, email)
        ]
        assert (result.shared, result.failed_jobs, result.running_job_ids) == ([], [], [])
        for job in (order, pdf, invoice, email):
            assert (await get_job(state_adapter, job.id)).status is JobStatus.CANCELLED

    async def test_without_cascade_the_blockers_keep_running(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        email = await start(state_adapter, now=now, type_name="email")
        order = await start(state_adapter, now=now + SECOND, blocker_chain_ids=[email.id])
        result = await cancel(state_adapter, [order.id], now=now + 2 * SECOND)
        assert (result.cascaded, result.shared) == ([], [])
        assert await get_job(state_adapter, email.id) == email

    async def test_a_cascade_follows_the_chains_a_handler_waits_for(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await acquire_job(state_adapter, await start(state_adapter, now=now), now=now)
        child = await start(state_adapter, now=now + SECOND, type_name="child")
        await wait_for(
            state_adapter, job.id, [child.id], now=now + SECOND, lease_generation=job.lease_generation
        )
        result = await cancel(state_adapter, [job.id], now=now + 2 * SECOND, cascade=True)
        assert (_ids(result.cancelled), _ids(result.cascaded)) == ([job.id], [child.id])
        assert (await get_job(state_adapter, child.id)).status is JobStatus.CANCELLED

    async def _shared_graph(self, adapter: StateAdapter, now: datetime) -> dict[str, Job]:
        """order waits for only, both and shared; shared (waited for by other too) waits for
        deep and both."""
        deep = await start(adapter, now=now, type_name="deep")
        both = await start(adapter, now=now + SECOND, type_name="both")
        shared = await start(
            adapter, now=now + 2 * SECOND, type_name="shared", blocker_chain_ids=[deep.id, both.id]
        )
        only = await start(adapter, now=now + 3 * SECOND, type_name="only")
        other = await start(adapter, now=now + 4 * SECOND, type_name="other", blocker_chain_ids=[shared.id])
        order = await start(adapter, now=now + 5 * SECOND, blocker_chain_ids=[shared.id, only.id, both.id])
        return {"deep": deep, "both": both, "shared": shared, "only": only, "other": other, "order": order}

    async def test_a_shared_blocker_is_left_out_with_what_only_it_reaches_and_reported(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        g = await self._shared_graph(state_adapter, now)
        result = await cancel(state_adapter, [g["order"].id], now=now + 6 * SECOND, cascade=True)
        assert _ids(result.cascaded) == [g["only"].id]
        # both blocks the order and the shared chain: cancelling it would fail the shared one.
        assert result.shared == [g["both"].id, g["shared"].id]
        assert result.failed_jobs == []
        for name in ("deep", "both", "shared", "other"):
            assert await get_job(state_adapter, g[name].id) == g[name], name
        assert (await get_job(state_adapter, g["only"].id)).status is JobStatus.CANCELLED

    async def test_naming_the_other_waiter_too_takes_the_shared_blocker(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        g = await self._shared_graph(state_adapter, now)
        named = [g["order"].id, g["other"].id]
        result = await cancel(state_adapter, named, now=now + 6 * SECOND, cascade=True)
        assert _ids(result.cancelled) == named
        assert _ids(result.cascaded) == [g[name].id for name in ("deep", "both", "shared", "only")]
        assert result.shared == []

    async def test_include_shared_takes_the_shared_blockers(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        g = await self._shared_graph(state_adapter, now)
        result = await cancel(
            state_adapter, [g["order"].id], now=now + 6 * SECOND, cascade=True, include_shared=True
        )
        assert _ids(result.cascaded) == [g[name].id for name in ("deep", "both", "shared", "only")]
        assert result.shared == []
        # The other waiter fails with its cancelled blocker, as any dependent does.
        assert [(job.id, job.status) for job in result.failed_jobs] == [(g["other"].id, JobStatus.FAILED)]

    async def test_terminal_blockers_are_skipped_and_a_finished_waiter_shares_nothing(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        done = await start(state_adapter, now=now, type_name="done")
        await complete(state_adapter, done.id, now=now)
        behind = await start(state_adapter, now=now + SECOND, type_name="behind")
        gone = await start(
            state_adapter, now=now + 2 * SECOND, type_name="gone", blocker_chain_ids=[behind.id]
        )
        await cancel(state_adapter, [gone.id], now=now + 2 * SECOND)
        open_ = await start(state_adapter, now=now + 3 * SECOND, type_name="open")
        finished_waiter = await start(
            state_adapter, now=now + 4 * SECOND, type_name="waiter", blocker_chain_ids=[open_.id]
        )
        await cancel(state_adapter, [finished_waiter.id], now=now + 4 * SECOND)
        order = await start(
            state_adapter,
            now=now + 5 * SECOND,
            blocker_chain_ids=[done.id, gone.id, open_.id],
            runs_after_failed_blockers=True,
        )
        result = await cancel(state_adapter, [order.id], now=now + 6 * SECOND, cascade=True)
        assert (_ids(result.cascaded), result.shared) == ([open_.id], [])
        # A cancelled blocker's own blockers are not walked: behind keeps running.
        assert await get_job(state_adapter, behind.id) == behind
        assert (await get_job(state_adapter, done.id)).status is JobStatus.COMPLETED

    async def test_a_running_blocker_job_is_reported_with_its_worker(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        blocker = await running_job(state_adapter, now, type_name="blocker")
        order = await start(state_adapter, now=now + SECOND, blocker_chain_ids=[blocker.id])
        result = await cancel(state_adapter, [order.id], now=now + 2 * SECOND, cascade=True)
        (cascaded,) = result.cascaded
        assert (cascaded.id, cascaded.status, cascaded.leased_by) == (blocker.id, JobStatus.CANCELLED, None)
        assert (result.running_job_ids, result.previous_leased_by) == ([blocker.id], {blocker.id: WORKER})

    async def test_a_refused_cascade_changes_nothing(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        blocker = await start(state_adapter, now=now, type_name="blocker")
        order = await start(state_adapter, now=now + SECOND, blocker_chain_ids=[blocker.id])
        finished = await start(state_adapter, now=now + 2 * SECOND, type_name="finished")
        await cancel(state_adapter, [finished.id], now=now + 2 * SECOND)
        result = await cancel(state_adapter, [order.id, finished.id], now=now + 3 * SECOND, cascade=True)
        assert result.not_cancellable == [(finished.id, "cancelled")]
        assert (result.cancelled, result.cascaded, result.shared) == ([], [], [])
        assert await get_job(state_adapter, blocker.id) == blocker
        assert await get_job(state_adapter, order.id) == order

    async def test_a_dry_run_changes_nothing_and_reports_what_the_cancel_does(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        g = await self._shared_graph(state_adapter, now)
        running = await running_job(state_adapter, now + 4 * SECOND, type_name="busy")
        order = await start(
            state_adapter,
            now=now + 5 * SECOND,
            type_name="order",
            blocker_chain_ids=[running.id, g["order"].id],
        )
        at = now + 6 * SECOND
        dry = await cancel(state_adapter, [order.id], now=at, reason="r", cascade=True, dry_run=True)
        for job in (*g.values(), running, order):
            assert await get_job(state_adapter, job.id) == job
        real = await cancel(state_adapter, [order.id], now=at, reason="r", cascade=True)
        assert _ids(real.cascaded) == [g["only"].id, running.id, g["order"].id]
        assert real.shared == [g["both"].id, g["shared"].id]
        assert real.running_job_ids == [running.id]
        assert dry == real
