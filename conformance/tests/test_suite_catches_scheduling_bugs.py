"""The scheduling cases catch broken adapters: deliberately wrong variants of the in-process
adapter must fail named cases of ``SchedulingStateTests``, while the correct control passes them.

Where a bug can be built from the contract (a wait that keeps ``runs_after_failed`` off, a
stats read that never says paused) the variant wraps the memory adapter's transaction; where
it cannot (a claim that ignores priority, aging, a limit or a pause; creation without the
ordering predecessor; propagation blind to the per-blocker flag) it swaps one named function
of the reference (``jobchain.memory._claims``, ``_ordering``, ``_lifecycle``, ``_scheduling``)
for the duration of one call and always puts back the original saved at import (retention
across resolves_on_any_end rows swaps ``jobchain.memory._deletion``). Only the
scheduling cases (and the scheduling model, for the variants it is listed under) run against
the variants, which keeps this run short.
"""

from __future__ import annotations

import pytest

INI = """
[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
"""

VARIANTS = '''
import dataclasses
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, contextmanager

import pytest
from hypothesis import Phase, settings

from jobchain.contracts import JobsList
from jobchain.contracts.scheduling import PausedTypesList
from jobchain.entities import JobStatus
from jobchain.memory import _claims, _deletion, _lifecycle, _ordering, _scheduling
from jobchain.memory.state import MemoryStateAdapter
from jobchain_conformance.model import MODEL_SETTINGS
from jobchain_conformance.suites.state_scheduling import SchedulingStateTests

NAMES = [
    (_claims, "claim_key"),
    (_claims, "paused"),
    (_claims, "type_allowance"),
    (_claims, "count_claims"),
    (_ordering, "take_key"),
    (_ordering, "prune_keys"),
    (_lifecycle, "runs_after_failure"),
    (_scheduling, "paused_types"),
    (_scheduling, "registered"),
    (_deletion, "holds_back"),
    (_deletion, "drop_references"),
]
ORIGINALS = {(module.__name__, name): getattr(module, name) for module, name in NAMES}


def original(module, name):
    return ORIGINALS[(module.__name__, name)]


@contextmanager
def swapped(module, name, replacement):
    """``module.name`` is ``replacement`` inside the block; the original saved at import after."""
    setattr(module, name, replacement)
    try:
        yield
    finally:
        setattr(module, name, original(module, name))


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


def _fifo_key(job, aged_before):
    return (job.scheduled_at, job.created_at, job.id)


class IgnoresPriorityTx(WrappedTx):
    """Bug (a): the claim takes jobs in FIFO order only, whatever their priorities."""

    async def jobs_acquire(self, params):
        with swapped(_claims, "claim_key", _fifo_key):
            return await self._inner.jobs_acquire(params)


def _never_aged_key(job, aged_before):
    return (True, -job.priority, job.scheduled_at, job.created_at, job.id)


class IgnoresAgingTx(WrappedTx):
    """Bug (b): no aging: a low-priority job waits as long as higher ones keep coming."""

    async def jobs_acquire(self, params):
        with swapped(_claims, "claim_key", _never_aged_key):
            return await self._inner.jobs_acquire(params)


def _without(limits, **cleared):
    if limits is None:
        return None
    kept = dataclasses.replace(limits, **cleared)
    return kept if kept.max_running is not None or kept.rate_limit is not None else None


class ExceedsMaxRunningTx(WrappedTx):
    """Bug (c): the claim ignores max_running (rate limits still apply)."""

    async def jobs_acquire(self, params):
        real = original(_claims, "type_allowance")

        def allowance(ctx, type_name, limits, now):
            return real(ctx, type_name, _without(limits, max_running=None), now)

        with swapped(_claims, "type_allowance", allowance):
            return await self._inner.jobs_acquire(params)


class UnserializedLimitsTx(WrappedTx):
    """Bug (d): claims of a limited type do not serialize: each counts the running jobs it sees
    (committed ones), so two overlapping claims together exceed max_running."""

    async def jobs_acquire(self, params):
        real = original(_claims, "type_allowance")

        def allowance(ctx, type_name, limits, now):
            store = ctx.store
            lock = store.lock_table

            def lock_but_controls(tx, table, key):
                if table is not store.controls:
                    lock(tx, table, key)

            store.lock_table = lock_but_controls
            try:
                return real(ctx, type_name, limits, now)
            finally:
                del store.lock_table

        with swapped(_claims, "type_allowance", allowance):
            return await self._inner.jobs_acquire(params)


class ClaimsPausedTx(WrappedTx):
    """Bug (e): the claim takes jobs of paused types."""

    async def jobs_acquire(self, params):
        with swapped(_claims, "paused", lambda ctx, type_name: False):
            return await self._inner.jobs_acquire(params)


class IgnoresRateLimitTx(WrappedTx):
    """Bug (f): the claim ignores rate limits (max_running still applies)."""

    async def jobs_acquire(self, params):
        real = original(_claims, "type_allowance")

        def allowance(ctx, type_name, limits, now):
            return real(ctx, type_name, _without(limits, rate_limit=None), now)

        with swapped(_claims, "type_allowance", allowance):
            return await self._inner.jobs_acquire(params)


class UncountedRateTx(WrappedTx):
    """Bug (g): the rate window counter is never bumped by a claim (each claim alone obeys it)."""

    async def jobs_acquire(self, params):
        with swapped(_claims, "count_claims", lambda ctx, type_name, allowance, count: None):
            return await self._inner.jobs_acquire(params)


def _no_predecessor(ctx, key, chain_id):
    original(_ordering, "take_key")(ctx, key, chain_id)
    return None


class KeyRunsTwoChainsTx(WrappedTx):
    """Bug (h): a new chain of an ordering key gets no implicit blocker: two chains of one key
    run at once."""

    async def jobs_create(self, params):
        with swapped(_ordering, "take_key", _no_predecessor):
            return await self._inner.jobs_create(params)


def _forget_every_key(ctx, limit):
    store = ctx.store
    keys = sorted(store.ordering.visible(ctx.tx))[:limit]
    for key in keys:
        store.lock_table(ctx.tx, store.ordering, key)
        store.ordering.put(ctx.tx, key, None)
    return len(keys)


class PruneForgetsLiveKeysTx(WrappedTx):
    """Bug (o): a locks_before prune deletes ordering keys whose last chain still exists, so the
    key's next chain runs beside it."""

    async def chains_prune(self, params):
        with swapped(_ordering, "prune_keys", _forget_every_key):
            return await self._inner.chains_prune(params)


class PruneHeldByAnyEndTx(WrappedTx):
    """Bug (p): every blocker row holds a chain back from retention, resolves_on_any_end ones
    too, so a key that keeps getting chains never loses its history."""

    async def chains_prune(self, params):
        with swapped(_deletion, "holds_back", lambda view, job, chain_id: True):
            return await self._inner.chains_prune(params)


class PruneKeepsAnyEndRowsTx(WrappedTx):
    """Bug (q): a pruned chain's resolves_on_any_end blocker rows stay with its dependents."""

    async def chains_prune(self, params):
        with swapped(_deletion, "drop_references", lambda ctx, chain_ids: None):
            return await self._inner.chains_prune(params)


class PruneIgnoresDeclaredBlockersTx(WrappedTx):
    """Bug (r): no blocker row holds a chain back from retention: a declared blocker (or a plain
    wait) of a job that stays loses its chain."""

    async def chains_prune(self, params):
        with swapped(_deletion, "holds_back", lambda view, job, chain_id: False):
            return await self._inner.chains_prune(params)


def _job_flag_only(view, job, chain_id):
    return job.runs_after_failed_blockers


class PropagationFailsSuccessorTx(WrappedTx):
    """Bug (i): propagation ignores the per-blocker 'resolved by any end' flag: a failed or
    cancelled ordering predecessor (or a waited-for chain with runs_after_failed) fails the job."""

    async def job_fail(self, params):
        with swapped(_lifecycle, "runs_after_failure", _job_flag_only):
            return await self._inner.job_fail(params)

    async def chains_cancel(self, params):
        with swapped(_lifecycle, "runs_after_failure", _job_flag_only):
            return await self._inner.chains_cancel(params)


class WaitCountsAttemptTx(WrappedTx):
    """Bug (j): job_wait counts the attempt against the budget (attempt_base is not moved)."""

    async def job_wait(self, params):
        waited = await self._inner.job_wait(params)

        def op(ctx, now):
            current = ctx.locked_job(params.job_id)
            return ctx.put(dataclasses.replace(current, attempt_base=current.attempt_base - 1))

        job = await self._inner._write(op, params.now)
        return dataclasses.replace(waited, job=job)


class WaitIgnoresRunsAfterFailedTx(WrappedTx):
    """Bug (k): job_wait drops runs_after_failed: a failed waited-for chain fails the job."""

    async def job_wait(self, params):
        return await self._inner.job_wait(dataclasses.replace(params, runs_after_failed=False))


class NextAvailableIgnoresPauseTx(WrappedTx):
    """Bug (l): job_next_available counts the pending jobs of paused types."""

    async def job_next_available(self, params):
        with swapped(_scheduling, "paused_types", lambda store, viewer: {}):
            return await self._inner.job_next_available(params)


class StatsHidePauseTx(WrappedTx):
    """Bug (m): queue_stats never marks a type paused (nor lists one without jobs)."""

    async def queue_stats(self, params):
        with swapped(_scheduling, "paused_types", lambda store, viewer: {}):
            return await self._inner.queue_stats(params)


def _tick_as_given(existing, given, now):
    record = original(_scheduling, "registered")(None, given, now)
    return dataclasses.replace(record, registered_at=existing.registered_at if existing else now)


class TickMovesBackTx(WrappedTx):
    """Bug (n): a registration with an older (or no) tick overwrites the stored tick."""

    async def schedules_register(self, params):
        with swapped(_scheduling, "registered", _tick_as_given):
            return await self._inner.schedules_register(params)


class FirstReadSnapshotTx(WrappedTx):
    """Base of the snapshot bugs: the transaction's first ``jobs_list`` takes a snapshot of one
    thing (``_take``), which a later operation then reads instead of what committed since, as
    a REPEATABLE READ backend's plain reads do."""

    snapshot = None

    async def _take(self):
        raise NotImplementedError

    async def jobs_list(self, params):
        if self.snapshot is None and self._inner._state is not None:  # write transactions only
            self.snapshot = await self._take()
        return await self._inner.jobs_list(params)


class _RunningAsSeen:
    """A view whose running counts are the snapshot's."""

    def __init__(self, view, counts):
        self._view, self._counts = view, counts

    def __getattr__(self, name):
        return getattr(self._view, name)

    def running_count(self, type_name):
        return self._counts[type_name]


class SnapshotRunningCountTx(FirstReadSnapshotTx):
    """Bug (s): the claim locks the type's control row but counts the running jobs as its
    transaction first read them, so claims committed since do not count."""

    async def _take(self):
        page = await self._inner.jobs_list(JobsList(statuses=[JobStatus.RUNNING.value], limit=500))
        return Counter(job.type_name for job in page.items)

    async def jobs_acquire(self, params):
        if self.snapshot is None:
            return await self._inner.jobs_acquire(params)
        real, counts = original(_claims, "type_allowance"), self.snapshot

        def allowance(ctx, type_name, limits, now):
            as_seen = dataclasses.replace(ctx, view=_RunningAsSeen(ctx.view, counts))
            return real(as_seen, type_name, limits, now)

        with swapped(_claims, "type_allowance", allowance):
            return await self._inner.jobs_acquire(params)


class SnapshotRateTx(FirstReadSnapshotTx):
    """Bug (t): the claim reads the rate window's count as its transaction first read it."""

    async def _take(self):
        return await self._inner._write(lambda ctx, now: dict(ctx.store.controls.visible(ctx.tx)), None)

    async def jobs_acquire(self, params):
        if self.snapshot is None:
            return await self._inner.jobs_acquire(params)
        real, seen = original(_claims, "type_allowance"), self.snapshot

        def allowance(ctx, type_name, limits, now):
            found = real(ctx, type_name, limits, now)
            if limits is None or limits.rate_limit is None or limits.max_running is not None:
                return found
            control = seen.get(type_name)
            stale = control is not None and control.window_start == found.window_start
            count = control.window_count if stale else 0
            return dataclasses.replace(found, cap=max(0, limits.rate_limit.limit - count), window_count=count)

        with swapped(_claims, "type_allowance", allowance):
            return await self._inner.jobs_acquire(params)


class SnapshotPauseTx(FirstReadSnapshotTx):
    """Bug (u): the claim sees the types paused as its transaction first read them."""

    async def _take(self):
        return {item.type_name for item in await self._inner.paused_types_list(PausedTypesList())}

    async def jobs_acquire(self, params):
        if self.snapshot is None:
            return await self._inner.jobs_acquire(params)
        seen = self.snapshot
        with swapped(_claims, "paused", lambda ctx, type_name: type_name in seen):
            return await self._inner.jobs_acquire(params)


class SnapshotKeyTx(FirstReadSnapshotTx):
    """Bug (v): a creation locks its ordering key but takes the key's last chain as its
    transaction first read it, so a chain of the key committed since is not waited for."""

    async def _take(self):
        return await self._inner._write(lambda ctx, now: dict(ctx.store.ordering.visible(ctx.tx)), None)

    async def jobs_create(self, params):
        if self.snapshot is None:
            return await self._inner.jobs_create(params)
        seen = self.snapshot

        def take_key(ctx, key, chain_id):
            store = ctx.store
            store.lock_table(ctx.tx, store.ordering, key)
            previous = seen.get(key)
            store.ordering.put(ctx.tx, key, chain_id)
            return None if previous is None or ctx.view.last_job(previous) is None else previous

        with swapped(_ordering, "take_key", take_key):
            return await self._inner.jobs_create(params)


def scheduling_suite(tx_class, *, with_model=False):
    class Variant(WrappedAdapter):
        pass

    Variant.tx_class = tx_class

    class Suite(SchedulingStateTests):
        @pytest.fixture
        async def state_adapter(self) -> AsyncIterator[WrappedAdapter]:
            adapter = Variant()
            yield adapter
            await adapter.close()

        @pytest.fixture
        def scheduling_model_settings(self):
            return settings(MODEL_SETTINGS, phases=[Phase.generate], derandomize=True)

    if not with_model:
        Suite.test_adapter_agrees_with_reference_on_scheduling = None  # not collected
    return Suite


TestCorrect = scheduling_suite(WrappedTx, with_model=True)
TestIgnoresPriority = scheduling_suite(IgnoresPriorityTx)
TestIgnoresAging = scheduling_suite(IgnoresAgingTx)
TestExceedsMaxRunning = scheduling_suite(ExceedsMaxRunningTx)
TestUnserializedLimits = scheduling_suite(UnserializedLimitsTx, with_model=True)
TestClaimsPaused = scheduling_suite(ClaimsPausedTx)
TestIgnoresRateLimit = scheduling_suite(IgnoresRateLimitTx, with_model=True)
TestUncountedRate = scheduling_suite(UncountedRateTx, with_model=True)
TestKeyRunsTwoChains = scheduling_suite(KeyRunsTwoChainsTx)
TestPropagationFailsSuccessor = scheduling_suite(PropagationFailsSuccessorTx)
TestWaitCountsAttempt = scheduling_suite(WaitCountsAttemptTx, with_model=True)
TestWaitIgnoresRunsAfterFailed = scheduling_suite(WaitIgnoresRunsAfterFailedTx)
TestNextAvailableIgnoresPause = scheduling_suite(NextAvailableIgnoresPauseTx)
TestStatsHidePause = scheduling_suite(StatsHidePauseTx, with_model=True)
TestTickMovesBack = scheduling_suite(TickMovesBackTx)
TestPruneForgetsLiveKeys = scheduling_suite(PruneForgetsLiveKeysTx)
TestPruneHeldByAnyEnd = scheduling_suite(PruneHeldByAnyEndTx)
TestPruneKeepsAnyEndRows = scheduling_suite(PruneKeepsAnyEndRowsTx)
TestPruneIgnoresDeclaredBlockers = scheduling_suite(PruneIgnoresDeclaredBlockersTx)
TestSnapshotRunningCount = scheduling_suite(SnapshotRunningCountTx)
TestSnapshotRate = scheduling_suite(SnapshotRateTx)
TestSnapshotPause = scheduling_suite(SnapshotPauseTx)
TestSnapshotKey = scheduling_suite(SnapshotKeyTx)
'''

