"""The suite catches broken adapters: deliberately wrong variants of the in-process
adapters must fail named cases, while the correct adapters pass those same cases.

Most variants wrap the memory adapters through the public contract only, so the bugs
stay meaningful whatever the reference's internals look like. Where a bug cannot be built
from the contract (a release that forgets the rescue, a heartbeat that rewrites started_at),
the variant swaps one named function of the reference for the duration of one call, and
always puts back the original saved at import (never a possibly swapped current value).

The worker-registry variants run only the registry and rescue suites (their bugs live
there), which keeps this run from growing by a whole suite per variant.
"""

from __future__ import annotations

import pytest

from jobchain_conformance.suites import state_concurrent_dedup

INI = """
[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
"""

BROKEN_ADAPTERS = '''
import dataclasses
import heapq
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta

import pytest

from jobchain.contracts import BlockedJobsList, JobReschedule, MAX_PAGE_SIZE
from jobchain.entities import Deduplication, JobStatus, Schedule, WorkerState
from jobchain.memory import _workers, _writes
from jobchain.memory.notify import MemoryNotifyAdapter
from jobchain.memory.state import MemoryStateAdapter
from hypothesis import Phase, settings

from jobchain_conformance import NotifyAdapterSuite, StateAdapterSuite
from jobchain_conformance.model import MODEL_SETTINGS
from jobchain_conformance.suites import state_acquire, state_rescue, state_workers
from jobchain_conformance.suites._base import StateSuiteBase


class WrappedTx:
    """Delegates every operation to the memory transaction; variants override one."""

    def __init__(self, inner):
        self._inner = inner

    def __getattr__(self, name):
        return getattr(self._inner, name)

    @asynccontextmanager
    async def _nested(self):
        async with self._inner.savepoint() as inner:
            yield type(self)(inner)

    def savepoint(self):
        return self._nested()


class WrappedAdapter:
    tx_class = WrappedTx

    def __init__(self):
        self._inner = MemoryStateAdapter()
        self.capabilities = self._inner.capabilities
        self.time_precision = self._inner.time_precision

    @asynccontextmanager
    async def _open(self, read_only, connection):
        async with self._inner.transaction(read_only=read_only, connection=connection) as tx:
            yield self.tx_class(tx)

    def transaction(self, *, read_only=False, connection=None):
        return self._open(read_only, connection)

    async def migrate(self):
        await self._inner.migrate()

    async def close(self):
        await self._inner.close()


class _Undo(Exception):
    pass


class DoubleDispatchTx(WrappedTx):
    """Bug (a): hands out jobs without keeping the claim, so the next caller gets them too."""

    async def jobs_acquire(self, params):
        acquired = None
        try:
            async with self._inner.savepoint() as sp:
                acquired = await sp.jobs_acquire(params)
                raise _Undo
        except _Undo:
            pass
        return acquired


class ScopeBlindDedupTx(WrappedTx):
    """Bug (b): deduplication treats scope 'incomplete' as 'any', matching completed chains."""

    async def jobs_create(self, params):
        jobs = []
        for job in params.jobs:
            dedup = job.deduplication
            if dedup is not None and dedup.scope == "incomplete":
                dedup = Deduplication(
                    key=dedup.key,
                    scope="any",
                    window=dedup.window or timedelta(days=3650),
                    exclude_chain_ids=dedup.exclude_chain_ids,
                )
                job = dataclasses.replace(job, deduplication=dedup)
            jobs.append(job)
        return await self._inner.jobs_create(dataclasses.replace(params, jobs=jobs))


class EagerUnblockTx(WrappedTx):
    """Bug (c): a completed chain unblocks its dependents even if another blocker is open."""

    async def job_complete(self, params):
        result = await self._inner.job_complete(params)
        if result.chain_completed:
            page = await self._inner.blocked_jobs_list(
                BlockedJobsList(blocker_chain_id=result.job.chain_id, limit=MAX_PAGE_SIZE)
            )
            for job in page.items:
                if job.status is JobStatus.BLOCKED:
                    now = Schedule(after=timedelta(0))
                    await self._inner.job_reschedule(
                        JobReschedule(job_id=job.id, schedule=now, error="", now=params.now)
                    )
        return result


REAL_AWAIT_UNCOMMITTED_INSERT = _writes.Ctx.await_uncommitted_insert


class NoDedupWaitTx(WrappedTx):
    """Bug (e): a deduplicating start decides without waiting for an uncommitted start of its
    key in another transaction (what PostgreSQL did before its lock rows): both create a chain."""

    async def jobs_create(self, params):
        # The original saved at import: creations running side by side would otherwise save
        # each other's replacement and leave it in place for every later case of the process.
        _writes.Ctx.await_uncommitted_insert = lambda ctx, job_id: None
        try:
            return await self._inner.jobs_create(params)
        finally:
            _writes.Ctx.await_uncommitted_insert = REAL_AWAIT_UNCOMMITTED_INSERT


REAL_LAPSED = _workers.lapsed
REAL_PRESUMED_DEAD = _workers.presumed_dead
REAL_RESCUED = _workers.rescued
REAL_RELEASE_JOBS = _workers._release_jobs


def _unrecorded(job, reason, now):
    return dataclasses.replace(job, status=JobStatus.PENDING, leased_by=None, leased_until=None)


class ReleasesLiveWorkersTx(WrappedTx):
    """Bug (f): a heartbeat presumes every other running worker dead, lapsed or not."""

    async def worker_heartbeat(self, params):
        _workers.lapsed = lambda row, now: row.state in _workers.ALIVE_STATES
        try:
            return await self._inner.worker_heartbeat(params)
        finally:
            _workers.lapsed = REAL_LAPSED


class StoppedPresumedDeadTx(WrappedTx):
    """Bug (g): a clean stop does not protect a worker from being presumed dead."""

    async def worker_heartbeat(self, params):
        _workers.lapsed = lambda row, now: row.state is not WorkerState.DEAD and row.alive_until < now
        try:
            return await self._inner.worker_heartbeat(params)
        finally:
            _workers.lapsed = REAL_LAPSED


class NeverReleasesTx(WrappedTx):
    """Bug (h): a heartbeat ignores release_dead: dead workers' jobs wait for their leases."""

    async def worker_heartbeat(self, params):
        return await self._inner.worker_heartbeat(dataclasses.replace(params, release_dead=False))


class ForgetfulReleaseTx(WrappedTx):
    """Bug (i): a heartbeat releases dead workers' jobs without recording the rescue."""

    async def worker_heartbeat(self, params):
        _workers.rescued = _unrecorded
        try:
            return await self._inner.worker_heartbeat(params)
        finally:
            _workers.rescued = REAL_RESCUED


class UnrecordedReapTx(WrappedTx):
    """Bug (j): the reaper returns expired jobs to pending without recording the rescue."""

    async def jobs_reap_expired(self, params):
        _workers.rescued = _unrecorded
        try:
            return await self._inner.jobs_reap_expired(params)
        finally:
            _workers.rescued = REAL_RESCUED


class ReleasesAtTheMomentTx(WrappedTx):
    """Bug: a worker counts as lapsed once its alive_until is reached, not passed (<= for <):
    its jobs are handed on while its own liveness deadline may not have passed."""

    async def worker_heartbeat(self, params):
        _workers.lapsed = lambda row, now: row.state in _workers.ALIVE_STATES and row.alive_until <= now
        try:
            return await self._inner.worker_heartbeat(params)
        finally:
            _workers.lapsed = REAL_LAPSED


class ReapsEarlyTx(WrappedTx):
    """Bug: the reaper judges leases half a second ahead of its now (a clock running ahead, a
    rounded-down leased_until): a lease is reaped before it ends."""

    async def jobs_reap_expired(self, params):
        if params.now is not None:
            params = dataclasses.replace(params, now=params.now + timedelta(milliseconds=500))
        return await self._inner.jobs_reap_expired(params)


class IgnoresTypeLeasesTx(WrappedTx):
    """Bug (k): a claim gives every type lease_for, ignoring type_leases."""

    async def jobs_acquire(self, params):
        return await self._inner.jobs_acquire(dataclasses.replace(params, type_leases={}))


class DeadListedRunningTx(WrappedTx):
    """Bug (l): workers_list reports the stored state, so a lapsed worker still looks alive."""

    async def workers_list(self, params):
        _workers.presumed_dead = lambda row, now: row.state is WorkerState.DEAD
        try:
            return await self._inner.workers_list(params)
        finally:
            _workers.presumed_dead = REAL_PRESUMED_DEAD


class RestartsStartedAtTx(WrappedTx):
    """Bug (m): every heartbeat overwrites started_at, as an upsert that sets every column would."""

    async def worker_heartbeat(self, params):
        def op(ctx, now):
            result = _workers.worker_heartbeat(ctx, params, now)
            row = ctx.store.workers.rows[params.worker_id]
            ctx.store.workers.put(ctx.tx, params.worker_id, dataclasses.replace(row, started_at=now))
            return result

        return await self._inner._write(op, params.now)


class NeverWasDeadTx(WrappedTx):
    """Bug (n): a worker is never told that it was presumed dead."""

    async def worker_heartbeat(self, params):
        result = await self._inner.worker_heartbeat(params)
        return dataclasses.replace(result, was_dead=False)


class NoPruneTx(WrappedTx):
    """Bug (o): registry rows are never pruned."""

    async def worker_heartbeat(self, params):
        far = timedelta(days=36500)
        return await self._inner.worker_heartbeat(dataclasses.replace(params, prune_after=far))


def _reap_through_holds(ctx, params, now):
    store = ctx.store
    excluded = set(params.exclude_job_ids)
    leases = [store.running[name] for name in set(params.type_names) if name in store.running]
    chosen = []
    for leased_until, job_id in heapq.merge(*leases):
        if leased_until >= now or len(chosen) == params.limit:
            break
        if job_id not in excluded and not ctx.locked_elsewhere(job_id):  # holds are not skipped
            chosen.append(job_id)
    reason = _workers.RescueReason.LEASE_EXPIRED
    return [ctx.put(REAL_RESCUED(store.jobs[job_id], reason, now), through_holds=True) for job_id in chosen]


class ReapsHeldJobsTx(WrappedTx):
    """Bug (p): the reaper releases an expired job an atomic attempt still holds (it skips
    locked rows, not held ones), so the job runs again beside the attempt."""

    async def jobs_reap_expired(self, params):
        return await self._inner._write(lambda ctx, now: _reap_through_holds(ctx, params, now), params.now)


def _release_through_holds(ctx, worker_ids, now):
    store = ctx.store
    reason = _workers.RescueReason.WORKER_DEAD
    released = [
        ctx.put(REAL_RESCUED(store.jobs[job_id], reason, now), through_holds=True)
        for worker_id in worker_ids
        for job_id in sorted(store.leased.get(worker_id, ()))
        if not ctx.locked_elsewhere(job_id)  # holds are not skipped
    ]
    released.sort(key=lambda job: (job.created_at, job.id))
    return released


class ReleasesHeldJobsTx(WrappedTx):
    """Bug (q): a heartbeat releases a dead worker's job an atomic attempt still holds."""

    async def worker_heartbeat(self, params):
        _workers._release_jobs = _release_through_holds
        try:
            return await self._inner.worker_heartbeat(params)
        finally:
            _workers._release_jobs = REAL_RELEASE_JOBS


class LeakyUnsubscribeNotify(MemoryNotifyAdapter):
    """Bug (d): unsubscribe returns but the listener stays subscribed."""

    async def listen_job_scheduled(self, type_names, listener):
        await super().listen_job_scheduled(type_names, listener)
        return _noop

    async def listen_chain_completed(self, chain_id, listener):
        await super().listen_chain_completed(chain_id, listener)
        return _noop

    async def listen_job_ownership_lost(self, job_id, listener):
        await super().listen_job_ownership_lost(job_id, listener)
        return _noop


async def _noop():
    return None


def state_suite(tx_class):
    class Variant(WrappedAdapter):
        pass

    Variant.tx_class = tx_class

    class Suite(StateAdapterSuite):
        @pytest.fixture
        async def state_adapter(self) -> AsyncIterator[WrappedAdapter]:
            adapter = Variant()
            yield adapter
            await adapter.close()

        @pytest.fixture
        def model_settings(self):
            # Only whether the model fails matters here; shrinking a failure can take minutes.
            # Derandomized: whether a random exploration meets a bug must not vary between runs.
            return settings(MODEL_SETTINGS, phases=[Phase.generate], derandomize=True)

    return Suite


WORKER_SUITES = (
    *(
        getattr(module, name)
        for module in (state_workers, state_rescue)
        for name in dir(module)
        if name.endswith("Tests") and isinstance(getattr(module, name), type)
    ),
    state_acquire.JobsReapExpiredTests,
)


def worker_suite(tx_class):
    """Only the registry and rescue cases, against a variant."""

    class Variant(WrappedAdapter):
        pass

    Variant.tx_class = tx_class

    class Suite(*WORKER_SUITES, StateSuiteBase):
        @pytest.fixture
        async def state_adapter(self) -> AsyncIterator[WrappedAdapter]:
            adapter = Variant()
            yield adapter
            await adapter.close()

    return Suite


TestCorrectState = state_suite(WrappedTx)
TestDoubleDispatch = state_suite(DoubleDispatchTx)
TestScopeBlindDedup = state_suite(ScopeBlindDedupTx)
TestEagerUnblock = state_suite(EagerUnblockTx)
TestNoDedupWait = state_suite(NoDedupWaitTx)
TestReleasesLiveWorkers = worker_suite(ReleasesLiveWorkersTx)
TestStoppedPresumedDead = worker_suite(StoppedPresumedDeadTx)
TestNeverReleases = worker_suite(NeverReleasesTx)
TestForgetfulRelease = worker_suite(ForgetfulReleaseTx)
TestUnrecordedReap = worker_suite(UnrecordedReapTx)
TestIgnoresTypeLeases = worker_suite(IgnoresTypeLeasesTx)
TestDeadListedRunning = worker_suite(DeadListedRunningTx)
TestRestartsStartedAt = worker_suite(RestartsStartedAtTx)
TestNeverWasDead = worker_suite(NeverWasDeadTx)
TestNoPrune = worker_suite(NoPruneTx)
TestReapsHeldJobs = worker_suite(ReapsHeldJobsTx)
TestReleasesHeldJobs = worker_suite(ReleasesHeldJobsTx)
TestReleasesAtTheMoment = worker_suite(ReleasesAtTheMomentTx)
TestReapsEarly = worker_suite(ReapsEarlyTx)


class OnOneHub:
    """The second adapter of a case shares the first one's hub (its broker)."""

    @pytest.fixture
    def notify_adapter_factory(self, notify_adapter):
        async def open_adapter():
            return type(notify_adapter)(hub=notify_adapter.hub)

        return open_adapter


class TestCorrectNotify(OnOneHub, NotifyAdapterSuite):
    @pytest.fixture
    async def notify_adapter(self):
        adapter = MemoryNotifyAdapter()
        yield adapter
        await adapter.close()


class TestLeakyUnsubscribe(OnOneHub, NotifyAdapterSuite):
    @pytest.fixture
    async def notify_adapter(self):
        adapter = LeakyUnsubscribeNotify()
        yield adapter
        await adapter.close()
'''

