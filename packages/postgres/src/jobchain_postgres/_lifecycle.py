"""The lifecycle operations: fail, cancel, retry and prune (issue 17), one round trip each.

job_fail and chains_cancel send three statements in one pipeline (one round trip, one
transaction, in autocommit too): the row locks, the decision, then the propagation down the
blocker graph (``sql/jobs_propagate.sql``), each statement with a snapshot taken after the one
before it. The decision hands the chains that became terminal to the propagation through the
transaction-local setting ``jobchain.origins``. A cascading cancel reads the blocker edges
(``sql/chains_cancel_cascade.sql``) in one round trip before that pipeline.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, cast

from jobchain.contracts.lifecycle import cancel_cascade, cancel_dry_run
from jobchain.contracts.state import (
    ChainsCancel,
    ChainsCancelled,
    ChainsPrune,
    ChainsPruned,
    JobFail,
    JobFailed,
    JobsRetried,
    JobsRetry,
    PrunedChain,
    StateTx,
)
from jobchain.entities import ATTEMPT_ERRORS_KEPT, Job
from jobchain.errors import InvalidArgumentError, JobNotFoundError, TransientStateError
from jobchain_postgres._results import check_now, owned_result, shape_of
from jobchain_postgres.errors import translated
from jobchain_postgres.providers import AnyConnection
from jobchain_postgres.queries import Queries
from jobchain_postgres.rows import UUID_OID, Row, Shape, UuidAsText, attempt_error_param, uuid_or_none

__all__ = ["LifecycleMixin"]

Step = tuple[bytes, Mapping[str, Any]]


def _cutoff(name: str, value: datetime | None) -> datetime | None:
    if value is not None and (not isinstance(value, datetime) or value.tzinfo is None):
        raise InvalidArgumentError(f"{name} must be a timezone-aware datetime, got {value!r}")
    return value


def _created_order(jobs: list[Job]) -> list[Job]:
    jobs.sort(key=lambda job: (job.created_at, job.id))
    return jobs


class LifecycleMixin:
    """Lifecycle operations; the transaction class supplies the plumbing named below."""

    _q: Queries
    _conn: AnyConnection
    _prepare: bool | None

    def _check(self, *, write: bool) -> None:
        raise NotImplementedError  # pragma: no cover - provided by PostgresStateTx

    async def _rows(
        self, query: bytes, params: Mapping[str, Any], *, write: bool, ids: Sequence[str] = ()
    ) -> tuple[Shape, list[Row]]:
        raise NotImplementedError  # pragma: no cover - provided by PostgresStateTx

    async def _rows_without_jit(
        self, query: bytes, params: Mapping[str, Any], *, write: bool
    ) -> tuple[Shape, list[Row]]:
        raise NotImplementedError  # pragma: no cover - provided by PostgresStateTx

    async def _pipeline(self, steps: Sequence[Step]) -> list[tuple[Shape, list[Row]]]:
        """``steps`` in one pipeline: one round trip and one transaction, each statement's
        snapshot taken after the statement before it ran (and its row locks were granted)."""

        self._check(write=True)
        results: list[tuple[Shape, list[Row]]] = []
        with translated():
            async with self._conn.pipeline():
                cursors = []
                for query, params in steps:
                    cursor = self._conn.cursor()
                    cursor.adapters.register_loader(UUID_OID, UuidAsText)
                    await cursor.execute(query, params, prepare=self._prepare)
                    cursors.append((query, cursor))
                for query, cursor in cursors:
                    rows = await cursor.fetchall()  # every step is a SELECT or returns rows
                    results.append((shape_of(query, cursor), rows))
        return results

    async def _propagated(
        self, steps: Sequence[Step], now: Any
    ) -> tuple[tuple[Shape, list[Row]], list[Job], list[Job]]:
        """The decision's result, then the jobs propagation failed and the ones it unblocked."""
        propagate = (self._q.jobs_propagate, {"now": now, "kept": ATTEMPT_ERRORS_KEPT})
        *_, decided, (shape, rows) = await self._pipeline([*steps, propagate])
        failed = [shape.must_job(row) for row in rows if shape.scalar(row, "_kind") == "failed"]
        unblocked = [shape.must_job(row) for row in rows if shape.scalar(row, "_kind") == "unblocked"]
        return decided, _created_order(failed), _created_order(unblocked)

    async def job_fail(self, params: JobFail) -> JobFailed:
        """Fail a job for good; its chain's failure propagates in the same round trip."""

        job_id = uuid_or_none(params.job_id)
        self._check(write=True)
        if job_id is None:
            raise JobNotFoundError(params.job_id)
        now = check_now(params.now)
        decided, failed, unblocked = await self._propagated(
            [
                (self._q.job_fail_lock, {"job_id": job_id}),
                (
                    self._q.job_fail,
                    {
                        "job_id": job_id,
                        "worker_id": params.worker_id,
                        "lease_generation": params.lease_generation,
                        "error": params.error,
                        "attempt_error": attempt_error_param(params.attempt_error),
                        "kept": ATTEMPT_ERRORS_KEPT,
                        "now": now,
                    },
                ),
            ],
            now,
        )
        shape, rows = decided
        job = owned_result(shape, rows, params.job_id, params.worker_id)
        status = shape.scalar(rows[0], "_status")
        return JobFailed(
            job=job,
            failed_jobs=failed,
            unblocked_jobs=unblocked,
            previous_leased_by=shape.scalar(rows[0], "_leased_by"),
            was_running=status == "running",
        )

    async def chains_cancel(self, params: ChainsCancel) -> ChainsCancelled:
        """Cancel each chain's last job, all or nothing, and propagate; never waits for an
        atomic attempt's hold (``sql/job_hold.sql``). A cascade first reads the blocker edges
        (``sql/chains_cancel_cascade.sql``, one round trip more); a dry run is the call in a
        savepoint rolled back (so it needs a transaction, not autocommit)."""

        if params.dry_run:
            return await cancel_dry_run(cast("StateTx", self), params)
        requested = list(dict.fromkeys(params.chain_ids))
        self._check(write=True)
        if params.reason is not None and not isinstance(params.reason, str):
            raise InvalidArgumentError(f"a cancel reason is a string, got {params.reason!r}")
        if not requested:
            return ChainsCancelled()
        valid = {chain_id: uuid_or_none(chain_id) for chain_id in requested}
        named = sorted({v for v in valid.values() if v is not None})
        refuse = None in valid.values()
        added: list[str] = []
        shared: list[str] = []
        if params.cascade and not refuse:
            edge_shape, edges = await self._rows(
                self._q.chains_cancel_cascade, {"chain_ids": named}, write=True
            )
            pairs = [
                (edge_shape.scalar(row, "_dependent_id"), edge_shape.scalar(row, "_blocker_id"))
                for row in edges
            ]
            order = {
                edge_shape.scalar(row, "_blocker_id"): (
                    edge_shape.scalar(row, "_created_at"),
                    edge_shape.scalar(row, "_blocker_id"),
                )
                for row in edges
            }
            canonical = [valid[chain_id] or chain_id for chain_id in requested]
            plan = cancel_cascade(canonical, pairs, order, include_shared=params.include_shared)
            added, shared = plan.added, plan.shared
        chain_ids = sorted({*named, *added})
        now = check_now(params.now)
        decided, failed, unblocked = await self._propagated(
            [
                (self._q.chains_cancel_lock, {"chain_ids": chain_ids}),
                (
                    self._q.chains_cancel,
                    {
                        "chain_ids": chain_ids,
                        "named": named,
                        "reason": params.reason,
                        "refuse": refuse,
                        "now": now,
                    },
                ),
            ],
            now,
        )
        shape, rows = decided
        by_chain = {shape.scalar(row, "_chain_id"): row for row in rows}
        not_found: list[str] = []
        not_cancellable: list[tuple[str, str]] = []
        cancelled: list[Job] = []
        cascaded: list[Job] = []
        running: list[str] = []
        leased_by: dict[str, str] = {}
        for chain_id, out in [(c, cancelled) for c in requested] + [(c, cascaded) for c in added]:
            key = valid.get(chain_id, chain_id)
            row = by_chain.get(key) if key is not None else None
            status = None if row is None else shape.scalar(row, "_status")
            if row is None or not shape.scalar(row, "_found") or status is None:
                if out is cancelled:
                    not_found.append(chain_id)
            elif status in ("completed", "failed", "cancelled"):
                if out is cancelled:
                    not_cancellable.append((chain_id, status))
            elif (job := shape.job(row)) is not None:
                out.append(job)
                if status == "running":
                    running.append(job.id)
                    holder = shape.scalar(row, "_leased_by")
                    if holder is not None:
                        leased_by[job.id] = holder
        if not_found or not_cancellable:
            return ChainsCancelled(not_found=not_found, not_cancellable=not_cancellable)
        return ChainsCancelled(
            cancelled=cancelled,
            running_job_ids=running,
            previous_leased_by=leased_by,
            failed_jobs=failed,
            unblocked_jobs=unblocked,
            cascaded=cascaded,
            shared=shared,
        )

    async def jobs_retry(self, params: JobsRetry) -> JobsRetried:
        """Redrive failed or cancelled jobs and the dependents they failed, all or nothing."""

        requested = list(dict.fromkeys(params.job_ids))
        self._check(write=True)
        if not requested:
            return JobsRetried()
        valid = {job_id: uuid_or_none(job_id) for job_id in requested}
        job_ids = list(dict.fromkeys(v for v in valid.values() if v is not None))
        schedule = params.schedule
        shape, rows = await self._rows(
            self._q.jobs_retry,
            {
                "job_ids": job_ids,
                "scheduled_at": None if schedule is None else schedule.at,
                "delay": None if schedule is None else schedule.after,
                "refuse": None in valid.values(),
                "now": check_now(params.now),
            },
            write=True,
        )
        by_id = {shape.scalar(row, "_id"): row for row in rows if shape.scalar(row, "_kind") == "requested"}
        not_found: list[str] = []
        not_retryable: list[tuple[str, str]] = []
        blocked_by_failed: list[tuple[str, str]] = []
        retried: list[Job] = []
        for job_id in requested:
            key = valid[job_id]
            row = by_id.get(key) if key is not None else None
            status = None if row is None else shape.scalar(row, "_status")
            if row is None or not shape.scalar(row, "_found"):
                not_found.append(job_id)
            elif status not in ("failed", "cancelled"):
                not_retryable.append((job_id, str(status)))
            elif (blocker := shape.scalar(row, "_blocked_by")) is not None:
                blocked_by_failed.append((job_id, blocker))
            elif (job := shape.job(row)) is not None:
                retried.append(job)
        if not_found or not_retryable or blocked_by_failed:
            return JobsRetried(
                not_found=not_found, not_retryable=not_retryable, blocked_by_failed=blocked_by_failed
            )
        if len(retried) < len(requested):  # pragma: no cover - a row changed under the statement
            raise TransientStateError("a job changed while it was retried; retry the request")
        reblocked = [shape.must_job(row) for row in rows if shape.scalar(row, "_kind") == "reblocked"]
        return JobsRetried(retried=retried, reblocked=_created_order(reblocked))

    async def chains_prune(self, params: ChainsPrune) -> ChainsPruned:
        """Retention: one bounded batch of finished chains, or ``busy`` while another prune runs."""
        self._check(write=True)

        schema, prefix = self._q.schema, self._q.prefix
        # Without JIT: compiling this statement's plan took 1.9 s of a 2.3 s batch (soak run).
        shape, rows = await self._rows_without_jit(
            self._q.chains_prune,
            {
                "key": f"jobchain.prune:{schema}:{prefix}",
                "completed_before": _cutoff("completed_before", params.completed_before),
                "failed_before": _cutoff("failed_before", params.failed_before),
                "cancelled_before": _cutoff("cancelled_before", params.cancelled_before),
                "locks_before": _cutoff("locks_before", params.locks_before),
                "limit": params.limit,
            },
            write=True,
        )
        if not rows or not shape.scalar(rows[0], "_got"):
            return ChainsPruned(busy=True)
        return ChainsPruned(
            chains=[
                PrunedChain(
                    id=shape.scalar(row, "_chain_id"),
                    type_name=shape.scalar(row, "_type_name"),
                    status=shape.scalar(row, "_status"),
                )
                for row in rows
                if shape.scalar(row, "_chain_id") is not None
            ],
            locks_deleted=int(shape.scalar(rows[0], "_locks_deleted") or 0),
        )
