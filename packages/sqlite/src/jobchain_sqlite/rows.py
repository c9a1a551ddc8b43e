"""Conversions between Python values and the stored columns: times, JSON, job rows.

Times are stored as fixed-width ISO-8601 UTC text with microseconds
(``2024-01-02T03:04:05.123456Z``), so comparing the text compares the instants.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, Protocol

from jobchain.entities import (
    AttemptError,
    Chain,
    Job,
    JobStatus,
    JsonValue,
    WorkerInfo,
    WorkerState,
    attempt_errors_from_json,
)
from jobchain.errors import InvalidArgumentError, NotJsonSerializableError


class Row(Protocol):
    """A result row addressable by column name (sqlite3.Row, SQLAlchemy RowMapping, dict)."""

    def __getitem__(self, key: str, /) -> Any: ...


def fmt_time(value: datetime) -> str:
    """``value`` (aware) as fixed-width UTC text."""
    if value.tzinfo is None:
        raise InvalidArgumentError("times must be timezone-aware (use datetime.now(timezone.utc))")
    v = value.astimezone(UTC)
    return (
        f"{v.year:04d}-{v.month:02d}-{v.day:02d}T{v.hour:02d}:{v.minute:02d}:{v.second:02d}"
        f".{v.microsecond:06d}Z"
    )


def opt_time(value: datetime | None) -> str | None:
    return None if value is None else fmt_time(value)


def parse_time(text: str) -> datetime:
    """Stored time text back to an aware UTC datetime."""
    return datetime.fromisoformat(text)


def dump_json(value: JsonValue, what: str = "value") -> str | None:
    """JSON text for a column; ``None`` is stored as SQL NULL."""
    if value is None:
        return None
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise NotJsonSerializableError(f"{what} is not JSON-serializable: {exc}") from None


def load_json(text: str | None) -> JsonValue:
    return None if text is None else json.loads(text)


def json_list(values: Iterable[object]) -> str:
    """A JSON array parameter for ``json_each``."""
    return json.dumps(list(values), separators=(",", ":"))


JOB_COLUMNS: tuple[str, ...] = (
    "id",
    "type_name",
    "chain_id",
    "chain_type_name",
    "chain_index",
    "status",
    "input",
    "output",
    "created_at",
    "scheduled_at",
    "attempt",
    "last_attempt_at",
    "last_attempt_error",
    "leased_by",
    "leased_until",
    "lease_generation",
    "completed_at",
    "completed_by",
    "deduplication_key",
    "trace_context",
    "chain_trace_context",
    "first_attempt_at",
    "attempt_started_at",
    "rescued_at",
    "rescued_from",
    "rescue_reason",
    "attempt_errors",
    "attempt_base",
    "failed_at",
    "cancelled_at",
    "cancel_reason",
    "failed_by_chain_id",
    "runs_after_failed_blockers",
    "priority",
    "ordering_key",
)
"""The job table's columns in table order (0001_initial, 0002_attempt_start's two,
0004_worker_registry's three, 0005_job_lifecycle's seven, then 0007_scheduling's two).

Every statement that returns jobs selects ``*`` / ``j.*`` first, so on the adapter's own
connections (``sqlite3.Row``) these are the row's first columns and are read by position.
"""

_STATUS: dict[str, JobStatus] = {status.value: status for status in JobStatus}
_fromisoformat = datetime.fromisoformat
_loads = json.loads


_LIFECYCLE_AT = JOB_COLUMNS.index("attempt_errors")
_PLAIN_LIFECYCLE = (None, 0, None, None, None, None, 0, 0, None)
"""The lifecycle and scheduling columns of a job never failed, cancelled or retried, of
priority 0 and no ordering key: what most rows hold."""

RUNNING_JOB_COLUMNS: tuple[str, ...] = (
    *JOB_COLUMNS[:_LIFECYCLE_AT],
    "attempt_errors",
    "attempt_base",
    "runs_after_failed_blockers",
    "priority",
    "ordering_key",
)
"""What claims and group completions return (``jobs_acquire.sql``, ``jobs_complete.sql``): a
job that is or was just running never has ``failed_at``, ``cancelled_at``, ``cancel_reason``
or ``failed_by_chain_id`` set (a retry clears them), so those four are left out — each
returned column costs SQLite and the sqlite3 module ~85 ns per row (claim + completion of
a job: 23.5 → 22.3 us of CPU without the seven lifecycle columns)."""


def job_from_row(row: Row) -> Job:
    """Build a Job from a row whose first columns are the job table's (``*`` or ``j.*`` first)."""
    # By position on the adapter's own rows: a sqlite3.Row looks a name up by comparing it
    # with every column name, which made decoding the costliest step of a claim or completion.
    values = row[: len(JOB_COLUMNS)] if type(row) is sqlite3.Row else tuple(row[name] for name in JOB_COLUMNS)
    return _job_of(values, values[_LIFECYCLE_AT:])


