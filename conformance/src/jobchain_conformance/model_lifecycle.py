"""The lifecycle rules of the model (``model.py``): fail, cancel, retry and prune.

:class:`LifecycleRules` is mixed into the model's state machine, which supplies the plumbing
it declares (``both``, ``agree``, ``reference_job``, ``pick`` and the example's namespace).
Like the other rules, these only assert what the contract specifies: results are compared as
sets where the contract gives no order, and prune cutoffs fall on half seconds while every
finish time is a whole second.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from hypothesis import strategies as st
from hypothesis.stateful import rule

from jobchain.contracts import (
    MAX_PAGE_SIZE,
    ChainGet,
    ChainsCancel,
    ChainsPrune,
    JobBlockersGet,
    JobFail,
    JobsList,
    JobsRetry,
    StateTx,
)
from jobchain.entities import AttemptError, Chain, Job, JobStatus, Schedule, WorkerInfo
from jobchain_conformance.model_stats import StatsInvariants

T = TypeVar("T")

RECENT = st.integers(0, 3)
PRUNE_LIMIT = 10_000
"""Large enough that a prune never leaves out a chain of the example for the limit's sake (the
adapter under test may hold earlier examples' chains too)."""


def _utc(value: Any) -> Any:
    return value.astimezone(UTC) if isinstance(value, datetime) else value


def project(job: Job | WorkerInfo) -> dict[str, Any]:
    """Every stored field of a job (or registry row), times normalized to UTC."""
    return {f.name: _utc(getattr(job, f.name)) for f in dataclasses.fields(job)}


def _projected(jobs: Iterable[Job]) -> list[Any]:
    return sorted((job.id, tuple(project(job).items())) for job in jobs)


