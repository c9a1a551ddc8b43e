"""The lifecycle cases catch broken adapters: deliberately wrong variants of the in-process
adapter must fail named cases of ``LifecycleStateTests``, while the correct control passes them.

Where a bug can be built from the contract (a fail that reschedules, a partial retry), the
variant wraps the memory adapter's transaction; where it cannot (a propagation that does
nothing, a prune that ignores blocker references), it swaps one named function of the
reference for the duration of one call and always puts back the original saved at import.
Only the lifecycle cases (and the hypothesis model, for the variants it is listed under) run
against the variants, which keeps this run short.
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
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, contextmanager
from datetime import timedelta

import pytest
from hypothesis import Phase, settings

from jobchain.contracts import JobCompleted, JobFailed, JobGet, JobReschedule
from jobchain.entities import JobStatus, Schedule
from jobchain.memory import _deletion, _lifecycle, _store, _workers, _writes
from jobchain.memory.state import MemoryStateAdapter
from jobchain_conformance.model import MODEL_SETTINGS, ModelTests
from jobchain_conformance.suites._base import StateSuiteBase
from jobchain_conformance.suites.state_lifecycle import LifecycleStateTests


@contextmanager
def swapped(module, name, replacement):
    """``module.name`` is ``replacement`` inside the block; the original saved at import after."""
    setattr(module, name, replacement)
    try:
        yield
    finally:
        setattr(module, name, ORIGINALS[(module.__name__, name)])


ORIGINALS = {
    (module.__name__, name): getattr(module, name)
    for module, name in [
        (_lifecycle, "propagate"),
        (_lifecycle, "_reblock_dependents"),
        (_lifecycle, "redriven"),
        (_writes, "with_error"),
        (_writes, "ended_badly"),
        (_writes, "resolved"),
        (_workers, "abandoned"),
        (_deletion, "_closed"),
        (_store.Store, "lock"),
    ]
}


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


class FailLeavesPendingTx(WrappedTx):
    """Bug (a): job_fail reschedules the job (the "ignores max_attempts" bug at state level)."""

    async def job_fail(self, params):
        job = await self._inner.job_reschedule(
            JobReschedule(
                job_id=params.job_id,
                schedule=Schedule(after=timedelta(0)),
                error=params.error,
                worker_id=params.worker_id,
                lease_generation=params.lease_generation,
                attempt_error=params.attempt_error,
                now=params.now,
            )
        )
        return JobFailed(job=job)


class LateCompletionTx(WrappedTx):
    """Bug (b): a cancelled job's worker may still complete it (its completion is not fenced)."""

    async def job_complete(self, params):
        job = await self._inner.job_get(JobGet(job_id=params.job_id))
        if job is None or job.status is not JobStatus.CANCELLED or params.worker_id is None:
            return await self._inner.job_complete(params)

        def op(ctx, now):
            current = ctx.locked_job(params.job_id)
            done = dataclasses.replace(
                current,
                status=JobStatus.COMPLETED,
                output=params.output,
                completed_at=now,
                completed_by=params.worker_id,
            )
            return JobCompleted(job=ctx.put(done), chain_completed=True)

        return await self._inner._write(op, params.now)


class StrandedDependentTx(WrappedTx):
    """Bug (c): a failed or cancelled chain leaves the jobs it blocks blocked."""

    async def job_fail(self, params):
        with swapped(_lifecycle, "propagate", lambda ctx, ended, now: ([], [])):
            return await self._inner.job_fail(params)

    async def chains_cancel(self, params):
        with swapped(_lifecycle, "propagate", lambda ctx, ended, now: ([], [])):
            return await self._inner.chains_cancel(params)


def _waiting_lock(self, tx, job_id, *, through_holds=False):
    return ORIGINALS[("Store", "lock")](self, tx, job_id, through_holds=False)


class CancelWaitsForHoldTx(WrappedTx):
    """Bug (d): a cancel waits for an atomic attempt holding its job (until the attempt ends)."""

    async def chains_cancel(self, params):
        with swapped(_store.Store, "lock", _waiting_lock):
            return await self._inner.chains_cancel(params)


class UnboundedHistoryTx(WrappedTx):
    """Bug (e): the error history never drops its oldest entries."""

    async def job_reschedule(self, params):
        grow = lambda errors, entry: errors if entry is None else (*errors, entry)  # noqa: E731
        with swapped(_writes, "with_error", grow):
            return await self._inner.job_reschedule(params)