# variant class → cases that must fail against it (and pass against the correct control).
# The model (model_scheduling) runs derandomized against the control and the variants it is
# listed under; with the settings of every suite it does not reach the others, whose named
# example cases are their guard.
MUST_FAIL = {
    "TestIgnoresPriority": [
        "test_higher_priority_is_claimed_first_whatever_the_creation_order",
        "test_negative_priority_is_claimed_after_the_default",
        "test_a_batch_claims_the_highest_priorities",
        "test_priority_orders_claims_across_types",
        "test_a_capped_type_takes_its_highest_priority_jobs",
    ],
    "TestIgnoresAging": [
        "test_an_aged_low_priority_job_goes_ahead_of_newer_high_priority_jobs",
        "test_a_job_due_exactly_priority_aging_ago_has_aged",
        "test_aged_jobs_are_claimed_fifo_whatever_their_priorities",
        "test_a_low_priority_job_is_claimed_once_it_ages_under_a_flood",
        "test_several_low_jobs_are_each_claimed_within_their_bound_under_a_flood",
    ],
    "TestExceedsMaxRunning": [
        "test_a_claim_counts_the_jobs_claimed_since_its_transaction_read",
        "test_claims_released_together_never_exceed_max_running",
        "test_a_claim_stops_at_max_running_and_holds_the_type_back",
        "test_jobs_running_for_another_worker_count_against_the_limit",
        "test_an_expired_lease_counts_as_running_until_it_is_reaped",
        "test_many_parallel_claimers_never_exceed_max_running",
    ],
    "TestUnserializedLimits": [
        "test_claims_released_together_never_exceed_max_running",
        "test_adapter_agrees_with_reference_on_scheduling",
        "test_a_claim_beside_an_uncommitted_claim_at_the_limit_gets_nothing",
    ],
    "TestClaimsPaused": [
        "test_a_pause_committed_since_the_claims_read_holds_the_claim",
        "test_a_paused_type_is_not_claimed_and_others_are",
        "test_a_resumed_type_is_claimed_again",
    ],
    "TestIgnoresRateLimit": [
        "test_a_claim_counts_the_rate_window_as_claims_since_its_read_left_it",
        "test_claims_released_together_share_one_rate_window",
        "test_adapter_agrees_with_reference_on_scheduling",
        "test_at_most_limit_claims_start_in_a_window",
        "test_windows_are_aligned_on_the_epoch_not_on_the_first_claim",
        "test_held_back_types_are_in_name_order_and_retry_at_is_the_earliest_window_end",
        "test_every_worker_shares_the_count",
        "test_a_rate_limited_type_leaves_the_others_of_the_claim_alone",
    ],
    "TestUncountedRate": [
        "test_a_claim_counts_the_rate_window_as_claims_since_its_read_left_it",
        "test_claims_released_together_share_one_rate_window",
        "test_adapter_agrees_with_reference_on_scheduling",
        "test_at_most_limit_claims_start_in_a_window",
        "test_completed_jobs_give_back_no_rate",
        "test_a_job_claimed_again_counts_again",
        "test_a_claim_beside_an_uncommitted_claim_shares_its_rate_window",
    ],
    "TestKeyRunsTwoChains": [
        "test_a_creation_orders_after_the_chain_of_its_key_committed_since_its_read",
        "test_creations_of_a_key_released_together_line_up",
        "test_the_next_chain_of_the_key_waits_for_the_previous_one",
        "test_a_third_chain_waits_for_the_second_not_the_first",
        "test_continuations_do_not_carry_the_key_and_the_whole_chain_holds_it",
        "test_the_running_chain_of_a_key_holds_the_next_one",
        "test_chains_of_a_key_are_claimed_one_at_a_time_in_creation_order",
        "test_a_creation_waits_for_an_uncommitted_creation_of_the_key",
        "test_roots_of_one_batch_are_ordered_in_input_order",
    ],
    "TestPropagationFailsSuccessor": [
        "test_a_failed_or_cancelled_predecessor_unblocks_its_successor",
        "test_with_runs_after_failed_a_failed_or_cancelled_chain_resolves_the_wait",
    ],
    "TestWaitCountsAttempt": [
        "test_adapter_agrees_with_reference_on_scheduling",
        "test_a_chain_that_already_failed_fails_the_job_at_once_and_propagates",
        "test_the_job_is_blocked_with_its_lease_cleared_and_no_attempt_used",
        "test_the_job_runs_again_once_every_waited_chain_ends",
        "test_chains_that_already_ended_leave_the_job_pending_now",
    ],
    "TestWaitIgnoresRunsAfterFailed": [
        "test_with_runs_after_failed_a_failed_or_cancelled_chain_resolves_the_wait",
        "test_with_runs_after_failed_an_already_failed_chain_leaves_the_job_pending",
    ],
    "TestNextAvailableIgnoresPause": [
        "test_next_available_leaves_a_paused_type_out",
    ],
    "TestStatsHidePause": [
        "test_adapter_agrees_with_reference_on_scheduling",
        "test_queue_stats_marks_a_paused_type_and_lists_it_without_jobs",
    ],
    "TestTickMovesBack": [
        "test_last_tick_at_only_moves_forward_with_its_chain",
    ],
    "TestPruneForgetsLiveKeys": [
        "test_a_locks_prune_keeps_a_key_whose_last_chain_exists",
    ],
    "TestPruneHeldByAnyEnd": [
        "test_a_key_that_keeps_getting_chains_loses_its_history_oldest_first",
        "test_a_failed_or_cancelled_predecessor_goes_under_its_own_cutoff",
        "test_a_successor_blocked_by_a_declared_blocker_stays_blocked_until_it_completes",
        "test_a_chain_waited_for_with_runs_after_failed_goes_and_the_waiter_runs",
        "test_an_ended_predecessor_is_pruned_though_the_next_chain_of_the_key_names_it",
    ],
    "TestPruneKeepsAnyEndRows": [
        "test_a_key_that_keeps_getting_chains_loses_its_history_oldest_first",
        "test_a_successor_blocked_by_a_declared_blocker_stays_blocked_until_it_completes",
        "test_a_predecessor_also_declared_as_a_blocker_is_held_back_with_its_rows",
    ],
    "TestPruneIgnoresDeclaredBlockers": [
        "test_a_predecessor_also_declared_as_a_blocker_is_held_back_with_its_rows",
        "test_a_chain_waited_for_without_runs_after_failed_is_held_back",
    ],
    "TestSnapshotRunningCount": [
        "test_a_claim_counts_the_jobs_claimed_since_its_transaction_read",
        "test_claims_released_together_never_exceed_max_running",
    ],
    "TestSnapshotRate": [
        "test_a_claim_counts_the_rate_window_as_claims_since_its_read_left_it",
        "test_claims_released_together_share_one_rate_window",
    ],
    "TestSnapshotPause": [
        "test_a_pause_committed_since_the_claims_read_holds_the_claim",
        "test_a_resume_committed_since_the_claims_read_lets_the_claim_take_jobs",
    ],
    "TestSnapshotKey": [
        "test_a_creation_orders_after_the_chain_of_its_key_committed_since_its_read",
        "test_creations_of_a_key_released_together_line_up",
    ],
}
CONTROL = "TestCorrect"