class LifecycleRules(StatsInvariants):
    """Rules for job_fail, chains_cancel, jobs_retry and chains_prune.

    It carries the queue-health invariant (:class:`StatsInvariants`) into the machine. That
    leaves the machine's class statement as it was: hypothesis derives a derandomized run's
    seed from that class's source, and the broken-variant tests rely on what a seed explores.
    """

    now: datetime
    types: tuple[str, str]
    chain_ids: list[str]
    job_ids: list[str]

    # Supplied by the machine (model.make_state_machine).
    def both(self, op: Callable[[StateTx], Awaitable[T]]) -> tuple[Any, Any]:
        raise NotImplementedError

    def agree(self, label: str, outcomes: tuple[Any, Any], summary: Callable[[Any], Any]) -> Any:
        raise NotImplementedError

    def reference_job(self, index: int, statuses: Sequence[JobStatus]) -> Job | None:
        raise NotImplementedError

    def pick(self, items: Sequence[str], index: int) -> str:
        raise NotImplementedError

    def reference_read(self, op: Callable[[StateTx], Awaitable[T]]) -> T:
        raise NotImplementedError

    def _blocker_of_a_blocked_job(self, index: int, which: int) -> Chain | None:
        """One blocker chain of one of the example's blocked jobs (in the reference)."""
        job = self.reference_job(index, [JobStatus.BLOCKED])
        if job is None or job.status is not JobStatus.BLOCKED:
            return None
        job_id = job.id
        chains = self.reference_read(lambda tx: tx.job_blockers_get(JobBlockersGet(job_id=job_id)))
        return chains[which % len(chains)] if chains else None

    # ------------------------------------------------------------ rules

    @rule(
        index=RECENT,
        status=st.sampled_from(
            [JobStatus.RUNNING, JobStatus.RUNNING, JobStatus.PENDING, JobStatus.BLOCKED, JobStatus.FAILED]
        ),
        as_worker=st.sampled_from(["owner", "owner", "other", "none"]),
        current_generation=st.booleans(),
        with_entry=st.booleans(),
    )
    def fail(
        self, index: int, status: JobStatus, as_worker: str, current_generation: bool, with_entry: bool
    ) -> None:
        job = self.reference_job(index, [status])
        if job is None:
            return
        worker = {"owner": job.leased_by, "other": "worker-stranger", "none": None}[as_worker]
        entry = (
            AttemptError(
                attempt=job.attempt,
                worker_id=worker,
                error_type=f"Error{index}",
                message="gave up",
                at=self.now,
            )
            if with_entry
            else None
        )
        params = JobFail(
            job_id=job.id,
            error=f"failed at {self.now.isoformat()}",
            worker_id=worker,
            lease_generation=job.lease_generation if current_generation and worker is not None else None,
            attempt_error=entry,
            now=self.now,
        )
        self.agree(
            "job_fail",
            self.both(lambda tx: tx.job_fail(params)),
            lambda r: (
                project(r.job),
                _projected(r.failed_jobs),
                _projected(r.unblocked_jobs),
                r.previous_leased_by,
                r.was_running,
            ),
        )

    @rule(
        indexes=st.lists(RECENT, min_size=1, max_size=2),
        missing=st.sampled_from([False, False, False, True]),
        reason=st.sampled_from([None, "stop"]),
    )
    def cancel(self, indexes: list[int], missing: bool, reason: str | None) -> None:
        if not self.chain_ids:
            return
        chain_ids = list(dict.fromkeys(self.pick(self.chain_ids, i) for i in indexes))
        if missing:
            chain_ids.append(str(uuid.uuid4()))
        self.cancel_chains(chain_ids, reason)

    def cancel_chains(self, chain_ids: list[str], reason: str | None) -> None:
        params = ChainsCancel(chain_ids=chain_ids, reason=reason, now=self.now)
        self.agree(
            "chains_cancel",
            self.both(lambda tx: tx.chains_cancel(params)),
            lambda r: (
                _projected(r.cancelled),
                sorted(r.running_job_ids),
                sorted(r.previous_leased_by.items()),
                _projected(r.failed_jobs),
                _projected(r.unblocked_jobs),
                sorted(r.not_found),
                sorted(r.not_cancellable),
            ),
        )

    @rule(
        indexes=st.lists(RECENT, min_size=1, max_size=2),
        missing=st.sampled_from([False, False, False, True]),
        delay=st.sampled_from([None, None, 0, 20]),
    )
    def retry(self, indexes: list[int], missing: bool, delay: int | None) -> None:
        chosen = [self.reference_job(i, [JobStatus.FAILED, JobStatus.CANCELLED]) for i in indexes]
        job_ids = list(dict.fromkeys(job.id for job in chosen if job is not None))
        if missing:
            job_ids.append(str(uuid.uuid4()))
        if job_ids:
            self.retry_jobs(job_ids, delay)

    def retry_jobs(self, job_ids: list[str], delay: int | None) -> None:
        params = JobsRetry(
            job_ids=job_ids,
            schedule=None if delay is None else Schedule(after=timedelta(seconds=delay)),
            now=self.now,
        )
        self.agree(
            "jobs_retry",
            self.both(lambda tx: tx.jobs_retry(params)),
            lambda r: (
                _projected(r.retried),
                _projected(r.reblocked),
                sorted(r.not_found),
                sorted(r.not_retryable),
                sorted(r.blocked_by_failed),
            ),
        )

    @rule(index=RECENT, which=st.integers(0, 1), cancel=st.booleans(), reason=st.sampled_from([None, "stop"]))
    def end_a_blocker(self, index: int, which: int, cancel: bool, reason: str | None) -> None:
        """Fail or cancel a chain that blocks a job: propagation, aimed rather than hoped for."""
        chain = self._blocker_of_a_blocked_job(index, which)
        if chain is None:
            return
        if cancel:
            self.cancel_chains([chain.id], reason)
            return
        params = JobFail(job_id=chain.last.id, error="blocker gave up", now=self.now)
        self.agree(
            "job_fail (a blocker)",
            self.both(lambda tx: tx.job_fail(params)),
            lambda r: (project(r.job), _projected(r.failed_jobs), _projected(r.unblocked_jobs)),
        )

    @rule(index=RECENT)
    def retry_a_blocker(self, index: int) -> None:
        """Retry the chain that failed a job: its dependents follow (or the retry is refused)."""
        listing = JobsList(type_names=self.types, statuses=[JobStatus.FAILED.value], limit=MAX_PAGE_SIZE)
        page = self.reference_read(lambda tx: tx.jobs_list(listing))
        causes = [job.failed_by_chain_id for job in page.items if job.failed_by_chain_id is not None]
        if not causes:
            return
        chain_id = causes[index % len(causes)]
        chain = self.reference_read(lambda tx: tx.chain_get(ChainGet(chain_id=chain_id)))
        if chain is not None:
            self.retry_jobs([chain.last.id], None)

    @rule(
        completed=st.sampled_from([None, 0, 60]),
        failed=st.sampled_from([None, 0, 60]),
        cancelled=st.sampled_from([None, 0, 60]),
    )
    def prune(self, completed: int | None, failed: int | None, cancelled: int | None) -> None:
        def cutoff(age: int | None) -> datetime | None:
            # Half a second after a whole-second finish time: never equal to one.
            return None if age is None else self.now - timedelta(seconds=age) + timedelta(milliseconds=500)

        params = ChainsPrune(
            completed_before=cutoff(completed),
            failed_before=cutoff(failed),
            cancelled_before=cutoff(cancelled),
            limit=PRUNE_LIMIT,
        )
        mine = set(self.types)  # the subject may prune earlier examples' chains as well
        pruned = self.agree(
            "chains_prune",
            self.both(lambda tx: tx.chains_prune(params)),
            lambda r: (
                r.busy,
                sorted((c.id, c.type_name, c.status) for c in r.chains if c.type_name in mine),
            ),
        )
        gone = {chain.id for chain in pruned.chains} if pruned is not None else set()
        self.chain_ids = [chain_id for chain_id in self.chain_ids if chain_id not in gone]