class SilentReapTx(WrappedTx):
    """Bug (f): a reap or a dead worker's release appends nothing to the error history."""

    async def jobs_reap_expired(self, params):
        with swapped(_workers, "abandoned", lambda job, message, now: job.attempt_errors):
            return await self._inner.jobs_reap_expired(params)

    async def worker_heartbeat(self, params):
        with swapped(_workers, "abandoned", lambda job, message, now: job.attempt_errors):
            return await self._inner.worker_heartbeat(params)


class StaleBudgetTx(WrappedTx):
    """Bug (g): a retry keeps the old attempt budget (attempt_base is not moved)."""

    async def jobs_retry(self, params):
        real = ORIGINALS[("jobchain.memory._lifecycle", "redriven")]

        def keep_base(job, status, scheduled_at):
            return dataclasses.replace(real(job, status, scheduled_at), attempt_base=job.attempt_base)

        with swapped(_lifecycle, "redriven", keep_base):
            return await self._inner.jobs_retry(params)


class OrphanedDependentsTx(WrappedTx):
    """Bug (h): a retry leaves the dependents that failed because of it failed."""

    async def jobs_retry(self, params):
        with swapped(_lifecycle, "_reblock_dependents", lambda ctx, retried: []):
            return await self._inner.jobs_retry(params)


class PartialRetryTx(WrappedTx):
    """Bug (i): a retry with refusals still retries the jobs it can."""

    async def jobs_retry(self, params):
        result = await self._inner.jobs_retry(params)
        refused = {*result.not_found, *(job_id for job_id, _ in result.not_retryable)}
        refused.update(job_id for job_id, _ in result.blocked_by_failed)
        rest = [job_id for job_id in params.job_ids if job_id not in refused]
        if refused and rest:
            done = await self._inner.jobs_retry(dataclasses.replace(params, job_ids=rest))
            return dataclasses.replace(result, retried=done.retried, reblocked=done.reblocked)
        return result


class PartialCancelTx(WrappedTx):
    """Bug (j): a cancel with refusals still cancels the chains it can."""

    async def chains_cancel(self, params):
        result = await self._inner.chains_cancel(params)
        refused = {*result.not_found, *(chain_id for chain_id, _ in result.not_cancellable)}
        rest = [chain_id for chain_id in params.chain_ids if chain_id not in refused]
        if refused and rest:
            await self._inner.chains_cancel(dataclasses.replace(params, chain_ids=rest))
        return result


class FailedHoldsKeyTx(WrappedTx):
    """Bug (k): deduplication scope incomplete still matches a failed or cancelled chain."""

    async def jobs_create(self, params):
        real = ORIGINALS_DEDUP

        def only_completed_frees(view, dedup, chain_type_name, now):
            best = None
            for root in view.dedup_roots(dedup.key, chain_type_name):
                if root.id in set(dedup.exclude_chain_ids):
                    continue
                if dedup.window is not None and root.created_at < now - dedup.window:
                    continue
                last = view.last_job(root.id)
                if dedup.scope == "incomplete" and last is not None and last.status is JobStatus.COMPLETED:
                    continue
                if best is None or (root.created_at, root.id) > (best.created_at, best.id):
                    best = root
            return best

        _writes._deduplication_match = only_completed_frees
        try:
            return await self._inner.jobs_create(params)
        finally:
            _writes._deduplication_match = real


ORIGINALS_DEDUP = _writes._deduplication_match


class CreatedBlindToFailureTx(WrappedTx):
    """Bug (l): a job created against an already failed blocker is not failed."""

    async def jobs_create(self, params):
        with swapped(_writes, "ended_badly", lambda last: False):
            return await self._inner.jobs_create(params)


def _completed_only(blocker, *, runs_after_failed_blockers):
    return blocker is None or blocker.status is JobStatus.COMPLETED


class OptInStuckTx(WrappedTx):
    """Bug (m): completion unblocking ignores runs_after_failed_blockers (failed blockers block)."""

    async def job_complete(self, params):
        with swapped(_writes, "resolved", _completed_only):
            return await self._inner.job_complete(params)


class PruneIgnoresBlockersTx(WrappedTx):
    """Bug (n): a prune deletes chains that still block jobs it does not delete."""

    async def chains_prune(self, params):
        with swapped(_deletion, "_closed", lambda view, chain_ids: set(chain_ids)):
            return await self._inner.chains_prune(params)


class PruneNeverBusyTx(WrappedTx):
    """Bug (o): two prunes run at once (no one-at-a-time lock)."""

    async def chains_prune(self, params):
        self._inner._store.pruner = None
        return await self._inner.chains_prune(params)


