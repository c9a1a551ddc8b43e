"""The in-process adapter's queue_stats against a brute-force oracle over random job histories.

The conformance suite (``QueueStatsTests``) pins each figure with examples; this property
builds random stores (every status, error histories, claimed and workerless completions,
leases that have or have not expired, times that land on window and bucket boundaries) and
checks every figure against a direct transcription of the contract over the listed jobs.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobchain.contracts import MAX_PAGE_SIZE, JobReschedule, JobsList, QueueStatsGet
from jobchain.entities import Job, JobStatus, Schedule
from jobchain.memory._stats import bucket_starts
from jobchain.memory.state import MemoryStateAdapter
from jobchain.stats import ERROR_TYPES_KEPT, QueueStats, ThroughputBucket, TypeStats, WindowCounts
from jobchain.stats import duration_percentiles as percentiles
from jobchain_conformance.helpers import (
    acquire_job,
    attempt_error,
    cancel,
    complete,
    fail,
    start,
)

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
SECOND = timedelta(seconds=1)
CLAIMED = ("running", "completed", "failed")  # built first: a claim takes the oldest pending job
FATES = (*CLAIMED, "workerless", "pending", "scheduled", "blocked", "cancelled")


@dataclass(frozen=True)
class Plan:
    type_name: str
    fate: str
    at: int  # seconds after T0 when the job is created (and claimed)
    took: int  # seconds until it finishes, its lease ends or it is scheduled
    errors: tuple[str, ...]


plans = st.builds(
    Plan,
    type_name=st.sampled_from(["a", "b", "C"]),
    fate=st.sampled_from(FATES),
    at=st.integers(0, 60),
    took=st.integers(0, 60),
    errors=st.lists(st.sampled_from(["E1", "E2", "E3"]), max_size=3).map(tuple),
)


async def build(adapter: MemoryStateAdapter, plan: Plan) -> None:
    now, done = T0 + plan.at * SECOND, T0 + (plan.at + plan.took) * SECOND
    if plan.fate == "blocked":
        blocker = await start(adapter, now=now, type_name="blocker")
        await start(adapter, now=now, type_name=plan.type_name, blocker_chain_ids=[blocker.id])
        return
    schedule = Schedule(at=done) if plan.fate == "scheduled" else None
    job = await start(adapter, now=now, type_name=plan.type_name, schedule=schedule)
    history = plan.errors[:-1] if plan.fate == "failed" else plan.errors
    for error_type in history if plan.fate in CLAIMED else ():
        await _append(adapter, job, error_type, now)
    if plan.fate in ("running", "completed"):
        running = await acquire_job(adapter, job, now=now, lease_for=max(plan.took, 1) * SECOND)
        if plan.fate == "completed":
            await complete(
                adapter,
                job.id,
                now=done,
                worker_id=running.leased_by,
                lease_generation=running.lease_generation,
            )
    elif plan.fate == "workerless":
        await complete(adapter, job.id, now=done)
    elif plan.fate == "failed":
        entry = attempt_error(0, at=done, error_type=plan.errors[-1]) if plan.errors else None
        await fail(adapter, job.id, now=done, attempt_error=entry)
    elif plan.fate == "cancelled":
        await cancel(adapter, [job.id], now=done)


async def _append(adapter: MemoryStateAdapter, job: Job, error_type: str, now: datetime) -> None:
    """Give the (pending again) job one more history entry through a claim and reschedule."""
    running = await acquire_job(adapter, job, now=now)
    async with adapter.transaction() as tx:
        await tx.job_reschedule(
            JobReschedule(
                job_id=job.id,
                schedule=Schedule(after=timedelta(0)),
                error=error_type,
                worker_id=running.leased_by,
                lease_generation=running.lease_generation,
                attempt_error=attempt_error(running.attempt, at=now, error_type=error_type),
                now=now,
            )
        )


def since(at: datetime | None, cutoff: datetime) -> bool:
    return at is not None and at >= cutoff


def _took(job: Job) -> timedelta:
    assert job.completed_at is not None
    assert job.attempt_started_at is not None
    return job.completed_at - job.attempt_started_at


def oracle(jobs: list[Job], params: QueueStatsGet, now: datetime) -> QueueStats:
    """Each figure as the contract words it, computed the slow way."""
    names = sorted(set(params.type_names) or {job.type_name for job in jobs})
    types = []
    for name in names:
        mine = [job for job in jobs if job.type_name == name]

        def having(status: JobStatus, jobs: list[Job] = mine) -> list[Job]:
            return [job for job in jobs if job.status is status]

        due = [job for job in having(JobStatus.PENDING) if job.scheduled_at <= now]
        errors = Counter(
            job.attempt_errors[-1].error_type if job.attempt_errors else ""
            for job in having(JobStatus.FAILED)
        )
        sampled = sorted(
            (
                job
                for job in having(JobStatus.COMPLETED)
                if job.attempt_started_at is not None
                and job.completed_at is not None
                and job.completed_at >= now - params.duration_window
            ),
            key=lambda job: (job.completed_at or T0, job.id),
            reverse=True,
        )[: params.duration_sample]
        types.append(
            TypeStats(
                type_name=name,
                blocked=len(having(JobStatus.BLOCKED)),
                pending=len(having(JobStatus.PENDING)),
                due=len(due),
                scheduled=len(having(JobStatus.PENDING)) - len(due),
                running=len(having(JobStatus.RUNNING)),
                expired_leases=sum(
                    1 for job in having(JobStatus.RUNNING) if job.leased_until and job.leased_until < now
                ),
                completed=len(having(JobStatus.COMPLETED)),
                failed=len(having(JobStatus.FAILED)),
                cancelled=len(having(JobStatus.CANCELLED)),
                oldest_due_at=min((job.scheduled_at for job in due), default=None),
                failed_by_error_type=dict(
                    sorted(errors.items(), key=lambda kv: (-kv[1], kv[0]))[:ERROR_TYPES_KEPT]
                ),
                recent=tuple(
                    WindowCounts(
                        window=window,
                        completed=sum(
                            since(j.completed_at, now - window) for j in having(JobStatus.COMPLETED)
                        ),
                        failed=sum(since(j.failed_at, now - window) for j in having(JobStatus.FAILED)),
                        cancelled=sum(
                            since(j.cancelled_at, now - window) for j in having(JobStatus.CANCELLED)
                        ),
                    )
                    for window in params.windows
                ),
                durations=percentiles(_took(job) for job in sampled),
            )
        )
    return QueueStats(now=now, types=tuple(types), throughput=_throughput(jobs, params, now))


def _throughput(jobs: list[Job], params: QueueStatsGet, now: datetime) -> tuple[ThroughputBucket, ...]:
    """Buckets from whole-second timestamps (every step here is whole seconds)."""
    if params.throughput_window is None:
        return ()
    step = int(params.throughput_step.total_seconds())
    count = -(-int(params.throughput_window.total_seconds()) // step)
    last = int(now.timestamp()) // step * step
    rows = []
    for index in range(count):
        start = last - step * (count - 1 - index)

        def within(at: datetime | None, start: int = start) -> bool:
            return at is not None and start <= at.timestamp() < start + step

        rows.append(
            ThroughputBucket(
                start=datetime.fromtimestamp(start, UTC),
                completed=sum(
                    1 for job in jobs if job.status is JobStatus.COMPLETED and within(job.completed_at)
                ),
                failed=sum(1 for job in jobs if job.status is JobStatus.FAILED and within(job.failed_at)),
            )
        )
    return tuple(rows)


async def _check(jobs_plans: list[Plan], params: QueueStatsGet) -> None:
    adapter = MemoryStateAdapter()
    for plan in sorted(jobs_plans, key=lambda plan: plan.fate not in CLAIMED):
        await build(adapter, plan)
    async with adapter.transaction(read_only=True) as tx:
        stats = await tx.queue_stats(params)
        jobs = (await tx.jobs_list(JobsList(limit=MAX_PAGE_SIZE))).items
    assert params.now is not None
    expected = oracle(jobs, params, params.now)
    assert stats == expected
    for got, want in zip(stats.types, expected.types, strict=True):
        assert list(got.failed_by_error_type) == list(want.failed_by_error_type), got.type_name


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    jobs_plans=st.lists(plans, max_size=25),
    now=st.integers(0, 150),
    type_names=st.lists(st.sampled_from(["a", "b", "C", "none"]), max_size=2),
    windows=st.lists(st.integers(1, 120), max_size=3),
    duration_window=st.integers(1, 150),
    duration_sample=st.integers(0, 6),
    throughput=st.none() | st.tuples(st.integers(1, 200), st.sampled_from([1, 7, 10, 30, 60])),
)
def test_queue_stats_agrees_with_the_oracle(
    jobs_plans: list[Plan],
    now: int,
    type_names: list[str],
    windows: list[int],
    duration_window: int,
    duration_sample: int,
    throughput: tuple[int, int] | None,
) -> None:
    params = QueueStatsGet(
        type_names=type_names,
        windows=[window * SECOND for window in windows],
        duration_window=duration_window * SECOND,
        duration_sample=duration_sample,
        throughput_window=None if throughput is None else throughput[0] * SECOND,
        throughput_step=SECOND if throughput is None else throughput[1] * SECOND,
        now=T0 + now * SECOND,
    )
    asyncio.run(_check(jobs_plans, params))


def test_bucket_starts_use_integer_microseconds() -> None:
    # A step of a third of a second does not divide evenly in floating point.
    step = timedelta(microseconds=333_333)
    now = datetime(2030, 1, 1, tzinfo=UTC) + timedelta(microseconds=1)
    starts = bucket_starts(now, timedelta(seconds=1), step)
    assert len(starts) == 4  # ceil(1_000_000 / 333_333)
    assert all((start - datetime(1970, 1, 1, tzinfo=UTC)) % step == timedelta(0) for start in starts)
    assert starts[-1] <= now < starts[-1] + step
    assert [b - a for a, b in itertools.pairwise(starts)] == [step] * 3