def running_job_from_row(row: Row) -> Job:
    """Build a Job from a row whose first columns are :data:`RUNNING_JOB_COLUMNS`."""
    values = (
        row[: len(RUNNING_JOB_COLUMNS)]
        if type(row) is sqlite3.Row
        else tuple(row[name] for name in RUNNING_JOB_COLUMNS)
    )
    attempt_errors, attempt_base, runs_after, priority, ordering_key = values[_LIFECYCLE_AT:]
    return _job_of(
        values, (attempt_errors, attempt_base, None, None, None, None, runs_after, priority, ordering_key)
    )


def _job_of(values: Sequence[Any], lifecycle: Sequence[Any]) -> Job:
    (
        id_,
        type_name,
        chain_id,
        chain_type_name,
        chain_index,
        status,
        input_,
        output,
        created_at,
        scheduled_at,
        attempt,
        last_attempt_at,
        last_attempt_error,
        leased_by,
        leased_until,
        lease_generation,
        completed_at,
        completed_by,
        deduplication_key,
        trace_context,
        chain_trace_context,
        first_attempt_at,
        attempt_started_at,
        rescued_at,
        rescued_from,
        rescue_reason,
    ) = values[:_LIFECYCLE_AT]
    job = Job(
        id=id_,
        chain_id=chain_id,
        type_name=type_name,
        chain_type_name=chain_type_name,
        chain_index=chain_index,
        status=_STATUS[status],
        input=None if input_ is None else _loads(input_),
        output=None if output is None else _loads(output),
        created_at=_fromisoformat(created_at),
        scheduled_at=_fromisoformat(scheduled_at),
        attempt=attempt,
        last_attempt_at=None if last_attempt_at is None else _fromisoformat(last_attempt_at),
        last_attempt_error=last_attempt_error,
        first_attempt_at=None if first_attempt_at is None else _fromisoformat(first_attempt_at),
        attempt_started_at=None if attempt_started_at is None else _fromisoformat(attempt_started_at),
        leased_by=leased_by,
        leased_until=None if leased_until is None else _fromisoformat(leased_until),
        lease_generation=lease_generation,
        completed_at=None if completed_at is None else _fromisoformat(completed_at),
        completed_by=completed_by,
        deduplication_key=deduplication_key,
        trace_context=None if trace_context is None else _loads(trace_context),
        chain_trace_context=None if chain_trace_context is None else _loads(chain_trace_context),
        rescued_at=None if rescued_at is None else _fromisoformat(rescued_at),
        rescued_from=rescued_from,
        rescue_reason=rescue_reason,
    )
    # One comparison for the common row (claims and completions of jobs that never failed):
    # the seven lifecycle keywords and their conversions cost a claim + completion ~1 us.
    return job if lifecycle == _PLAIN_LIFECYCLE else _with_lifecycle(job, lifecycle)


