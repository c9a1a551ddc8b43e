"""``jobs_acquire`` of the in-process state backend: the claim, with priorities, pause and limits.

The reference for every backend (``JobsAcquire``, ``contracts.scheduling``), built as the SQL
backends build it, from small named steps:

* :func:`type_allowance` — how many jobs of one type this claim may take (its cap); a type
  with limits locks its control row first, so the claims of a limited type are serialized
  and each one counts the running jobs and the rate window its predecessor left;
* :func:`type_candidates` — the union of three index-ordered prefixes of the type's pending
  due jobs (FIFO filtered to ``priority >= 0`` or aged, ``priority > 0`` by priority,
  ``priority < 0`` by priority), cut to the type's cap by :func:`claim_key`;
* :func:`order_claims` — every type's candidates by :func:`claim_key`: aged jobs first by
  ``scheduled_at, created_at, id``, then the others by priority descending, then the same;
* :func:`count_claims` — the claimed jobs added to the type's rate window counter;
* :func:`held_back_types` / :func:`rate_retry_at` — what ``JobsAcquired`` reports.

Rows locked or held by other transactions are skipped (``SKIP LOCKED``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from jobchain.contracts.state import JobsAcquire, JobsAcquired
from jobchain.entities import Job, JobStatus, TypeLimits
from jobchain.memory._indexkeys import PriorityKey
from jobchain.memory._store import unique
from jobchain.memory._tables import TypeControl
from jobchain.memory._writes import Ctx

ClaimKey = tuple[bool, int, datetime, datetime, str]
_LOWEST = datetime.min.replace(tzinfo=UTC)
_FIRST_NEGATIVE: PriorityKey = (0, _LOWEST, _LOWEST, "")  # no key has -priority 0: the first after is < 0


@dataclass(frozen=True, slots=True)
class Allowance:
    """What one type's limits let this claim take.

    ``cap``: how many jobs (None: no type limit, only the claim's own ``limit``).
    ``rate_bound``: the rate limit is what caps it (``window_end`` is then its window's end).
    """

    cap: int | None = None
    rate_bound: bool = False
    window_start: datetime | None = None
    window_end: datetime | None = None
    window_count: int = 0


UNLIMITED = Allowance()


def limited(limits: TypeLimits | None) -> bool:
    """Whether a claim must enforce (and serialize on) the type's limits."""
    return limits is not None and (limits.max_running is not None or limits.rate_limit is not None)


def paused(ctx: Ctx, type_name: str) -> bool:
    """The type is paused as this transaction sees it (committed, or its own change)."""
    control = ctx.store.controls.get(ctx.tx, type_name)
    return control is not None and control.paused_at is not None


def type_allowance(ctx: Ctx, type_name: str, limits: TypeLimits | None, now: datetime) -> Allowance:
    """The type's cap: ``min(max_running - running, rate.limit - count in the window)``, >= 0.

    Locks the type's control row (waiting for another claim of the type) before counting.
    """
    if limits is None or not limited(limits):
        return UNLIMITED
    store = ctx.store
    store.lock_table(ctx.tx, store.controls, type_name)
    running_room: int | None = None
    if limits.max_running is not None:
        running_room = limits.max_running - ctx.view.running_count(type_name)
    rate = limits.rate_limit
    if rate is None:
        assert running_room is not None  # limited(): one of the two is set
        return Allowance(cap=max(0, running_room))
    window = rate.window_start(now)
    control = store.controls.rows.get(type_name)  # locked by us: the live row is what we see
    count = control.window_count if control is not None and control.window_start == window else 0
    rate_room = rate.limit - count
    cap = rate_room if running_room is None else min(running_room, rate_room)
    return Allowance(
        cap=max(0, cap),
        rate_bound=running_room is None or rate_room <= running_room,
        window_start=window,
        window_end=window + rate.per,
        window_count=count,
    )


def claim_key(job: Job, aged_before: datetime) -> ClaimKey:
    """Ascending claim order: aged first (``scheduled_at <= aged_before``), then priority
    descending for the others (aged jobs all count as 0), then ``scheduled_at, created_at, id``."""
    aged = job.scheduled_at <= aged_before
    return (not aged, 0 if aged else -job.priority, job.scheduled_at, job.created_at, job.id)


def order_claims(jobs: Iterable[Job], aged_before: datetime) -> list[Job]:
    """Candidates in claim order (:func:`claim_key`)."""
    return sorted(jobs, key=lambda job: claim_key(job, aged_before))


def fifo_prefix(ctx: Ctx, type_name: str, count: int, now: datetime, aged_before: datetime) -> list[Job]:
    """C1: the first ``count`` due jobs by ``scheduled_at, created_at, id`` with priority >= 0 or aged."""
    store = ctx.store
    found: list[Job] = []
    for scheduled_at, _, job_id in store.pending.get(type_name, ()):
        if scheduled_at > now or len(found) == count:
            break
        job = store.jobs[job_id]
        if (job.priority >= 0 or scheduled_at <= aged_before) and not ctx.skipped(job_id):
            found.append(job)
    return found


def priority_prefix(ctx: Ctx, type_name: str, count: int, now: datetime, *, positive: bool) -> list[Job]:
    """C2 (``positive``) / C3: the first ``count`` due jobs with priority > 0 (< 0) by priority
    descending, then ``scheduled_at, created_at, id``."""
    store = ctx.store
    keys: Iterator[PriorityKey] = iter(store.prioritized.get(type_name, ()))
    if not positive:
        index = store.prioritized.get(type_name)
        keys = index.after(_FIRST_NEGATIVE) if index is not None else iter(())
    found: list[Job] = []
    for negated, scheduled_at, _, job_id in keys:
        if (positive and negated > 0) or len(found) == count:
            break
        if scheduled_at <= now and not ctx.skipped(job_id):
            found.append(store.jobs[job_id])
    return found


def type_candidates(ctx: Ctx, type_name: str, count: int, now: datetime, aged_before: datetime) -> list[Job]:
    """The type's first ``count`` claimable jobs in claim order (the true top ``count``: it is
    inside the union of the three prefixes)."""
    if count <= 0:
        return []
    union = {
        job.id: job
        for job in (
            *fifo_prefix(ctx, type_name, count, now, aged_before),
            *priority_prefix(ctx, type_name, count, now, positive=True),
            *priority_prefix(ctx, type_name, count, now, positive=False),
        )
    }
    return order_claims(union.values(), aged_before)[:count]


def claimed(job: Job, params: JobsAcquire, now: datetime) -> Job:
    """The job as a claim leaves it: running under the caller's lease."""
    return replace(
        job,
        status=JobStatus.RUNNING,
        attempt=job.attempt + 1,
        lease_generation=job.lease_generation + 1,
        leased_by=params.worker_id,
        leased_until=now + params.lease_of(job.type_name),
        first_attempt_at=job.first_attempt_at if job.first_attempt_at is not None else now,
        attempt_started_at=now,
    )


def count_claims(ctx: Ctx, type_name: str, allowance: Allowance, count: int) -> None:
    """Add ``count`` claims to the type's rate window (restarting it when the window moved)."""
    if allowance.window_start is None or count == 0:
        return
    controls = ctx.store.controls
    control = controls.rows.get(type_name) or TypeControl()  # locked by type_allowance
    updated = replace(
        control, window_start=allowance.window_start, window_count=allowance.window_count + count
    )
    controls.put(ctx.tx, type_name, updated)


def held_back_types(
    allowances: Mapping[str, Allowance], counts: Mapping[str, int], limit: int
) -> tuple[str, ...]:
    """Types whose limits capped the claim: it took all they allowed, fewer than ``limit``."""
    return tuple(
        sorted(
            name
            for name, allowance in allowances.items()
            if allowance.cap is not None and allowance.cap < limit and counts.get(name, 0) == allowance.cap
        )
    )


def rate_retry_at(allowances: Mapping[str, Allowance], held_back: Iterable[str]) -> datetime | None:
    """The earliest window end among held-back types that their rate limit capped."""
    ends = [
        end
        for name in held_back
        if allowances[name].rate_bound and (end := allowances[name].window_end) is not None
    ]
    return min(ends, default=None)


def jobs_acquire(ctx: Ctx, params: JobsAcquire, now: datetime) -> JobsAcquired:
    aged_before = now - params.priority_aging
    allowances: dict[str, Allowance] = {}
    pool: list[Job] = []
    # Sorted: limited types lock their control rows in one order, so claimers never deadlock.
    for name in sorted(unique(params.type_names)):
        allowance = type_allowance(ctx, name, params.type_limits.get(name), now)
        if paused(ctx, name):
            continue
        allowances[name] = allowance
        # One beyond the limit tells whether more were waiting (has_more).
        take = params.limit + 1 if allowance.cap is None else min(allowance.cap, params.limit + 1)
        pool.extend(type_candidates(ctx, name, take, now, aged_before))
    ordered = order_claims(pool, aged_before)
    chosen = ordered[: params.limit]
    jobs = [ctx.put(claimed(job, params, now)) for job in chosen]
    counts = Counter(job.type_name for job in jobs)
    for name, allowance in allowances.items():
        count_claims(ctx, name, allowance, counts[name])
    held_back = held_back_types(allowances, counts, params.limit)
    return JobsAcquired(
        jobs=jobs,
        has_more=len(ordered) > params.limit,
        held_back=held_back,
        retry_at=rate_retry_at(allowances, held_back),
    )