class ErrorTypesIgnoredTx(WrappedTx):
    """Bug (p): jobs_list ignores the error_types filter."""

    async def jobs_list(self, params):
        return await self._inner.jobs_list(dataclasses.replace(params, error_types=()))


class CancelIgnoresCascadeTx(WrappedTx):
    """Bug (q): chains_cancel ignores cascade (the chains the cancelled ones wait for run on)."""

    async def chains_cancel(self, params):
        return await self._inner.chains_cancel(dataclasses.replace(params, cascade=False))


class CancelTakesSharedTx(WrappedTx):
    """Bug (r): a cascade cancels shared blockers too, as if include_shared were given."""

    async def chains_cancel(self, params):
        return await self._inner.chains_cancel(dataclasses.replace(params, include_shared=True))


class DryRunCancelsTx(WrappedTx):
    """Bug (s): a dry run cancels for real."""

    async def chains_cancel(self, params):
        return await self._inner.chains_cancel(dataclasses.replace(params, dry_run=False))


def lifecycle_suite(tx_class, *, with_model=False):
    class Variant(WrappedAdapter):
        pass

    Variant.tx_class = tx_class
    bases = (LifecycleStateTests, ModelTests) if with_model else (LifecycleStateTests,)

    class Suite(*bases):
        @pytest.fixture
        async def state_adapter(self) -> AsyncIterator[WrappedAdapter]:
            adapter = Variant()
            yield adapter
            await adapter.close()

        @pytest.fixture
        def model_settings(self):
            return settings(MODEL_SETTINGS, phases=[Phase.generate], derandomize=True)

    return Suite


