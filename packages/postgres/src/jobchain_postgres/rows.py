"""Result rows → entities, and entities → statement parameters.

Statements return scalar columns (names starting with ``_``) followed by one or more whole job
rows (``j.*``). A job row starts at a column named ``id``; its columns are read by name, so a
later migration that appends a column changes nothing here. The rescue columns (migration 0005),
the lifecycle columns (migration 0006) and the scheduling columns (migration 0008) read as their
defaults where a schema does not have them yet.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from operator import itemgetter
from typing import Any

from psycopg import Column
from psycopg.abc import Buffer
from psycopg.adapt import Loader

from jobchain.contracts.state import NewJob
from jobchain.entities import (
    CANONICAL_ID,
    AttemptError,
    Job,
    JobStatus,
    Schedule,
    WorkerInfo,
    WorkerState,
    attempt_errors_from_json,
)
from jobchain.errors import InvalidArgumentError, InvalidJobIdError
from jobchain_postgres._json_text import json_text

Row = tuple[Any, ...]

UUID_OID = 2950
"""The ``uuid`` type's oid (fixed in PostgreSQL's catalog)."""


class UuidAsText(Loader):
    """Loads ``uuid`` columns as their canonical text, which is what jobchain's ids are."""

    def load(self, data: Buffer) -> str:
        return bytes(data).decode()


_JOB_FIELDS = (
    "id",
    "chain_id",
    "type_name",
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
    "first_attempt_at",
    "attempt_started_at",
    "leased_by",
    "leased_until",
    "lease_generation",
    "completed_at",
    "completed_by",
    "deduplication_key",
    "trace_context",
    "chain_trace_context",
)

_RESCUE_FIELDS = ("rescued_at", "rescued_from", "rescue_reason")
_NO_RESCUE = (None, None, None)
_OPEN_FIELDS = ("attempt_errors", "attempt_base", "runs_after_failed_blockers")
_NO_OPEN = (None, 0, False)
_SCHEDULING_FIELDS = ("priority", "ordering_key")
_NO_SCHEDULING = (0, None)
_FINISH_FIELDS = ("failed_at", "cancelled_at", "cancel_reason", "failed_by_chain_id")
"""Set only on a failed or cancelled job: the hot statements (claims, completions) do not
return them, and their jobs read them as None."""
_NO_FINISH = (None, None, None, None)


def _fields_getter(group: dict[str, int]) -> Callable[[Row], tuple[Any, ...]] | None:
    """One getter that picks a group's job fields in one C call: the base fields, then the
    rescue, open-lifecycle, scheduling and finish-lifecycle fields, each group defaulted when
    absent.

    Decoding jobs is on every claim and completion. A schema from before migration 0005 (0006,
    0008) has no rescue (lifecycle, scheduling) columns: its jobs read with none recorded.
    """
    if not all(name in group for name in _JOB_FIELDS):
        return None
    segments = [
        (_JOB_FIELDS, ()),
        (_RESCUE_FIELDS, _NO_RESCUE),
        (_OPEN_FIELDS, _NO_OPEN),
        (_SCHEDULING_FIELDS, _NO_SCHEDULING),
        (_FINISH_FIELDS, _NO_FINISH),
    ]
    present = [all(name in group for name in names) for names, _ in segments]
    getter = itemgetter(
        *(group[name] for (names, _), has in zip(segments, present, strict=True) if has for name in names)
    )
    if all(present):
        return getter
    if present == [True, True, True, True, False]:  # the hot statements: one tuple concatenation
        return lambda row: getter(row) + _NO_FINISH
    # Other shapes (schemas from before 0005/0006, whole-row statements): slower, and rare.
    spans: list[tuple[int, int, tuple[Any, ...]]] = []  # (start, end) in picked, or defaults
    offset = 0
    for (names, defaults), has in zip(segments, present, strict=True):
        if has:
            spans.append((offset, offset + len(names), ()))
            offset += len(names)
        else:
            spans.append((0, 0, defaults))

    def padded(row: Row) -> tuple[Any, ...]:
        picked = getter(row)
        out: list[Any] = []
        for first, last, defaults in spans:
            out.extend(picked[first:last] if last else defaults)
        return tuple(out)

    return padded


