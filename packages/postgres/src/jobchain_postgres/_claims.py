"""The claim of PostgresStateTx (``jobs_acquire``): claim order with priorities and aging, pause,
and the type limits (``max_running``, rate limits), in both claim modes.

A claim of types without limits is one statement. While none of the claimed types has a due job
with a priority (the common case) that is ``sql/jobs_acquire_plain.sql`` (or
``jobs_acquire_atomic_plain.sql``): the FIFO statement of before priorities existed, which also
reports when priorities are in play, and then claims nothing; the claim is then made with
``sql/jobs_acquire.sql`` (``jobs_acquire_atomic.sql``), which merges the priority order in, and
for :data:`PRIORITY_RECHECK_SECONDS` this adapter's claims go straight to it. So a queue that
never uses priorities pays no planning or execution for them on its hottest statement.

A claim that serves a limited type first locks those types'
``type_control`` rows (``sql/type_control_lock.sql``) and then runs the limited statement in the
same transaction, both in one pipeline (one round trip): claims of one limited type take turns,
and each sees the ones before it. In autocommit the pipeline's single Sync makes the two one
transaction; an atomic-update claim that must retry sends the pair again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from operator import attrgetter
from typing import Any, ClassVar

from jobchain.contracts.state import JobsAcquire, JobsAcquired
from jobchain.entities import Job, TypeLimits
from jobchain_postgres._results import check_now
from jobchain_postgres.queries import Queries
from jobchain_postgres.rows import Row, Shape, utc

__all__ = ["ATOMIC_CLAIM_ATTEMPTS", "ClaimsMixin", "claim_order"]

ATOMIC_CLAIM_ATTEMPTS = 8
"""Statements one atomic-update claim may send when concurrent claimers keep winning its candidates."""

PRIORITY_RECHECK_SECONDS = 5.0
"""After a plain claim found priorities in play, claims use the merging statement this long."""

_MICROSECOND = timedelta(microseconds=1)

_FIFO = attrgetter("scheduled_at", "created_at", "id")
"""The claim order when every claimed job has priority 0: aged jobs are then exactly the
earliest scheduled ones, so :func:`claim_order` reduces to FIFO (this key costs a C call per job)."""


def claim_order(aging: timedelta) -> Callable[[Job], tuple[Any, ...]]:
    """The sort key of claimed jobs: aged first (FIFO), then priority descending, then FIFO.

    A claimed job's ``attempt_started_at`` is the claim's ``now``.
    """

    def key(job: Job) -> tuple[Any, ...]:
        now = job.attempt_started_at or job.scheduled_at
        aged = job.scheduled_at <= now - aging
        return (not aged, 0 if aged else -job.priority, job.scheduled_at, job.created_at, job.id)

    return key


def _limited(type_names: Sequence[str], type_limits: Mapping[str, TypeLimits]) -> dict[str, TypeLimits]:
    """The claimed types that have a limit (an empty TypeLimits is no limit)."""
    found: dict[str, TypeLimits] = {}
    for name in type_names:
        limits = type_limits.get(name)
        if limits is not None and (limits.max_running is not None or limits.rate_limit is not None):
            found[name] = limits
    return found


def _limit_params(type_names: Sequence[str], limited: Mapping[str, TypeLimits]) -> dict[str, Any]:
    """The per-type limit arrays of the limited statements, aligned with ``type_names``."""
    max_running: list[int | None] = []
    rate_limits: list[int | None] = []
    rate_pers: list[int | None] = []
    for name in type_names:
        limits = limited.get(name)
        rate = None if limits is None else limits.rate_limit
        max_running.append(None if limits is None else limits.max_running)
        rate_limits.append(None if rate is None else rate.limit)
        rate_pers.append(None if rate is None else rate.per // _MICROSECOND)
    return {"max_running": max_running, "rate_limits": rate_limits, "rate_pers": rate_pers}


class ClaimsMixin:
    """``jobs_acquire``; the transaction class supplies the plumbing named below."""

    _q: Queries
    _atomic_claim: bool
    # (schema, prefix) -> monotonic time until which claims skip the plain statement. Only a
    # hint for which statement to send first: the plain one never claims past a priority.
    _priorities_until: ClassVar[dict[tuple[str, str], float]] = {}

    def _check(self, *, write: bool) -> None:
        raise NotImplementedError  # pragma: no cover - provided by PostgresStateTx

    async def _rows(
        self, query: bytes, params: Mapping[str, Any], *, write: bool, ids: Sequence[str] = ()
    ) -> tuple[Shape, list[Row]]:
        raise NotImplementedError  # pragma: no cover - provided by PostgresStateTx

    async def _rows_after_lock(
        self,
        lock: bytes,
        lock_params: Mapping[str, Any],
        query: bytes,
        params: Mapping[str, Any],
        *,
        ids: Sequence[str] = (),
    ) -> tuple[Shape, list[Row]]:
        raise NotImplementedError  # pragma: no cover - provided by PostgresStateTx

    async def jobs_acquire(self, params: JobsAcquire) -> JobsAcquired:
        type_names = list(dict.fromkeys(params.type_names))
        self._check(write=True)
        if not type_names:
            return JobsAcquired(jobs=[], has_more=False)
        query_params: dict[str, Any] = {
            "type_names": type_names,
            "limit": params.limit,
            "worker_id": params.worker_id,
            # Aligned with type_names: each claimed job gets its own type's lease.
            "leases": [params.lease_of(type_name) for type_name in type_names],
            "now": check_now(params.now),
            "aging": params.priority_aging,
        }
        limited = _limited(type_names, params.type_limits)
        if limited:
            return await self._claim_limited(params, type_names, limited, query_params)
        where = (self._q.schema, self._q.prefix)
        plain = time.monotonic() >= self._priorities_until.get(where, 0.0)
        jobs: list[Job] = []
        has_more = False
        for _attempt in range(ATOMIC_CLAIM_ATTEMPTS + 1):
            query = self._claim_query(plain=plain)
            shape, rows = await self._rows(query, query_params, write=True)
            if plain and shape.scalar(rows[0], "_priorities"):
                # Priorities in play: the plain statement claimed nothing; merge them in.
                self._priorities_until[where] = time.monotonic() + PRIORITY_RECHECK_SECONDS
                plain = False
                continue
            jobs.extend(job for row in rows if (job := shape.job(row)) is not None)
            has_more = bool(rows) and bool(shape.scalar(rows[0], "_has_more"))
            lost = int(shape.scalar(rows[0], "_lost")) if rows and "_lost" in shape.scalars else 0
            # Atomic-update claims lose candidates to concurrent claimers instead of skipping
            # them; claim the rest again with a fresh snapshot (never needed with SKIP LOCKED).
            if lost == 0 or len(jobs) >= params.limit:
                break
            query_params["limit"] = params.limit - len(jobs)
        jobs.sort(key=_FIFO if plain else claim_order(params.priority_aging))
        return JobsAcquired(jobs=jobs, has_more=has_more)

    def _claim_query(self, *, plain: bool) -> bytes:
        q = self._q
        if self._atomic_claim:
            return q.jobs_acquire_atomic_plain if plain else q.jobs_acquire_atomic
        return q.jobs_acquire_plain if plain else q.jobs_acquire

    async def _claim_limited(
        self,
        params: JobsAcquire,
        type_names: list[str],
        limited: Mapping[str, TypeLimits],
        query_params: dict[str, Any],
    ) -> JobsAcquired:
        """Lock the limited types' type_control rows, then claim within their limits."""
        query_params.update(_limit_params(type_names, limited))
        lock_params = {"type_names": sorted(limited)}
        jobs: list[Job] = []
        has_more = False
        held: tuple[str, ...] = ()
        retry_at: datetime | None = None
        query = self._q.jobs_acquire_atomic_limited if self._atomic_claim else self._q.jobs_acquire_limited
        for _attempt in range(ATOMIC_CLAIM_ATTEMPTS):
            # Lock and claim in one pipeline: one round trip, one transaction (in autocommit the
            # pipeline's single Sync ends both). An atomic-update claim that lost candidates
            # claims the rest the same way: in autocommit its first part has committed and the
            # lock is taken again; in a transaction the rows are still held (locking them again
            # changes nothing) and the retry sees the claim's own jobs and counts.
            shape, rows = await self._rows_after_lock(
                self._q.type_control_lock, lock_params, query, query_params
            )
            claimed, has_more, held, retry_at = _limited_result(shape, rows)
            jobs.extend(claimed)
            lost = int(shape.scalar(rows[0], "_lost")) if "_lost" in shape.scalars else 0
            if lost == 0 or len(jobs) >= params.limit:
                break
            query_params["limit"] = params.limit - len(jobs)
        jobs.sort(key=claim_order(params.priority_aging))
        return JobsAcquired(jobs=jobs, has_more=has_more, held_back=held, retry_at=retry_at)


def _limited_result(
    shape: Shape, rows: list[Row]
) -> tuple[list[Job], bool, tuple[str, ...], datetime | None]:
    """(claimed jobs, has_more, held_back, retry_at) of a limited claim statement (always a row)."""
    head = rows[0]
    jobs = [job for row in rows if (job := shape.job(row)) is not None]
    held = tuple(sorted(shape.scalar(head, "_held_back") or ()))
    retry_at = shape.scalar(head, "_retry_at")
    return jobs, bool(shape.scalar(head, "_has_more")), held, None if retry_at is None else utc(retry_at)