def _with_lifecycle(job: Job, lifecycle: Sequence[Any]) -> Job:
    (
        attempt_errors,
        attempt_base,
        failed_at,
        cancelled_at,
        cancel_reason,
        failed_by,
        runs_after,
        priority,
        ordering_key,
    ) = lifecycle
    return replace(
        job,
        attempt_errors=() if attempt_errors is None else attempt_errors_from_json(_loads(attempt_errors)),
        attempt_base=attempt_base,
        failed_at=None if failed_at is None else _fromisoformat(failed_at),
        cancelled_at=None if cancelled_at is None else _fromisoformat(cancelled_at),
        cancel_reason=cancel_reason,
        failed_by_chain_id=failed_by,
        runs_after_failed_blockers=bool(runs_after),
        priority=priority,
        ordering_key=ordering_key,
    )


def completed_from_running(job: Job, output: JsonValue, completed_at: datetime, worker_id: str) -> Job:
    """``job`` (running, as its worker claimed it) as ``jobs_complete`` leaves it."""
    # Every field spelled out: Job's generated __init__ is the fast path (replace() is not).
    return Job(
        id=job.id,
        chain_id=job.chain_id,
        type_name=job.type_name,
        chain_type_name=job.chain_type_name,
        chain_index=job.chain_index,
        status=JobStatus.COMPLETED,
        input=job.input,
        output=output,
        created_at=job.created_at,
        scheduled_at=job.scheduled_at,
        attempt=job.attempt,
        last_attempt_at=job.last_attempt_at,
        last_attempt_error=None,
        first_attempt_at=job.first_attempt_at,
        attempt_started_at=job.attempt_started_at,
        leased_by=None,
        leased_until=None,
        lease_generation=job.lease_generation,
        completed_at=completed_at,
        completed_by=worker_id,
        deduplication_key=job.deduplication_key,
        trace_context=job.trace_context,
        chain_trace_context=job.chain_trace_context,
        rescued_at=job.rescued_at,
        rescued_from=job.rescued_from,
        rescue_reason=job.rescue_reason,
        attempt_errors=job.attempt_errors,
        attempt_base=job.attempt_base,
        failed_at=job.failed_at,
        cancelled_at=job.cancelled_at,
        cancel_reason=job.cancel_reason,
        failed_by_chain_id=job.failed_by_chain_id,
        runs_after_failed_blockers=job.runs_after_failed_blockers,
        priority=job.priority,
        ordering_key=job.ordering_key,
    )


def attempt_error_json(error: AttemptError | None) -> str | None:
    """An error history entry as the JSON text the statements append (None: no entry)."""
    if error is None:
        return None
    return json.dumps(error.to_json(), separators=(",", ":"))


def worker_from_row(row: Row) -> WorkerInfo:
    """Build a WorkerInfo from a worker row; ``reported_state`` (workers_list) is the state."""
    return WorkerInfo(
        id=row["id"],
        name=row["name"],
        host=row["host"],
        pid=row["pid"],
        version=row["version"],
        type_names=tuple(_loads(row["type_names"])),
        concurrency=row["concurrency"],
        inflight=row["inflight"],
        buffered=row["buffered"],
        committing=row["committing"],
        capacity=row["capacity"],
        state=WorkerState(row["reported_state"]),
        started_at=_fromisoformat(row["started_at"]),
        last_seen_at=_fromisoformat(row["last_seen_at"]),
        alive_until=_fromisoformat(row["alive_until"]),
    )


def chains_from_jobs(jobs: Sequence[Job]) -> dict[str, Chain]:
    """Pair root and last job per chain id from rows holding (at least) both of them."""
    roots: dict[str, Job] = {}
    lasts: dict[str, Job] = {}
    for job in jobs:
        if job.chain_index == 0:
            roots[job.chain_id] = job
        last = lasts.get(job.chain_id)
        if last is None or job.chain_index > last.chain_index:
            lasts[job.chain_id] = job
    return {chain_id: Chain(root, lasts[chain_id]) for chain_id, root in roots.items()}


__all__ = [
    "JOB_COLUMNS",
    "attempt_error_json",
    "Row",
    "chains_from_jobs",
    "dump_json",
    "fmt_time",
    "job_from_row",
    "running_job_from_row",
    "json_list",
    "load_json",
    "opt_time",
    "parse_time",
    "worker_from_row",
]