# variant class → cases that must fail against it (and pass against the correct control).
# The model test is listed only where it fails on every run: it explores at random, so it
# catches the rarer bugs (b) and (c) only in some runs; the named example cases are the guard.
MUST_FAIL = {
    "TestDoubleDispatch": [
        "test_parallel_acquisitions_never_claim_a_job_twice",
        "test_acquire_never_claims_running_or_completed_jobs",
        "test_adapter_agrees_with_reference_model",
    ],
    "TestScopeBlindDedup": [
        "test_scope_incomplete_ignores_a_completed_chain",
        "test_scope_incomplete_ignores_a_chain_whose_last_job_completed",
    ],
    "TestEagerUnblock": [
        "test_dependent_stays_blocked_while_another_blocker_is_incomplete",
    ],
    "TestNoDedupWait": [
        "test_second_start_waits_and_returns_the_first_chain_once_it_commits",
        "test_second_start_creates_its_own_chain_when_the_first_rolls_back",
        "test_second_start_of_a_key_whose_earlier_chain_completed_waits_too",
        "test_batches_sharing_keys_in_another_order_collapse_without_deadlock",
    ],
    "TestReleasesAtTheMoment": [
        "test_a_worker_is_not_marked_dead_before_its_alive_until_has_passed",
    ],
    "TestReapsEarly": [
        "test_a_lease_is_not_reaped_before_it_has_passed",
    ],
    "TestReleasesLiveWorkers": [
        "test_a_live_worker_is_never_marked_dead",
        "test_jobs_of_live_workers_pending_and_completed_jobs_stay_untouched",
    ],
    "TestStoppedPresumedDead": [
        "test_a_stopped_worker_is_never_marked_dead",
        "test_a_stopped_workers_jobs_are_left_to_their_lease",
    ],
    "TestNeverReleases": [
        "test_a_dead_workers_running_job_returns_to_pending_with_the_rescue_recorded",
        "test_lapsed_running_and_draining_workers_are_marked_dead",
        "test_parallel_heartbeats_release_each_job_once",
        "test_the_dead_worker_cannot_renew",
    ],
    "TestForgetfulRelease": [
        "test_a_dead_workers_running_job_returns_to_pending_with_the_rescue_recorded",
        "test_a_released_job_is_claimed_again_and_keeps_its_rescue",
        "test_a_later_rescue_replaces_the_earlier_one",
    ],
    "TestUnrecordedReap": [
        "test_reap_records_when_whose_lease_and_why",
        "test_the_rescue_stays_after_the_next_claim_and_completion",
    ],
    "TestIgnoresTypeLeases": [
        "test_one_claim_gives_each_type_its_own_lease",
        "test_a_per_type_lease_decides_when_the_reaper_takes_the_job",
    ],
    "TestDeadListedRunning": [
        "test_a_lapsed_worker_is_reported_dead_before_anyone_marks_it",
        "test_states_filter_on_the_reported_state",
    ],
    "TestRestartsStartedAt": [
        "test_later_heartbeat_keeps_started_at_and_moves_last_seen_and_alive_until",
        "test_most_recently_started_first_and_a_later_heartbeat_keeps_the_place",
    ],
    "TestNeverWasDead": [
        "test_heartbeat_of_a_worker_marked_dead_reports_was_dead_and_a_rejoin_revives_it",
        "test_was_dead_is_reported_until_the_worker_rejoins",
    ],
    "TestNoPrune": [
        "test_rows_lapsed_longer_than_prune_after_are_deleted",
    ],
    "TestReapsHeldJobs": [
        "test_the_reaper_skips_an_expired_job_an_atomic_attempt_holds",
    ],
    "TestReleasesHeldJobs": [
        "test_a_heartbeat_skips_a_dead_workers_job_an_atomic_attempt_holds",
    ],
    "TestLeakyUnsubscribe": [
        "test_unsubscribe_stops_job_scheduled_notifications",
        "test_unsubscribe_stops_chain_completed_notifications",
        "test_unsubscribe_stops_ownership_lost_notifications",
        "test_unsubscribing_one_of_two_listeners_keeps_the_other",
        "test_listener_can_resubscribe_after_unsubscribe",
    ],
}
CONTROL = {
    "TestDoubleDispatch": "TestCorrectState",
    "TestScopeBlindDedup": "TestCorrectState",
    "TestEagerUnblock": "TestCorrectState",
    "TestNoDedupWait": "TestCorrectState",
    "TestLeakyUnsubscribe": "TestCorrectNotify",
}
CONTROL.update((variant, "TestCorrectState") for variant in MUST_FAIL if variant not in CONTROL)