class Shape:
    """Where the scalars and each job row sit in a result's columns."""

    __slots__ = ("_fields", "groups", "scalars")

    def __init__(self, description: Sequence[Column] | None) -> None:
        names = [column.name for column in description or ()]
        self.scalars: dict[str, int] = {}
        self.groups: list[dict[str, int]] = []
        for position, name in enumerate(names):
            if name == "id":
                self.groups.append({})
            if self.groups:
                self.groups[-1].setdefault(name, position)
            else:
                self.scalars[name] = position
        self._fields = [_fields_getter(group) for group in self.groups]

    def scalar(self, row: Row, name: str) -> Any:
        return row[self.scalars[name]]

    def job(self, row: Row, group: int = 0) -> Job | None:
        """The job in column group ``group`` of ``row`` (None when the group is all NULL)."""
        fields = self._fields[group]
        if fields is None:  # pragma: no cover - only statements returning whole job rows call this
            raise AssertionError("this result has no whole job row")
        (
            id_,
            chain_id,
            type_name,
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
            first_attempt_at,
            attempt_started_at,
            leased_by,
            leased_until,
            lease_generation,
            completed_at,
            completed_by,
            deduplication_key,
            trace_context,
            chain_trace_context,
            rescued_at,
            rescued_from,
            rescue_reason,
            attempt_errors,
            attempt_base,
            runs_after_failed_blockers,
            priority,
            ordering_key,
            failed_at,
            cancelled_at,
            cancel_reason,
            failed_by_chain_id,
        ) = fields(row)
        if id_ is None:
            return None
        return Job(
            id=str(id_),
            chain_id=str(chain_id),
            type_name=type_name,
            chain_type_name=chain_type_name,
            chain_index=chain_index,
            status=JobStatus(status),
            input=input_,
            output=output,
            created_at=utc(created_at),
            scheduled_at=utc(scheduled_at),
            attempt=attempt,
            last_attempt_at=utc_or_none(last_attempt_at),
            last_attempt_error=last_attempt_error,
            first_attempt_at=utc_or_none(first_attempt_at),
            attempt_started_at=utc_or_none(attempt_started_at),
            leased_by=leased_by,
            leased_until=utc_or_none(leased_until),
            lease_generation=lease_generation,
            completed_at=utc_or_none(completed_at),
            completed_by=completed_by,
            deduplication_key=deduplication_key,
            trace_context=trace_context,
            chain_trace_context=chain_trace_context,
            rescued_at=utc_or_none(rescued_at),
            rescued_from=rescued_from,
            rescue_reason=rescue_reason,
            attempt_errors=attempt_errors_from_json(attempt_errors) if attempt_errors else (),
            attempt_base=attempt_base,
            failed_at=None if failed_at is None else utc(failed_at),
            cancelled_at=None if cancelled_at is None else utc(cancelled_at),
            cancel_reason=cancel_reason,
            failed_by_chain_id=failed_by_chain_id,
            runs_after_failed_blockers=runs_after_failed_blockers,
            priority=priority,
            ordering_key=ordering_key,
        )

    def must_job(self, row: Row, group: int = 0) -> Job:
        job = self.job(row, group)
        if job is None:  # pragma: no cover - the statements only call this on present rows
            raise AssertionError("expected a job row")
        return job


def worker_info(row: Row) -> WorkerInfo:
    """A ``workers_list`` row (columns in the order that statement selects them)."""
    (
        id_,
        name,
        host,
        pid,
        version,
        type_names,
        concurrency,
        inflight,
        state,
        started_at,
        last_seen_at,
        alive_until,
        buffered,
        committing,
        capacity,
    ) = row
    return WorkerInfo(
        id=id_,
        name=name,
        host=host,
        pid=pid,
        version=version,
        type_names=tuple(type_names),
        concurrency=concurrency,
        inflight=inflight,
        state=WorkerState(state),
        started_at=utc(started_at),
        last_seen_at=utc(last_seen_at),
        alive_until=utc(alive_until),
        buffered=buffered,
        committing=committing,
        capacity=capacity,
    )


def utc(value: datetime) -> datetime:
    """``value`` in UTC (the session time zone may be anything on a caller's connection)."""
    return value if value.tzinfo is UTC else value.astimezone(UTC)


def utc_or_none(value: datetime | None) -> datetime | None:
    return None if value is None else utc(value)


def uuid_or_none(value: object) -> str | None:
    """``value`` as a canonical UUID string, or None if it cannot be one (so it matches no row)."""
    if not isinstance(value, str):
        return None
    if CANONICAL_ID.fullmatch(value):
        return value  # already what str(uuid.UUID(value)) would give
    try:
        return str(uuid.UUID(value))
    except ValueError:
        return None


def uuids(values: Sequence[str]) -> list[str]:
    """The values that can be UUIDs, canonical, in order (the others match no row)."""
    return [canonical for value in values if (canonical := uuid_or_none(value)) is not None]