TestCorrect = lifecycle_suite(WrappedTx, with_model=True)
TestFailLeavesPending = lifecycle_suite(FailLeavesPendingTx, with_model=True)
TestLateCompletion = lifecycle_suite(LateCompletionTx, with_model=True)
TestStrandedDependent = lifecycle_suite(StrandedDependentTx, with_model=True)
TestCancelWaitsForHold = lifecycle_suite(CancelWaitsForHoldTx)
TestUnboundedHistory = lifecycle_suite(UnboundedHistoryTx)
TestSilentReap = lifecycle_suite(SilentReapTx)
TestStaleBudget = lifecycle_suite(StaleBudgetTx)
TestOrphanedDependents = lifecycle_suite(OrphanedDependentsTx)
TestPartialRetry = lifecycle_suite(PartialRetryTx, with_model=True)
TestPartialCancel = lifecycle_suite(PartialCancelTx, with_model=True)
TestFailedHoldsKey = lifecycle_suite(FailedHoldsKeyTx)
TestCreatedBlindToFailure = lifecycle_suite(CreatedBlindToFailureTx, with_model=True)
TestOptInStuck = lifecycle_suite(OptInStuckTx)
TestPruneIgnoresBlockers = lifecycle_suite(PruneIgnoresBlockersTx)
TestPruneNeverBusy = lifecycle_suite(PruneNeverBusyTx)
TestErrorTypesIgnored = lifecycle_suite(ErrorTypesIgnoredTx)
TestCancelIgnoresCascade = lifecycle_suite(CancelIgnoresCascadeTx)
TestCancelTakesShared = lifecycle_suite(CancelTakesSharedTx)
TestDryRunCancels = lifecycle_suite(DryRunCancelsTx)
'''

# variant class → cases that must fail against it (and pass against the correct control).
# The model runs derandomized (see lifecycle_suite) and is listed only under the variants it
# catches; the named example cases are the guard for the others.
MUST_FAIL = {
    "TestFailLeavesPending": [
        "test_adapter_agrees_with_reference_model",
        "test_the_owner_fails_its_running_job_with_the_error_recorded",
        "test_a_failed_job_is_never_claimed",
        "test_a_failed_chain_fails_its_blocked_dependent_naming_it",
    ],
    "TestLateCompletion": [
        "test_adapter_agrees_with_reference_model",
        "test_renewal_completion_reschedule_and_fail_of_the_worker_are_refused",
        "test_a_completion_without_the_generation_is_refused_too",
        "test_a_cancel_does_not_wait_for_an_attempt_holding_its_job",
    ],
    "TestStrandedDependent": [
        "test_adapter_agrees_with_reference_model",
        "test_a_failed_chain_fails_its_blocked_dependent_naming_it",
        "test_a_cancelled_chain_fails_its_blocked_dependent_naming_it",
        "test_failure_propagates_several_levels_deep_in_one_operation",
        "test_a_failed_blocker_makes_an_opted_in_dependent_pending",
        "test_a_failure_waits_for_an_uncommitted_dependent_and_fails_it",
    ],
    "TestCancelWaitsForHold": [
        "test_a_cancel_does_not_wait_for_an_attempt_holding_its_job",
    ],
    "TestUnboundedHistory": [
        "test_the_history_keeps_the_last_entries_oldest_first",
    ],
    "TestSilentReap": [
        "test_a_reap_appends_an_abandoned_attempt",
        "test_a_dead_workers_release_appends_an_abandoned_attempt",
    ],
    "TestStaleBudget": [
        "test_a_failed_job_is_pending_now_with_a_fresh_budget_and_its_history",
        "test_a_retried_job_runs_again_counting_attempts_from_the_retry",
    ],
    "TestOrphanedDependents": [
        "test_dependents_return_to_blocked_several_levels_deep",
        "test_dependents_of_a_retried_cancelled_chain_follow_it",
        "test_a_dependent_with_another_failed_blocker_stays_failed_naming_that_one",
    ],
    "TestPartialRetry": [
        "test_adapter_agrees_with_reference_model",
        "test_missing_and_unfinished_jobs_refuse_the_whole_request",
    ],
    "TestPartialCancel": [
        "test_adapter_agrees_with_reference_model",
        "test_an_unknown_chain_refuses_the_whole_request",
        "test_finished_chains_refuse_the_whole_request_with_their_statuses",
    ],
    "TestFailedHoldsKey": [
        "test_a_failed_chain_frees_its_key",
        "test_a_cancelled_chain_frees_its_key",
    ],
    "TestCreatedBlindToFailure": [
        "test_adapter_agrees_with_reference_model",
        "test_a_job_created_against_a_failed_blocker_is_failed_at_once",
        "test_a_job_created_against_a_cancelled_blocker_is_failed_at_once",
        "test_an_insert_waits_for_an_uncommitted_failure_and_fails_at_once",
    ],
    "TestOptInStuck": [
        "test_an_opted_in_job_waits_for_every_blocker_then_completion_unblocks_it",
    ],
    # Not the model: with Hypothesis's literals from local modules left out (conftest's
    # without_local_constants) its derandomized run does not reach this bug, even with 100
    # examples; it did only through one such literal. The cases below are the guard.
    "TestPruneIgnoresBlockers": [
        "test_a_chain_blocking_a_live_job_is_kept_and_does_not_crowd_out_others",
        "test_a_blocker_whose_dependent_misses_the_batch_is_kept_for_later",
    ],
    "TestPruneNeverBusy": [
        "test_a_second_prune_while_one_runs_returns_busy_and_deletes_nothing",
    ],
    "TestErrorTypesIgnored": [
        "test_error_types_match_the_last_entry_of_the_history",
        "test_dead_letters_by_type_and_error_page_with_a_cursor",
    ],
    "TestCancelIgnoresCascade": [
        "test_a_cascade_cancels_the_blockers_recursively",
        "test_a_cascade_follows_the_chains_a_handler_waits_for",
        "test_a_shared_blocker_is_left_out_with_what_only_it_reaches_and_reported",
        "test_terminal_blockers_are_skipped_and_a_finished_waiter_shares_nothing",
        "test_a_running_blocker_job_is_reported_with_its_worker",
        "test_a_dry_run_changes_nothing_and_reports_what_the_cancel_does",
    ],
    "TestCancelTakesShared": [
        "test_a_shared_blocker_is_left_out_with_what_only_it_reaches_and_reported",
        "test_a_dry_run_changes_nothing_and_reports_what_the_cancel_does",
    ],
    "TestDryRunCancels": [
        "test_a_dry_run_changes_nothing_and_reports_what_the_cancel_does",
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
pytestmark = [pytest.mark.timeout(900), pytest.mark.xdist_group("catches_lifecycle_bugs")]


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory, without_local_constants: None) -> Outcomes:
    """Run the lifecycle cases once, in-process, against every variant; (class, case) → outcomes."""
    root = tmp_path_factory.mktemp("lifecycle_variants")
    (root / "pytest.ini").write_text(INI)
    (root / "test_lifecycle_variants.py").write_text(VARIANTS)
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


def test_the_correct_control_passes_every_lifecycle_case(outcomes: Outcomes) -> None:
    cases = [case for cls, case in outcomes if cls == CONTROL]
    assert len(cases) > 80, f"too few lifecycle cases ran: {len(cases)}"
    assert sorted(case for case in cases if "failed" in outcomes[(CONTROL, case)]) == []