Outcomes = dict[tuple[str, str], set[str]]


class _Recorder:
    """A pytest plugin object collecting every phase report of the inner run."""

    def __init__(self) -> None:
        self.outcomes: Outcomes = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        _, cls, name = report.nodeid.split("::")
        self.outcomes.setdefault((cls, name.split("[")[0]), set()).add(report.outcome)


# One worker runs the inner session once (a module fixture runs again on every worker).
pytestmark = [pytest.mark.timeout(900), pytest.mark.xdist_group("catches_scheduling_bugs")]


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory, without_local_constants: None) -> Outcomes:
    """Run the scheduling cases once, in-process, against every variant; (class, case) → outcomes."""
    root = tmp_path_factory.mktemp("scheduling_variants")
    (root / "pytest.ini").write_text(INI)
    (root / "test_scheduling_variants.py").write_text(VARIANTS)
    recorder = _Recorder()
    args = [
        "-q",
        "--tb=no",  # only outcomes matter (and see test_suite_catches_bugs on CPython 3.11.7)
        "-p",
        "no:cacheprovider",
        "-p",
        "no:unraisableexception",
        "--import-mode=importlib",
        f"--rootdir={root}",
        "-c",
        str(root / "pytest.ini"),
    ]
    exit_code = pytest.main([*args, str(root)], plugins=[recorder])
    assert exit_code in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED), (
        f"inner run ended with {exit_code!r}"
    )
    return recorder.outcomes


def _failed(outcomes: Outcomes, cls: str, name: str) -> bool:
    assert (cls, name) in outcomes, f"{cls}::{name} did not run; was the case renamed?"
    return "failed" in outcomes[(cls, name)]


@pytest.mark.parametrize(
    ("variant", "case"), [(variant, case) for variant, cases in MUST_FAIL.items() for case in cases]
)
def test_broken_variant_fails_the_named_case(outcomes: Outcomes, variant: str, case: str) -> None:
    assert _failed(outcomes, variant, case), f"the suite let {variant} pass {case}"
    assert not _failed(outcomes, CONTROL, case), f"{case} fails on the correct adapter too"


def test_the_correct_control_passes_every_scheduling_case(outcomes: Outcomes) -> None:
    cases = [case for cls, case in outcomes if cls == CONTROL]
    assert len(cases) > 80, f"too few scheduling cases ran: {len(cases)}"
    assert sorted(case for case in cases if "failed" in outcomes[(CONTROL, case)]) == []
