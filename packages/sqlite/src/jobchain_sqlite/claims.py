"""jobs_acquire: the plain claim, and the general claim with priorities, limits and pauses.

The plain claim (``jobs_acquire.sql``) is one UPDATE … RETURNING, as before the scheduling
controls: it serves claims of types without ``type_limits`` while none of their pending jobs
has a priority (its guard reads ``job_priority_idx``, empty while nobody uses priorities)
and leaves paused types out. Everything else, and a plain claim that found nothing, takes
the general claim, under the write lock the transaction holds from BEGIN IMMEDIATE (so the
claims of a limited type are serialized, as the contract asks, by SQLite's single writer):

1. ``jobs_acquire_candidates``: per type not paused, what its limits leave (running jobs,
   the rate window's count) and the union of the three candidate prefixes
   (``JobsAcquire``: FIFO filtered to priority >= 0 or aged, priority > 0, priority < 0);
2. the adapter orders them by the claim key, caps each type, takes ``limit`` overall;
3. ``jobs_acquire_ids``: claims those jobs;
4. ``type_rate_count``: adds the claims of rate-limited types to their window's count (only
   when one claimed something).

``held_back`` / ``retry_at`` / ``has_more`` are decided as the in-process reference decides
them (``jobchain.memory._claims``).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from datetime import datetime

from jobchain.contracts.state import JobsAcquire, JobsAcquired
from jobchain.entities import Job, utcnow
from jobchain_sqlite.context import TxContext
from jobchain_sqlite.rows import Row, fmt_time, json_list, running_job_from_row

ClaimKey = tuple[bool, int, str, str, str]


@dataclass(frozen=True, slots=True)
class _Allowance:
    cap: int | None = None
    rate_bound: bool = False
    window_start: datetime | None = None
    window_end: datetime | None = None


def _key(priority: int, scheduled_at: str, created_at: str, job_id: str, aged_before: str) -> ClaimKey:
    """Ascending claim order: aged jobs first (all as priority 0), then priority descending,
    then scheduled_at, created_at, id (fixed-width time text compares as the instants)."""
    aged = scheduled_at <= aged_before
    return (not aged, 0 if aged else -priority, scheduled_at, created_at, job_id)


def _leases(params: JobsAcquire, now: datetime) -> tuple[str, str | None]:
    """leased_until, and the JSON object of the listed types whose lease differs (or None)."""
    type_leases = {
        name: fmt_time(now + lease)
        for name in params.type_names
        if (lease := params.lease_of(name)) != params.lease_for
    }
    return fmt_time(now + params.lease_for), (
        json.dumps(type_leases, separators=(",", ":")) if type_leases else None
    )


def _limited(params: JobsAcquire) -> bool:
    limits = params.type_limits
    if not limits:
        return False
    for name in params.type_names:
        found = limits.get(name)
        if found is not None and (found.max_running is not None or found.rate_limit is not None):
            return True
    return False


async def jobs_acquire(ctx: TxContext, params: JobsAcquire) -> JobsAcquired:
    """See StateTx.jobs_acquire."""
    ctx.require_write("jobs_acquire")
    if not params.type_names:
        return JobsAcquired(jobs=[], has_more=False)
    now = params.now or utcnow()
    leased_until, type_leases = _leases(params, now)
    if not _limited(params):
        args = {
            "type_names": json_list(params.type_names),
            "now": fmt_time(now),
            "worker_id": params.worker_id,
            "leased_until": leased_until,
            "type_leases": type_leases,
            "limit": params.limit,
        }
        rows = await ctx.fetch(ctx.q.jobs_acquire, args)
        if rows:
            claimed = sorted(
                ((running_job_from_row(row), row) for row in rows),
                key=lambda p: (p[0].scheduled_at, p[0].created_at, p[0].id),
            )
            return JobsAcquired(
                jobs=[job for job, _ in claimed], has_more=bool(claimed[-1][1]["has_more_after"])
            )
    return await _general(ctx, params, now, leased_until, type_leases)


def _allowance(params: JobsAcquire, row: Row, now: datetime) -> _Allowance:
    limits = params.type_limits.get(row["type_name"])
    running_left, rate_left = row["running_left"], row["rate_left"]
    if limits is None or (running_left is None and rate_left is None):
        return _Allowance()
    if rate_left is None or limits.rate_limit is None:
        return _Allowance(cap=max(0, running_left))
    start = limits.rate_limit.window_start(now)
    cap = rate_left if running_left is None else min(running_left, rate_left)
    return _Allowance(
        cap=max(0, cap),
        rate_bound=running_left is None or rate_left <= running_left,
        window_start=start,
        window_end=start + limits.rate_limit.per,
    )


async def _general(
    ctx: TxContext, params: JobsAcquire, now: datetime, leased_until: str, type_leases: str | None
) -> JobsAcquired:
    types: list[list[object]] = []
    for name in dict.fromkeys(params.type_names):
        limits = params.type_limits.get(name)
        rate = limits.rate_limit if limits is not None else None
        types.append(
            [
                name,
                limits.max_running if limits is not None else None,
                rate.limit if rate is not None else None,
                fmt_time(rate.window_start(now)) if rate is not None else None,
            ]
        )
    aged_before = fmt_time(now - params.priority_aging)
    rows = await ctx.fetch(
        ctx.q.jobs_acquire_candidates,
        {
            "types": json.dumps(types, separators=(",", ":")),
            "now": fmt_time(now),
            "aged_before": aged_before,
            "k": params.limit + 1,  # one beyond the limit tells whether more were waiting
        },
    )
    allowances: dict[str, _Allowance] = {}
    candidates: dict[str, dict[str, ClaimKey]] = {}
    for row in rows:
        name = row["type_name"]
        if row["kind"] == "type":
            allowances[name] = _allowance(params, row, now)
        else:
            key = _key(row["priority"], row["scheduled_at"], row["created_at"], row["id"], aged_before)
            candidates.setdefault(name, {})[row["id"]] = key
    pool: list[ClaimKey] = []
    for name, allowance in allowances.items():
        cap = allowance.cap
        take = params.limit + 1 if cap is None else min(cap, params.limit + 1)
        pool.extend(sorted(candidates.get(name, {}).values())[:take])
    pool.sort()
    chosen = [key[4] for key in pool[: params.limit]]
    jobs: list[Job] = []
    if chosen:
        claimed = await ctx.fetch(
            ctx.q.jobs_acquire_ids,
            {
                "job_ids": json_list(chosen),
                "now": fmt_time(now),
                "worker_id": params.worker_id,
                "leased_until": leased_until,
                "type_leases": type_leases,
            },
        )
        by_id = {job.id: job for job in map(running_job_from_row, claimed)}
        jobs = [by_id[job_id] for job_id in chosen]
    counts = Counter(job.type_name for job in jobs)
    rated = [
        [name, fmt_time(a.window_start), counts[name]]
        for name, a in allowances.items()
        if a.window_start is not None and counts[name]
    ]
    if rated:
        await ctx.fetch(ctx.q.type_rate_count, {"counts": json.dumps(rated, separators=(",", ":"))})
    held_back = tuple(
        sorted(
            name
            for name, a in allowances.items()
            if a.cap is not None and a.cap < params.limit and counts[name] == a.cap
        )
    )
    ends = [a.window_end for name in held_back if (a := allowances[name]).rate_bound and a.window_end]
    return JobsAcquired(
        jobs=jobs,
        has_more=len(pool) > params.limit,
        held_back=held_back,
        retry_at=min(ends, default=None),
    )


__all__ = ["jobs_acquire"]