def job_uuid(value: object) -> str:
    """A caller-supplied job or chain id; anything but a UUID is InvalidJobIdError before any SQL."""
    canonical = uuid_or_none(value)
    if canonical is None:
        raise InvalidJobIdError(value)
    return canonical


def attempt_error_param(entry: AttemptError | None) -> str | None:
    """An error-history entry as the one-entry JSON array the statements append, or None."""
    return None if entry is None else json_text([entry.to_json()])


def schedule_params(schedule: Schedule) -> tuple[datetime | None, timedelta | None]:
    """(absolute time, delay) for a statement that clamps the result to now."""
    return schedule.at, schedule.after


def check_chain_index(new: NewJob) -> None:
    """A root sits at index 0 and a continuation after it; anything else is refused before any SQL."""
    if new.chain_id is None:
        if new.chain_index != 0:
            raise InvalidArgumentError(f"a new chain's first job has chain_index 0, got {new.chain_index!r}")
    elif new.chain_index < 1:
        raise InvalidArgumentError(
            f"continuation {new.id} of chain {new.chain_id} needs chain_index >= 1, got {new.chain_index!r}"
        )


def new_jobs_document(jobs: Sequence[NewJob]) -> str:
    """The batch of ``jobs_create`` as one JSON document (read with ``jsonb_to_recordset``)."""
    items: list[dict[str, Any]] = []
    for position, new in enumerate(jobs):
        check_chain_index(new)
        dedup = new.deduplication
        schedule = new.schedule
        items.append(
            {
                "ord": position,
                "id": job_uuid(new.id),
                "type_name": new.type_name,
                "chain_type_name": new.chain_type_name,
                "chain_id": None if new.chain_id is None else job_uuid(new.chain_id),
                "chain_index": new.chain_index,
                "input": new.input,
                "dedup_key": None if dedup is None else dedup.key,
                "dedup_scope": None if dedup is None else dedup.scope,
                "dedup_window": None
                if dedup is None or dedup.window is None
                else dedup.window.total_seconds(),
                "dedup_exclude": [] if dedup is None else uuids(list(dedup.exclude_chain_ids)),
                "scheduled_at": None if schedule is None or schedule.at is None else schedule.at.isoformat(),
                "delay": None
                if schedule is None or schedule.after is None
                else schedule.after.total_seconds(),
                "blockers": [job_uuid(chain_id) for chain_id in new.blocker_chain_ids],
                "trace_context": new.trace_context,
                "chain_trace_context": new.chain_trace_context,
                "runs_after": new.runs_after_failed_blockers,
                "priority": new.priority,
                "ordering_key": new.ordering_key if new.chain_id is None else None,
            }
        )
    return json_text(items)


def new_roots_document(jobs: Sequence[NewJob]) -> tuple[list[str], str]:
    """The ids and the JSON document of ``jobs_create_roots`` (new chains only).

    One ``json.dumps`` of the whole batch costs a fraction of psycopg's adaptation of one
    array parameter per column. A key whose value is null or the default is left out: the
    statement reads a missing key as a JSON null does (SQL NULL, then its default), and a plain
    start sends only its id, type and input.
    """
    ids: list[str] = []
    items: list[dict[str, Any]] = []
    for new in jobs:
        if new.chain_index != 0:  # new chains only (see check_chain_index)
            check_chain_index(new)
        job_id = job_uuid(new.id)
        ids.append(job_id)
        item: dict[str, Any] = {"id": job_id, "type_name": new.type_name, "input": new.input}
        if new.chain_type_name != new.type_name:  # absent reads as type_name
            item["chain_type_name"] = new.chain_type_name
        schedule = new.schedule
        if schedule is not None:
            if schedule.at is not None:
                item["scheduled_at"] = schedule.at.isoformat()
            if schedule.after is not None:
                item["delay"] = schedule.after.total_seconds()
        if new.trace_context is not None:
            item["trace_context"] = new.trace_context
        if new.chain_trace_context is not None:
            item["chain_trace_context"] = new.chain_trace_context
        if new.runs_after_failed_blockers:  # absent reads as false
            item["runs_after"] = True
        if new.priority:  # absent reads as 0
            item["priority"] = new.priority
        items.append(item)
    return ids, json_text(items)


__all__ = [
    "Row",
    "attempt_error_param",
    "Shape",
    "check_chain_index",
    "job_uuid",
    "json_text",
    "new_jobs_document",
    "new_roots_document",
    "schedule_params",
    "utc",
    "uuid_or_none",
    "uuids",
    "worker_info",
]