class _Recorder:
    """A pytest plugin object collecting every phase report of the inner run."""

    def __init__(self) -> None:
        self.outcomes: dict[tuple[str, str], set[str]] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        _, cls, name = report.nodeid.split("::")
        self.outcomes.setdefault((cls, name.split("[")[0]), set()).add(report.outcome)


# The inner run executes the whole state suite once per variant: minutes on a loaded machine.
# One worker runs the inner session once (a module fixture runs again on every worker).
pytestmark = [pytest.mark.timeout(900), pytest.mark.xdist_group("catches_bugs")]


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], set[str]]:
    """Run the whole suite once, in-process, against every variant; (class, case) → outcomes."""
    root = tmp_path_factory.mktemp("variants")
    (root / "pytest.ini").write_text(INI)
    (root / "test_variants.py").write_text(BROKEN_ADAPTERS)
    recorder = _Recorder()
    args = [
        "-q",
        # Only outcomes matter here; formatting ~100 expected failures also costs time, and on
        # CPython 3.11.7 it can trip "AST constructor recursion depth mismatch" (gh-106905).
        "--tb=no",
        "-p",
        "no:cacheprovider",
        # Its gc.collect() after every case makes ~1000 cases in one process take minutes.
        "-p",
        "no:unraisableexception",
        "--import-mode=importlib",
        f"--rootdir={root}",
        "-c",
        str(root / "pytest.ini"),
    ]
    # In-process variants that skip a wait finish within a few event-loop turns: a short grace
    # catches them and keeps seven suite runs from sleeping half a second per waiting case.
    grace = state_concurrent_dedup.GRACE
    state_concurrent_dedup.GRACE = 0.05
    try:
        exit_code = pytest.main([*args, str(root)], plugins=[recorder])
    finally:
        state_concurrent_dedup.GRACE = grace
    assert exit_code in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED), (
        f"inner run ended with {exit_code!r}"
    )
    return recorder.outcomes


def _failed(outcomes: dict[tuple[str, str], set[str]], cls: str, name: str) -> bool:
    assert (cls, name) in outcomes, f"{cls}::{name} did not run; was the case renamed?"
    return "failed" in outcomes[(cls, name)]


@pytest.mark.parametrize(
    ("variant", "case"), [(variant, case) for variant, cases in MUST_FAIL.items() for case in cases]
)
def test_broken_variant_fails_the_named_case(
    outcomes: dict[tuple[str, str], set[str]], variant: str, case: str
) -> None:
    assert _failed(outcomes, variant, case), f"the suite let {variant} pass {case}"
    assert not _failed(outcomes, CONTROL[variant], case), f"{case} fails on the correct adapter too"


def test_correct_adapters_pass_the_whole_suite(outcomes: dict[tuple[str, str], set[str]]) -> None:
    failing = sorted(
        f"{cls}::{name}"
        for (cls, name), phases in outcomes.items()
        if cls in ("TestCorrectState", "TestCorrectNotify") and "failed" in phases
    )
    assert failing == []
